"""Host side of cu_src/reduce.cu: sum, mean, max, min with NumPy's axis / keepdims / out, and the teaching
ladder of full float32 sums from the original articles."""
from __future__ import annotations

import builtins  # this module's public sum/max/min shadow the builtins
import math
from dataclasses import dataclass

import numpy as np

from .._runtime import (ACC, ACC_SCALAR, CTYPES, CUPY, FLOAT_DTYPES, ITEMSIZE, KernelSource, PlanBuilder, ceil_div,
                        check_like, checked_dtype, dtype_name, kind_of, normalize_axes, resident_blocks, vec)
from .._runtime.launch import alignment
from .._runtime.tuning import PlanCache

SOURCE = KernelSource("reduce.cu")
OPS = {"sum": "OP_SUM", "mean": "OP_MEAN", "max": "OP_MAX", "min": "OP_MIN"}  # reduce.cu's op names
DTYPES = {"sum": tuple(CTYPES), "max": tuple(CTYPES), "min": tuple(CTYPES), "mean": FLOAT_DTYPES}
THREADS = 256   # reduce_rows / reduce_cols block size (__launch_bounds__(256, 4) in reduce.cu)
UNROLL = 4      # UNROLL in reduce.cu
COL_ROWS = 8    # threadIdx.y extent of reduce_cols
LADDER = {  # rung -> (kernel, inputs per block); "vectorized" is the default two-pass path
    "interleaved": ("ladder_interleaved", 256),
    "no_divergence": ("ladder_no_divergence", 256),
    "sequential": ("ladder_sequential", 256),
    "first_add": ("ladder_first_add", 512),
    "unroll_warp": ("ladder_unroll_warp", 512),
    "vectorized": (None, None),
}


@dataclass(frozen=True)
class Tuning:
    # 16-byte loads a thread aims at on reduce_rows (4 unrolled steps of UNROLL): the power-of-two row group
    # this gives was the best or within 2% of the best on every benchmark shape (H200).
    loads_per_thread: int = 4 * UNROLL
    # reduce_rows grids stop at this many waves of resident blocks; each group loops over its rows.
    row_waves: int = 4
    # Threads a row on reduce_rows: 0 chooses by loads_per_thread; a power of two up to 256 forces it (tests).
    row_group: int = 0


TUNING = Tuning()
PLANS = PlanCache()


def result_dtype(op: str, dtype: str) -> str:
    """NumPy's (and torch's) result dtype: int32 sums widen to int64, everything else keeps its type."""
    return "int64" if op == "sum" and dtype == "int32" else dtype


def _pass1_op(op):
    return "sum" if op == "mean" else op


def _rows_name(op, t, out):
    return f"reduce_rows<{OPS[op]}, {CTYPES[t]}, {CTYPES[out]}>"


def _cols_name(op, t, out, v):
    return f"reduce_cols<{OPS[op]}, {CTYPES[t]}, {CTYPES[out]}, {v}>"


def _declare():
    names = []
    for op, dtypes in DTYPES.items():
        for t in dtypes:
            out, acc = result_dtype(op, t), ACC[t]
            names.append(_rows_name(op, t, out))
            for v in (1, vec(t)):
                names += [_cols_name(op, t, out, v), _cols_name(_pass1_op(op), t, acc, v)]
            for v in (1, vec(acc)):
                names.append(_cols_name(op, acc, out, v))
    names += [k for k, _ in LADDER.values() if k]
    SOURCE.declare(dict.fromkeys(names))


_declare()


def _scale(op, acc, count):
    return ACC_SCALAR[acc](1.0 / count if op == "mean" and count else 1)


def output_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


# ---- planning --------------------------------------------------------------------------------------------


def plan_rows(b: PlanBuilder, op, x, y, dtype, rows, n, count) -> None:
    """y[rows] <- op over each row of the contiguous (rows, n) data x (Buffers of `b`), in one launch. Too few rows
    to fill the chip: each row is cut into chunks whose partials the row's last chunk combines (a persistent
    workspace per stream: the kernel leaves its arrival counters at zero)."""
    acc, out = ACC[dtype], result_dtype(op, dtype)
    kernel = SOURCE.kernel(_rows_name(op, dtype, out))
    wave = resident_blocks(kernel, THREADS)
    group = _row_group(n, dtype)
    splits = 1
    if group == THREADS and rows < wave:
        # Floor, not ceil: rows * splits within one wave (a nearly empty second wave cost 8% on 256 x 262144).
        splits = builtins.max(1, builtins.min(wave // rows, n // (THREADS * vec(dtype) * UNROLL)))
    chunk = ceil_div(ceil_div(n, splits), vec(dtype)) * vec(dtype)
    splits = ceil_div(n, chunk)
    if splits > 1:
        partial = b.workspace(8 * wave, persistent="reduce_rows.partial")
        arrivals = b.workspace(4 * wave, zero=True, persistent="reduce_rows.arrivals")
    else:
        partial = arrivals = None
    blocks = builtins.min(ceil_div(rows * splits * group, THREADS), wave * TUNING.row_waves)
    b.launch(kernel, blocks, THREADS, (x, y, partial, arrivals, np.int64(rows), np.int64(n), np.uint32(splits),
                                       np.int64(chunk), np.int32(group), _scale(op, acc, count)))


def _row_group(n, dtype):
    """Threads per row: a power of two giving each thread about TUNING.loads_per_thread 16-byte loads."""
    if TUNING.row_group:
        return TUNING.row_group
    want = ceil_div(ceil_div(n, vec(dtype)), TUNING.loads_per_thread)
    return builtins.min(THREADS, 1 << builtins.max(0, math.ceil(math.log2(builtins.max(want, 1)))))


def plan_cols(b: PlanBuilder, op, x, y, dtype, outer, r, k, count) -> None:
    """y[outer, k] <- op over the middle axis of the contiguous (outer, r, k) data x (Buffers of `b`): one pass, or
    chunks of rows into a workspace of partials and a second pass over them (too few columns to fill the chip)."""
    acc, out = ACC[dtype], result_dtype(op, dtype)
    v = vec(dtype) if k % vec(dtype) == 0 and x.alignment >= 16 else 1
    col_blocks = ceil_div(k, 32 * v)
    target = resident_blocks(SOURCE.kernel(_cols_name(_pass1_op(op), dtype, acc, v)), THREADS)
    splits = builtins.max(1, builtins.min(target // (col_blocks * outer), r // (COL_ROWS * UNROLL)))
    if splits == 1:
        _cols_launch(b, _cols_name(op, dtype, out, v), x, y, outer, r, k, 1, r, _scale(op, acc, count), col_blocks)
        return
    chunk = ceil_div(r, splits)
    splits = ceil_div(r, chunk)
    partial = b.workspace(outer * splits * k * ITEMSIZE[acc])
    _cols_launch(b, _cols_name(_pass1_op(op), dtype, acc, v), x, partial, outer, r, k, splits, chunk,
                 _scale("sum", acc, 1), col_blocks)
    v2 = vec(acc) if k % vec(acc) == 0 else 1
    _cols_launch(b, _cols_name(op, acc, out, v2), partial, y, outer, splits, k, 1, splits,
                 _scale(op, acc, count), ceil_div(k, 32 * v2))


def _cols_launch(b, name, x, y, outer, r, k, splits, chunk, scale, col_blocks):
    grid = (col_blocks, builtins.min(outer * splits, 65535))
    b.launch(SOURCE.kernel(name), grid, (32, COL_ROWS),
             (x, y, np.int64(outer), np.int64(r), np.int64(k), np.uint32(splits), np.int64(chunk), scale))


@dataclass(frozen=True)
class _Entry:
    """A planned reduction: the output's shape and dtype, the axis order of the contiguous copy the kernels read
    (None: they read x itself), the plan, and new_output() (an empty output)."""
    shape: tuple
    dtype: str
    permute: tuple | None
    plan: object
    new_output: object = None


def _plan(op, kind, x, axis, keepdims, device) -> _Entry:
    """Validate the call and plan it (a miss of PLANS: every check happens here)."""
    dtype = checked_dtype(x, op, "x", DTYPES[op])
    ndim = len(x.shape)
    axes = normalize_axes(axis, builtins.max(ndim, 1), op) if ndim else ()
    shape = output_shape(tuple(x.shape), axes, keepdims)
    out_dtype = result_dtype(op, dtype)
    count = math.prod(x.shape[a] for a in axes)
    if op in ("max", "min") and axes and count == 0:  # NumPy and torch raise even when the result is empty
        raise ValueError(f"{op}: zero-size array to reduction operation {op}imum which has no identity")
    if not axes or math.prod(shape) == 0 or count == 0:
        return _Entry(shape, out_dtype, None, None)  # no kernel: _degenerate
    kept = [a for a in range(ndim) if a not in axes]
    together = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    permute = None if together else tuple(kept + list(axes))
    moved = tuple(x.shape[a] for a in permute) if permute else tuple(x.shape)
    if permute:
        axes = tuple(range(len(kept), ndim))
    strides = tuple(kind.strides(x)[a] for a in permute) if permute else tuple(kind.strides(x))
    contiguous = is_contiguous(moved, strides)
    align = alignment(kind.ptr(x)) if contiguous else 256  # a copy is a fresh allocation
    outer = math.prod(moved[: axes[0]])
    inner = math.prod(moved[axes[-1] + 1:])
    b = PlanBuilder(device, (align, 256))
    src, dst = b.buffers
    if inner == 1:
        plan_rows(b, op, src, dst, dtype, outer, count, count)
    else:
        plan_cols(b, op, src, dst, dtype, outer, count, inner, count)
    copy = permute if permute else None if contiguous else tuple(range(ndim))  # strided data is copied first
    return _Entry(shape, out_dtype, copy, b.plan(), kind.empty_fn(shape, out_dtype, device))


def is_contiguous(shape, strides) -> bool:
    """C-contiguous element strides (dimensions of one element may have any stride, as in torch and CuPy)."""
    step = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s != 1 and st != step:
            return False
        step *= s
    return True


def _degenerate(op, kind, x, e: _Entry, out):
    """Results that need no kernel: no axis reduced (a 0-d input, or axis=()): the input in the result dtype; an empty
    output; a sum or mean over no element (max / min raised in _plan)."""
    y = out if out is not None else kind.empty(e.shape, e.dtype, kind.device(x))
    if math.prod(e.shape) == 0:
        return y
    if tuple(e.shape) == tuple(x.shape) and math.prod(x.shape) > 0 or len(x.shape) == 0:
        if kind is CUPY:
            y[...] = x.astype(y.dtype)
        else:
            y.copy_(x)
        return y
    kind.fill(y, 0 if op == "sum" else float("nan"))
    return y


def reduce_impl(op, x, axis=None, keepdims=False, out=None):
    """`op` ('sum', 'mean', 'max', 'min') of a CuPy array or a CUDA tensor over `axis`, NumPy-style (no
    autograd): one launch plan per (dtype, shape, strides, axis, alignment, device), replayed."""
    kind = kind_of(x, op)
    x_key = kind.key(x)  # (dtype, shape, strides, alignment, device)
    device = x_key[4]
    stream = kind.stream_on(device)
    if stream is None:  # another device is current: run on the input's
        with kind.on_device(device):
            return reduce_impl(op, x, axis, keepdims, out)
    ptr = kind.ptr(x)
    key = (op, x_key, axis if axis is None or type(axis) is int else
           tuple(axis) if type(axis) in (tuple, list) else ("axis", axis), keepdims)
    e = PLANS.get(key)
    if e is None:
        e = PLANS.build(key, device, _plan, op, kind, x, axis, keepdims, device)
    if out is not None:
        _check_out(op, kind, out, e, device)
    if e.plan is None:
        return _degenerate(op, kind, x, e, out)
    if e.permute is not None:
        src = kind.as_contiguous(x.permute(e.permute) if kind is not CUPY else x.transpose(e.permute))
        ptr = kind.ptr(src)
    y = out if out is not None else e.new_output()
    e.plan.run((ptr, kind.ptr(y)), stream, kind.alloc(device) if e.plan.workspaces else None)
    return y


def _check_out(op, kind, out, e: _Entry, device):
    check_like(kind, out, op, "out", device, (e.dtype,))
    if tuple(out.shape) != e.shape or not kind.contiguous(out):
        raise ValueError(f"{op}: out must be a C-contiguous array of shape {e.shape}; got shape "
                         f"{tuple(out.shape)}{'' if kind.contiguous(out) else ', non-contiguous'}")


# ---- the teaching ladder -----------------------------------------------------------------------------------


def sum_ladder(x, rung: str = "vectorized"):
    """Full float32 sum by one rung of the original articles' ladder (see cu_src/reduce.cu); a 0-d result."""
    if rung not in LADDER:
        raise ValueError(f"sum_ladder: rung must be one of {', '.join(LADDER)}; got {rung!r}")
    kernel, per_block = LADDER[rung]
    if kernel is None:
        return reduce_impl("sum", x)
    kind = kind_of(x, "sum_ladder")
    if dtype_name(x) != "float32":
        raise TypeError(f"sum_ladder: x has dtype {dtype_name(x)}; expected float32")
    device = kind.device(x)
    if kind.current_device() != device:
        with kind.on_device(device):
            return sum_ladder(x, rung)
    src = kind.as_contiguous(x)
    size = math.prod(x.shape)
    y = kind.empty((), "float32", device)
    if size == 0:
        kind.fill(y, 0)
        return y
    key = ("ladder", rung, size, device)
    plan = PLANS.get(key)
    if plan is None:
        plan = PLANS.build(key, device, _plan_ladder, kernel, per_block, size, device)
    plan.run((kind.ptr(src), kind.ptr(y)), kind.stream(device), kind.alloc(device))
    return y


def _plan_ladder(kernel, per_block, size, device):
    """The ladder's launches: one partial a block, repeated until one value remains."""
    b = PlanBuilder(device, (256, 256))
    cur, n = b.buffers[0], size
    while n > 1:
        blocks = ceil_div(n, per_block)
        nxt = b.buffers[1] if blocks == 1 else b.workspace(4 * blocks)
        b.launch(SOURCE.kernel(kernel), blocks, 256, (cur, nxt, np.int64(n)))
        cur, n = nxt, blocks
    if size == 1:
        b.launch(SOURCE.kernel(kernel), 1, 256, (cur, b.buffers[1], np.int64(1)))
    return b.plan()
