"""TMA descriptors (CUtensorMap) for Hopper kernels, encoded by the driver's cuTensorMapEncodeTiled through
ctypes (CuPy does not wrap it) and passed to kernels by value (`const __grid_constant__`), and how many
thread-block clusters of a kernel fit on the chip at once (`max_active_clusters`)."""
from __future__ import annotations

import ctypes

import numpy as np

from . import driver
from .dtypes import ITEMSIZE

MAP_BYTES = 128
_DATA_TYPE = {"float16": 6, "bfloat16": 9, "float32": 7}      # CUtensorMapDataType
_SWIZZLE_128B = 3                                              # CUtensorMapSwizzle
_L2_PROMOTION_256B = 3                                         # CUtensorMapL2promotion
def _encoder():
    f = driver.lib().cuTensorMapEncodeTiled
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
    itemsize = ITEMSIZE[dtype]
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


_clusters: dict = {}


def max_active_clusters(kernel, block: int, shared_mem: int, cluster: int) -> int:
    """How many clusters of `cluster` blocks of `kernel` can be resident on the chip at once
    (cuOccupancyMaxActiveClusters: SMs, shared memory, and the GPCs that a cluster must share). Raises
    when none fits."""
    from .launch import launch_config

    key = (kernel.ptr, block, shared_mem, cluster)
    n = _clusters.get(key)
    if n is None:
        f = driver.lib().cuOccupancyMaxActiveClusters
        cfg, attr = launch_config(cluster, block, shared_mem, 0, cluster)
        count = ctypes.c_int(0)
        rc = f(ctypes.byref(count), ctypes.c_void_p(kernel.ptr), ctypes.byref(cfg))
        if rc != 0 or count.value < 1:
            raise RuntimeError(f"cuOccupancyMaxActiveClusters returned {driver.error_name(rc) if rc else 'no cluster'} "
                               f"(clusters of {cluster} blocks of {block} threads, {shared_mem} bytes of shared memory)")
        n = _clusters[key] = count.value
    return n
