"""Host side of cu_src/square_matmul.cu: in-place square matmul A <- A @ W (or A @ W.T), and in-place
nn.Linear for a square weight (x <- x @ weight.T + bias), without an output buffer.

Every output tile waits in registers until all column tiles of its 128-row block have read their
inputs, then overwrites those rows (see the .cu file): the only extra device memory is a counter array
of 4 * (1 + ceil(m / 128)) bytes."""
from __future__ import annotations

import numpy as np

from .._runtime import (CTYPES, Call, KernelSource, ceil_div, is_torch, launch, resident_blocks, tensor_map_2d,
                        use_shared_memory)
from .._runtime.tma import max_active_clusters

SOURCE = KernelSource("square_matmul.cu")
SOURCE90 = KernelSource("square_matmul_sm90.cu", options=("-arch=sm_90a",))  # wgmma: Hopper only
DTYPES = ("float32", "float16", "bfloat16")
BM = 128               # rows of a tile (sqmm::BM); columns: 128 (FP32, mma128) or 256 (mma256)
THREADS = 256
SEED_MAX_N = 2048      # the seed kernel's 64-entry register buffer x 32 lanes
# The ladder: "auto" (the default, see choose_kernel); on Hopper (sm_90a), 128 x 256 tiles: "tma_cluster"
# (tma in clusters of two CTAs on neighbouring row blocks that share each W tile through TMA multicast),
# "tma" (TMA loads by a producer thread, two consumer warpgroups on wgmma, a store warp that waits for the
# row block and writes the staged tile with TMA stores), "tma_direct" (the same, but the consumers wait and store from
# registers), "wgmma" (cp.async loads by every thread); "mma256" (mma.sync, 128 x 256 tiles, one block per
# SM), "mma128" (mma.sync, 128 x 128 tiles, two blocks per SM), "seed" (the seed article's warp-per-row
# kernel, n <= 2048).
VARIANTS = ("auto", "tma_cluster", "tma", "tma_direct", "wgmma", "mma256", "mma128", "seed")
HOPPER = ("tma_cluster", "tma", "tma_direct", "wgmma")
TMA_CLUSTER = {"tma_cluster": 2, "tma": 1, "tma_direct": 1}  # CTAs per cluster (sqmm_tma's CL)
WGMMA_SMEM = 4 * (BM * 64 + 64 * 256) * 2 + 1024  # sqmm90::SMEM
TMA_SMEM = {True: 3 * (BM * 64 + 64 * 256) * 2 + BM * 256 * 2 + 1024, False: WGMMA_SMEM}  # sqmm90::tma_smem
TMA_THREADS = 384
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def _b(v: bool) -> str:
    return "true" if v else "false"


def choose_kernel(dtype: str, variant: str, hopper: bool, aligned: bool, op: str = "square_matmul_") -> str:
    """Which kernel runs: "simt" (float32), "tma_cluster", "tma", "tma_direct", "wgmma", "mma256" or
    "mma128". "auto" takes tma_cluster for half types on a compute capability 9.0 device when a and w rows
    are 16-byte aligned (square_matmul_impl falls back to tma when n is too wide for the clusters that fit
    at once); else mma256."""
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
        return "tma_cluster" if hopper and aligned else "mma256"
    return variant


def mma_smem(tbn: int) -> int:
    """sqmm::MmaSmem<TBN>::bytes: 4 stages of a 128 x 32 A tile and a 32 x TBN W tile, 2-byte elements."""
    return 4 * (BM * 32 + 32 * tbn) * 2


def tile_cols(dtype: str, variant: str = "auto") -> int:
    if dtype == "float32":
        return 128
    return 128 if variant == "mma128" else 256


def tiled_name(dtype: str, trans: bool, aligned: bool, tbn: int = 256) -> str:
    if dtype == "float32":
        return f"sqmm_simt<{_b(trans)}, {_b(aligned)}>"
    return f"sqmm_mma<{CTYPES[dtype]}, {_b(trans)}, {_b(aligned)}, {tbn}>"


def wgmma_name(dtype: str, trans: bool) -> str:
    return f"sqmm_wgmma<{CTYPES[dtype]}, {_b(trans)}>"


def tma_name(dtype: str, trans: bool, store_warp: bool = True, cluster: int = 1) -> str:
    return f"sqmm_tma<{CTYPES[dtype]}, {_b(trans)}, {_b(store_warp)}{f', {cluster}' if cluster > 1 else ''}>"


def seed_name(dtype: str, trans: bool) -> str:
    return f"sqmm_seed<{CTYPES[dtype]}, {_b(trans)}>"


SOURCE.declare([tiled_name(t, tr, al, tbn) for t in DTYPES for tbn in ((128,) if t == "float32" else (256, 128))
                for tr in (False, True) for al in (True, False)]
               + [seed_name(t, tr) for t in DTYPES for tr in (False, True)])
SOURCE90.declare([tma_name(t, tr, sw) for sw in (True, False) for t in ("float16", "bfloat16") for tr in (False, True)]
                 + [tma_name(t, tr, True, 2) for t in ("float16", "bfloat16") for tr in (False, True)]
                 + [wgmma_name(t, tr) for t in ("float16", "bfloat16") for tr in (False, True)])


def has_wgmma() -> bool:
    from .._runtime import current

    return current().cc == 90


def _dtype(x) -> str:
    from .._runtime import dtype_name

    return dtype_name(x)


def _span(x):
    """[first byte, last byte + 1) of a CuPy array's memory (any strides)."""
    if x.size == 0:
        return (x.data.ptr, x.data.ptr)
    lo = hi = x.data.ptr
    for s, st in zip(x.shape, x.strides):
        if st > 0:
            hi += (s - 1) * st
        else:
            lo += (s - 1) * st
    return (lo, hi + x.itemsize)


def _overlap(x, y) -> bool:
    (a0, a1), (b0, b1) = _span(x), _span(y)
    return a0 < b1 and b0 < a1 and a0 != a1 and b0 != b1


def check_args(op, call, a, w, bias=None):
    """Validate everything before anything is written. Returns (a2d, w, bias, transpose flip): a as
    (m, n), w C-contiguous (an F-contiguous w is used through its transpose: flip = True)."""
    ac = call.arg(a, "a" if op == "square_matmul_" else "x", dtypes=DTYPES)
    wname = "w" if op == "square_matmul_" else "weight"
    wc = call.arg(w, wname, dtypes=DTYPES, ndim=2)
    aname = "a" if op == "square_matmul_" else "x"
    dt = _dtype(ac)
    if _dtype(w) != _dtype(a):
        raise TypeError(f"{op}: {wname} has dtype {_dtype(w)}; expected {_dtype(a)} like {aname}")
    if ac.ndim < 1:
        raise ValueError(f"{op}: {aname} must have at least one dimension (..., n); got a 0-d array")
    n = ac.shape[-1]
    if wc.shape != (n, n):
        raise ValueError(f"{op}: {wname} must be square with the size of {aname}'s last dimension, ({n}, {n}); "
                         f"got shape {tuple(wc.shape)}")
    if not ac.flags.c_contiguous:
        raise ValueError(f"{op}: {aname} must be C-contiguous (it is written in place); got strides {ac.strides}")
    if _overlap(ac, wc):
        raise ValueError(f"{op}: {wname} overlaps {aname} in memory; the result would overwrite its own weights "
                         f"(pass a separate copy)")
    bc = None
    if bias is not None:
        bc = call.arg(bias, "bias", dtypes=(_dtype(a),), ndim=1)
        if bc.shape != (n,):
            raise ValueError(f"{op}: bias must have shape ({n},); got {tuple(bc.shape)}")
        if _overlap(ac, bc):
            raise ValueError(f"{op}: bias overlaps {aname} in memory (pass a separate copy)")
    flip = False
    if not wc.flags.c_contiguous:
        if wc.flags.f_contiguous:
            wc, flip = wc.T, True     # the transpose of a C-contiguous matrix: swap the transpose flag
        else:
            import cupy

            wc = cupy.ascontiguousarray(wc)  # an n x n copy (strided views only)
    if bc is not None and not bc.flags.c_contiguous:
        import cupy

        bc = cupy.ascontiguousarray(bc)
    m = ac.size // n if n else 0
    return ac.reshape(m, n), wc, bc, flip, dt


def _aligned(dtype, n, *arrays) -> bool:
    return n % (16 // ITEMSIZE[dtype]) == 0 and all(x.data.ptr % 16 == 0 for x in arrays)


def square_matmul_impl(a, w, transpose=False, bias=None, variant="auto", op="square_matmul_"):
    """The kernels' path for either kind of input (no autograd): writes a @ w (a @ w.T with transpose)
    + bias into a and returns a."""
    if variant not in VARIANTS:
        raise ValueError(f"{op}: variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    with Call(op, a, "a" if op == "square_matmul_" else "x") as call:
        a2, wc, bc, flip, dtype = check_args(op, call, a, w, bias)
        trans = bool(transpose) != flip
        m, n = a2.shape
        if m == 0:
            return a
        if variant == "seed":
            if bc is not None:
                raise ValueError(f"{op}: the seed variant takes no bias")
            if n > SEED_MAX_N:
                raise ValueError(f"{op}: the seed variant handles n <= {SEED_MAX_N} (its 64-entry register "
                                 f"buffer per lane); got n = {n}")
            SOURCE.kernel(seed_name(dtype, trans))((ceil_div(m, 4),), (128,), (a2, wc, np.int64(m), np.int32(n)))
            return a
        aligned = _aligned(dtype, n, a2, wc)  # the bias is read element by element
        kind = choose_kernel(dtype, variant, has_wgmma(), aligned, op)
        if kind.startswith("tma") and m >= 2 ** 31 - 512:
            kind = "wgmma"  # TMA row coordinates are 32-bit
        if kind == "tma_cluster" and variant == "auto" and not _clusters_fit(dtype, trans, n):
            kind = "tma"    # a row block's column tiles need more clusters than fit at once
        if kind.startswith("tma"):
            _launch_tma(call, a2, wc, bc, trans, dtype, op, kind != "tma_direct", TMA_CLUSTER[kind])
        elif kind == "wgmma":
            _launch_wgmma(call, a2, wc, bc, trans, dtype, op)
        else:
            _launch_tiled(call, a2, wc, bc, trans, dtype, op, 256 if kind == "mma256" else 128, aligned)
        return a


def plan(m, n, tbn, resident, cluster=1):
    """(tiles_n, row blocks, total tiles, grid) of the tiled kernels for a wave of `resident` blocks
    (cluster > 1: `resident` clusters, tiles of `cluster` row blocks, the row blocks rounded up to whole
    tiles and the grid counted in clusters)."""
    tiles_n, rbs = ceil_div(n, tbn), cluster * ceil_div(m, BM * cluster)
    total = tiles_n * (rbs // cluster)
    return tiles_n, rbs, total, min(resident, total)


def max_n(resident: int, tbn: int) -> int:
    """Largest n the tiled kernels take on a device holding `resident` blocks at once: every column
    tile of a row block must be resident together (they wait for each other before writing)."""
    return resident * tbn


def _launch_tiled(call, a2, wc, bc, trans, dtype, op, tbn, aligned):
    kernel = SOURCE.kernel(tiled_name(dtype, trans, aligned, tbn))
    smem = 0 if dtype == "float32" else mma_smem(tbn)
    geometry = _persistent(call, kernel, THREADS, smem, tbn, a2.shape, op)
    _launch(kernel, THREADS, smem, geometry, (a2, wc), a2, bc)


def _launch_wgmma(call, a2, wc, bc, trans, dtype, op):
    kernel = SOURCE90.kernel(wgmma_name(dtype, trans))
    geometry = _persistent(call, kernel, THREADS, WGMMA_SMEM, 256, a2.shape, op)
    # mn_swap = 0: the descriptor convention the H200 confirmed (1 is wrong for W as [k][n])
    _launch(kernel, THREADS, WGMMA_SMEM, geometry, (a2, wc), a2, bc, (np.int32(0),))


def _clusters_fit(dtype, trans, n) -> bool:
    """Whether the tma_cluster kernel holds all ceil(n / 256) column tiles of a row block at once."""
    kernel = SOURCE90.kernel(tma_name(dtype, trans, True, 2), TMA_SMEM[True])
    return ceil_div(n, 256) <= max_active_clusters(kernel, TMA_THREADS, TMA_SMEM[True], 2)


def _launch_tma(call, a2, wc, bc, trans, dtype, op, store_warp, cluster=1):
    kernel = SOURCE90.kernel(tma_name(dtype, trans, store_warp, cluster))
    m, n = a2.shape
    smem = TMA_SMEM[store_warp]
    geometry = _persistent(call, kernel, TMA_THREADS, smem, 256, a2.shape, op, cluster)
    maps = (tensor_map_2d(a2.data.ptr, m, n, dtype, 64, BM),
            tensor_map_2d(wc.data.ptr, n, n, dtype, 64, 256 // cluster if trans else 64))
    _launch(kernel, TMA_THREADS, smem, geometry, maps + (a2,), a2, bc, by_value=True, cluster=cluster)


def _persistent(call, kernel, threads, smem, tbn, shape, op, cluster=1):
    """(grid, zeroed counters, tiles_n, total tiles) of a persistent launch of at most one wave, after
    checking that a row block's column tiles fit in it together. cluster > 1: a tile is `cluster` row
    blocks (one per CTA of a cluster), the wave is counted in whole clusters (the driver's occupancy for
    clusters) and the grid in blocks."""
    m, n = shape
    if n >= 2 ** 31:
        raise ValueError(f"{op}: n = {n} is too large (int32 column index)")
    if smem:
        use_shared_memory(kernel, smem, op)
    if cluster > 1:
        resident = max_active_clusters(kernel, threads, smem, cluster)
        unit = f"clusters of {cluster} blocks"
    else:
        resident = resident_blocks(kernel, threads, smem)
        unit = "blocks"
    tiles_n, rbs, total, grid = plan(m, n, tbn, resident, cluster)
    if tiles_n > resident:
        raise ValueError(f"{op}: n = {n} needs {tiles_n} column tiles of {tbn} resident at once, but this device "
                         f"holds {resident} {unit} of this kernel (n <= {max_n(resident, tbn)} here)")
    if total + grid >= 2 ** 32:
        raise ValueError(f"{op}: {m} x {n} has too many tiles for the 32-bit tile counter; split the rows")
    ctrl = call.empty((1 + rbs,), "int32")
    ctrl.fill(0)
    return grid * cluster, ctrl, tiles_n, total


def _launch(kernel, threads, smem, geometry, lead, a2, bc, extra=(), by_value=False, cluster=1):
    """Launch with the shared tail of arguments: (*lead, bias, has_bias, m, n, ctrl, tiles_n, total, *extra);
    by_value: `lead` holds structs as bytes (TMA maps), launched through the runtime's `launch`."""
    grid, ctrl, tiles_n, total = geometry
    m, n = a2.shape
    args = (*lead, bc if bc is not None else a2, np.int32(bc is not None), np.int64(m), np.int32(n), ctrl,
            np.uint32(tiles_n), np.uint32(total), *extra)
    if by_value:
        launch(kernel, grid, threads, args, smem, cluster)
    else:
        kernel((grid,), (threads,), args, shared_mem=smem)
