"""The mechanisms every op shares, each once: sources, compilation, geometry, the launch path, interop."""
from .bridge import CUPY, TORCH, check_like, checked_dtype, describe, is_cupy, is_torch, kind_of, to_cupy, to_torch
from .device import DeviceProps, ceil_div, current, current_device, on_context, properties, resident_blocks, use_shared_memory
from .dtypes import (ACC, ACC_SCALAR, CTYPES, FLOAT_DTYPES, HALF_DTYPES, ITEMSIZE, UNSIGNED_CTYPES, dtype_name,
                     numpy_dtype, vec)
from .kernels import Kernel, KernelCompileError, KernelSource
from .launch import Buffer, Deferred, Plan, PlanBuilder, aligned, alignment
from .offline import KernelReport, compile_offline
from .sources import all_sources, cu_src_dir, cuda_include_dir, read_source
from .tma import max_active_clusters, tensor_map_2d


def normalize_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    """NumPy's axis argument (None, int or tuple) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{op}: axis must be None, an int or a tuple of ints; got {axis!r}")
        if not -ndim <= a < ndim:
            raise ValueError(f"{op}: axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))
