"""Planning without a GPU, for the CPU tests: a made-up device, a plan builder that records its launches, and each
launch's arguments checked against its kernel's parameters as cu_src declares them (a mismatch would otherwise show
only on a GPU, as garbage or a fault: the driver reads each parameter's bytes by its type). `Array` and `HOST` stand
in for an op's input arrays where its planner reads their shape, strides and address."""
from __future__ import annotations

import contextlib
import functools
import re
import types

import numpy as np

from cupy_kernels._runtime import Buffer, Deferred, PlanBuilder, numpy_dtype, read_source

SMS = 132


class Props:
    """Device properties of compute capability `cc`."""

    def __init__(self, cc, sms=SMS):
        self.id, self.name, self.cc, self.sm_count = 0, f"sm_{cc}", cc, sms
        self.max_threads_per_block, self.max_threads_per_sm = 1024, 2048
        self.shared_per_block_optin, self.l2_bytes = 227 * 1024, 50 << 20

    def resident_blocks(self, threads_per_block, per_sm_cap=32):  # DeviceProps': thread-limited
        return max(1, min(per_sm_cap, self.max_threads_per_sm // threads_per_block)) * self.sm_count


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
    class, each launch's (kernel, args, block) goes there too. `plan()` returns the recorder itself (an op's
    planner with PlanBuilder replaced by Recorder)."""

    calls = None

    def launch(self, kernel, grid, block, args, shared_mem=0, cluster=1, after_previous=False):
        self.launches.append(kernel.name)
        if self.calls is not None:
            self.calls.append((kernel, tuple(args), block))

    def plan(self):
        return self


class Array:
    """What a planner reads of an input array: shape, dtype, element strides (C-contiguous by default), address."""

    def __init__(self, shape, dtype, strides=None, ptr=1 << 20):
        self.shape, self.dtype, self.ptr = tuple(shape), numpy_dtype(dtype), ptr
        step, dense = 1, []
        for n in reversed(self.shape):
            dense.append(step)
            step *= max(n, 1)
        self.strides = tuple(strides) if strides is not None else tuple(reversed(dense))
        self.c_contiguous = all(n == 1 or s == d for n, s, d in zip(self.shape, self.strides, reversed(dense)))


# The array kind (as bridge.CUPY / TORCH) of `Array`s, for the planners that take one.
HOST = types.SimpleNamespace(strides=lambda x: x.strides, ptr=lambda x: x.ptr, contiguous=lambda x: x.c_contiguous,
                             empty_fn=lambda shape, dtype, device: lambda: None)


def _close(text, i):
    """The index of the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return j
    raise ValueError("unbalanced parentheses")


def _split(text, sep=","):
    """`text` split at the top-level `sep`s (not inside brackets)."""
    out, depth, cur = [], 0, ""
    for ch in text + sep:
        depth += {"(": 1, "<": 1, "[": 1, ")": -1, ">": -1, "]": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out


def _expand(text, macros):
    """`text` with the macros of `macros` (name -> (parameters or None, body)) expanded, ## pasting included."""
    for _ in range(16):
        m = re.search(r"\b(" + "|".join(map(re.escape, macros)) + r")\b", text) if macros else None
        if m is None:
            return text
        params, body = macros[m.group(1)]
        end = m.end()
        if params is not None:
            i = text.index("(", end)
            end = _close(text, i) + 1
            values = dict(zip(params, _split(text[i + 1:end - 1])))
            body = re.sub(r"\s*##\s*", "##", body)
            body = re.sub(r"\b\w+\b", lambda w: values.get(w.group(0), w.group(0)), body).replace("##", "")
        text = text[:m.start()] + body + text[end:]
    raise ValueError("macros nested too deep")


def _source(filename):
    """cu_src/<filename> (headers pasted) without line comments or line continuations; its macros."""
    text = re.sub(r"//[^\n]*", "", read_source(filename)).replace("\\\n", " ")
    macros = {}
    for m in re.finditer(r"^[ \t]*#define[ \t]+(\w+)(\([^)]*\))?[ \t]*(.*)$", text, re.M):
        params = [p.strip() for p in m.group(2)[1:-1].split(",")] if m.group(2) else None
        macros[m.group(1)] = (params, m.group(3))
    return text, macros


@functools.lru_cache(maxsize=None)
def signatures(filename) -> dict:
    """Kernel name -> [(C type, parameter name)] for each __global__ function of cu_src/<filename> (headers pasted,
    macros in the parameter list expanded)."""
    return {name: params for name, (params, _) in _kernels(filename).items()}


@functools.lru_cache(maxsize=None)
def _kernels(filename) -> dict:
    """Kernel name -> ([(C type, parameter name)], [template parameter names])."""
    text, macros = _source(filename)
    out = {}
    for m in re.finditer(r"__global__\s+void\s+", text):
        i = m.end()
        if text.startswith("__launch_bounds__", i):
            i = _close(text, text.index("(", i)) + 1
        name = re.match(r"\s*(\w+)\s*\(", text[i:])
        start = i + name.end() - 1
        params = []
        for cur in _split(_expand(text[start + 1:_close(text, start)], macros)):
            if cur:
                ctype, pname = re.match(r"(.*?)(\w+)$", " ".join(cur.split())).groups()
                params.append((ctype.replace("__restrict__", "").strip(), pname))
        tail = text[max(text.rfind("}", 0, m.start()), text.rfind(";", 0, m.start())) + 1:m.start()]
        head = re.search(r"template\s*<([^{};]*)>\s*$", tail)
        targs = [re.findall(r"\w+", p.split("=")[0])[-1] for p in _split(head.group(1))] if head else []
        out[name.group(1)] = (params, targs)
    return out


@functools.lru_cache(maxsize=None)
def struct_sizes(filename) -> dict:
    """Struct name -> bytes, for the structs of cu_src/<filename> made of scalar (array) fields."""
    text, _ = _source(filename)
    out = {}
    for m in re.finditer(r"struct\s+(?:alignas\((\d+)\)\s+)?(\w+)\s*\{([^{}]*)\}", text):
        fields = [re.fullmatch(r"\s*([\w ]+?)\s+\w+\s*(?:\[(\d+)\])?\s*", f) for f in m.group(3).split(";")[:-1]]
        types = {" ".join(f.group(1).split()) for f in fields if f}
        if fields and all(fields) and len(types) == 1 and types <= set(SCALARS):  # one type: no padding
            size = sum(np.dtype(SCALARS[" ".join(f.group(1).split())]).itemsize * int(f.group(2) or 1) for f in fields)
            align = int(m.group(1) or 1)
            out[m.group(2)] = -(-size // align) * align
    return out


SCALARS = {"long long": np.int64, "int": np.int32, "unsigned": np.uint32, "float": np.float32, "double": np.float64,
           "unsigned long long": np.uint64, "NormMode": np.int32, "NormSource": np.int32}
ACC_OF = {"double": "double", "int": "long long", "long long": "long long"}  # AccOf in common/types.cuh (else float)


def argument_fits(ctype, arg, structs=None) -> bool:
    """A planned launch's argument passes as a parameter of C type `ctype` (template arguments resolved; structs:
    by-value struct name -> bytes, passed as bytes or a Deferred of that size)."""
    if "*" in ctype:
        return isinstance(arg, Buffer) or arg is None or (type(arg) is np.uint64 and arg == 0)
    ctype = " ".join(w for w in ctype.split() if w not in ("const", "__grid_constant__"))
    if structs and ctype in structs:
        size = len(arg) if isinstance(arg, bytes) else arg.nbytes if isinstance(arg, Deferred) else None
        return size == structs[ctype]
    return type(arg) is SCALARS[ctype]


def _resolve(ctype, bound):
    """`ctype` with the instance's template arguments (`bound`: parameter name -> argument) and AccOf resolved."""
    ctype = re.sub(r"\b\w+\b", lambda w: bound.get(w.group(0), w.group(0)), ctype)
    return re.sub(r"typename AccOf<(.+?)>::type", lambda a: ACC_OF.get(a.group(1).strip(), "float"), ctype)


@functools.lru_cache(maxsize=None)
def parameters(filename, kernel_name) -> tuple:
    """((C type, parameter name), ...) of `kernel_name` (an instance name) of cu_src/<filename>, its template
    arguments and AccOf resolved."""
    base, _, targs = kernel_name.partition("<")
    params, tparams = _kernels(filename)[base]
    bound = dict(zip(tparams, _split(targs[:-1]))) if targs else {}
    return tuple((_resolve(ctype, bound), pname) for ctype, pname in params)


def check_launch(filename, kernel_name, args):
    """Assert that `args` pass as the parameters of `kernel_name` (an instance name) of cu_src/<filename>; returns
    [(parameter name, argument)]."""
    params = parameters(filename, kernel_name)
    assert len(args) == len(params), (kernel_name, params, args)
    structs = struct_sizes(filename)
    for (ctype, pname), arg in zip(params, args):
        assert argument_fits(ctype, arg, structs), (kernel_name, pname, ctype, arg)
    return [(pname, arg) for (_, pname), arg in zip(params, args)]
