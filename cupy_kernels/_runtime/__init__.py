"""The mechanisms every op shares, each once: sources, compilation, geometry, interop."""
from .bridge import Call, cupy_dtype, describe, dtype_name, is_cupy, is_torch, to_cupy, to_torch
from .device import DeviceProps, ceil_div, current, properties, resident_blocks, use_shared_memory
from .kernels import KernelCompileError, KernelSource
from .offline import KernelReport, compile_offline
from .sources import all_sources, cu_src_dir, cuda_include_dir, read_source
from .tma import launch, tensor_map_2d

# C type of each dtype name, for template arguments.
CTYPES = {
    "float16": "half", "bfloat16": "bfloat16", "float32": "float", "float64": "double",
    "int32": "int", "int64": "long long",
}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


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
