"""Host side of cu_src/timex.cu: RWKV "timex", a causal depthwise long convolution, and its gradients.

    out[b, c, t] = eps + sum_{u <= t} w[c, T-1-t+u] * k[b, c, u]
               (= eps + F.conv1d(F.pad(k, (T-1, 0)), w.unsqueeze(1), groups=C))

`w` is (C, T), `k` is (B, C, T). Rows of `w` may be strided (the view `w[:, -T:]` of a longer filter is
used without a copy); `k` and `grad_out` may have any batch and channel strides. An input whose last
axis is not unit-stride is copied once (documented in docs/timex.md), as is a non-contiguous `k` for the
ladder rungs.

A call is planned once per (variant, dtypes, shapes, strides, alignment, eps, device) into a Plan (the kernel
instances, their geometry and arguments, the workspaces) and replayed after that: a hit is a key lookup, the
outputs' allocation and the launches."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._runtime import (CTYPES, FLOAT_DTYPES, ITEMSIZE, TORCH, KernelSource, PlanBuilder, ceil_div, check_like,
                        checked_dtype, current, kind_of)
from .._runtime.launch import alignment
from .._runtime.tuning import PlanCache

SOURCE = KernelSource("timex.cu")
THREADS = 128                # TX_THREADS in timex.cu: the block of the tiled and tensor-core kernels
GRID_STRIDE_THREADS = 256    # block of the grid-stride kernels (naive, the band combine)
GRID_STRIDE_WAVES = 8        # their grid: at most this many waves of thread-resident blocks (threads loop)
TF32X3_TILE = (32, 256)      # rows b, times t a block of the Toeplitz tensor-core kernels
FOLD_TOTAL_BYTES = 32768     # timex_tf32x3f's folded mode: a block's flushed sums (128 threads x 64 floats)
BAND = 64                    # TXB in timex.cu: the band tile of the tensor-core grad_w
GRAD_W_BANDS = 2             # bands a block of the tensor-core grad_w kernels (their NB)

VARIANTS = ("auto", "tiled", "tiled_b32", "tiled_b8", "tiled_b2", "mma16", "tf32x3", "tf32x3_full", "tf32x3_scalar",
            "naive", "shared", "float4", "batch8", "balanced")
LADDER = ("naive", "shared", "float4", "batch8", "balanced")  # the original article's rungs, in order
LADDER_KERNELS = {"shared": "timex_shared", "float4": "timex_float4", "batch8": "timex_batch8",
                  "balanced": "timex_balanced"}  # float32 only; preconditions in ladder_preconditions
BACKWARD_VARIANTS = ("auto", "tiled", "mma16", "tf32x3", "naive")
# The Toeplitz tensor-core kernel of each tf32x3 variant: tf32x3 skips the diagonal chunks' all-zero MMA tiles;
# tf32x3_full runs every tile; tf32x3_scalar is the first tensor-core rung (fragments gathered word by word).
TOEPLITZ_TF32X3 = {"tf32x3": "skip_zero_tiles", "tf32x3_full": "every_tile", "tf32x3_scalar": "scalar"}
# The tensor-core kernels' element types: float32 split in hi + lo (3 MMAs a product); a float16 or bfloat16 value
# is exact in TF32 (one MMA, exact products). float64 has none (its variants: tiled, naive).
TENSOR_CORE_DTYPES = ("float32", "float16", "bfloat16")
# timex_mma16 (variant mma16): the Toeplitz product on m16n8k16 MMAs of 16-bit operands, the half types only.
MMA16_DTYPES = ("float16", "bfloat16")
MMA16_TILE = (32, 256)       # rows b, times t a block of timex_mma16


@dataclass(frozen=True)
class Tuning:
    # timex_tiled's tile shapes by name: (RB rows b x RT times t a thread, WB lanes of a warp along b); a block
    # holds WB*RB rows b x 128*RT/WB times t. b32 (32 x 256) measured 37.2 TFLOP/s at B=32 C=768 T=768 against
    # 28.6-30.1 for the other shapes tried, (4, 16, 4), (8, 8, 2) and (4, 16, 4) with 64 u a chunk (H200, the
    # probe log of 61f08d7); b2 (2 x 1024) serves small batches; b8 (8 x 512) is a named variant only.
    tiled_tiles: tuple = (("b32", (8, 8, 4)), ("b8", (4, 8, 2)), ("b2", (2, 8, 1)))
    # Relative time per computed FMA of each tile: 'auto' takes the least (rows b padded to the tile) x cost.
    # H200, ffd9e1d's bench: b32 37.2 TFLOP/s and b8 21.5 at B=32 T=768; b2 26.7-32.5 at B = 3..12, T = 2048..8192.
    tiled_cost: tuple = (("b32", 1.0), ("b8", 1.75), ("b2", 1.2))
    # float64's tile (gradcheck, not tuned): 16 rows b x 128 t, 4 x 4 a thread (half float32's registers).
    tiled_f64: tuple = (4, 4, 4)
    # timex_grad_w's tile (RD lags x RU values of u a thread, LD lanes of a warp along the lags; 64 lags a
    # block). B=32 C=768 T=768 float32, ms with 4-wide / scalar loads (H200, the probe log of 61f08d7): this
    # 0.661 / 1.041; (8, 16, 8) 0.652 / 1.138, (16, 8, 4) 0.707 / 1.086, (8, 8, 4) 0.906 / 1.408.
    grad_w_tile: tuple = (16, 16, 4)
    # float64's (gradcheck, not tuned): 32 lags a block.
    grad_w_tile_f64: tuple = (8, 8, 4)
    # float32 forward and grad_k on the tensor cores (tf32x3) from this batch and this T: the 32 x 256 block
    # tile pads small B and short T. H200, 845ec6b, ms tf32x3 / tiled: B=12 T=768 0.236 / 0.261, B=192 T=128
    # 0.128 / 0.131, B=128 T=192 0.135 / 0.153; but B=8 T=768 0.233 / 0.181, B=384 T=64 0.128 / 0.123.
    # float16 / bfloat16 take the same two thresholds (not measured apart; their kernels run a third of the MMAs).
    tf32x3_min_b: int = 12
    tf32x3_min_t: int = 128
    # ... up to this T, float32 only: the split-precision error grows with the accumulation length, 5.1e-6 at
    # T = 1024 and 1.0e-5 at 2048 against float32's 1e-5 (B=32 C=16, H200, the probe log of 61f08d7), where
    # tiled also won (B=12 T=2048: 1.37 against 1.53 ms). The half types have no such bound: their values are
    # exact in TF32, so one MMA gives exact products and the error is float32 accumulation's at any T.
    # Beyond it float32's tf32x3 runs folded (timex_tf32x3f<..., true>: the rows are (256-time block, b) pairs,
    # so small B fills the tile, and the MMAs' sums are flushed every 256 u, so the error stays T = 256's).
    tf32x3_max_t: int = 1024
    # 'auto' takes the folded kernel where its MMA work (a block runs all its rows to its latest time block) is at
    # most this many times the useful work (fold_waste). C=768 forward, ms folded / tiled (H200, f2ac743):
    # B=3 T=2048 (2.37x) 0.335 / 0.464, B=5 T=2048 (2.67x) 0.616 / 0.695, B=2 T=2048 (3.56x) 0.337 / 0.241,
    # B=1 T=4096 (3.76x) 0.663 / 0.792 (the one miss), B=1 T=8192 (1.94x) 1.32 / 2.88, B=3 T=8192 (1.31x) 2.57 / 5.74.
    tf32x3_fold_max_waste: float = 3.0
    # float32 grad_w on the tensor cores (band GEMMs, any B: they won at every B measured, 1..384) while the
    # error stays within float32's 1e-5. It grows with B*T, the length of each band's sums: 2.0e-6 at B=3
    # T=8192, 5.1e-6 at B=32 T=2048, 1.0e-5 at B=32 T=4096 (C=4..16, H200, 17b27bd and the probe log of 61f08d7).
    # An accuracy bound of the 3-MMA split, so float32 only: the half types' exact products take the band GEMMs
    # at any B and T.
    tf32x3_grad_w_max_bt: int = 32 * 2048
    # The Toeplitz kernel (forward, grad_k) 'auto' runs for float16 / bfloat16 where tf32x3_auto allows the tensor
    # cores: "mma16" (m16n8k16 on 16-bit operands: half the MMAs and staging of the one-pass TF32 kernel,
    # predicted ~2x faster, not yet measured) or "tf32x3" (one exact TF32 pass; 0.2065 ms forward at B=32
    # C=768 T=768 bfloat16, H200, 72a42d9).
    half_toeplitz: str = "mma16"
    # ... and the grad_w kernel, at any B and T: "mma16" (timex_grad_w_mma16, the band GEMMs on m16n8k16 MMAs of
    # 16-bit operands, not yet measured) or "tf32x3" (the one-pass TF32 bands, timex_grad_w_frag).
    half_grad_w: str = "mma16"


TUNING = Tuning()
PLANS = PlanCache()


# ---- instance names ---------------------------------------------------------------------------------------

_PRODUCT = {False: "Product::forward", True: "Product::grad_k"}


def _tile(tile: str) -> tuple:
    """(RB, RT, WB) of a named tiled shape ('f64': float64's)."""
    if tile == "f64":
        return TUNING.tiled_f64
    return dict(TUNING.tiled_tiles)[tile]


def _tiled_name(dtype: str, tile: str, rev: bool, vec: bool) -> str:
    rb, rt, wb = _tile(tile)
    return (f"timex_tiled<{CTYPES[dtype]}, TiledTile<{rb}, {rt}, {wb}>, {_PRODUCT[rev]}, "
            f"Loads::{'vec4' if vec else 'scalar'}>")


def _grad_w_name(dtype: str, vec: bool) -> str:
    rd, ru, ld = TUNING.grad_w_tile_f64 if dtype == "float64" else TUNING.grad_w_tile
    return f"timex_grad_w<{CTYPES[dtype]}, LagTile<{rd}, {ru}, {ld}>, Loads::{'vec4' if vec else 'scalar'}>"


def _element(dtype: str) -> str:
    """The trailing element-type argument of a tensor-core kernel: none for float32 (its default)."""
    return "" if dtype == "float32" else f", {CTYPES[dtype]}"


def _toeplitz_name(kernel: str, rev: bool, dtype: str = "float32", fold: bool = False) -> str:
    if kernel == "scalar":
        return f"timex_tf32x3<{_PRODUCT[rev]}{_element(dtype)}>"
    if fold:
        return f"timex_tf32x3f<{_PRODUCT[rev]}, Diagonal::{kernel}, float, true>"
    return f"timex_tf32x3f<{_PRODUCT[rev]}, Diagonal::{kernel}{_element(dtype)}>"


def _mma16_name(rev: bool, dtype: str, vec: bool) -> str:
    return f"timex_mma16<{_PRODUCT[rev]}, {CTYPES[dtype]}, Loads::{'vec8' if vec else 'scalar'}>"


def _grad_w_mma16_name(dtype: str, vec: bool) -> str:
    return f"timex_grad_w_mma16<{CTYPES[dtype]}, Loads::{'vec8' if vec else 'scalar'}>"


def _grad_w_bands_name(vec: bool, dtype: str = "float32") -> str:
    return f"timex_grad_w_frag<{GRAD_W_BANDS}, Loads::{'vec2' if vec else 'scalar'}{_element(dtype)}>"


def _band_combine_name(dtype: str) -> str:
    return f"timex_grad_w_bands<{CTYPES[dtype]}>"


def _declare():
    """Every instance a variant may launch, and no other."""
    names = []
    for dt in FLOAT_DTYPES:  # the naive rung and backward
        names += [f"timex_{kernel}<{CTYPES[dt]}>" for kernel in ("naive", "naive_grad_k", "naive_grad_w")]
    names += list(LADDER_KERNELS.values())
    for dt in TENSOR_CORE_DTYPES:
        # tf32x3 (both directions: the default's and the tf32x3 backward's); tf32x3_full, tf32x3_scalar: forward only
        names += [_toeplitz_name("skip_zero_tiles", rev, dt) for rev in (False, True)]
        names += [_toeplitz_name("every_tile", False, dt), _toeplitz_name("scalar", False, dt)]
        names += [_grad_w_bands_name(vec, dt) for vec in (False, True)] + [_band_combine_name(dt)]
    names += [_toeplitz_name("skip_zero_tiles", rev, fold=True) for rev in (False, True)]  # float32 beyond max_t
    names += [_mma16_name(rev, dt, vec) for dt in MMA16_DTYPES for rev in (False, True) for vec in (False, True)]
    names += [_grad_w_mma16_name(dt, vec) for dt in MMA16_DTYPES for vec in (False, True)]
    for dt in FLOAT_DTYPES:
        for tile in (("f64",) if dt == "float64" else dict(TUNING.tiled_tiles)):
            # b8 forward only: the backward of every SIMT variant takes choose_tiled's tile, never b8
            for rev in ((False,) if tile == "b8" else (False, True)):
                names += [_tiled_name(dt, tile, rev, vec) for vec in (False, True)]
        names += [_grad_w_name(dt, vec) for vec in (False, True)]
    SOURCE.declare(names)


_declare()


# ---- dispatch rules ---------------------------------------------------------------------------------------


def tiled_shape(cfg) -> tuple[int, int]:
    """(rows b a block, times t a block) of a tiled configuration (RB, RT, WB)."""
    rb, rt, wb = cfg[:3]
    return wb * rb, (32 // wb) * rt * (THREADS // 32)


def choose_tiled(dtype: str, B: int) -> str:
    """The tiled shape with the least estimated time for batch B (padding rows b costs FMAs)."""
    if dtype == "float64":
        return "f64"
    cost = dict(TUNING.tiled_cost)

    def estimate(name):
        bm = tiled_shape(_tile(name))[0]
        return ceil_div(B, bm) * bm * cost[name]

    return min((name for name, _ in TUNING.tiled_tiles if name in cost), key=estimate)


def tf32x3_auto(dtype: str, B: int, T: int, kernel: str = "toeplitz") -> bool:
    """Whether 'auto' takes the tensor-core kernel ('toeplitz': forward and grad_k; 'grad_w'). float32: where
    faster and its split-precision error within 1e-5 (beyond tf32x3_max_t, folded); float16 / bfloat16 (exact
    products): the same B and T thresholds, no upper T, only the kernels' grid limits."""
    if dtype not in TENSOR_CORE_DTYPES:
        return False
    t = TUNING
    half = dtype != "float32"
    if kernel == "grad_w":
        if half:
            return _band_grid_ok(B, 1, T)
        return B * T <= t.tf32x3_grad_w_max_bt
    if half:
        bm, tn = TF32X3_TILE
        fits = ceil_div(T, tn) <= 65535 and ceil_div(B, bm) <= 65535
        return fits and B >= t.tf32x3_min_b and T >= t.tf32x3_min_t
    if T > t.tf32x3_max_t:
        return _fold_grid_ok(B, T) and fold_waste(B, T) <= t.tf32x3_fold_max_waste
    return B >= t.tf32x3_min_b and t.tf32x3_min_t <= T


def fold_waste(B: int, T: int) -> float:
    """The folded tf32x3 kernel's MMA work over the useful work: block z takes rows 32z.. of the (time block p,
    b) pairs and runs each to its latest block; a row of block p needs p + 1 blocks of u (the diagonal aside)."""
    bm, tn = TF32X3_TILE
    nblk = ceil_div(T, tn)
    rows = B * nblk
    work = sum(bm * (min(nblk - 1, (r0 + bm - 1) // B) + 1) for r0 in range(0, rows, bm))
    return work / (B * nblk * (nblk + 1) / 2)


def _fold_grid_ok(B: int, T: int) -> bool:
    return ceil_div(B * ceil_div(T, TF32X3_TILE[1]), TF32X3_TILE[0]) <= 65535


def _band_grid_ok(B: int, C: int, T: int) -> bool:
    """Whether the tensor-core grad_w's grid and (b, band) counters fit: C and B times ceil(T / 64) < 2**31."""
    nt = ceil_div(T, BAND)
    return C * nt < 2**31 and B * nt < 2**31


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"timex: variant must be one of {', '.join(VARIANTS)}; got {variant!r}")


def check_backward_variant(variant: str) -> None:
    if variant not in BACKWARD_VARIANTS:
        raise ValueError(f"timex_backward: variant must be one of {', '.join(BACKWARD_VARIANTS)}; got {variant!r}")


def backward_variant(variant: str) -> str:
    """The backward a forward variant's autograd uses: auto, naive, mma16 and tf32x3 their own, tf32x3_full and
    tf32x3_scalar the tf32x3 one, the other (SIMT) rungs the SIMT tiled kernels."""
    if variant in ("tf32x3_scalar", "tf32x3_full"):
        return "tf32x3"
    return variant if variant in ("auto", "naive", "mma16", "tf32x3") else "tiled"


BACKWARD_OF = {v: backward_variant(v) for v in VARIANTS}


def ladder_preconditions(variant: str, dtype: str, B: int, T: int) -> str | None:
    """Why a rung of the original article's ladder cannot run this problem (None when it can)."""
    if dtype != "float32":
        return f"the ladder rung {variant!r} is float32 only; got {dtype}"
    if variant == "shared" and T > 1024:
        return f"the ladder rung 'shared' needs T <= 1024 (one thread per t); got T = {T}"
    if variant == "float4" and (T % 4 or T > 4096):
        return f"the ladder rung 'float4' needs T % 4 == 0 and T <= 4096; got T = {T}"
    if variant in ("batch8", "balanced"):
        step = 8 if variant == "balanced" else 4
        if B % 8 or T % step or T > 1024:
            return (f"the ladder rung {variant!r} needs B % 8 == 0, T % {step} == 0 and T <= 1024; "
                    f"got B = {B}, T = {T}")
    return None


# ---- planning: each function records its launches into a PlanBuilder ----------------------------------------
# Arguments: Buffers of the builder (w, k / x, g, outputs); ldw, (sb, sc): element strides of w's rows and of
# the batch and channel axes of k / g (unit stride along t).


def _packs_ok(buf, strides, dtype: str, n: int) -> bool:
    """Whether rows of a buffer with these (batch, channel) strides start on n-element boundaries."""
    return buf.alignment >= n * ITEMSIZE[dtype] and all(s % n == 0 for s in strides)


def _grid_stride_blocks(n: int) -> int:
    return max(1, min(ceil_div(n, GRID_STRIDE_THREADS), current().resident_blocks(GRID_STRIDE_THREADS)
                      * GRID_STRIDE_WAVES))


def plan_naive(b: PlanBuilder, name: str, n: int, args) -> None:
    """A grid-stride kernel over n items."""
    b.launch(SOURCE.kernel(name), _grid_stride_blocks(n), GRID_STRIDE_THREADS, args)


def plan_tiled(b: PlanBuilder, dtype: str, tile: str, rev: bool, w, ldw, x, xs, out, eps, B, C, T, vec=None):
    """The tiled Toeplitz product on FP32 / FP64 FMAs: out <- timex(w, x) (rev: grad_k, x the output gradient)."""
    bm, tn = tiled_shape(_tile(tile))
    grid = (C, ceil_div(T, tn), ceil_div(B, bm))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"timex: T = {T} or B = {B} is beyond this kernel's grid ({tn * 65535} / {bm * 65535})")
    if vec is None:
        vec = T % 4 == 0 and _packs_ok(x, xs, dtype, 4)
    b.launch(SOURCE.kernel(_tiled_name(dtype, tile, rev, vec)), grid, THREADS,
             (w, np.int64(ldw), x, np.int64(xs[0]), np.int64(xs[1]), out, np.float64(eps), np.int32(B), np.int32(C),
              np.int32(T)))


def plan_toeplitz_tf32x3(b: PlanBuilder, dtype: str, kernel: str, rev: bool, w, ldw, x, xs, out, eps, B, C, T):
    """The Toeplitz product on the tensor cores: split-precision TF32 for float32 (folded beyond tf32x3_max_t),
    one exact TF32 pass for float16 / bfloat16; kernel: a value of TOEPLITZ_TF32X3."""
    bm, tn = TF32X3_TILE
    args = (w, np.int64(ldw), x, np.int64(xs[0]), np.int64(xs[1]), out, np.float64(eps), np.int32(B), np.int32(C),
            np.int32(T))
    if dtype == "float32" and kernel == "skip_zero_tiles" and T > TUNING.tf32x3_max_t:
        if not _fold_grid_ok(B, T):
            raise ValueError(f"timex: B * ceil(T / {tn}) = {B * ceil_div(T, tn)} is beyond this kernel's grid "
                             f"({bm * 65535})")
        fn = SOURCE.kernel(_toeplitz_name(kernel, rev, fold=True), shared_mem=FOLD_TOTAL_BYTES)
        b.launch(fn, (C, 1, ceil_div(B * ceil_div(T, tn), bm)), THREADS, args, shared_mem=FOLD_TOTAL_BYTES)
        return
    grid = (C, ceil_div(T, tn), ceil_div(B, bm))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"timex: T = {T} or B = {B} is beyond this kernel's grid ({tn * 65535} / {bm * 65535})")
    b.launch(SOURCE.kernel(_toeplitz_name(kernel, rev, dtype)), grid, THREADS, args)


def plan_toeplitz_mma16(b: PlanBuilder, dtype: str, rev: bool, w, ldw, x, xs, out, eps, B, C, T, vec=None):
    """The Toeplitz product of a half type on m16n8k16 MMAs (timex_mma16); vec: 16-byte loads of x (T, its
    strides and pointer multiples of 8 elements)."""
    bm, tn = MMA16_TILE
    grid = (C, ceil_div(T, tn), ceil_div(B, bm))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"timex: T = {T} or B = {B} is beyond this kernel's grid ({tn * 65535} / {bm * 65535})")
    if vec is None:
        vec = T % 8 == 0 and _packs_ok(x, xs, dtype, 8)
    b.launch(SOURCE.kernel(_mma16_name(rev, dtype, vec)), grid, THREADS,
             (w, np.int64(ldw), x, np.int64(xs[0]), np.int64(xs[1]), out, np.float64(eps), np.int32(B), np.int32(C),
              np.int32(T)))


def _toeplitz_auto(dtype: str, B: int, T: int) -> str:
    """The variant 'auto' runs for a forward or grad_k: a tensor-core kernel where tf32x3_auto allows, else tiled."""
    if not tf32x3_auto(dtype, B, T):
        return "tiled"
    return TUNING.half_toeplitz if dtype in MMA16_DTYPES else "tf32x3"


def plan_ladder(b: PlanBuilder, rung: str, w, ldw, k, out, eps, B, C, T):
    """A rung of the original article's ladder (k C-contiguous); preconditions checked by the caller."""
    smem = (2 if rung in ("shared", "float4") else 9) * T * 4
    if rung == "shared":
        grid, block = B * C, T
    elif rung == "float4":
        grid, block = B * C, T // 4
    else:
        grid, block = (C, B // 8), T // (8 if rung == "balanced" else 4)
    b.launch(SOURCE.kernel(LADDER_KERNELS[rung], smem), grid, block,
             (w, np.int64(ldw), k, out, np.float64(eps), np.int32(B), np.int32(C), np.int32(T)), shared_mem=smem)


def plan_grad_w(b: PlanBuilder, dtype: str, k, ks, g, gs, gw, B, C, T, vec=None):
    """grad_w on the SIMT kernel: one launch, reduced over b in-kernel."""
    rd, ru, ld = TUNING.grad_w_tile_f64 if dtype == "float64" else TUNING.grad_w_tile
    if vec is None:
        vec = T % 4 == 0 and _packs_ok(k, ks, dtype, 4) and _packs_ok(g, gs, dtype, 4)
    blocks = C * ceil_div(T, ld * rd)
    if blocks >= 2**31:
        raise ValueError(f"timex_backward: C * ceil(T / {ld * rd}) = {blocks} blocks is beyond the grid limit")
    b.launch(SOURCE.kernel(_grad_w_name(dtype, vec)), blocks, THREADS,
             (k, np.int64(ks[0]), np.int64(ks[1]), g, np.int64(gs[0]), np.int64(gs[1]), gw, np.int32(B), np.int32(C),
              np.int32(T)))


def plan_grad_w_bands(b: PlanBuilder, dtype: str, k, ks, g, gs, gw, B, C, T, vec=None, kernel: str = "tf32x3"):
    """grad_w on the tensor cores: band GEMMs (two bands a block) into a float32 workspace of (C, ceil(T/64), 128),
    then the fixed-order combine of each lag's two bands (timex_grad_w_bands) into gw, rounded once to the dtype.
    kernel: "tf32x3" (timex_grad_w_frag: TF32, split for float32; 2-element loads) or "mma16" (timex_grad_w_mma16:
    m16n8k16 on 16-bit operands, the half types; 16-byte loads); vec: those loads (default: where they fit)."""
    nt = ceil_div(T, BAND)
    if not _band_grid_ok(B, C, T):
        raise ValueError(f"timex_backward: C * ceil(T / {BAND}) and B * ceil(T / {BAND}) must be < 2**31 for "
                         f"{kernel!r}; got B = {B}, C = {C}, T = {T}")
    pack = 8 if kernel == "mma16" else 2
    if vec is None:
        vec = T % pack == 0 and _packs_ok(k, ks, dtype, pack) and _packs_ok(g, gs, dtype, pack)
    name = _grad_w_mma16_name(dtype, vec) if kernel == "mma16" else _grad_w_bands_name(vec, dtype)
    ws = b.workspace(C * nt * 2 * BAND * 4)
    b.launch(SOURCE.kernel(name), C * ceil_div(nt, GRAD_W_BANDS), THREADS,
             (k, np.int64(ks[0]), np.int64(ks[1]), g, np.int64(gs[0]), np.int64(gs[1]), ws, np.int32(B), np.int32(C),
              np.int32(T)))
    plan_naive(b, _band_combine_name(dtype), C * T, (ws, gw, np.int32(C), np.int32(T)))


def _tensor_core_dtype(op: str, variant: str, dtype: str) -> None:
    if dtype not in TENSOR_CORE_DTYPES:
        raise ValueError(f"{op}: variant {variant!r} (TF32 tensor cores) takes {', '.join(TENSOR_CORE_DTYPES)}; "
                         f"got {dtype} (use 'tiled' or 'naive')")


def _mma16_dtype(op: str, dtype: str) -> None:
    if dtype not in MMA16_DTYPES:
        raise ValueError(f"{op}: variant 'mma16' (16-bit tensor-core operands) takes {', '.join(MMA16_DTYPES)}; "
                         f"got {dtype} (use 'tf32x3', 'tiled' or 'naive')")


def plan_forward(b: PlanBuilder, variant: str, dtype: str, w, ldw, k, ks, out, eps, B, C, T):
    """out <- timex(w, k) + eps by `variant` (validated: a ValueError names a variant outside its limits)."""
    if variant == "auto":
        variant = _toeplitz_auto(dtype, B, T)
    if variant == "tiled" or variant.startswith("tiled_"):
        tile = choose_tiled(dtype, B) if variant == "tiled" else variant[len("tiled_"):]
        if dtype == "float64" and variant != "tiled":
            raise ValueError(f"timex: variant {variant!r} has no float64 kernel; use 'tiled' or 'naive'")
        plan_tiled(b, dtype, tile, False, w, ldw, k, ks, out, eps, B, C, T)
    elif variant in TOEPLITZ_TF32X3:
        _tensor_core_dtype("timex", variant, dtype)
        plan_toeplitz_tf32x3(b, dtype, TOEPLITZ_TF32X3[variant], False, w, ldw, k, ks, out, eps, B, C, T)
    elif variant == "mma16":
        _mma16_dtype("timex", dtype)
        plan_toeplitz_mma16(b, dtype, False, w, ldw, k, ks, out, eps, B, C, T)
    elif variant == "naive":
        plan_naive(b, f"timex_naive<{CTYPES[dtype]}>", B * C * T,
                   (w, np.int64(ldw), k, np.int64(ks[0]), np.int64(ks[1]), out, np.float64(eps), np.int32(B),
                    np.int32(C), np.int32(T)))
    else:
        why = ladder_preconditions(variant, dtype, B, T)
        if why:
            raise ValueError(f"timex: {why}; use variant='auto'")
        plan_ladder(b, variant, w, ldw, k, out, eps, B, C, T)


def plan_backward(b: PlanBuilder, variant: str, dtype: str, w, ldw, k, ks, g, gs, gw, gk, B, C, T,
                  need_w: bool = True, need_k: bool = True):
    """gk <- grad_k (when need_k), gw <- grad_w (when need_w) by `variant`: one launch each on the SIMT
    kernels, grad_w's bands and their combine on the tensor cores (mma16: both on m16n8k16 MMAs of 16-bit
    operands)."""
    if variant == "naive":
        if need_k:
            plan_naive(b, f"timex_naive_grad_k<{CTYPES[dtype]}>", B * C * T,
                       (w, np.int64(ldw), g, np.int64(gs[0]), np.int64(gs[1]), gk, np.int32(B), np.int32(C),
                        np.int32(T)))
        if need_w:
            plan_naive(b, f"timex_naive_grad_w<{CTYPES[dtype]}>", C * T,
                       (k, np.int64(ks[0]), np.int64(ks[1]), g, np.int64(gs[0]), np.int64(gs[1]), gw, np.int32(B),
                        np.int32(C), np.int32(T)))
        return
    if variant == "mma16":
        _mma16_dtype("timex_backward", dtype)
    forced = variant in ("tf32x3", "mma16")
    if forced:
        _tensor_core_dtype("timex_backward", variant, dtype)
    # (grad_k's kernel could also do grad_w's band combine and save a launch: measured 1.7-2.1 us slower at
    # B=32 C=768 T=768, each block's serial prologue; H200, 1a4fcfc)
    if need_k:
        kernel = _toeplitz_auto(dtype, B, T) if variant == "auto" else variant
        if kernel == "mma16":
            plan_toeplitz_mma16(b, dtype, True, w, ldw, g, gs, gk, 0.0, B, C, T)
        elif kernel == "tf32x3":
            plan_toeplitz_tf32x3(b, dtype, TOEPLITZ_TF32X3["tf32x3"], True, w, ldw, g, gs, gk, 0.0, B, C, T)
        else:
            plan_tiled(b, dtype, choose_tiled(dtype, B), True, w, ldw, g, gs, gk, 0.0, B, C, T)
    if need_w:
        if variant == "auto" and dtype in MMA16_DTYPES and tf32x3_auto(dtype, B, T, "grad_w"):
            variant = TUNING.half_grad_w
        if variant == "mma16":
            plan_grad_w_bands(b, dtype, k, ks, g, gs, gw, B, C, T, kernel="mma16")
        elif variant == "tf32x3" or (variant == "auto" and tf32x3_auto(dtype, B, T, "grad_w")):
            plan_grad_w_bands(b, dtype, k, ks, g, gs, gw, B, C, T)
        else:
            plan_grad_w(b, dtype, k, ks, g, gs, gw, B, C, T)


# ---- calls ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """A planned call: the outputs' shapes, which inputs are copied first (w, k[, g]), whether grad_w is zeroed
    without a kernel (B = 0), the plan (None: nothing to launch)."""
    shapes: tuple
    copies: tuple
    zero_gw: bool
    plan: object


def _elem_strides(kind, x, dtype):
    """Element strides, or None when a CuPy array's byte strides are not whole elements."""
    if kind is TORCH:
        return tuple(x.stride())
    item = ITEMSIZE[dtype]
    return None if any(s % item for s in x.strides) else tuple(s // item for s in x.strides)


def _row_layout(kind, x, dtype, contiguous=False):
    """(copy, element strides of the array the kernels read, its alignment): a copy (C-contiguous, fresh) when
    the last axis is not unit-stride (or, with contiguous=True, when x is not C-contiguous)."""
    shape = tuple(x.shape)
    st = _elem_strides(kind, x, dtype)
    dense = _dense_strides(shape)
    if st is not None and contiguous:
        ok = all(n == 1 or s == d for n, s, d in zip(shape, st, dense))
    else:
        ok = st is not None and (shape[-1] <= 1 or st[-1] == 1)
    if not ok:
        return True, dense, 256
    return False, st, min(alignment(kind.ptr(x)), 32)  # the key holds the pointer's low 5 bits


def _dense_strides(shape):
    st, step = [], 1
    for n in reversed(shape):
        st.append(step)
        step *= n
    return tuple(reversed(st))


def _validate(kind, op, w, k, g, device):
    """Every check of a call's inputs; returns (dtype, B, C, T)."""
    wdt = check_like(kind, w, op, "w", device, FLOAT_DTYPES)
    if len(w.shape) != 2:
        raise ValueError(f"{op}: w must have 2 dimensions; got shape {tuple(w.shape)}")
    dtype = checked_dtype(k, op, "k", FLOAT_DTYPES)
    if len(k.shape) != 3:
        raise ValueError(f"{op}: k must have 3 dimensions; got shape {tuple(k.shape)}")
    if wdt != dtype:
        raise TypeError(f"{op}: w has dtype {wdt} but k has {dtype}; w and k must have the same dtype")
    B, C, T = k.shape
    if tuple(w.shape) != (C, T):
        raise ValueError(f"{op}: w must have shape (C, T) = ({C}, {T}) to match k of shape (B, C, T) = "
                         f"{tuple(k.shape)}; got w of shape {tuple(w.shape)}")
    if g is not None:
        gdt = check_like(kind, g, op, "grad_out", device, FLOAT_DTYPES)
        if len(g.shape) != 3:
            raise ValueError(f"{op}: grad_out must have 3 dimensions; got shape {tuple(g.shape)}")
        if gdt != dtype:
            raise TypeError(f"{op}: grad_out has dtype {gdt} but k has {dtype}; they must match")
        if tuple(g.shape) != tuple(k.shape):
            raise ValueError(f"{op}: grad_out must have the shape of k {tuple(k.shape)}; got {tuple(g.shape)}")
    if max(B, C, T) >= 2**31:
        raise ValueError(f"{op}: B, C and T must each be < 2**31; got k of shape {tuple(k.shape)}")
    return dtype, B, C, T


def _build_forward(kind, variant, w, k, eps, device) -> _Entry:
    """Validate a forward call and plan it (a miss of PLANS: every check happens here)."""
    check_variant(variant)
    dtype, B, C, T = _validate(kind, "timex", w, k, None, device)
    if B * C * T == 0:
        return _Entry(((B, C, T),), (False, False), False, None)
    copy_w, ws, wal = _row_layout(kind, w, dtype)
    copy_k, ks, kal = _row_layout(kind, k, dtype, contiguous=variant in LADDER_KERNELS)
    b = PlanBuilder(device, (wal, kal, 256))
    wb, kb, ob = b.buffers
    plan_forward(b, variant, dtype, wb, ws[0], kb, ks[:2], ob, eps, B, C, T)
    return _Entry(((B, C, T),), (copy_w, copy_k), False, b.plan())


def _build_backward(kind, variant, w, k, g, need_w, need_k, device) -> _Entry:
    check_backward_variant(variant)
    dtype, B, C, T = _validate(kind, "timex_backward", w, k, g, device)
    shapes = ((C, T), (B, C, T))
    if C * T == 0 or B == 0:
        return _Entry(shapes, (False, False, False), need_w and C * T > 0, None)
    layouts = [_row_layout(kind, x, dtype) for x in (w, k, g)]
    (copy_w, ws, wal), (copy_k, ks, kal), (copy_g, gs, gal) = layouts
    b = PlanBuilder(device, (wal, kal, gal, 256, 256))
    wb, kb, gb, gwb, gkb = b.buffers
    plan_backward(b, variant, dtype, wb, ws[0], kb, ks[:2], gb, gs[:2], gwb, gkb, B, C, T, need_w, need_k)
    return _Entry(shapes, (copy_w, copy_k, copy_g), False, b.plan())


def _key_of(kind, x):
    """What a plan depends on of one input: (dtype, shape, strides, the pointer's low 5 bits, device). An input
    of another kind raises AttributeError, which sends the call to the validation."""
    if kind is TORCH:
        return x.dtype, x.shape, x.stride(), x.data_ptr() & 31, x.get_device()
    return x.dtype, x.shape, x.strides, x.data.ptr & 31, x.device.id


def timex_impl(w, k, eps: float = 0.0, variant: str = "auto"):
    """out = timex(w, k) + eps for CuPy arrays or CUDA tensors (no autograd): a planned call, replayed."""
    kind = kind_of(k, "timex", "k")
    device = kind.device(k)
    if kind.current_device() != device:
        with kind.on_device(device):
            return timex_impl(w, k, eps, variant)
    eps = float(eps)
    try:
        key = (variant, eps, _key_of(kind, k), _key_of(kind, w), device)
    except AttributeError:
        _validate(kind, "timex", w, k, None, device)
        raise
    e = PLANS.get(key)
    if e is None:
        e = PLANS.put(key, _build_forward(kind, variant, w, k, eps, device))
    out = _new(kind, k, e.shapes[0])
    if e.plan is None:
        return out
    if e.copies[0]:
        w = kind.as_contiguous(w)
    if e.copies[1]:
        k = kind.as_contiguous(k)
    e.plan.run((kind.ptr(w), kind.ptr(k), kind.ptr(out)), kind.stream(device))
    return out


def timex_backward_impl(w, k, grad_out, variant: str = "auto", need_w: bool = True, need_k: bool = True):
    """(grad_w, grad_k) of timex for CuPy arrays or CUDA tensors (no autograd); need_w / need_k False: that
    gradient is not computed (None)."""
    kind = kind_of(k, "timex_backward", "k")
    device = kind.device(k)
    if kind.current_device() != device:
        with kind.on_device(device):
            return timex_backward_impl(w, k, grad_out, variant, need_w, need_k)
    try:
        key = (variant, need_w, need_k, _key_of(kind, k), _key_of(kind, w), _key_of(kind, grad_out),
               device)
    except AttributeError:
        _validate(kind, "timex_backward", w, k, grad_out, device)
        raise
    e = PLANS.get(key)
    if e is None:
        e = PLANS.put(key, _build_backward(kind, variant, w, k, grad_out, need_w, need_k, device))
    gw = _new(kind, k, e.shapes[0]) if need_w else None
    gk = _new(kind, k, e.shapes[1]) if need_k else None
    if e.plan is None:
        if e.zero_gw:
            kind.fill(gw, 0)
        return gw, gk
    copy_w, copy_k, copy_g = e.copies
    if copy_w:
        w = kind.as_contiguous(w)
    if copy_k:
        k = kind.as_contiguous(k)
    if copy_g:
        grad_out = kind.as_contiguous(grad_out)
    plan = e.plan
    plan.run((kind.ptr(w), kind.ptr(k), kind.ptr(grad_out), 0 if gw is None else kind.ptr(gw),
              0 if gk is None else kind.ptr(gk)), kind.stream(device), kind.alloc(device) if plan.workspaces else None)
    return gw, gk


def _new(kind, like, shape):
    """A new C-contiguous array of `like`'s kind, dtype and device."""
    if kind is TORCH:
        return like.new_empty(shape)
    import cupy

    return cupy.empty(shape, like.dtype)


# ---- float64 references (host, NumPy) -------------------------------------------------------------


def reference(w, k, eps=0.0):
    """float64 forward on the host through FFTs (exact to ~1e-15): w (C, T), k (B, C, T) NumPy arrays."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    T = k.shape[-1]
    n = 2 * T
    f = w[:, ::-1]  # f[c, d] = w[c, T-1-d]
    out = np.fft.irfft(np.fft.rfft(k, n) * np.fft.rfft(f, n), n)[..., :T]
    return out + eps


def reference_backward(w, k, g):
    """float64 (grad_w, grad_k) on the host through FFTs."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    T = k.shape[-1]
    n = 2 * T
    f = w[:, ::-1]
    G = np.fft.rfft(g, n)
    # grad_k[u] = sum_d f[d] g[u+d]: a correlation
    gk = np.fft.irfft(G * np.conj(np.fft.rfft(f, n)), n)[..., :T]
    # grad_f[d] = sum_b sum_u k[u] g[u+d]
    gf = np.fft.irfft((G * np.conj(np.fft.rfft(k, n))).sum(axis=0), n)[..., :T]
    return gf[:, ::-1].copy(), gk


def reference_loops(w, k, eps=0.0):
    """The definition as plain loops (small sizes; checks the FFT reference)."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    B, C, T = k.shape
    out = np.full((B, C, T), float(eps))
    for t in range(T):
        for u in range(t + 1):
            out[:, :, t] += w[None, :, T - 1 - t + u] * k[:, :, u]
    return out
