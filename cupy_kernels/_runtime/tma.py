"""TMA descriptors (CUtensorMap) for Hopper kernels, encoded by the driver's cuTensorMapEncodeTiled
through ctypes (CuPy does not wrap it), and `launch`, which passes them to a kernel by value
(`const __grid_constant__` on the device side) through cuLaunchKernel: CuPy's scalar arguments hold at
most 64 bytes, a CUtensorMap is 128. Thread-block clusters: `launch(..., cluster=k)` goes through
cuLaunchKernelEx with the cluster-dimension attribute, and `max_active_clusters` asks the driver how many
such clusters fit on the chip at once. Programmatic dependent launch: `launch(..., after_previous=True)`
lets the kernel's blocks start while the previous kernel of the stream ends (it must call
wait_prerequisites(), common/cluster.cuh, before reading that kernel's results)."""
from __future__ import annotations

import ctypes

import numpy as np

MAP_BYTES = 128
_DATA_TYPE = {"float16": 6, "bfloat16": 9, "float32": 7}      # CUtensorMapDataType
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
_SWIZZLE_128B = 3                                              # CUtensorMapSwizzle
_L2_PROMOTION_256B = 3                                         # CUtensorMapL2promotion
_driver = {}


def _libcuda(name: str):
    f = _driver.get(name)
    if f is None:
        f = _driver[name] = getattr(ctypes.CDLL("libcuda.so.1"), name)
    return f


def _encoder():
    f = _libcuda("cuTensorMapEncodeTiled")
    if f.argtypes is None:
        u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        f.restype = ctypes.c_int
    return f


def tensor_map_2d(ptr: int, rows: int, cols: int, dtype: str, box_cols: int, box_rows: int) -> bytes:
    """The descriptor of a row-major (rows, cols) matrix at device address `ptr` (16-byte aligned, rows
    16-byte multiples), read in boxes of box_rows x box_cols elements into 128-byte-swizzled shared
    memory (box_cols * itemsize == 128); elements outside the matrix read as zero."""
    itemsize = _ITEMSIZE[dtype]
    raw = np.zeros(MAP_BYTES + 64, np.uint8)
    off = (-raw.ctypes.data) % 64                  # the driver wants a 64-byte aligned map
    rc = _encoder()(raw.ctypes.data + off, _DATA_TYPE[dtype], 2, ptr,
                    (ctypes.c_uint64 * 2)(cols, rows), (ctypes.c_uint64 * 1)(cols * itemsize),
                    (ctypes.c_uint32 * 2)(box_cols, box_rows), (ctypes.c_uint32 * 2)(1, 1),
                    0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {rc} for a {rows} x {cols} {dtype} "
                           f"matrix at 0x{ptr:x}, box {box_rows} x {box_cols}")
    return raw[off:off + MAP_BYTES].tobytes()


_CTYPE = {np.dtype(t): c for t, c in ((np.int32, ctypes.c_int32), (np.uint32, ctypes.c_uint32),
                                      (np.int64, ctypes.c_int64), (np.uint64, ctypes.c_uint64),
                                      (np.float32, ctypes.c_float), (np.float64, ctypes.c_double))}


def _param(arg):
    """A ctypes object holding one kernel argument's bytes: a device array's address, a NumPy scalar,
    or raw bytes (a struct passed by value)."""
    if isinstance(arg, bytes):
        return (ctypes.c_ubyte * len(arg)).from_buffer_copy(arg)
    if isinstance(arg, np.generic):
        return _CTYPE[arg.dtype](arg.item())
    return ctypes.c_void_p(arg.data.ptr)  # cupy.ndarray


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, 4 bytes of padding, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_ubyte * 4), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_clusters = {}


def _dims(d) -> tuple[int, int, int]:
    d = (d,) if isinstance(d, int) else tuple(d)
    return d + (1,) * (3 - len(d))


def _config(grid, block, shared_mem: int, stream: int, cluster: int, after_previous: bool = False):
    """A CUlaunchConfig (grid / block: an int or up to 3 dimensions) in clusters of `cluster` blocks along x,
    with after_previous a programmatic dependent launch (kept alive with its attribute array: the caller holds
    the returned pair)."""
    attr = (_LaunchAttribute * 2)()
    k = 0
    if cluster > 1:
        attr[k].id = _CLUSTER_DIMENSION
        attr[k].value[0], attr[k].value[1], attr[k].value[2] = cluster, 1, 1
        k += 1
    if after_previous:
        attr[k].id = _PROGRAMMATIC_STREAM_SERIALIZATION
        attr[k].value[0] = 1
        k += 1
    cfg = _LaunchConfig(*_dims(grid), *_dims(block), shared_mem, ctypes.c_void_p(stream), attr, k)
    return cfg, attr


def max_active_clusters(kernel, block: int, shared_mem: int, cluster: int) -> int:
    """How many clusters of `cluster` blocks of `kernel` can be resident on the chip at once
    (cuOccupancyMaxActiveClusters: SMs, shared memory, and the GPCs that a cluster must share). Raises
    when none fits."""
    key = (kernel.kernel.ptr, block, shared_mem, cluster)
    n = _clusters.get(key)
    if n is None:
        f = _libcuda("cuOccupancyMaxActiveClusters")
        cfg, attr = _config(cluster, block, shared_mem, 0, cluster)
        count = ctypes.c_int(0)
        rc = f(ctypes.byref(count), ctypes.c_void_p(kernel.kernel.ptr), ctypes.byref(cfg))
        if rc != 0 or count.value < 1:
            raise RuntimeError(f"cuOccupancyMaxActiveClusters returned CUresult {rc}, {count.value} clusters "
                               f"(clusters of {cluster} blocks of {block} threads, {shared_mem} bytes of shared memory)")
        n = _clusters[key] = count.value
    return n


def launch(kernel, grid, block, args, shared_mem: int = 0, cluster: int = 1, after_previous: bool = False) -> None:
    """Launch a CuPy RawKernel on CuPy's current stream with `args` (CuPy arrays, NumPy scalars of the
    kernel's parameter types, or bytes for structs passed by value); grid / block an int or up to 3
    dimensions. cluster > 1: in clusters of `cluster` blocks along x (grid a multiple of it); after_previous:
    a programmatic dependent launch (compute capability 9.0; see the module's docstring)."""
    import cupy

    params = [_param(a) for a in args]
    pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
    stream = cupy.cuda.get_current_stream().ptr
    cfg, attr = _config(grid, block, shared_mem, stream, cluster, after_previous)
    rc = _libcuda("cuLaunchKernelEx")(ctypes.byref(cfg), ctypes.c_void_p(kernel.kernel.ptr), pointers,
                                       ctypes.c_void_p(0))
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {rc} (grid {grid}, block {block}, {shared_mem} bytes "
                           f"of shared memory{f', clusters of {cluster}' if cluster > 1 else ''}"
                           f"{', after the previous kernel' if after_previous else ''})")
