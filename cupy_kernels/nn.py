"""torch.nn modules over the kernels: drop-in LayerNorm / RMSNorm with an `inplace` flag.

With inplace=True the module normalises its input in place (no output allocation; autograd still
works, recomputing the normalised input from the output: a weight entry of exactly zero gives NaN gradients in
its column, and the input must not be a leaf that requires grad). Importing this module imports torch."""
from __future__ import annotations

import math
import numbers

import torch

from . import torch_ops
from .ops import norm as _norm


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
        """x as (..., n) over the normalised dims (x itself for one dim), and the flat weight / bias in x's dtype
        (the parameters themselves where they are that already: nothing made per call)."""
        shape = self.normalized_shape
        if x.shape[-len(shape):] != shape or x.dim() < len(shape):
            raise ValueError(f"{type(self).__name__}: expected input with trailing shape {shape}; "
                             f"got {tuple(x.shape)}")
        w, b = self.weight, self.bias
        if len(shape) > 1:
            if self.inplace:
                _norm.check_inplace(f"{type(self).__name__}(inplace=True)", x)  # (a reshape would copy)
            n = math.prod(shape)
            x = x.reshape(*x.shape[: x.dim() - len(shape)], n)
            w = None if w is None else w.reshape(n)
            b = None if b is None else b.reshape(n)
        if w is not None and w.dtype != x.dtype:
            w = w.to(x.dtype)
        if b is not None and b.dtype != x.dtype:
            b = b.to(x.dtype)
        return x, w, b

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
        y = torch_ops.layer_norm(x2, w, b, self.eps)
        return y if x2 is x else y.reshape(x.shape)


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
        y = torch_ops.rms_norm(x2, w, eps)
        return y if x2 is x else y.reshape(x.shape)


class InplaceLinear(torch.nn.Module):
    """Inference-only nn.Linear with a square weight that writes its result into its input
    (`x <- x @ weight.T + bias`, cupy_kernels.linear_): no output buffer. Loads an nn.Linear's state dict
    (`weight` (n, n), `bias` (n,)); `InplaceLinear.from_linear(linear)` wraps one without copying.
    Parameters do not require grad; calling it with grad mode on and an input that requires grad
    raises (the input it would need for a backward is overwritten). The input must be C-contiguous,
    its last dimension `features`; forward returns the input tensor itself."""

    def __init__(self, features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = self.out_features = int(features)
        kw = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(self.in_features, self.in_features, **kw), requires_grad=False)
        if bias:
            self.bias = torch.nn.Parameter(torch.empty(self.in_features, **kw), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:  # nn.Linear's initialisation
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            torch.nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "InplaceLinear":
        if linear.in_features != linear.out_features:
            raise ValueError(f"InplaceLinear: the weight must be square; got {linear.out_features} x "
                             f"{linear.in_features}")
        mod = cls(linear.in_features, linear.bias is not None, device="meta")
        mod.weight = torch.nn.Parameter(linear.weight.detach(), requires_grad=False)
        if linear.bias is not None:
            mod.bias = torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
        return mod

    def forward(self, x):
        return torch_ops.linear_(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"features={self.in_features}, bias={self.bias is not None}, inplace=True"
