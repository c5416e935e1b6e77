"""Host side of cu_src/square_matmul.cu and square_matmul_sm90.cu: in-place square matmul A <- A @ W (or
A @ W.T), and in-place nn.Linear for a square weight (x <- x @ weight.T + bias), without an output buffer.

Every output tile waits in registers until all column tiles of its 128-row block have read their inputs, then
overwrites those rows (see the .cu file): the only extra device memory is a counter array of
4 * (1 + ceil(m / 128)) bytes, a zeroed workspace of the call's plan. A call is planned once per (variant,
transpose, dtypes, shapes, strides, alignments, device) and replayed after that."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._runtime import (CTYPES, ITEMSIZE, Deferred, KernelSource, PlanBuilder, ceil_div, check_like, checked_dtype,
                        current, dtype_name, kind_of, resident_blocks, tensor_map_2d)
from .._runtime.launch import alignment
from .._runtime.tma import MAP_BYTES, max_active_clusters
from .._runtime.tuning import PlanCache

SOURCE = KernelSource("square_matmul.cu")
SOURCE90 = KernelSource("square_matmul_sm90.cu", options=("-arch=sm_90a",))  # wgmma: Hopper only
DTYPES = ("float32", "float16", "bfloat16")
HALF_DTYPES = ("float16", "bfloat16")
BM = 128               # rows of a tile (sqmm::BM); columns: 128 (float32) or 256 (half types)
THREADS = 256          # sqmm_simt, sqmm_mma, sqmm_wgmma
MMA_TBN = 256          # sqmm::MMA_TBN: sqmm_mma's tile columns
WARP_PER_ROW_MAX_N = 2048  # the original article's kernel: a 64-entry register buffer x 32 lanes
# The ladder (square_matmul_impl's variant=): "auto" (choose_kernel); on Hopper (sm_90a), 128 x 256 tiles:
# "tma_cluster" (TMA loads by a producer thread, two consumer warpgroups on wgmma, a store warp that waits for
# the row block and writes the staged tile with TMA stores, in clusters of two CTAs on neighbouring row blocks
# that share each W tile through TMA multicast), "tma" (the same, one CTA), "wgmma" (cp.async loads by every
# thread); "mma256" (mma.sync, 128 x 256 tiles, one block per SM); "warp_per_row" (the original article's
# kernel, from the project make-torch-inplace: a warp per row straight from global memory, n <= 2048).
VARIANTS = ("auto", "tma_cluster", "tma", "wgmma", "mma256", "warp_per_row")
HOPPER = ("tma_cluster", "tma", "wgmma")
TMA_CLUSTER = {"tma_cluster": 2, "tma": 1}  # CTAs per cluster of sqmm_tma (its Ctas)
WGMMA_SMEM = 4 * (BM * 64 + 64 * 256) * 2 + 1024  # sqmm90::SMEM
TMA_SMEM = 3 * (BM * 64 + 64 * 256) * 2 + BM * 256 * 2 + 1024  # sqmm90::TMA_SMEM: 3 stages + the staged tile
TMA_THREADS = 384
TMA_MAX_M = 2 ** 31 - 512  # TMA row coordinates are 32-bit: more rows take wgmma


@dataclass(frozen=True)
class Tuning:
    # The half-type kernel on sm_90 when n is a multiple of 8 and a, w are 16-byte aligned: 2-CTA clusters sharing
    # the W tile by TMA multicast. Timed side by side in rotated order against "tma" (H200, a8ff0c4): fp16
    # n = 4096 3.289 / 3.198 ms against 3.527 / 3.316 (100-101% of cuBLAS), n = 2048 -3%, n = 1024 -1%.
    hopper_half: str = "tma_cluster"
    # ... when a row block's column tiles need more clusters than fit at once (n > 256 x resident clusters,
    # 16896 on an H200): the single-CTA TMA kernel (bf16 92 / 99 / 96% of cuBLAS at n = 1024 / 2048 / 4096,
    # H200, 00efc5c).
    hopper_half_wide: str = "tma"


TUNING = Tuning()
PLANS = PlanCache()

_W = {False: "sqmm::W::plain", True: "sqmm::W::transposed"}
_LOADS = {True: "sqmm::Loads::vector", False: "sqmm::Loads::scalar"}
_CTAS = {1: "sqmm::Ctas::one", 2: "sqmm::Ctas::pair"}


def tiled_name(dtype: str, trans: bool, aligned: bool) -> str:
    """sqmm_simt (float32, 128 x 128 tiles) or sqmm_mma (half types, 128 x 256 tiles)."""
    if dtype == "float32":
        return f"sqmm_simt<{_W[trans]}, {_LOADS[aligned]}>"
    return f"sqmm_mma<{CTYPES[dtype]}, {_W[trans]}, {_LOADS[aligned]}>"


def wgmma_name(dtype: str, trans: bool) -> str:
    return f"sqmm_wgmma<{CTYPES[dtype]}, {_W[trans]}>"


def tma_name(dtype: str, trans: bool, cluster: int = 1) -> str:
    return f"sqmm_tma<{CTYPES[dtype]}, {_W[trans]}, {_CTAS[cluster]}>"


def warp_per_row_name(dtype: str, trans: bool) -> str:
    return f"sqmm_warp_per_row<{CTYPES[dtype]}, {_W[trans]}>"


SOURCE.declare([tiled_name(t, tr, al) for t in DTYPES for tr in (False, True) for al in (True, False)]
               + [warp_per_row_name(t, tr) for t in DTYPES for tr in (False, True)])
SOURCE90.declare([tma_name(t, tr, cl) for cl in (1, 2) for t in HALF_DTYPES for tr in (False, True)]
                 + [wgmma_name(t, tr) for t in HALF_DTYPES for tr in (False, True)])


def has_wgmma() -> bool:
    return current().cc == 90


def choose_kernel(dtype: str, variant: str, hopper: bool, aligned: bool, op: str = "square_matmul_") -> str:
    """Which kernel runs: "simt" (float32), "tma_cluster", "tma", "wgmma", "mma256" or "warp_per_row". "auto"
    takes TUNING.hopper_half for half types on a compute capability 9.0 device when n % 8 == 0 and a, w are
    16-byte aligned (the plan falls back to TUNING.hopper_half_wide when n is too wide for the clusters that fit
    at once, and to wgmma for m beyond TMA's coordinates); else mma256."""
    if variant == "warp_per_row":
        return variant
    if dtype == "float32":
        if variant != "auto":
            raise ValueError(f"{op}: variant {variant!r} is for float16 / bfloat16 (float32 runs on FP32 SIMT)")
        return "simt"
    if variant in HOPPER:
        if not (hopper and aligned):
            raise ValueError(f"{op}: variant {variant!r} needs a compute capability 9.0 device and n % 8 == 0 "
                             f"with 16-byte aligned a and w")
        return variant
    if variant == "auto":
        return TUNING.hopper_half if hopper and aligned else "mma256"
    return variant


def mma_smem(tbn: int = MMA_TBN) -> int:
    """sqmm::MmaSmem<TBN>::bytes: 4 stages of a 128 x 32 A tile and a 32 x TBN W tile, 2-byte elements."""
    return 4 * (BM * 32 + 32 * tbn) * 2


def tile_cols(dtype: str) -> int:
    return 128 if dtype == "float32" else 256


def tile_schedule(m, n, tbn, resident, cluster=1):
    """(tiles_n, row blocks, total tiles, grid) of the persistent kernels for a wave of `resident` blocks
    (cluster > 1: `resident` clusters, tiles of `cluster` row blocks, the row blocks rounded up to whole
    tiles and the grid counted in clusters)."""
    tiles_n, rbs = ceil_div(n, tbn), cluster * ceil_div(m, BM * cluster)
    total = tiles_n * (rbs // cluster)
    return tiles_n, rbs, total, min(resident, total)


def max_n(resident: int, tbn: int) -> int:
    """Largest n the persistent kernels take on a device holding `resident` blocks at once: every column
    tile of a row block must be resident together (they wait for each other before writing)."""
    return resident * tbn


# ---- planning ---------------------------------------------------------------------------------------------


def _persistent(b: PlanBuilder, kernel, threads, smem, tbn, m, n, op, cluster=1, tickets=False):
    """(grid in blocks, the zeroed counters, tiles_n, total tiles) of a persistent launch of at most one wave,
    after checking that a row block's column tiles fit in it together. cluster > 1: a tile is `cluster` row
    blocks (one per CTA of a cluster), the wave is counted in whole clusters (the driver's occupancy for
    clusters). Unless the kernel always takes tickets (the TMA kernels), one column tile a row block makes the
    counters None: tiles go round statically and no block waits on another, so a call allocates and zeroes
    nothing."""
    if n >= 2 ** 31:
        raise ValueError(f"{op}: n = {n} is too large (int32 column index)")
    if cluster > 1:
        resident = max_active_clusters(kernel, threads, smem, cluster)
        unit = f"clusters of {cluster} blocks"
    else:
        resident = resident_blocks(kernel, threads, smem)
        unit = "blocks"
    tiles_n, rbs, total, grid = tile_schedule(m, n, tbn, resident, cluster)
    if tiles_n > resident:
        raise ValueError(f"{op}: n = {n} needs {tiles_n} column tiles of {tbn} resident at once, but this device "
                         f"holds {resident} {unit} of this kernel (n <= {max_n(resident, tbn)} here)")
    if total + grid >= 2 ** 32:
        raise ValueError(f"{op}: {m} x {n} has too many tiles for the 32-bit tile counter; split the rows")
    if tiles_n == 1 and not tickets:
        return grid, None, tiles_n, total
    ctrl = b.workspace(4 * (1 + rbs), zero=True)  # ctrl[0]: the next ticket; ctrl[1 + rb]: row block rb's arrivals
    return grid * cluster, ctrl, tiles_n, total


def _tensor_map(rows, cols, dtype, box_cols, box_rows):
    """ptr -> the TMA descriptor of a (rows, cols) matrix at ptr (bytes), remembered for the last pointers."""
    maps: dict = {}

    def encode(ptr):
        raw = maps.get(ptr)
        if raw is None:
            if len(maps) >= 64:
                maps.clear()
            raw = maps[ptr] = tensor_map_2d(ptr, rows, cols, dtype, box_cols, box_rows)
        return raw

    return encode


def _clusters_fit(dtype, trans, n) -> bool:
    """Whether the tma_cluster kernel holds all ceil(n / 256) column tiles of a row block at once."""
    kernel = SOURCE90.kernel(tma_name(dtype, trans, 2), TMA_SMEM)
    return ceil_div(n, 256) <= max_active_clusters(kernel, TMA_THREADS, TMA_SMEM, 2)


def plan_product(b: PlanBuilder, kernel: str, dtype, trans, aligned, a, w, bias, m, n, op="square_matmul_"):
    """Record a <- a @ w (a @ w.T with trans) + bias in place on `kernel` (choose_kernel's): a (m, n) and w (n, n)
    C-contiguous, bias (n,) or None, Buffers of b. The persistent kernels take a zeroed workspace of row-block
    counters."""
    has_bias = np.int32(bias is not None)
    bias = a if bias is None else bias  # read only when has_bias
    if kernel == "warp_per_row":
        if has_bias:
            raise ValueError(f"{op}: the warp_per_row variant takes no bias")
        if n > WARP_PER_ROW_MAX_N:
            raise ValueError(f"{op}: the warp_per_row variant handles n <= {WARP_PER_ROW_MAX_N} (its 64-entry "
                             f"register buffer per lane); got n = {n}")
        b.launch(SOURCE.kernel(warp_per_row_name(dtype, trans)), ceil_div(m, 4), 128,
                 (a, w, np.int64(m), np.int32(n)))
        return
    if kernel in TMA_CLUSTER:
        cluster = TMA_CLUSTER[kernel]
        k = SOURCE90.kernel(tma_name(dtype, trans, cluster), TMA_SMEM)
        grid, ctrl, tiles_n, total = _persistent(b, k, TMA_THREADS, TMA_SMEM, 256, m, n, op, cluster, tickets=True)
        maps = (Deferred(_tensor_map(m, n, dtype, 64, BM), (a.index,), MAP_BYTES),
                Deferred(_tensor_map(n, n, dtype, 64, 256 // cluster if trans else 64), (w.index,), MAP_BYTES))
        b.launch(k, grid, TMA_THREADS, (*maps, a, bias, has_bias, np.int64(m), np.int32(n), ctrl,
                                        np.uint32(tiles_n), np.uint32(total)), shared_mem=TMA_SMEM, cluster=cluster)
        return
    if kernel == "wgmma":
        k, smem, tbn, extra = SOURCE90.kernel(wgmma_name(dtype, trans), WGMMA_SMEM), WGMMA_SMEM, 256, (np.int32(0),)
        # mn_swap = 0: the descriptor convention the H200 confirmed (1 is wrong for W as [k][n])
    else:  # "simt" (float32) or "mma256"
        smem = 0 if dtype == "float32" else mma_smem()
        k, tbn, extra = SOURCE.kernel(tiled_name(dtype, trans, aligned), smem), tile_cols(dtype), ()
    grid, ctrl, tiles_n, total = _persistent(b, k, THREADS, smem, tbn, m, n, op)
    b.launch(k, grid, THREADS, (a, w, bias, has_bias, np.int64(m), np.int32(n), ctrl, np.uint32(tiles_n),
                                np.uint32(total), *extra), shared_mem=smem)


# ---- calls ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """A planned call: the plan (None: no rows), the byte spans of a, w and bias from their pointers (None:
    empty), whether w or bias is copied (contiguous) first."""
    plan: object
    a_span: tuple | None
    w_span: tuple | None
    b_span: tuple | None
    w_copy: bool = False
    bias_copy: bool = False


def _span(shape, strides, itemsize):
    """(first byte, last byte + 1) of an array's memory relative to its pointer (any strides); None if empty."""
    if math.prod(shape) == 0:
        return None
    lo = hi = 0
    for s, st in zip(shape, strides):
        if st > 0:
            hi += (s - 1) * st
        else:
            lo += (s - 1) * st
    return lo * itemsize, (hi + 1) * itemsize


def _overlap(p, span, q, other) -> bool:
    return span is not None and other is not None and p + span[0] < q + other[1] and q + other[0] < p + span[1]


def _names(op):
    return ("a", "w") if op == "square_matmul_" else ("x", "weight")


def _build(kind, op, variant, transpose, a, w, bias, device) -> _Entry:
    """Validate a call (everything but the overlap of the operands, which depends on the pointers) and plan it:
    a miss of PLANS."""
    aname, wname = _names(op)
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise ValueError(f"{op}: variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    dt = checked_dtype(a, op, aname, DTYPES)
    if check_like(kind, w, op, wname, device, DTYPES) != dt:
        raise TypeError(f"{op}: {wname} has dtype {dtype_name(w)}; expected {dt} like {aname}")
    if len(w.shape) != 2:
        raise ValueError(f"{op}: {wname} must have 2 dimensions; got shape {tuple(w.shape)}")
    if len(a.shape) < 1:
        raise ValueError(f"{op}: {aname} must have at least one dimension (..., n); got a 0-d array")
    n = a.shape[-1]
    if tuple(w.shape) != (n, n):
        raise ValueError(f"{op}: {wname} must be square with the size of {aname}'s last dimension, ({n}, {n}); "
                         f"got shape {tuple(w.shape)}")
    if not kind.contiguous(a):
        raise ValueError(f"{op}: {aname} must be C-contiguous (it is written in place); got strides "
                         f"{tuple(kind.strides(a))} (elements)")
    if bias is not None:
        check_like(kind, bias, op, "bias", device, (dt,))
        if tuple(bias.shape) != (n,):
            raise ValueError(f"{op}: bias must have shape ({n},); got {tuple(bias.shape)}")
    itemsize = ITEMSIZE[dt]
    w_strides = tuple(kind.strides(w))
    spans = (_span(a.shape, kind.strides(a), itemsize), _span(w.shape, w_strides, itemsize),
             None if bias is None else _span(bias.shape, kind.strides(bias), itemsize))
    m = math.prod(a.shape[:-1]) if n else 0
    if m == 0:
        return _Entry(None, *spans)
    flip = w_copy = False
    if n > 1 and w_strides != (n, 1):
        if w_strides == (1, n):
            flip = True    # the transpose of a C-contiguous matrix: swap the transpose flag
        else:
            w_copy = True  # an n x n copy (strided views only)
    bias_copy = bias is not None and n > 1 and tuple(kind.strides(bias)) != (1,)
    trans = bool(transpose) != flip
    a_align = alignment(kind.ptr(a))
    w_align = 256 if w_copy else alignment(kind.ptr(w))
    aligned = n % (16 // itemsize) == 0 and a_align >= 16 and w_align >= 16  # the bias is read by element
    kernel = choose_kernel(dt, variant, has_wgmma(), aligned, op)
    if kernel in TMA_CLUSTER and m >= TMA_MAX_M:
        kernel = "wgmma"
    if kernel == "tma_cluster" and variant == "auto" and not _clusters_fit(dt, trans, n):
        kernel = TUNING.hopper_half_wide  # a row block's column tiles need more clusters than fit at once
    aligns = (a_align, w_align) + (() if bias is None else (256 if bias_copy else alignment(kind.ptr(bias)),))
    b = PlanBuilder(device, aligns)
    plan_product(b, kernel, dt, trans, aligned, b.buffers[0], b.buffers[1], b.buffers[2] if bias is not None else None,
                 m, n, op)
    return _Entry(b.plan(), *spans, w_copy, bias_copy)


def square_matmul_impl(a, w, transpose=False, bias=None, variant="auto", op="square_matmul_"):
    """a <- a @ w (a @ w.T with transpose) + bias, in place, for either kind of input (no autograd); returns a.
    One launch plan per (variant, transpose, dtypes, shapes, strides, 16-byte alignments, device), replayed."""
    aname, wname = _names(op)
    kind = kind_of(a, op, aname)
    device = kind.device(a)
    if kind.current_device() != device:
        with kind.on_device(device):
            return square_matmul_impl(a, w, transpose, bias, variant, op)
    transpose = bool(transpose)
    try:
        pa, pw = kind.ptr(a), kind.ptr(w)
        pb = 0 if bias is None else kind.ptr(bias)
        key = (op, variant, transpose, kind.key(a), kind.key(w), None if bias is None else kind.key(bias))
        e = PLANS.get(key)
    except (AttributeError, TypeError):  # w or bias of another kind: _build names it
        key = e = None
    if e is None:
        e = _build(kind, op, variant, transpose, a, w, bias, device)
        if key is None:
            pa, pw, pb = kind.ptr(a), kind.ptr(w), 0 if bias is None else kind.ptr(bias)
        else:
            PLANS.put(key, e)
    if _overlap(pa, e.a_span, pw, e.w_span):
        raise ValueError(f"{op}: {wname} overlaps {aname} in memory; the result would overwrite its own weights "
                         f"(pass a separate copy)")
    if bias is not None and _overlap(pa, e.a_span, pb, e.b_span):
        raise ValueError(f"{op}: bias overlaps {aname} in memory (pass a separate copy)")
    if e.plan is None:
        return a
    if e.w_copy:
        w = kind.as_contiguous(w)
        pw = kind.ptr(w)
    if e.bias_copy:
        bias = kind.as_contiguous(bias)
        pb = kind.ptr(bias)
    e.plan.run((pa, pw) if bias is None else (pa, pw, pb), kind.stream(device),
               kind.alloc(device) if e.plan.workspaces else None)
    return a
