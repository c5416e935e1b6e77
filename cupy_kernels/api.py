"""The public functions: CuPy arrays go straight to the ops' kernels; CUDA torch tensors go through
torch_ops (autograd, torch.compile, CUDA graphs), imported only once a tensor comes."""
from __future__ import annotations

import sys

from .ops import norm as _norm
from .ops import pad as _pad
from .ops import reduce as _reduce
from .ops import softmax as _softmax
from .ops import square_matmul as _sqmm
from .ops import timex as _timex

_torch_ops = None
_PLAIN: tuple = ()  # torch.Tensor and nn.Parameter once torch_ops is imported: `type(x) in _PLAIN` is the cheap test


def _tensor(x) -> bool:
    """Whether x is a torch tensor (torch_ops then imported): torch is never imported for CuPy callers."""
    global _torch_ops, _PLAIN
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    if _torch_ops is None:
        from . import torch_ops

        _torch_ops, _PLAIN = torch_ops, (torch.Tensor, torch.nn.Parameter)
    return True


# ---- reductions -----------------------------------------------------------------------------------------


def sum(x, axis=None, keepdims=False, out=None):
    """Sum over `axis` (None, an int or a tuple; NumPy's rules), in the input dtype (int32 sums widen to
    int64), float32 accumulation for half types. `out`: a C-contiguous array of the result's shape and dtype
    (CuPy arrays). Torch tensors: differentiable."""
    if out is None and (type(x) in _PLAIN or _tensor(x)):
        return _torch_ops.reduce("sum", x, axis, keepdims)
    return _reduce.reduce_impl("sum", x, axis, keepdims, out)


def mean(x, axis=None, keepdims=False, out=None):
    """Mean over `axis` (floating dtypes; NaN over an empty axis, as NumPy)."""
    if out is None and (type(x) in _PLAIN or _tensor(x)):
        return _torch_ops.reduce("mean", x, axis, keepdims)
    return _reduce.reduce_impl("mean", x, axis, keepdims, out)


def max(x, axis=None, keepdims=False, out=None):
    """Maximum over `axis` (NaN propagates; an empty axis raises, as NumPy). Torch tensors: differentiable,
    the gradient shared evenly by tied maxima (as torch.amax)."""
    if out is None and (type(x) in _PLAIN or _tensor(x)):
        return _torch_ops.reduce("max", x, axis, keepdims)
    return _reduce.reduce_impl("max", x, axis, keepdims, out)


def min(x, axis=None, keepdims=False, out=None):
    """Minimum over `axis` (see max)."""
    if out is None and (type(x) in _PLAIN or _tensor(x)):
        return _torch_ops.reduce("min", x, axis, keepdims)
    return _reduce.reduce_impl("min", x, axis, keepdims, out)


def sum_ladder(x, rung: str = "vectorized"):
    """Full float32 sum by one rung of the reduction ladder of the original articles (docs/reduce.md)."""
    return _reduce.sum_ladder(x, rung)


# ---- softmax ----------------------------------------------------------------------------------------------


def softmax(x, axis=-1, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along `axis`, in the input dtype (statistics in float32). dtype: compute
    in (and return) that dtype instead, as torch's softmax(dtype=)."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.softmax(x, axis, dtype, False)
    return _softmax.softmax_impl(_softmax.cast_input(x, dtype, "softmax"), axis, "softmax")


def log_softmax(x, axis=-1, dtype=None):
    """x - max - log(sum(exp(x - max))) along `axis` (dtype: as softmax)."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.softmax(x, axis, dtype, True)
    return _softmax.softmax_impl(_softmax.cast_input(x, dtype, "log_softmax"), axis, "log_softmax")


def softmax_(x, axis=-1):
    """softmax written into x (C-contiguous, axis last); returns x. Torch tensors keep autograd: the backward
    uses only the output."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.softmax_(x, axis)
    return _softmax.softmax_inplace_impl(x, axis)


def softmax_backward(y, dy, axis=-1):
    """Gradient of softmax: y * (dy - sum(dy * y)) along `axis`, from the output y."""
    return _softmax.softmax_backward_impl(y, dy, axis, "softmax")


def log_softmax_backward(y, dy, axis=-1):
    """Gradient of log_softmax: dy - exp(y) * sum(dy) along `axis`, from the output y."""
    return _softmax.softmax_backward_impl(y, dy, axis, "log_softmax")


# ---- layer_norm, rms_norm ---------------------------------------------------------------------------------


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (torch semantics)."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.norm(x, weight, bias, eps, False)
    return _norm.norm_forward_impl(x, weight, bias, eps, "layer_norm", save_stats=False)[0]


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.norm(x, weight, None, eps, True)
    return _norm.norm_forward_impl(x, weight, None, eps, "rms_norm", save_stats=False)[0]


def layer_norm_(x, weight=None, bias=None, eps=1e-5):
    """layer_norm written into x (C-contiguous); returns x. Under torch autograd the backward recomputes the
    normalised input from the output: a weight entry of exactly zero gives NaN gradients in its column."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.layer_norm_(x, weight, bias, eps)
    return _norm.norm_forward_impl(x, weight, bias, eps, "layer_norm", inplace=True, save_stats=False)[0]


def rms_norm_(x, weight=None, eps=1e-6):
    """rms_norm written into x (C-contiguous); returns x (see layer_norm_ for autograd)."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.rms_norm_(x, weight, eps)
    return _norm.norm_forward_impl(x, weight, None, eps, "rms_norm", inplace=True, save_stats=False)[0]


def layer_norm_forward(x, weight=None, bias=None, eps=1e-5, inplace=False):
    """(y, mean, rstd): the output and the float32 (float64) row statistics the backward needs (no autograd)."""
    return _norm.norm_forward_impl(x, weight, bias, eps, "layer_norm", inplace=inplace)


def rms_norm_forward(x, weight=None, eps=1e-6, inplace=False):
    """(y, rstd) (no autograd)."""
    y, _, rstd = _norm.norm_forward_impl(x, weight, None, eps, "rms_norm", inplace=inplace)
    return y, rstd


def layer_norm_backward(dy, x, weight=None, bias=None, mean=None, rstd=None, from_output=False):
    """(dx, dweight, dbias) from the forward input x (with mean, rstd) or, with from_output=True, from the forward
    output y (with rstd; weight without zero entries)."""
    return _norm.norm_backward_impl(dy, x, weight, bias, mean, rstd, "layer_norm", from_output)


def rms_norm_backward(dy, x, weight=None, rstd=None, from_output=False):
    """(dx, dweight) from the forward input x (or the output y with from_output=True) and rstd."""
    dx, dw, _ = _norm.norm_backward_impl(dy, x, weight, None, None, rstd, "rms_norm", from_output)
    return dx, dw


# ---- timex ------------------------------------------------------------------------------------------------


def timex(w, k, eps: float = 0.0, *, variant: str = "auto"):
    """out[b,c,t] = eps + sum_{u<=t} w[c,T-1-t+u] * k[b,c,u] for w (C, T) and k (B, C, T): RWKV's causal
    depthwise long convolution. float32, float16, bfloat16, float64; returns (B, C, T), C-contiguous, in the
    input dtype (float32 accumulation for half types). Torch tensors: differentiable (our backward kernels).
    `variant` picks a rung of the ladder or a kernel family (docs/timex.md)."""
    _timex.check_variant(variant)
    if type(k) in _PLAIN or _tensor(k):
        return _torch_ops.timex(w, k, eps, variant)
    return _timex.timex_impl(w, k, eps, variant)


def timex_backward(w, k, grad_out, *, variant: str = "auto"):
    """(grad_w, grad_k) of timex for the output gradient grad_out (B, C, T); eps gets no gradient.
    grad_k[b,c,u] = sum_{t>=u} grad_out[b,c,t] w[c,T-1-t+u]; grad_w[c,T-1-d] = sum_b sum_{t>=d}
    grad_out[b,c,t] k[b,c,t-d]. Both C-contiguous in the input dtype."""
    _timex.check_backward_variant(variant)
    return _timex.timex_backward_impl(w, k, grad_out, variant)


# ---- pad --------------------------------------------------------------------------------------------------


def pad(x, pad_width, mode="constant", constant_values=_pad.UNSET, stagger=0, **kwargs):
    """numpy.pad for a CuPy array or a CUDA torch tensor: every mode (constant, edge, linear_ramp, maximum, mean,
    median, minimum, reflect, symmetric, wrap, empty, or a function), its keywords (constant_values, end_values,
    stat_length, reflect_type: only those of the mode, as numpy.pad), numpy's results and the types of its errors;
    a Fortran-ordered CuPy array pads into a Fortran-ordered result. Plus mode "brick" (brick-wall tiles: wrap with
    every other row band shifted by `stagger`).

    constant, edge, reflect, symmetric, wrap, empty and brick: one kernel, differentiable for torch tensors.
    linear_ramp, the statistics and reflect_type='odd': a copy and a pass (two for linear_ramp) per padded axis,
    no gradient (NotImplementedError when one is required). A function as mode: numpy.pad on a host copy
    (docs/pad.md)."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.pad(x, _torch_ops.pad_spec(x, pad_width, mode, constant_values, stagger, kwargs))
    return _pad.pad_impl(x, _pad.spec_for(x, pad_width, mode, constant_values, stagger, True, kwargs))


# ---- in-place products ------------------------------------------------------------------------------------


def square_matmul_(a, w, transpose=False):
    """a <- a @ w (a @ w.T with transpose=True), in place; returns a. `a` of shape (..., n), C-contiguous; `w` of
    shape (n, n), the same dtype (float32, float16, bfloat16; float32 is exact FP32, half types accumulate in
    float32 on the tensor cores). Torch tensors: inference only (an input that requires grad raises while grad
    mode is on)."""
    if type(a) in _PLAIN or _tensor(a):
        return _torch_ops.square_matmul_(a, w, transpose)
    return _sqmm.square_matmul_impl(a, w, transpose)


def linear_(x, weight, bias=None):
    """In-place nn.Linear for a square weight: x <- x @ weight.T + bias (weight (n, n), bias (n,) or None);
    returns x."""
    if type(x) in _PLAIN or _tensor(x):
        return _torch_ops.linear_(x, weight, bias)
    return _sqmm.square_matmul_impl(x, weight, True, bias, op="linear_")
