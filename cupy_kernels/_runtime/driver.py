"""The CUDA driver calls the runtime makes, through ctypes on libcuda (loads in microseconds, needs neither CuPy's
array module nor torch), and the per-call launch through cupy_backends' Cython binding (every argument an int:
a fraction of a microsecond over the driver's own cost)."""
from __future__ import annotations

import ctypes

_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuInit", "cuDeviceGetAttribute", "cuDeviceGetName", "cuCtxGetCurrent", "cuCtxGetDevice",
                     "cuCtxSetCurrent", "cuDevicePrimaryCtxRetain", "cuModuleLoadData", "cuModuleGetFunction",
                     "cuFuncGetAttribute", "cuFuncSetAttribute", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                     "cuOccupancyMaxActiveClusters", "cuLaunchKernelEx", "cuMemsetD8Async", "cuGetErrorName"):
            getattr(_lib, name).restype = ctypes.c_int
        _lib.cuInit(0)
    return _lib


class CudaError(RuntimeError):
    """A driver call failed; `status` is its CUresult."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def error_name(rc: int) -> str:
    s = ctypes.c_char_p()
    lib().cuGetErrorName(rc, ctypes.byref(s))
    return s.value.decode() if s.value else f"CUresult {rc}"


def check(rc: int, what: str) -> None:
    if rc:
        raise CudaError(f"{what} failed: {error_name(rc)}", rc)


INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT


def device_attribute(device: int, attribute: int) -> int:
    v = ctypes.c_int()
    check(lib().cuDeviceGetAttribute(ctypes.byref(v), attribute, device), f"cuDeviceGetAttribute({attribute})")
    return v.value


def device_name(device: int) -> str:
    buf = ctypes.create_string_buffer(256)
    check(lib().cuDeviceGetName(buf, 256, device), "cuDeviceGetName")
    return buf.value.decode()


def current_context() -> int:
    c = ctypes.c_void_p()
    check(lib().cuCtxGetCurrent(ctypes.byref(c)), "cuCtxGetCurrent")
    return c.value or 0


def context_device() -> int:
    d = ctypes.c_int()
    check(lib().cuCtxGetDevice(ctypes.byref(d)), "cuCtxGetDevice")
    return d.value


def set_context(ctx: int) -> None:
    check(lib().cuCtxSetCurrent(ctypes.c_void_p(ctx)), "cuCtxSetCurrent")


def primary_context(device: int) -> int:
    """The device's primary context (the one torch and CuPy use), retained: it stays alive with the process."""
    c = ctypes.c_void_p()
    check(lib().cuDevicePrimaryCtxRetain(ctypes.byref(c), device), "cuDevicePrimaryCtxRetain")
    return c.value


def load_function(cubin: bytes, mangled: str) -> int:
    """The CUfunction `mangled` of a cubin, loaded into the current context (the module is never unloaded)."""
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(lib().cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
    check(lib().cuModuleGetFunction(ctypes.byref(fn), module, mangled.encode()), f"cuModuleGetFunction({mangled})")
    return fn.value


def function_attribute(fn: int, attribute: int) -> int:
    v = ctypes.c_int()
    check(lib().cuFuncGetAttribute(ctypes.byref(v), attribute, ctypes.c_void_p(fn)), "cuFuncGetAttribute")
    return v.value


def set_function_attribute(fn: int, attribute: int, value: int) -> None:
    check(lib().cuFuncSetAttribute(ctypes.c_void_p(fn), attribute, value), "cuFuncSetAttribute")


def occupancy(fn: int, threads: int, dynamic_smem: int) -> int:
    """Resident blocks of `fn` per SM at `threads` threads and `dynamic_smem` bytes (the driver's calculator)."""
    v = ctypes.c_int()
    check(lib().cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(v), ctypes.c_void_p(fn), threads,
                                                           ctypes.c_size_t(dynamic_smem)), "cuOccupancy")
    return v.value


def memset_zero(ptr: int, nbytes: int, stream: int) -> None:
    check(lib().cuMemsetD8Async(ctypes.c_uint64(ptr), ctypes.c_ubyte(0), ctypes.c_size_t(nbytes),
                                ctypes.c_void_p(stream)), f"zeroing {nbytes} bytes at 0x{ptr:x}")


def launcher(L):
    """A callable launching the planned launch L (launch.py's _Launch) on a stream: cuLaunchKernel through
    cupy_backends' Cython binding where CuPy is loaded already (a fraction of a microsecond), else through ctypes
    (that binding's first call imports CuPy, a large part of a second a torch caller would pay in its first call).
    Every argument but the stream is bound once."""
    import sys

    fn, (gx, gy, gz), (bx, by, bz), smem = L.fn, L.grid, L.block, L.smem
    if "cupy" in sys.modules:
        from cupy_backends.cuda.api.driver import launchKernel

        params = L.params_ptr

        def by_cython(stream):
            launchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params, 0)

        return by_cython
    c_launch, fn_c, params_c = lib().cuLaunchKernel, L.fn_c, L.params_c

    def by_ctypes(stream):
        rc = c_launch(fn_c, gx, gy, gz, bx, by, bz, smem, _stream_arg(stream), params_c, None)
        if rc:
            raise CudaError(f"launching {L.name} (grid {L.grid}, block {L.block}, {L.smem} bytes of shared "
                            f"memory) failed: {error_name(rc)}", rc)

    return by_ctypes


_streams: dict = {}  # stream handle -> its ctypes argument


def _stream_arg(stream: int):
    s = _streams.get(stream)
    if s is None:
        if len(_streams) > 4096:
            _streams.clear()
        s = _streams[stream] = ctypes.c_void_p(stream)
    return s
