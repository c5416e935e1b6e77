"""The shared runtime on the CPU: launch parameter blocks, plan caches and tuning overrides, the per-instance kernel
cache (compiled by NVRTC, no GPU needed), alignment, the kind checks, and what an import loads."""
import ctypes
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import torch
from cupy_kernels._runtime import Buffer, Deferred, KernelSource, kind_of
from cupy_kernels._runtime import kernels as K
from cupy_kernels._runtime.launch import _Launch, alignment
from cupy_kernels._runtime.tuning import PlanCache, tuned


def param_bytes(launch, i, n):
    return ctypes.string_at(launch.params[i], n)


def test_parameter_block_holds_every_argument_at_its_address():
    args = (Buffer(1), np.int32(-7), None, Buffer(0), np.float32(1.5), b"\x01" * 24, np.uint64(2 ** 63 + 5),
            Deferred(lambda a, b: struct.pack("<QQ", b, a), (0, 1), 16))
    launch = _Launch(0, (1, 1, 1), (32, 1, 1), 0, args, 1, False, "k")
    pointers = (0x1000_0000_0040, 0x2000_0000_0080)
    launch.pack(launch._blob, 0, *[pointers[j] for j in launch.pointer_indices])
    for off, d in launch.deferred:
        raw = d.fn(*[pointers[j] for j in d.indices])
        launch._blob[off:off + len(raw)] = raw
    assert not launch.identity  # Buffer(1) comes first
    assert param_bytes(launch, 0, 8) == struct.pack("<Q", pointers[1])
    assert param_bytes(launch, 1, 4) == struct.pack("<i", -7)
    assert param_bytes(launch, 2, 8) == b"\0" * 8
    assert param_bytes(launch, 3, 8) == struct.pack("<Q", pointers[0])
    assert param_bytes(launch, 4, 4) == struct.pack("<f", 1.5)
    assert param_bytes(launch, 5, 24) == b"\x01" * 24
    assert param_bytes(launch, 6, 8) == struct.pack("<Q", 2 ** 63 + 5)
    assert param_bytes(launch, 7, 16) == struct.pack("<QQ", pointers[1], pointers[0])
    assert launch.params[7] % 64 == ctypes.addressof(launch.buffer) % 64  # structs on 64-byte offsets
    with pytest.raises(TypeError, match="argument 0 is a int"):
        _Launch(0, (1, 1, 1), (1, 1, 1), 0, (5,), 1, False, "k")


def test_pointers_in_call_order_pack_directly():
    from cupy_kernels._runtime.launch import Plan

    launch = _Launch(0, (1, 1, 1), (1, 1, 1), 0, (Buffer(0), Buffer(1), np.int64(3)), 1, False, "k")
    assert Plan([launch], [], 2, 0).single is launch and launch.identity
    assert not Plan([launch], [], 3, 0).launches[0].identity  # a call passing a pointer this launch does not take
    launch.pack(launch._blob, 0, 11, 22)
    assert param_bytes(launch, 0, 8) == struct.pack("<Q", 11) and param_bytes(launch, 1, 8) == struct.pack("<Q", 22)
    assert param_bytes(launch, 2, 8) == struct.pack("<q", 3)


def test_a_calls_workspaces_are_one_allocation_zeroed_ones_first(monkeypatch):
    """A plan's workspaces come from one allocation a call, each at a 256-byte offset, the zeroed ones first under
    one memset; a persistent workspace is made once per (device, stream, name) and kept."""
    from cupy_kernels._runtime import driver
    from cupy_kernels._runtime import launch as L

    class Seen:  # a launch that records the pointers it gets
        pointer_indices, calls = (), []

        def __call__(self, pointers, stream):
            self.calls.append(list(pointers))

    memsets, allocs = [], []
    monkeypatch.setattr(driver, "memset_zero", lambda ptr, nbytes, stream: memsets.append((ptr, nbytes, stream)))

    def alloc(nbytes):
        allocs.append(nbytes)
        return 0x10000 * len(allocs), f"owner {len(allocs)}"

    name = "test_runtime.persistent"
    works = [Buffer(2, 256, 100), Buffer(3, 256, 300, zero=True), Buffer(4, 256, 40, persistent=name),
             Buffer(5, 256, 1, zero=True)]
    seen = Seen()
    plan = L.Plan([seen], works, 2, 0)
    try:
        owners = plan.run((0xA00, 0xB00), 7, alloc)
        assert allocs == [1024, 40] and owners == ("owner 1",)  # 300 + 1 zeroed -> 512 + 256, then 100 -> 256
        assert memsets == [(0x10000, 768, 7)]
        assert seen.calls == [[0xA00, 0xB00, 0x10000 + 768, 0x10000, 0x20000, 0x10000 + 512]]
        plan.run((0xA00, 0xB00), 7, alloc)  # the persistent one is kept
        assert allocs == [1024, 40, 1024] and seen.calls[-1][4] == 0x20000
    finally:
        L._persistents.pop((0, 7, name), None)


def test_each_launch_binds_its_driver_call(monkeypatch):
    """A launch's driver call gets the function, grid, block, shared memory, the call's stream and the parameter
    block, by either binding (CuPy's Cython where CuPy is loaded, else ctypes), and cuLaunchKernelEx its config with
    the stream set; the pointers are packed first."""
    import sys
    import types

    from cupy_backends.cuda.api import driver as cy

    from cupy_kernels._runtime import driver

    calls = []

    class Lib:
        def cuLaunchKernel(self, *args):
            calls.append(("ctypes",) + args)
            return 0

        def cuLaunchKernelEx(self, cfg, fn, params, extra):
            calls.append(("ex", cfg._obj.hStream, cfg._obj.gridDimX, cfg._obj.blockDimX, fn.value, params, extra))
            return 0

    monkeypatch.setattr(driver, "lib", lambda: Lib())
    monkeypatch.setattr(cy, "launchKernel", lambda *args: calls.append(("cython",) + args))
    args = (Buffer(0), np.int32(3))

    def check_packed(launch, ptr):
        assert param_bytes(launch, 0, 8) == struct.pack("<Q", ptr)

    monkeypatch.setitem(sys.modules, "cupy", sys.modules.get("cupy") or types.ModuleType("cupy"))
    launch = _Launch(0x1234, (5, 6, 7), (32, 2, 1), 96, args, 1, False, "k")
    launch((0xA0,), 11)
    launch((0xB0,), 12)
    assert calls == [("cython", 0x1234, 5, 6, 7, 32, 2, 1, 96, s, launch.params_ptr, 0) for s in (11, 12)]
    check_packed(launch, 0xB0)

    calls.clear()
    monkeypatch.delitem(sys.modules, "cupy")
    launch = _Launch(0x1234, (5, 6, 7), (32, 2, 1), 96, args, 1, False, "k")
    launch((0xC0,), 13)
    (_, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra), = calls
    assert (fn.value, gx, gy, gz, bx, by, bz, smem, stream.value, extra) == (0x1234, 5, 6, 7, 32, 2, 1, 96, 13, None)
    assert ctypes.cast(params, ctypes.c_void_p).value == launch.params_ptr
    check_packed(launch, 0xC0)

    calls.clear()
    launch = _Launch(0x1234, (5, 6, 7), (32, 2, 1), 96, args, 2, True, "k")  # clusters of 2, after the previous
    launch((0xD0,), 14)
    launch((0xE0,), 15)
    assert [c[:5] for c in calls] == [("ex", 14, 5, 32, 0x1234), ("ex", 15, 5, 32, 0x1234)]
    assert all(c[5] is launch.params and c[6] is None for c in calls)
    check_packed(launch, 0xE0)


def test_alignment():
    assert alignment(0) == 256 and alignment(4096) == 256 and alignment(0x1008) == 8 and alignment(0x1030) == 16


def test_plan_cache_and_tuning_override():
    from cupy_kernels.ops import softmax as S

    cache = PlanCache()
    cache.put("k", 1)
    default = S.TUNING.tiled_max_n
    with tuned(S, tiled_max_n=7) as t:
        assert S.TUNING.tiled_max_n == 7 == t.tiled_max_n and "k" not in cache  # the default table's plans: away
        cache.put("k", 2)
    assert S.TUNING.tiled_max_n == default and cache["k"] == 1  # back, and not the override's
    with tuned(S, tiled_max_n=7):
        assert cache["k"] == 2  # the override's own plans, kept for its next entry
    with tuned(S, tiled_max_n=8):
        assert "k" not in cache
    with pytest.raises(Exception):
        S.TUNING.tiled_max_n = 3  # frozen: only tuned() changes a table


def test_kernel_cache_compiles_once_per_instance(tmp_path, monkeypatch):
    """One NVRTC compile of one instance (no GPU), stored; the next lookup reads the file and compiles nothing."""
    monkeypatch.setenv("CUPY_KERNELS_CACHE_DIR", str(tmp_path))
    from cupy_kernels.ops import reduce as R

    name = "reduce_rows<OP_SUM, float, float>"
    cubin, mangled = K.compiled(R.SOURCE, name, "90")
    assert cubin[:4] == b"\x7fELF" and mangled.startswith("_Z") and "reduce_rows" in mangled
    assert len(list(tmp_path.glob("*.cubin"))) == 1

    def no_compile(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(K, "_nvrtc", no_compile)
    assert K.compiled(R.SOURCE, name, "90") == (cubin, mangled)
    with pytest.raises(AssertionError, match="compiled again"):
        K.compiled(R.SOURCE, name, "80")  # another architecture: another entry


def test_compile_error_names_the_instance(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_KERNELS_CACHE_DIR", str(tmp_path))
    src = KernelSource("reduce.cu")  # the real file, a name it does not define
    try:
        src.declare(["no_such_kernel<float>"])
        with pytest.raises(K.KernelCompileError, match="no_such_kernel<float>"):
            K.compiled(src, "no_such_kernel<float>", "90")
    finally:
        from cupy_kernels.ops import reduce as R

        KernelSource.registry["reduce.cu"] = R.SOURCE
    with pytest.raises(KeyError, match="was not declared"):
        src.kernel("undeclared<int>")


def test_kind_checks_name_the_argument():
    with pytest.raises(TypeError, match="op: x must be a cupy.ndarray or a CUDA torch.Tensor; got numpy"):
        kind_of(np.ones(3), "op")
    if torch is not None:
        with pytest.raises(TypeError, match="op: y must be a CUDA tensor"):
            kind_of(torch.ones(3), "op", "y")


def test_import_leaves_torch_compile_unloaded():
    """`import cupy_kernels` beside torch loads the torch bridge but not torch._dynamo (2-4 s of import time): the
    bridge's torch.compile pieces are made at the first traced call."""
    if torch is None:
        pytest.skip("needs torch")
    code = ("import sys, torch, cupy_kernels, cupy_kernels.torch_ops\n"
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo'))[:3])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
