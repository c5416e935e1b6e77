"""Planning without a GPU, for the CPU tests: a made-up device, a plan builder that records its launches, and each
launch's arguments checked against its kernel's parameters as cu_src declares them (a mismatch would otherwise show
only on a GPU, as garbage or a fault: the driver reads each parameter's bytes by its type)."""
from __future__ import annotations

import contextlib
import functools
import re

import numpy as np

from cupy_kernels._runtime import Buffer, PlanBuilder, read_source

SMS = 132


class Props:
    """Device properties of compute capability `cc`."""

    def __init__(self, cc, sms=SMS):
        self.id, self.name, self.cc, self.sm_count = 0, f"sm_{cc}", cc, sms
        self.max_threads_per_block, self.max_threads_per_sm = 1024, 2048
        self.shared_per_block_optin, self.l2_bytes = 227 * 1024, 50 << 20


def resident(kernel, threads, smem=0, sms=SMS):
    """Blocks resident on the device from the threads and shared memory alone (no kernel loaded)."""
    return max(1, min(32, 2048 // threads, (227 * 1024) // smem if smem else 32)) * sms


@contextlib.contextmanager
def fake_device(monkeypatch, cc, *modules):
    """Plan as on a device of compute capability `cc`: `current`, `resident_blocks`, `max_active_clusters` and
    `use_shared_memory` replaced in _runtime and in each of `modules` (the ops modules that imported them)."""
    import cupy_kernels._runtime as runtime
    from cupy_kernels._runtime import device as device_mod

    props = Props(cc)
    stand_ins = {"current": lambda: props, "resident_blocks": resident,
                 "use_shared_memory": lambda *a, **k: None,
                 "max_active_clusters": lambda kernel, threads, smem, cl: max(1, resident(kernel, threads, smem) // cl)}
    with monkeypatch.context() as m:
        for module in (runtime, device_mod) + modules:
            for name, fn in stand_ins.items():
                if hasattr(module, name):
                    m.setattr(module, name, fn)
        yield props


class Recorder(PlanBuilder):
    """A plan builder that loads nothing: `launches` holds the kernels' names; with `calls` (a list) set on the
    class, each launch's (kernel, args, block) goes there too."""

    calls = None

    def launch(self, kernel, grid, block, args, shared_mem=0, cluster=1, after_previous=False):
        self.launches.append(kernel.name)
        if self.calls is not None:
            self.calls.append((kernel, tuple(args), block))


def _close(text, i):
    """The index of the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return j
    raise ValueError("unbalanced parentheses")


@functools.lru_cache(maxsize=None)
def signatures(filename) -> dict:
    """Kernel name -> [(C type, parameter name)] for each __global__ function of cu_src/<filename> (headers pasted)."""
    text = re.sub(r"//[^\n]*", "", read_source(filename))
    out = {}
    for m in re.finditer(r"__global__\s+void\s+", text):
        i = m.end()
        if text.startswith("__launch_bounds__", i):
            i = _close(text, text.index("(", i)) + 1
        name = re.match(r"\s*(\w+)\s*\(", text[i:])
        start = i + name.end() - 1
        params, depth, cur = [], 0, ""
        for ch in text[start + 1:_close(text, start)] + ",":
            depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                if cur.strip():
                    ctype, pname = re.match(r"(.*?)(\w+)$", " ".join(cur.split())).groups()
                    params.append((ctype.replace("__restrict__", "").strip(), pname))
                cur = ""
            else:
                cur += ch
        out[name.group(1)] = params
    return out


SCALARS = {"long long": np.int64, "int": np.int32, "unsigned": np.uint32, "float": np.float32, "double": np.float64,
           "NormMode": np.int32, "NormSource": np.int32}


def argument_fits(ctype, arg, acc=np.float32) -> bool:
    """A planned launch's argument passes as a parameter of C type `ctype` (acc: the accumulator type's scalar)."""
    if "*" in ctype:
        return isinstance(arg, Buffer) or arg is None or (type(arg) is np.uint64 and arg == 0)
    ctype = ctype.replace("const", "").strip()
    if ctype == "typename AccOf<T>::type":
        return type(arg) is acc
    return type(arg) is SCALARS[ctype]


def check_launch(filename, kernel_name, args):
    """Assert that `args` pass as the parameters of `kernel_name` (an instance name) of cu_src/<filename>; returns
    [(parameter name, argument)]."""
    base, _, targs = kernel_name.partition("<")
    params = signatures(filename)[base]
    assert len(args) == len(params), (kernel_name, params, args)
    acc = np.float64 if targs.startswith("double") else np.float32
    for (ctype, pname), arg in zip(params, args):
        assert argument_fits(ctype, arg, acc), (kernel_name, pname, ctype, arg)
    return [(pname, arg) for (_, pname), arg in zip(params, args)]
