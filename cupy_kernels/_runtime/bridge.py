"""CuPy arrays and CUDA torch tensors in, the same kind out: kernels read the caller's memory through raw
pointers (zero-copy) on the caller's device and current stream (torch's current stream for tensors), with
clear errors. `TORCH` and `CUPY` give the few things an op needs of either kind."""
from __future__ import annotations

import functools
import sys

import numpy as np

from .dtypes import dtype_name, numpy_dtype


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


class _Torch:
    """What an op needs of torch tensors (bound to torch's functions once torch is imported)."""

    name = "torch"

    def bind(self, torch) -> None:
        # the C entry points under torch.cuda.current_device / current_stream (absent from CPU builds)
        self._get_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
        self._get_stream = getattr(torch._C, "_cuda_getCurrentRawStream",
                                   lambda d: torch.cuda.current_stream(d).cuda_stream)
        self._torch = torch
        self._dtypes: dict = {}   # dtype name -> torch.dtype
        self._devices: dict = {}  # index -> torch.device
        self._allocs: dict = {}   # index -> alloc(nbytes)

    @staticmethod
    def device(x) -> int:
        return x.get_device()

    @staticmethod
    def key(x) -> tuple:
        """What a launch plan depends on of an array: dtype, shape, element strides, 16-byte alignment, device."""
        return x.dtype, x.shape, x.stride(), x.data_ptr() & 15, x.get_device()

    def current_device(self) -> int:
        return self._get_device()

    def stream_on(self, device: int):
        """The current stream of `device` when it is the current device, else None (switch devices first)."""
        return self._get_stream(device) if self._get_device() == device else None

    def on_device(self, device: int):
        return self._torch.cuda.device(device)

    def stream(self, device: int) -> int:
        return self._get_stream(device)

    @staticmethod
    def ptr(x) -> int:
        return x.data_ptr()

    @staticmethod
    def strides(x) -> tuple:
        return x.stride()

    @staticmethod
    def contiguous(x) -> bool:
        return x.is_contiguous()

    @staticmethod
    def as_contiguous(x):
        return x.contiguous()

    def _dtype_device(self, dtype: str, device: int):
        dt, dev = self._dtypes.get(dtype), self._devices.get(device)
        if dt is None:
            dt = self._dtypes[dtype] = getattr(self._torch, dtype)
        if dev is None:
            dev = self._devices[device] = self._torch.device("cuda", device)
        return dt, dev

    def empty_fn(self, shape, dtype: str, device: int):
        """empty(shape, dtype, device) as a call of no arguments, for a plan to keep: its arguments are resolved
        once (0.5 us a call). Sizes as separate ints and a torch.device: torch's argument parsing takes them in
        2.3 us, a tuple and an index in 3.4 (H200 host)."""
        dt, dev = self._dtype_device(dtype, device)
        return functools.partial(self._torch.empty, *(shape or ((),)), dtype=dt, device=dev)

    def empty(self, shape, dtype: str, device: int):
        return self.empty_fn(shape, dtype, device)()

    def empty_like(self, x):
        return self._torch.empty_like(x)

    def alloc(self, device: int):
        """nbytes -> (pointer, owner) from torch's caching allocator on `device` (CUDA-graph capturable)."""
        alloc = self._allocs.get(device)
        if alloc is None:
            empty = self._torch.empty
            u8, dev = self._dtype_device("uint8", device)

            def alloc(nbytes):
                a = empty(nbytes, dtype=u8, device=dev)
                return a.data_ptr(), a

            self._allocs[device] = alloc
        return alloc

    @staticmethod
    def fill(x, value) -> None:
        x.fill_(value)


class _Cupy:
    """What an op needs of CuPy arrays."""

    name = "cupy"

    @staticmethod
    def device(x) -> int:
        return x.device.id

    @staticmethod
    def current_device() -> int:
        import cupy

        return cupy.cuda.runtime.getDevice()

    @staticmethod
    def on_device(device: int):
        import cupy

        return cupy.cuda.Device(device)

    @staticmethod
    def stream(device: int) -> int:
        import cupy

        return cupy.cuda.get_current_stream().ptr

    @staticmethod
    def stream_on(device: int):
        import cupy

        return cupy.cuda.get_current_stream().ptr if cupy.cuda.runtime.getDevice() == device else None

    @staticmethod
    def ptr(x) -> int:
        return x.data.ptr

    @staticmethod
    def key(x) -> tuple:
        return x.dtype, x.shape, _Cupy.strides(x), x.data.ptr & 15, x.device.id

    @staticmethod
    def strides(x) -> tuple:
        item = x.itemsize
        return tuple(s // item for s in x.strides)

    @staticmethod
    def contiguous(x) -> bool:
        return x.flags.c_contiguous

    @staticmethod
    def as_contiguous(x):
        import cupy

        return cupy.ascontiguousarray(x)

    @staticmethod
    def empty_fn(shape, dtype: str, device: int, order: str = "C"):
        """empty() as a call of no arguments (on the device current at the call); order "F": Fortran-ordered."""
        import cupy

        return functools.partial(cupy.empty, tuple(shape), dtype=numpy_dtype(dtype), order=order)

    @staticmethod
    def empty(shape, dtype: str, device: int):
        return _Cupy.empty_fn(shape, dtype, device)()

    @staticmethod
    def empty_like(x):
        import cupy

        return cupy.empty_like(x)

    @staticmethod
    def alloc(device: int):
        import cupy

        def alloc(nbytes):
            a = cupy.empty(nbytes, dtype=cupy.uint8)
            return a.data.ptr, a

        return alloc

    @staticmethod
    def fill(x, value) -> None:
        x.fill(value)


TORCH, CUPY = _Torch(), _Cupy()


_tensor_type = None  # torch.Tensor, once torch is imported


def bind_torch(torch) -> None:
    """Bind TORCH to torch's functions and name its dtypes (torch_ops does it at import)."""
    global _tensor_type
    if _tensor_type is None:
        from .dtypes import register_torch

        TORCH.bind(torch)
        register_torch(torch)
        _tensor_type = torch.Tensor


def kind_of(x, op: str, name: str = "x"):
    """TORCH or CUPY for the op's primary input, which must be a CUDA tensor or a CuPy array."""
    if _tensor_type is None and "torch" in sys.modules:
        bind_torch(sys.modules["torch"])
    if _tensor_type is not None and isinstance(x, _tensor_type):
        if not x.is_cuda:
            raise TypeError(f"{op}: {name} must be a CUDA tensor; got {describe(x)}")
        return TORCH
    if is_cupy(x):
        return CUPY
    raise TypeError(f"{op}: {name} must be a cupy.ndarray or a CUDA torch.Tensor; got {describe(x)}")


def check_like(kind, x, op: str, name: str, device: int, dtypes=None):
    """An optional further input of a call: the primary's kind and device, one of `dtypes`. Returns its dtype
    name (None for None)."""
    if x is None:
        return None
    if kind is TORCH:
        if not is_torch(x):
            raise TypeError(f"{op}: {name} must be a torch.Tensor like the other inputs; got {describe(x)}")
        if not x.is_cuda or x.get_device() != device:
            raise ValueError(f"{op}: {name} is on {x.device}; expected cuda:{device} like the other inputs")
    else:
        if not is_cupy(x):
            raise TypeError(f"{op}: {name} must be a cupy.ndarray like the other inputs; got {describe(x)}")
        if x.device.id != device:
            raise ValueError(f"{op}: {name} is on cuda:{x.device.id}; expected cuda:{device} like the other inputs")
    return dtype_name(x) if dtypes is None else checked_dtype(x, op, name, dtypes)


def checked_dtype(x, op: str, name: str, dtypes) -> str:
    """x's dtype name, one of `dtypes`, else the TypeError naming the argument and what was expected."""
    dt = dtype_name(x)
    if dt not in dtypes:
        raise TypeError(f"{op}: {name} has dtype {dt}; expected one of {', '.join(dtypes)}")
    return dt


def to_cupy(x):
    """Zero-copy CuPy view of a CUDA tensor (a CuPy array as it is), from its pointer and strides."""
    if not is_torch(x):
        return x
    import cupy

    dtype = np.dtype(bool) if x.dtype == _torch().bool else numpy_dtype(dtype_name(x))
    item = x.element_size()
    span = (1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))) * item if x.numel() else 0
    mem = cupy.cuda.UnownedMemory(x.data_ptr(), span, x, x.get_device())
    return cupy.ndarray(tuple(x.shape), dtype, cupy.cuda.MemoryPointer(mem, 0),
                        strides=tuple(st * item for st in x.stride()))


def to_torch(arr):
    torch = _torch()
    if arr.dtype == np.bool_:
        return torch.from_dlpack(arr.view(np.uint8)).view(torch.bool)
    return torch.from_dlpack(arr)
