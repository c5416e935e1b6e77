"""torch.library custom ops with autograd for every op, in one place (imported only for torch callers).

Each op is registered as `cupy_kernels::<name>` with a fake (meta) implementation, so it works under
torch.autograd, torch.compile and CUDA graphs; forward and backward run our kernels."""
from __future__ import annotations

import math
from typing import Optional

import torch

from ._runtime.bridge import bind_torch

from .ops import reduce as _reduce


bind_torch(torch)  # here, at import: nothing a traced call runs mutates module state
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a Parameter is a plain tensor to the kernels (no __torch_function__)


_function_apply = torch._C._FunctionBase.__dict__["apply"]  # autograd.Function.apply's C core
_functorch_active = torch._C._are_functorch_transforms_active


class _Function(torch.autograd.Function):
    """The eager autograd.Functions' base: apply goes straight to the C core, skipping Function.apply's Python
    prologue (binding defaults for setup_context, unwrapping dead functorch wrappers: 4 us a call on a 2-core
    CPU box). Under a functorch transform the full apply runs (and refuses, as these have no setup_context)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._c_apply = _function_apply.__get__(None, cls)

    @classmethod
    def apply(cls, *args):
        if _functorch_active():
            return super().apply(*args)
        return cls._c_apply(*args)


def untraced(*tensors) -> bool:
    """Plain tensors (None entries ignored), no torch.compile tracing and no dispatch mode active: a call then runs
    the kernels directly (eager autograd through an autograd.Function), without its custom op's dispatch (~150 us
    of host time a call). The custom ops remain what torch.compile, fake tensors and modes see."""
    # is_compiling() first: under dynamo it is a constant and the rest is never traced
    if _is_compiling() or _dispatch_modes():
        return False
    for t in tensors:  # (a loop: no generator a call)
        if t is not None and type(t) not in _PLAIN:
            return False
    return True


def plain_eager(*tensors) -> bool:
    """untraced(), and no autograd to record: the kernels may run directly."""
    return untraced(*tensors) and not (torch.is_grad_enabled()
                                       and any(t is not None and t.requires_grad for t in tensors))


def run_inplace(x, tensors, kernels, custom_op):
    """An in-place op outside autograd: `kernels()` directly when nothing traces, bumping x's version
    counter as the custom op's mutates_args does; else `custom_op()`."""
    if untraced(*tensors):
        kernels()
        torch.autograd.graph.increment_version(x)
    else:
        custom_op()

# ---- reductions ------------------------------------------------------------------------------------------
# Eager calls run the kernels directly, under autograd through _Reduce (an autograd.Function); traced calls
# (torch.compile, fake tensors, modes) see the custom op cupy_kernels::<op>, whose autograd is the same.


def _reduce_axes(ndim, dims):
    """The reduced axes, sorted and non-negative, of None, an int or a sequence of ints."""
    if not ndim:
        return ()
    if dims is None:
        return tuple(range(ndim))
    return tuple(sorted(d % ndim for d in (dims if isinstance(dims, (tuple, list)) else (dims,))))


def _reduce_meta(op, x, dims, keepdim):
    axes = _reduce_axes(x.dim(), dims)
    shape = _reduce.output_shape(tuple(x.shape), axes, keepdim)
    dtype = getattr(torch, _reduce.result_dtype(op, str(x.dtype).removeprefix("torch.")))
    return x.new_empty(shape, dtype=dtype)


class _Reduce(_Function):
    @staticmethod
    def forward(ctx, x, op, dims, keepdim):
        y = _reduce.reduce_impl(op, x, dims, keepdim)
        _reduce_setup(ctx, op, x, y, dims, keepdim)
        return y

    @staticmethod
    def backward(ctx, grad):
        return _reduce_backward(ctx, grad), None, None, None


def _reduce_setup(ctx, op, x, y, dims, keepdim):
    """What the backward needs, worked out here (the backward's Python runs on autograd's device thread, slower):
    the input's shape, the reduced axes and the result's shape with them kept."""
    shape = tuple(x.shape)
    ctx.op, ctx.shape, ctx.axes = op, shape, _reduce_axes(len(shape), dims)
    ctx.kept = _reduce.output_shape(shape, ctx.axes, True)
    if op in ("max", "min"):
        ctx.save_for_backward(x, y)  # sum and mean need only the shapes


def _reduce_backward(ctx, grad):
    """d(op)/dx: the output gradient broadcast over the reduced axes; mean divides by the count; max / min share it
    evenly among the elements equal to the result (torch.amax's rule)."""
    g = grad.reshape(ctx.kept)
    if ctx.op == "sum":
        return g.expand(ctx.shape)
    if ctx.op == "mean":
        return g.expand(ctx.shape) / math.prod(ctx.shape[a] for a in ctx.axes)
    x, y = ctx.saved_tensors
    hit = x == y.reshape(ctx.kept)
    count = hit.sum(dim=ctx.axes, keepdim=True) if ctx.axes else hit.to(torch.int64)
    return torch.where(hit, g / count, torch.zeros((), dtype=g.dtype, device=g.device))


def _register_reduce(op):
    @torch.library.custom_op(f"cupy_kernels::{op}", mutates_args=())
    def impl(x: torch.Tensor, dims: Optional[list[int]], keepdim: bool) -> torch.Tensor:
        return _reduce.reduce_impl(op, x, None if dims is None else tuple(dims), keepdim)

    @impl.register_fake
    def _(x, dims, keepdim):
        return _reduce_meta(op, x, dims, keepdim)

    def setup_context(ctx, inputs, output):
        x, dims, keepdim = inputs
        _reduce_setup(ctx, op, x, output, dims, keepdim)

    def backward(ctx, grad):
        return _reduce_backward(ctx, grad), None, None

    impl.register_autograd(backward, setup_context=setup_context)
    return impl


_REDUCE_OPS = {op: _register_reduce(op) for op in _reduce.OPS}


def reduce(op, x, axis, keepdims):
    if type(x) in _PLAIN and not _is_compiling() and not _dispatch_modes():
        if x.requires_grad and torch.is_grad_enabled():
            return _Reduce.apply(x, op, axis, bool(keepdims))
        return _reduce.reduce_impl(op, x, axis, keepdims)
    dims = None if axis is None else list(axis) if isinstance(axis, (tuple, list)) else [axis]
    return _REDUCE_OPS[op](x, dims, bool(keepdims))


# ---- softmax, log_softmax, softmax_ (ops/softmax.py) ------------------------------------------------------
from .ops import norm as _norm  # noqa: E402
from .ops import softmax as _softmax  # noqa: E402


def _mode(log: bool) -> str:
    return "log_softmax" if log else "softmax"


def _dim(x, axis, op):
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{op}: axis must be an int; got {axis!r}")
    nd = max(x.dim(), 1)
    if not -nd <= axis < nd:
        raise ValueError(f"{op}: axis {axis} is out of bounds for a tensor of dimension {x.dim()}")
    return axis % nd


@torch.library.custom_op("cupy_kernels::softmax", mutates_args=())
def _softmax_op(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    return _softmax.softmax_impl(x, dim, _mode(log))


@_softmax_op.register_fake
def _(x, dim, log):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("cupy_kernels::softmax_backward", mutates_args=())
def _softmax_bwd_op(y: torch.Tensor, dy: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    return _softmax.softmax_backward_impl(y, dy, dim, _mode(log))


@_softmax_bwd_op.register_fake
def _(y, dy, dim, log):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.dim, ctx.log = inputs[1], inputs[2]
    ctx.save_for_backward(output)


def _softmax_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return _softmax_bwd_op(y, dy, ctx.dim, ctx.log), None, None


_softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)


class _Softmax(_Function):
    """Eager softmax / log_softmax under autograd: the backward needs only the output."""

    @staticmethod
    def forward(ctx, x, dim, log):
        y = _softmax.softmax_impl(x, dim, _mode(log))
        _softmax_setup(ctx, (x, dim, log), y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return _softmax.softmax_backward_impl(y, dy, ctx.dim, _mode(ctx.log)), None, None


def softmax(x, axis=-1, dtype=None, log=False):
    """softmax (log: log_softmax) of a torch tensor along `axis`; dtype: cast to it first (torch's rule)."""
    op = "log_softmax" if log else "softmax"
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"{op}: dtype must be a floating torch.dtype; got {dtype!r}")
        x = x.to(dtype)  # torch's rule: the input is cast before the op (autograd flows through the cast)
    if type(x) in _PLAIN and not _is_compiling() and not _dispatch_modes():
        if x.requires_grad and torch.is_grad_enabled():
            return _Softmax.apply(x, axis, log)
        return _softmax._run(op, "fwd", op, "auto", (x,), axis)
    return _softmax_op(x, _dim(x, axis, op), log)


@torch.library.custom_op("cupy_kernels::softmax_inplace", mutates_args=("x",))
def _softmax_inplace_op(x: torch.Tensor) -> None:
    _softmax.softmax_inplace_impl(x, -1)


@_softmax_inplace_op.register_fake
def _(x):
    return None


def _check_leaf(op, x):
    if torch.is_grad_enabled() and x.requires_grad and x.is_leaf:
        raise RuntimeError(f"{op}: x is a leaf tensor that requires grad; it cannot be written in place "
                           "(use the out-of-place op, or x.clone())")


class _SoftmaxInplace(_Function):
    """softmax_ under autograd: the backward needs only the output, which is x after the call."""

    @staticmethod
    def forward(ctx, x):
        if untraced(x):
            _softmax.softmax_inplace_impl(x, -1)
        else:
            _softmax_inplace_op(x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dim = y.dim() - 1 if y.dim() else 0
        if untraced(y, dy):
            return _softmax.softmax_backward_impl(y, dy, dim, "softmax")
        return _softmax_bwd_op(y, dy, dim, False)


def softmax_(x, axis=-1):
    _softmax.check_inplace("softmax_", x, axis)  # every check before anything is written
    _check_leaf("softmax_", x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SoftmaxInplace.apply(x)
    run_inplace(x, (x,), lambda: _softmax.softmax_inplace_impl(x, -1), lambda: _softmax_inplace_op(x))
    return x


# ---- layer_norm, rms_norm and their in-place forms (ops/norm.py) -------------------------------
# Eager calls run the kernels directly, under autograd through _Norm / _NormInplace (autograd.Functions whose
# forward and backward call the impls); traced calls (torch.compile, fake tensors, modes) see the custom ops
# cupy_kernels::norm, ::norm_backward, ::norm_inplace, whose autograd is the same. No custom op returns a tensor that
# aliases an input or another of its outputs (placeholders for absent gradients are fresh empty tensors).


def _norm_mode(rms: bool) -> str:
    return "rms_norm" if rms else "layer_norm"


def _stat_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _wants_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


@torch.library.custom_op("cupy_kernels::norm", mutates_args=())
def _norm_op(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
             rms: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, rstd = _norm.norm_forward_impl(x, weight, bias, eps, _norm_mode(rms))
    return y, (rstd.new_empty(0) if mean is None else mean), rstd


@_norm_op.register_fake
def _(x, weight, bias, eps, rms):
    stats = x.new_empty(x.shape[:-1], dtype=_stat_dtype(x))
    mean = x.new_empty(0, dtype=_stat_dtype(x)) if rms else torch.empty_like(stats)
    return torch.empty_like(x, memory_format=torch.contiguous_format), mean, stats


@torch.library.custom_op("cupy_kernels::norm_backward", mutates_args=())
def _norm_bwd_op(dy: torch.Tensor, src: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                 mean: Optional[torch.Tensor], rstd: torch.Tensor, rms: bool, from_output: bool, need_dw: bool,
                 need_db: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = _norm.norm_backward_impl(dy, src, weight, bias, None if rms else mean, rstd, _norm_mode(rms),
                                          from_output, need_dw, need_db)
    return dx, dx.new_empty(0) if dw is None else dw, dx.new_empty(0) if db is None else db


@_norm_bwd_op.register_fake
def _(dy, src, weight, bias, mean, rstd, rms, from_output, need_dw, need_db):
    def grad_of(p, need):
        return p.new_empty(p.shape) if (p is not None and need) else src.new_empty(0)

    return (torch.empty_like(src, memory_format=torch.contiguous_format), grad_of(weight, need_dw),
            grad_of(bias, need_db and not rms))


def _norm_grads(ctx, dy, src, weight, bias, mean, rstd, from_output):
    """(dx, dweight, dbias) for the inputs that need them (None for the others): the kernels directly in eager
    backward, else (traced, or a graph of the backward being built) the custom op."""
    need = ctx.needs_input_grad
    args = (dy, src, weight, bias, None if ctx.rms else mean, rstd)
    if untraced(*args) and not torch.is_grad_enabled():
        dx, dw, db = _norm.norm_backward_impl(*args, _norm_mode(ctx.rms), from_output, bool(need[1]), bool(need[2]))
    else:
        dx, dw, db = _norm_bwd_op(*args, ctx.rms, from_output, bool(need[1]), bool(need[2]))
    return (dx if need[0] else None, dw if weight is not None and need[1] else None,
            db if bias is not None and need[2] else None, None, None)


def _norm_setup(ctx, inputs, output):
    x, weight, bias, eps, rms = inputs
    ctx.rms = rms
    ctx.save_for_backward(x, weight, bias, output[1], output[2])


def _norm_backward(ctx, dy, _dmean, _drstd):
    return _norm_grads(ctx, dy, *ctx.saved_tensors, False)


_norm_op.register_autograd(_norm_backward, setup_context=_norm_setup)


class _Norm(_Function):
    """Eager layer_norm / rms_norm under autograd: the backward needs x, the affine and the saved statistics."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms):
        y, mean, rstd = _norm.norm_forward_impl(x, weight, bias, eps, _norm_mode(rms))
        ctx.rms = rms
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _norm_grads(ctx, dy, *ctx.saved_tensors, False)


@torch.library.custom_op("cupy_kernels::norm_inplace", mutates_args=("x",))
def _norm_inplace_op(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
                     rms: bool) -> torch.Tensor:
    return _norm.norm_forward_impl(x, weight, bias, eps, _norm_mode(rms), inplace=True)[2]


@_norm_inplace_op.register_fake
def _(x, weight, bias, eps, rms):
    return x.new_empty(x.shape[:-1], dtype=_stat_dtype(x))


class _NormInplace(_Function):
    """layer_norm_ / rms_norm_ under autograd: the backward recomputes the normalised input from the output (x after
    the call), weight and bias, with the saved rstd (Apex's memory-efficient form). A weight entry of exactly zero
    leaves that column's x-hat unknown: dx and dweight are NaN there (no check, no device sync)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms):
        if untraced(x, weight, bias):
            rstd = _norm.norm_forward_impl(x, weight, bias, eps, _norm_mode(rms), inplace=True)[2]
        else:
            rstd = _norm_inplace_op(x, weight, bias, eps, rms)
        ctx.mark_dirty(x)
        ctx.rms = rms
        ctx.save_for_backward(x, weight, bias, rstd)
        return x

    @staticmethod
    def backward(ctx, dy):
        y, weight, bias, rstd = ctx.saved_tensors
        return _norm_grads(ctx, dy, y, weight, bias, None, rstd, True)


def norm(x, weight, bias, eps, rms):
    """layer_norm (rms: rms_norm, no bias) of a torch tensor over its last dimension."""
    eps = float(eps)
    if untraced(x, weight, bias):
        if _wants_grad(x, weight, bias):
            return _Norm.apply(x, weight, bias, eps, rms)
        return _norm.norm_forward_impl(x, weight, bias, eps, _norm_mode(rms), save_stats=False)[0]
    return _norm_op(x, weight, bias, eps, rms)[0]


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    return norm(x, weight, bias, eps, False)


def rms_norm(x, weight=None, eps=1e-6):
    return norm(x, weight, None, eps, True)


def _norm_inplace(op, x, weight, bias, eps, rms):
    _norm.check_inplace(op, x)  # every check before anything is written (the rest: in the impl, before it launches)
    _check_leaf(op, x)
    eps = float(eps)
    if _wants_grad(x, weight, bias):
        return _NormInplace.apply(x, weight, bias, eps, rms)
    run_inplace(x, (x, weight, bias),
                lambda: _norm.norm_forward_impl(x, weight, bias, eps, _norm_mode(rms), inplace=True, save_stats=False),
                lambda: _norm_inplace_op(x, weight, bias, eps, rms))
    return x


def layer_norm_(x, weight=None, bias=None, eps=1e-5):
    return _norm_inplace("layer_norm_", x, weight, bias, eps, False)


def rms_norm_(x, weight=None, eps=1e-6):
    return _norm_inplace("rms_norm_", x, weight, None, eps, True)


# ---- timex: RWKV causal depthwise long convolution (ops/timex.py) ------------------------------
# Eager calls run the impls directly, under autograd through _Timex (an autograd.Function: one planned launch
# forward, grad_w and grad_k's launches backward, only those asked for); traced calls (torch.compile, fake
# tensors, modes) see the custom ops cupy_kernels::timex / timex_backward, whose autograd runs the same
# kernels. Every output is a new tensor (never an alias of an input).
from .ops import timex as _timex  # noqa: E402

@torch.library.custom_op("cupy_kernels::timex", mutates_args=())
def _timex_op(w: torch.Tensor, k: torch.Tensor, eps: float, variant: str) -> torch.Tensor:
    return _timex.timex_impl(w, k, eps, variant)


@_timex_op.register_fake
def _(w, k, eps, variant):
    return k.new_empty(tuple(k.shape))


@torch.library.custom_op("cupy_kernels::timex_backward", mutates_args=())
def _timex_backward_op(w: torch.Tensor, k: torch.Tensor, grad_out: torch.Tensor,
                       variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _timex.timex_backward_impl(w, k, grad_out, variant)


@_timex_backward_op.register_fake
def _(w, k, grad_out, variant):
    return w.new_empty(tuple(w.shape)), k.new_empty(tuple(k.shape))


def _timex_setup(ctx, inputs, output):
    w, k, _eps, variant = inputs
    ctx.save_for_backward(w, k)
    ctx.variant = _timex.BACKWARD_OF[variant]


def _timex_grad(ctx, grad):
    # grad_w is reduced over the batch inside the kernels; eps gets no gradient.
    w, k = ctx.saved_tensors
    gw, gk = _timex_backward_op(w, k, grad, ctx.variant)
    return gw, gk, None, None


_timex_op.register_autograd(_timex_grad, setup_context=_timex_setup)


class _Timex(_Function):
    """Eager timex under autograd: the impls directly, without the custom ops' dispatch."""

    @staticmethod
    def forward(ctx, w, k, eps, variant):
        _timex_setup(ctx, (w, k, eps, variant), None)
        return _timex.timex_impl(w, k, eps, variant)

    @staticmethod
    def backward(ctx, grad):
        w, k = ctx.saved_tensors
        need_w, need_k = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gw, gk = _timex.timex_backward_impl(w, k, grad, ctx.variant, need_w, need_k)
        return gw, gk, None, None


def timex(w, k, eps=0.0, variant="auto"):
    eps = float(eps)
    if untraced() and type(w) in _PLAIN and type(k) in _PLAIN:
        if torch.is_grad_enabled() and (w.requires_grad or k.requires_grad):
            return _Timex.apply(w, k, eps, variant)
        return _timex.timex_impl(w, k, eps, variant)
    return _timex_op(w, k, eps, variant)


# ---- square_matmul_ / linear_: in-place A <- A @ W (+ bias), inference only (ops/square_matmul.py) --
# Eager calls run square_matmul_impl directly; traced calls see cupy_kernels::square_matmul_inplace (it mutates a
# and returns nothing, so no output can alias an input).
from .ops import square_matmul as _sqmm  # noqa: E402


@torch.library.custom_op("cupy_kernels::square_matmul_inplace", mutates_args=("a",))
def _sqmm_inplace_op(a: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], transpose: bool) -> None:
    _sqmm.square_matmul_impl(a, w, transpose, bias, op="square_matmul_" if bias is None else "linear_")


@_sqmm_inplace_op.register_fake
def _(a, w, bias, transpose):
    return None


def _sqmm_no_grad(op, names, tensors):
    """In-place products are inference only: the backward would need the input that was overwritten."""
    if not torch.is_grad_enabled():
        return
    for name, t in zip(names, tensors):
        if t is not None and t.requires_grad:
            raise RuntimeError(f"{op}: {name} requires grad; {op} overwrites its input and has no backward "
                               f"(run it under torch.no_grad() / torch.inference_mode(), or use the "
                               f"out-of-place product)")


def _sqmm_call(a, w, bias, transpose, op):
    """Eager calls run the kernels directly, bumping a's version counter as the custom op's mutates_args does;
    traced calls see the custom op."""
    if untraced(a, w, bias):
        _sqmm.square_matmul_impl(a, w, transpose, bias, op=op)
        torch.autograd.graph.increment_version(a)
    else:
        _sqmm_inplace_op(a, w, bias, transpose)


def square_matmul_(a, w, transpose=False):
    _sqmm_no_grad("square_matmul_", ("a", "w"), (a, w))
    _sqmm_call(a, w, None, bool(transpose), "square_matmul_")
    return a


def linear_(x, weight, bias=None):
    _sqmm_no_grad("linear_", ("x", "weight", "bias"), (x, weight, bias))
    _sqmm_call(x, weight, bias, True, "linear_")
    return x


# ---- pad ----------------------------------------------------------------------------------------
# Eager calls run the kernels directly, under autograd through _Pad (backward: pad_backward_impl); traced calls
# see the custom ops cupy_kernels::pad and cupy_kernels::pad_backward (fresh outputs, never views of the input).

from .ops import pad as _pad  # noqa: E402


def _pad_spec(shape, pads, mode, bits, stagger):
    pairs = [(pads[2 * i], pads[2 * i + 1]) for i in range(len(shape))]
    return _pad.from_wire(tuple(shape), pairs, mode, bits, stagger)


@torch.library.custom_op("cupy_kernels::pad", mutates_args=())
def _pad_op(x: torch.Tensor, pads: list[int], mode: str, bits: list[int], stagger: int) -> torch.Tensor:
    return _pad.pad_impl(x, _pad_spec(x.shape, pads, mode, bits, stagger))


@_pad_op.register_fake
def _(x, pads, mode, bits, stagger):
    return x.new_empty(_pad_spec(x.shape, pads, mode, bits, stagger).out_shape)


@torch.library.custom_op("cupy_kernels::pad_backward", mutates_args=())
def _pad_backward_op(grad: torch.Tensor, shape: list[int], pads: list[int], mode: str, stagger: int) -> torch.Tensor:
    return _pad.pad_backward_impl(grad, _pad_spec(shape, pads, mode, [], stagger))


@_pad_backward_op.register_fake
def _(grad, shape, pads, mode, stagger):
    return grad.new_empty(tuple(shape))


def _pad_setup(ctx, inputs, output):
    x, pads, mode, _bits, stagger = inputs
    ctx.pad_args = (list(x.shape), list(pads), mode, stagger)


def _pad_grad(ctx, grad):
    # A gather-sum per padded axis (no atomics): deterministic.
    return _pad_backward_op(grad, *ctx.pad_args), None, None, None, None


_pad_op.register_autograd(_pad_grad, setup_context=_pad_setup)


class _Pad(_Function):
    """Eager pad under autograd: the backward needs only the spec."""

    @staticmethod
    def forward(ctx, x, spec):
        ctx.spec = spec
        return _pad.pad_impl(x, spec)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        return _pad.pad_backward_impl(grad, ctx.spec), None


# numpy's other modes validate with NumPy (linear_ramp's compute dtype comes from numpy.linspace): outside the traced
# graph, which would trace NumPy as tensors. The disabled wrapper is made at the first traced call, not at import:
# torch.compiler.disable imports torch._dynamo, 2-4 s that every `import cupy_kernels` paid.
_numpy_spec_disabled = None


def _numpy_spec(*args):
    global _numpy_spec_disabled
    if _numpy_spec_disabled is None:
        _numpy_spec_disabled = torch.compiler.disable(_pad.spec_for)
    return _numpy_spec_disabled(*args)


def pad_spec(x, pad_width, mode, constant_values, stagger, options=None):
    """ops.pad's spec_for, without its identity cache while torch.compile traces."""
    if _is_compiling():
        if options or type(mode) is not str or mode not in _pad.MODES:
            return _numpy_spec(x, pad_width, mode, constant_values, stagger, False, options)
        return _pad.spec_for(x, pad_width, mode, constant_values, stagger, False, options)
    return _pad.spec_for(x, pad_width, mode, constant_values, stagger, True, options)


def pad(x, spec):
    """ops.pad's pad for a torch tensor: `spec` is the validated ops.pad.Spec. Without a backward (numpy's computing
    modes, functions): NotImplementedError when a gradient is required."""
    if untraced(x):
        if torch.is_grad_enabled() and x.requires_grad:
            if not spec.differentiable:
                raise NotImplementedError(_pad.no_gradient(spec))
            return _Pad.apply(x, spec)
        return _pad.pad_impl(x, spec)
    if spec.host is not None:
        raise NotImplementedError("pad: a function as mode runs numpy.pad on the host: not under torch.compile or "
                                  "a dispatch mode")
    if not spec.differentiable and torch.is_grad_enabled() and x.requires_grad:
        raise NotImplementedError(_pad.no_gradient(spec))
    mode, values = _pad.wire(spec)  # int64 schema: raw bits as signed words
    return _pad_op(x, [v for pair in spec.pads for v in pair], mode, values, spec.stagger)
