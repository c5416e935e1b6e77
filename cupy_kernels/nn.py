"""torch.nn modules over the kernels: drop-in LayerNorm / RMSNorm with an `inplace` flag.

With inplace=True the module normalises its input in place (no output allocation; autograd still
works, recomputing the normalised input from the output: weight entries must not be exactly zero and
the input must not be a leaf that requires grad). Importing this module imports torch."""
from __future__ import annotations

import math
import numbers

import torch

from . import torch_ops


def _shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


class _Norm(torch.nn.Module):
    def __init__(self, normalized_shape, eps, elementwise_affine, bias, device, dtype, inplace):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.inplace = inplace
        kw = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, **kw))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = torch.nn.Parameter(torch.empty(self.normalized_shape, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def _rows(self, x):
        """x as (..., n) over the normalised dims (a view), and the flat weight / bias in x's dtype."""
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k:]) != self.normalized_shape or x.dim() < k:
            raise ValueError(f"{type(self).__name__}: expected input with trailing shape {self.normalized_shape}; "
                             f"got {tuple(x.shape)}")
        n = math.prod(self.normalized_shape)
        x2 = x if k == 1 else x.reshape(*x.shape[: x.dim() - k], n)
        flat = [None if p is None else p.reshape(n).to(x.dtype) for p in (self.weight, self.bias)]
        return x2, flat[0], flat[1]

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
                f"{', inplace=True' if self.inplace else ''}")


class LayerNorm(_Norm):
    """torch.nn.LayerNorm over our kernels (same arguments, plus inplace)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, inplace: bool = False):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype, inplace)

    def forward(self, x):
        x2, w, b = self._rows(x)
        if self.inplace:
            torch_ops.layer_norm_(x2, w, b, self.eps)
            return x
        return torch_ops.layer_norm(x2, w, b, self.eps).reshape(x.shape)


class RMSNorm(_Norm):
    """torch.nn.RMSNorm over our kernels (same arguments, plus inplace); eps=None means
    torch.finfo(x.dtype).eps, like torch."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None, inplace: bool = False):
        super().__init__(normalized_shape, eps, elementwise_affine, False, device, dtype, inplace)

    def forward(self, x):
        x2, w, _ = self._rows(x)
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        if self.inplace:
            torch_ops.rms_norm_(x2, w, eps)
            return x
        return torch_ops.rms_norm(x2, w, eps).reshape(x.shape)
