"""The dtype tables every op shares: names, element sizes, C types, accumulator types."""
from __future__ import annotations

import numpy as np

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES = ("float16", "bfloat16")

ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "complex64": 8,
    "complex128": 16,
}

# C type of each dtype name, for template arguments.
CTYPES = {
    "float16": "half", "bfloat16": "bfloat16", "float32": "float", "float64": "double",
    "int32": "int", "int64": "long long",
}

# Unsigned C type of each element size: kernels that only move bits (pad) are instanced by size.
UNSIGNED_CTYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}

# Accumulator of each dtype: half types accumulate in float32, int32 sums in int64.
ACC = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64",
       "int32": "int64", "int64": "int64"}
ACC_SCALAR = {"float32": np.float32, "float64": np.float64, "int64": np.int64}


def vec(dtype: str) -> int:
    """Elements of `dtype` in one 16-byte pack."""
    return 16 // ITEMSIZE[dtype]


_NUMPY: dict[str, np.dtype] = {}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy / CuPy dtype of a name (bfloat16 through ml_dtypes)."""
    dt = _NUMPY.get(name)
    if dt is None:
        if name == "bfloat16":
            import ml_dtypes

            dt = np.dtype(ml_dtypes.bfloat16)
        else:
            dt = np.dtype(name)
        _NUMPY[name] = dt
    return dt


# dtype object -> name: str() of a dtype costs microseconds a call. torch's dtypes have their own dict, named at
# import (register_torch): torch.compile traces the lookup, and Dynamo cannot trace a dict holding NumPy dtypes.
_TORCH_NAMES: dict = {}
_NAMES: dict = {}


def dtype_name(x) -> str:
    """'float32', 'bfloat16', ... of a CuPy / NumPy array or a torch tensor."""
    dt = x.dtype
    name = _TORCH_NAMES.get(dt)
    if name is None:
        name = _NAMES.get(dt)
        if name is None:
            s = str(dt)
            if s.startswith("torch."):
                name = _TORCH_NAMES[dt] = s[6:]
            else:
                name = _NAMES[dt] = np.dtype(dt).name
    return name


def register_torch(torch) -> None:
    """Name every torch dtype, and make every NumPy dtype, now: at import, not inside a call that torch.compile
    may be tracing (Dynamo cannot replay a NumPy dtype stored into a dict during the trace)."""
    for dt in vars(torch).values():
        if isinstance(dt, torch.dtype) and dt not in _TORCH_NAMES:
            _TORCH_NAMES[dt] = str(dt)[6:]
    for name in ITEMSIZE:
        numpy_dtype(name)
