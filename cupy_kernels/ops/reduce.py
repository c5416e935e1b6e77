"""Host side of cu_src/reduce.cu: sum, mean, max, min with NumPy's axis/keepdims/out."""
from __future__ import annotations

import builtins  # this module's public sum/max/min shadow the builtins
import math

import numpy as np

from .._runtime import (CTYPES, FLOAT_DTYPES, Call, KernelSource, ceil_div, is_torch, normalize_axes,
                        resident_blocks)

SOURCE = KernelSource("reduce.cu")
OPS = {"sum": 0, "mean": 1, "max": 2, "min": 3}
DTYPES = {"sum": tuple(CTYPES), "max": tuple(CTYPES), "min": tuple(CTYPES), "mean": FLOAT_DTYPES}
THREADS = 256   # reduce_rows / reduce_cols block size
UNROLL = 4      # matches UNROLL in reduce.cu
COL_ROWS = 8    # threadIdx.y extent of reduce_cols
ACC = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64",
       "int32": "int64", "int64": "int64"}
SCALAR = {"float32": np.float32, "float64": np.float64, "int64": np.int64}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}
LADDER = {  # rung -> (kernel, inputs per block); "vectorized" is the default two-pass path
    "interleaved": ("ladder_interleaved", 256),
    "no_divergence": ("ladder_no_divergence", 256),
    "sequential": ("ladder_sequential", 256),
    "first_add": ("ladder_first_add", 512),
    "unroll_warp": ("ladder_unroll_warp", 512),
    "vectorized": (None, None),
}


def result_dtype(op: str, dtype: str) -> str:
    """NumPy's (and torch's) result dtype: int32 sums widen to int64, everything else keeps its type."""
    return "int64" if op == "sum" and dtype == "int32" else dtype


def _pass1_op(op):
    return "sum" if op == "mean" else op


def _vec(dtype):
    return 16 // ITEMSIZE[dtype]


def _rows_name(op, t, out):
    return f"reduce_rows<{OPS[op]}, {CTYPES[t]}, {CTYPES[out]}>"


def _cols_name(op, t, out, vec):
    return f"reduce_cols<{OPS[op]}, {CTYPES[t]}, {CTYPES[out]}, {vec}>"


def _declare():
    names = []
    for op, dtypes in DTYPES.items():
        for t in dtypes:
            out, acc = result_dtype(op, t), ACC[t]
            names.append(_rows_name(op, t, out))
            for vec in (1, _vec(t)):
                names += [_cols_name(op, t, out, vec), _cols_name(_pass1_op(op), t, acc, vec)]
            for vec in (1, _vec(acc)):
                names.append(_cols_name(op, acc, out, vec))
    names += [k for k, _ in LADDER.values() if k]
    SOURCE.declare(dict.fromkeys(names))


_declare()


def _launch(name, grid, block, args):
    SOURCE.kernel(name)(grid, block, args)


def _scale(op, acc, count):
    return SCALAR[acc](1.0 / count if op == "mean" and count else 1)


def _reduce_rows(call, op, x, y, dtype, rows, n, count, group=None):
    """y[rows] <- op over each row of the contiguous (rows, n) data x, in one launch."""
    acc, out = ACC[dtype], result_dtype(op, dtype)
    kernel = SOURCE.kernel(_rows_name(op, dtype, out))
    wave = resident_blocks(kernel, THREADS)
    group = group or _row_group(n, dtype)
    splits = 1
    if group == THREADS and rows < wave:
        # Too few rows to fill the chip: cut rows into chunks, whose partials the last chunk of each
        # row combines. Floor, not ceil: rows * splits within one wave (a nearly empty second wave
        # cost 8% on 256 x 262144).
        splits = builtins.max(1, builtins.min(wave // rows, n // (THREADS * _vec(dtype) * UNROLL)))
    chunk = ceil_div(ceil_div(n, splits), _vec(dtype)) * _vec(dtype)
    splits = ceil_div(n, chunk)
    partial, arrivals = _row_workspace(call, wave) if splits > 1 else (None, None)
    blocks = builtins.min(ceil_div(rows * splits * group, THREADS), wave * 4)
    kernel((blocks,), (THREADS,), (x, y, partial, arrivals, np.int64(rows), np.int64(n), np.uint32(splits),
                                   np.int64(chunk), np.int32(group), _scale(op, acc, count)))


_workspaces: dict = {}


def _row_workspace(call, resident):
    """Per (device, stream): room for one wave of partials (any accumulator type) and the per-row
    arrival counters, zeroed once; each launch leaves the counters at zero again. Create it before
    CUDA graph capture: any reduction on the capturing stream does (a warm-up call)."""
    import cupy

    key = (call.device_id, cupy.cuda.get_current_stream().ptr)
    ws = _workspaces.get(key)
    if ws is None or ws[0].size < resident:  # kernels of other dtypes may have more resident blocks
        ws = _workspaces[key] = (cupy.empty(resident, dtype=cupy.float64), cupy.zeros(resident, dtype=cupy.uint32))
    return ws


def _row_group(n, dtype):
    """Threads per row: a power of two giving each thread about 16 16-byte loads (4 unrolled steps);
    the best or within 2% of the best group on every benchmark shape on an H200
    (scripts/sweep_row_groups.py)."""
    want = ceil_div(ceil_div(n, _vec(dtype)), 4 * UNROLL)
    return builtins.min(THREADS, 1 << builtins.max(0, math.ceil(math.log2(builtins.max(want, 1)))))


def _reduce_cols(call, op, x, y, dtype, outer, r, k, count):
    """y[outer, k] <- op over the middle axis of the contiguous (outer, r, k) data x."""
    acc, out = ACC[dtype], result_dtype(op, dtype)
    vec = _vec(dtype) if k % _vec(dtype) == 0 and x.data.ptr % 16 == 0 else 1
    col_blocks = ceil_div(k, 32 * vec)
    target = resident_blocks(SOURCE.kernel(_cols_name(_pass1_op(op), dtype, acc, vec)), THREADS)
    splits = builtins.max(1, builtins.min(target // (col_blocks * outer), r // (COL_ROWS * UNROLL)))
    if splits == 1:
        _cols_launch(_cols_name(op, dtype, out, vec), x, y, outer, r, k, 1, r, _scale(op, acc, count), col_blocks)
        return
    chunk = ceil_div(r, splits)
    splits = ceil_div(r, chunk)
    partial = call.empty((outer * splits * k,), acc)
    _cols_launch(_cols_name(_pass1_op(op), dtype, acc, vec), x, partial, outer, r, k, splits, chunk,
                 _scale("sum", acc, 1), col_blocks)
    vec2 = _vec(acc) if k % _vec(acc) == 0 else 1
    _cols_launch(_cols_name(op, acc, out, vec2), partial, y, outer, splits, k, 1, splits,
                 _scale(op, acc, count), ceil_div(k, 32 * vec2))


def _cols_launch(name, x, y, outer, r, k, splits, chunk, scale, col_blocks):
    grid = (col_blocks, builtins.min(outer * splits, 65535))
    _launch(name, grid, (32, COL_ROWS), (x, y, np.int64(outer), np.int64(r), np.int64(k), np.uint32(splits),
                                         np.int64(chunk), scale))


def reduce(op: str, x, axis=None, keepdims=False, out=None):
    """`op` ('sum', 'mean', 'max', 'min') of a CuPy array or CUDA tensor over `axis`, NumPy-style."""
    if is_torch(x) and out is None:
        from .. import torch_ops

        return torch_ops.reduce(op, x, axis, keepdims)
    return reduce_impl(op, x, axis, keepdims, out)


def output_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def reduce_impl(op, x, axis=None, keepdims=False, out=None):
    """The kernels' path for either kind of input (no autograd)."""
    import cupy

    with Call(op, x) as call:
        xc = call.arg(x, "x", dtypes=DTYPES[op])
        dtype = str(xc.dtype)
        axes = normalize_axes(axis, xc.ndim, op)
        shape = output_shape(xc.shape, axes, keepdims)
        out_dtype = result_dtype(op, dtype)
        count = math.prod(xc.shape[a] for a in axes)
        if out is None:
            y = call.empty(shape, out_dtype)
        else:
            y = call.arg(out, "out", dtypes=(out_dtype,))
            if tuple(y.shape) != shape or not y.flags.c_contiguous:
                raise ValueError(f"{op}: out must be a C-contiguous array of shape {shape}; got shape "
                                 f"{tuple(y.shape)}{'' if y.flags.c_contiguous else ', non-contiguous'}")
        if y.size == 0:
            return out if out is not None else call.result(y)
        if count == 0:
            if op in ("max", "min"):
                raise ValueError(f"{op}: zero-size array to reduction operation {op}imum which has no identity")
            y.fill(0 if op == "sum" else np.nan)
            return out if out is not None else call.result(y)
        # Bring the reduced axes together at the end (a copy only when they are not already).
        kept = [a for a in range(xc.ndim) if a not in axes]
        if list(axes) != list(range(axes[0], axes[0] + len(axes))):
            xc = xc.transpose(kept + list(axes))
            axes = tuple(range(len(kept), xc.ndim))
        xc = cupy.ascontiguousarray(xc)
        outer = math.prod(xc.shape[: axes[0]])
        inner = math.prod(xc.shape[axes[-1] + 1:])
        if inner == 1:
            _reduce_rows(call, op, xc, y, dtype, outer, count, count)
        else:
            _reduce_cols(call, op, xc, y, dtype, outer, count, inner, count)
        return out if out is not None else call.result(y)


def sum_ladder(x, rung: str = "vectorized"):
    """Full float32 sum by one rung of the seeds' ladder (see cu_src/reduce.cu); a 0-d result."""
    if rung not in LADDER:
        raise ValueError(f"sum_ladder: rung must be one of {', '.join(LADDER)}; got {rung!r}")
    kernel, per_block = LADDER[rung]
    if kernel is None:
        return reduce_impl("sum", x)
    import cupy

    with Call("sum_ladder", x) as call:
        cur = cupy.ascontiguousarray(call.arg(x, "x", dtypes=("float32",))).ravel()
        if cur.size == 0:
            y = call.empty((), "float32")
            y.fill(0)
            return call.result(y)
        while cur.size > 1:
            blocks = ceil_div(cur.size, per_block)
            nxt = call.empty((blocks,), "float32")
            _launch(kernel, (blocks,), (256,), (cur, nxt, np.int64(cur.size)))
            cur = nxt
        return call.result(cur.reshape(()))


def sum(x, axis=None, keepdims=False, out=None):
    return reduce("sum", x, axis, keepdims, out)


def mean(x, axis=None, keepdims=False, out=None):
    return reduce("mean", x, axis, keepdims, out)


def max(x, axis=None, keepdims=False, out=None):
    return reduce("max", x, axis, keepdims, out)


def min(x, axis=None, keepdims=False, out=None):
    return reduce("min", x, axis, keepdims, out)
