"""Transitional: the per-call CuPy-view path that ops not yet on plans use. Deleted once every op plans."""
from __future__ import annotations

from .bridge import _torch, describe, is_cupy, is_torch, to_cupy, to_torch
from .dtypes import dtype_name, numpy_dtype as cupy_dtype


def torch_dtype(name: str):
    return getattr(_torch(), name)


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


