"""CuPy arrays and CUDA torch tensors in, the same kind out: zero-copy through DLPack, launched on
the caller's device and current stream (torch's current stream for tensors), with clear errors."""
from __future__ import annotations

import sys

import numpy as np

_TORCH_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32",
                      "int64", "bool")


def _torch():
    return sys.modules.get("torch")  # never import torch for a CuPy caller


def is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_cupy(x) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def describe(x) -> str:
    if is_torch(x):
        return f"torch.Tensor(shape={tuple(x.shape)}, dtype={x.dtype}, device={x.device})"
    if is_cupy(x):
        return f"cupy.ndarray(shape={x.shape}, dtype={x.dtype}, device=cuda:{x.device.id})"
    if isinstance(x, np.ndarray):
        return f"numpy.ndarray(shape={x.shape}, dtype={x.dtype}) on the host"
    return f"{type(x).__module__}.{type(x).__qualname__}"


_DTYPE_NAMES: dict = {}  # dtype object -> name (a few microseconds a call otherwise)


def dtype_name(x) -> str:
    """'float32', 'bfloat16', ... for a CuPy array or a torch tensor."""
    dt = x.dtype
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = str(dt).removeprefix("torch.") if is_torch(x) else np.dtype(dt).name
    return name


def torch_dtype(name: str):
    return getattr(_torch(), name)


def cupy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class Call:
    """One public op call. Entering it makes the caller's device and stream CuPy's current ones, so
    every launch and allocation inside lands where the caller's own work would have."""

    def __init__(self, op: str, primary, name: str = "x"):
        self.op = op
        self.torch = is_torch(primary)
        if self.torch:
            if primary.device.type != "cuda":
                raise TypeError(f"{op}: {name} must be a CUDA tensor; got {describe(primary)}")
            self.device_id = primary.device.index if primary.device.index is not None else _torch().cuda.current_device()
        elif is_cupy(primary):
            self.device_id = primary.device.id
        else:
            raise TypeError(f"{op}: {name} must be a cupy.ndarray or a CUDA torch.Tensor; got {describe(primary)}")
        self._contexts = []
        self._made = {}  # torch tensors from empty(), by the layout of their CuPy views

    def __enter__(self) -> "Call":
        import cupy

        device = cupy.cuda.Device(self.device_id)
        device.__enter__()
        self._contexts.append(device)
        if self.torch:
            ptr = _current_raw_stream(self.device_id)
            stream = _external_stream(ptr, self.device_id)
            stream.__enter__()
            self._contexts.append(stream)
        return self

    def __exit__(self, *exc) -> None:
        while self._contexts:
            self._contexts.pop().__exit__(*exc)

    def arg(self, x, name: str, dtypes=None, ndim=None):
        """`x` as a CuPy array on the call's device (zero-copy), checked for kind, device and dtype."""
        if self.torch:
            if not is_torch(x):
                raise TypeError(f"{self.op}: {name} must be a torch.Tensor like the other inputs; got {describe(x)}")
            if x.device.type != "cuda" or (x.device.index or 0) != self.device_id:
                raise ValueError(f"{self.op}: {name} is on {x.device}; expected cuda:{self.device_id} like the other inputs")
        elif not is_cupy(x):
            raise TypeError(f"{self.op}: {name} must be a cupy.ndarray like the other inputs; got {describe(x)}")
        elif x.device.id != self.device_id:
            raise ValueError(f"{self.op}: {name} is on cuda:{x.device.id}; expected cuda:{self.device_id} like the other inputs")
        dt = dtype_name(x)
        if dtypes is not None and dt not in dtypes:
            raise TypeError(f"{self.op}: {name} has dtype {dt}; expected one of {', '.join(dtypes)}")
        if ndim is not None and x.ndim not in (ndim if isinstance(ndim, tuple) else (ndim,)):
            raise ValueError(f"{self.op}: {name} must have {ndim} dimensions; got shape {tuple(x.shape)}")
        return to_cupy(x)

    def empty(self, shape, dtype: str):
        """A CuPy array from the caller's allocator (torch's caching allocator for torch callers, so
        that CUDA graph capture and torch's memory statistics see it)."""
        if self.torch:
            t = _torch().empty(tuple(shape), dtype=torch_dtype(dtype), device=self.device_id)
            arr = to_cupy(t)
            if arr.size:  # empty tensors may share a null pointer
                self._made[_layout(arr)] = t
            return arr
        import cupy

        return cupy.empty(tuple(shape), dtype=cupy_dtype(dtype))

    def result(self, arr):
        """A CuPy result back in the caller's kind (zero-copy): the tensor `empty` made when `arr` is laid
        out exactly like it, else through DLPack."""
        if not self.torch:
            return arr
        t = self._made.get(_layout(arr))
        return t if t is not None else to_torch(arr)


_streams: dict = {}


def _current_raw_stream(device_id: int) -> int:
    """torch's current stream on the device as a cudaStream_t (no Stream object: ~10 us less a call)."""
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device_id) if raw is not None else torch.cuda.current_stream(device_id).cuda_stream


class _StreamHandle:
    """A raw CUDA stream pointer in the CUDA stream protocol, for cupy.cuda.Stream.from_external."""

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def _external_stream(ptr: int, device_id: int):
    import cupy

    key = (ptr, device_id)
    s = _streams.get(key)
    if s is None:
        from_external = getattr(cupy.cuda.Stream, "from_external", None)  # CuPy >= 14
        s = from_external(_StreamHandle(ptr)) if from_external else cupy.cuda.ExternalStream(ptr, device_id)
        _streams[key] = s
    return s


def _layout(arr) -> tuple:
    return arr.data.ptr, arr.shape, arr.strides, arr.dtype


def to_cupy(x):
    """Zero-copy view of a CUDA tensor (or a CuPy array as it is), built from the tensor's pointer and
    strides: DLPack's stream handshake (torch's `__dlpack__`) cost ~25 us a tensor on the device host,
    and every launch already runs on the stream the tensor's producer used (`Call`)."""
    if not is_torch(x):
        return x
    import cupy

    dtype = np.dtype(bool) if x.dtype == _torch().bool else cupy_dtype(dtype_name(x))
    item = x.element_size()
    span = (1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))) * item if x.numel() else 0
    mem = cupy.cuda.UnownedMemory(x.data_ptr(), span, x, x.device.index)
    return cupy.ndarray(tuple(x.shape), dtype, cupy.cuda.MemoryPointer(mem, 0),
                        strides=tuple(st * item for st in x.stride()))


def to_torch(arr):
    torch = _torch()
    if arr.dtype == np.bool_:
        return torch.from_dlpack(arr.view(np.uint8)).view(torch.bool)
    return torch.from_dlpack(arr)
