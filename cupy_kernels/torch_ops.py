"""torch.library custom ops with autograd for every op, in one place (imported only for torch callers).

Each op is registered as `cupy_kernels::<name>` with a fake (meta) implementation, so it works under
torch.autograd, torch.compile and CUDA graphs; forward and backward run our kernels."""
from __future__ import annotations

import math
from typing import Optional

import torch

from .ops import reduce as _reduce

# ---- reductions -------------------------------------------------------------------------------


def _reduce_meta(op, x, dims, keepdim):
    axes = tuple(range(x.dim())) if dims is None else tuple(sorted(d % x.dim() for d in dims))
    shape = _reduce.output_shape(tuple(x.shape), axes, keepdim)
    dtype = getattr(torch, _reduce.result_dtype(op, str(x.dtype).removeprefix("torch.")))
    return x.new_empty(shape, dtype=dtype), axes


def _register_reduce(op):
    name = f"cupy_kernels::{op}"

    @torch.library.custom_op(name, mutates_args=())
    def impl(x: torch.Tensor, dims: Optional[list[int]], keepdim: bool) -> torch.Tensor:
        return _reduce.reduce_impl(op, x, None if dims is None else tuple(dims), keepdim)

    @impl.register_fake
    def _(x, dims, keepdim):
        return _reduce_meta(op, x, dims, keepdim)[0]

    if op in ("sum", "mean"):
        def setup_context(ctx, inputs, output):
            x, dims, keepdim = inputs
            ctx.shape = tuple(x.shape)
            ctx.axes = _reduce_meta(op, x, dims, keepdim)[1]
            ctx.keepdim = keepdim

        def backward(ctx, grad):
            # d(sum)/dx is a broadcast of the output gradient; mean divides by the count.
            shape = _reduce.output_shape(ctx.shape, ctx.axes, True)
            g = grad.reshape(shape).expand(ctx.shape)
            if op == "mean":
                g = g / math.prod(ctx.shape[a] for a in ctx.axes)
            return g, None, None

        impl.register_autograd(backward, setup_context=setup_context)
    return impl


_REDUCE_OPS = {op: _register_reduce(op) for op in _reduce.OPS}


def reduce(op, x, axis, keepdims):
    dims = None if axis is None else list(axis) if isinstance(axis, (tuple, list)) else [axis]
    return _REDUCE_OPS[op](x, dims, bool(keepdims))
