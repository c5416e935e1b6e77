"""Host side of the norm kernels: layer_norm, rms_norm, their in-place forms and backward.

cu_src/norm_fwd.cu holds the forward; norm_bwd.cu the backward's register forms, its pipelined long rows and
column_sum (the partial rows of dweight / dbias added up); norm_bwd_cluster.cu the backward with its column sums in
shared memory (a CTA or an sm_90 cluster a row, and the ring). A call is planned once per (op, dtypes, shapes,
strides, alignments, eps, device) into a Plan (`plan_forward`, `plan_backward`) and replayed after that
(`norm_forward_impl`, `norm_backward_impl`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._runtime import (ACC, ACC_SCALAR, CTYPES, FLOAT_DTYPES, HALF_DTYPES, ITEMSIZE, KernelSource, PlanBuilder,
                        ceil_div, check_like, checked_dtype, current, kind_of, resident_blocks, vec)
from .._runtime.launch import alignment
from .._runtime.tma import max_active_clusters
from .._runtime.tuning import PlanCache
from . import _rowwise as rw
from . import reduce as _reduce

FWD = KernelSource("norm_fwd.cu")
BWD = KernelSource("norm_bwd.cu")
CLUSTER = KernelSource("norm_bwd_cluster.cu")
SOURCES = (FWD, BWD, CLUSTER)
MODES = {"layer_norm": "LAYER", "rms_norm": "RMS"}  # the NormMode names of common/norm.cuh
SOURCE_NAMES = {False: "FROM_X", True: "FROM_Y"}    # the backward's src (NormSource)
# Their values, the kernels' run-time arguments `mode` and `source` (instances of ANY_MODE / ANY_SOURCE read them)
MODE_ARGS = {"layer_norm": np.int32(0), "rms_norm": np.int32(1)}
SOURCE_ARGS = {False: np.int32(0), True: np.int32(1)}
SHARED_DTYPES = ("float16", "bfloat16", "float32")  # norm_bwd_shared and norm_bwd_ring: float sums
SHARED_CLUSTERS = (1, 2, 4)  # norm_bwd_shared's CTAs a row at TUNING.shared_threads (and 8 at cl8_threads)
RING_CLUSTERS, RING_PACKS = (2, 4, 8), (1, 2, 4)
RING_STAGES, RING_LAG = 6, 2  # norm_bwd_ring's S and LAG (their defaults in norm_bwd_cluster.cu)
COLUMN_SUM_Y = (1, 8, 32)     # column_sum's Y instances
# norm_bwd's instances compiled for their group (GT), by dtype: the form (PACKS) that has them. float32's two-pack
# form (layer G 16: 1640 -> 728 SASS instructions; 65536x128 layer 33.0 -> 31.7 us, rms 31.9 -> 30.9, H200) and a
# half type's one-pack form (32768x768 bf16 layer 72.3 -> 65.7 us, rms 64.3 -> 55.6; 131072x128 bf16 layer 39.5 ->
# 35.4, H200). float64 keeps the run-time group.
BWD_GROUP_PACKS = {"float32": 2, "float16": 1, "bfloat16": 1}


@dataclass(frozen=True)
class Tuning:
    """The norm kernels' choices. The kernel instances are declared for these values: a probe that moves rows onto
    forms the defaults never take (thresholds of the shared and ring forms, the staged groups) declares those
    instances first (FWD / BWD / CLUSTER.declare with the *_name functions below)."""

    # Forward rows that are not whole packs, of 1..tiled_max_n elements (x and y 16-byte aligned), through
    # shared-memory tiles (norm_fwd_tiled; 0: never): faster than the element path at every length measured (H100, us,
    # f32 x33 layer / rms 46.9 / 46.2 vs 71.6 / 61.8, x1 99.9 / 71.3 vs 245.2 / 190.6; bf16 x100 35.5 / 30.2 vs
    # 45.5 / 34.9). Shifted rows are compiled for the sub-warp groups of longer rows only (SHIFTED_FWD_GROUPS).
    tiled_max_n: int = 128
    # Forward rows in blocks of >= stage_fwd_min_threads threads staged (the next row copied in by cp.async while this
    # one is reduced): a block alone or nearly so on its SM overlaps rows only so (1024x32768 bf16 softmax 55.0 ->
    # 44.0 us, H200); smaller blocks keep several rows an SM in flight already. layer_norm's long rows split over
    # several blocks measured 2% slower staged (256x262144 float32) and are not.
    stage_fwd: bool = True
    stage_fwd_min_threads: int = 512
    # float32 sub-warp forward rows of 8-thread groups (65..128 elements) staged too: 65536x128 layer 22.1 -> 21.5 us,
    # rms 22.0 -> 20.9 (H100); groups of 16 and 32 and the half types measured equal or slower (layer 131072x256
    # bf16 44.8 -> 48.0).
    stage_short_fwd_groups: tuple = (8,)
    stage_short_fwd_dtypes: tuple = ("float32",)
    # norm_fwd_parts' FULL_PACKS instances where every part is whole (rw.full_parts): float32 layer 1208 -> 968 SASS
    # instructions, 256x262144 f32 layer 140.2 -> 138.1 us, rms 136.6 -> 136.0 (H200).
    full_parts: bool = True
    # Half-type backward rows from this length take norm_bwd's two-pack register form (512-thread blocks, two an SM,
    # accumulators spilled), shorter ones the spill-free one-pack form. H200, us, one-pack staged vs two-pack:
    # layer 8192² bf16 191 vs 215, 1024x32768 bf16 170 vs 156; rms 8192² 161 vs 139, 1024x32768 145 vs 114.
    # (Aligned rows of these lengths take norm_bwd_shared, norm_bwd_ring or norm_bwd_parts first.)
    two_pack_from: int = 8193
    # Sub-warp backward rows of these groups stage the group's next row (float32, and a half type's rms_norm; float32
    # groups of 32 only when full: stage_short_bwd): 65536x128 f32 layer 35.5 -> 34.4 us, rms 34.4 -> 32.9;
    # 131072x192 bf16 rms 58.6 -> 56.0 (H100); groups of 4 gain nothing, half layer rows are within 1% or slower.
    stage_short_bwd_groups: tuple = (8, 16, 32)
    # The shifted half backward's 1024-thread block rows (alone on their SM) stage their next row: bfloat16
    # 4095x4097 108 -> 93 us (H100).
    stage_shifted_bwd: bool = True
    # The two-pack half layer_norm backward leaves dbias to a column sum of dy (reduce.cu) instead of keeping 16 more
    # accumulators a thread in its spilling registers (256 bytes of spills instead of 832).
    db_by_reduce: bool = True
    # norm_bwd_shared: aligned rows from shared_from elements (float32: shared_from_float32), 2 packs of x and dy a
    # thread in CTAs of up to shared_threads, the dweight / dbias sums in shared memory; one CTA a row, or on sm_90 a
    # cluster of 2 or 4 (8 at cl8_threads) whose sums meet in distributed shared memory. H200, us, against the
    # register forms: layer 8192² bf16 177.5 -> 132.9, 32768x1024 f16 76.8 -> 68.8; rms 1024x32768 110.9 -> 81.2;
    # f32 4096²: layer 61.0 -> 56.3, rms 57.0 -> 54.9. CTAs of up to 512 threads: layer 1024x32768 100.0 -> 97.0.
    shared_from: int = 1024
    shared_from_float32: int = 4096
    shared_threads: int = 512
    # One-CTA rows in CTAs below this many threads load x and dy straight into registers (many CTAs an SM overlap rows
    # already): 32768x1024 f16 layer 68.3 -> 65.9 us; unstaged 512-thread CTAs were slower (8192² 128.3 -> 143.3).
    shared_stage_threads: int = 512
    # Half rows that would take a cluster of 4 CTAs of shared_threads take 8 of cl8_threads (four an SM instead of
    # two), loading their rows straight into registers (the staged CTA fits three an SM, 45 clusters placed instead of
    # 62): 1024x32768 bf16 layer 86.1 -> 83.8 -> 81.1 us, rms 72.0 -> 70.5 -> 69.1 (H200).
    cl8_threads: int = 256
    # norm_bwd_shared's WARP_ROWS form (a warp a row, sums by shuffles, a CTA's warps' column sums folded into one
    # partial row): aligned half rows from warps_from (float32: warps_from_float32) up to 128 * V elements, in CTAs of
    # warps_threads. H200, us: layer 32768x1024 f16 60.9 -> 53.6, 32768x768 bf16 65.7 -> 45.6; float32 65536x512
    # layer 107.6 -> 100.3; but 131072x256 f32 (a sub-warp group of 32) 103.9 -> 108.8.
    warps_from: int = 512
    warps_from_float32: int = 257
    warps_threads: int = 256
    # norm_bwd_ring (sm_90): aligned rows that split over a cluster of 2, 4 or 8 CTAs into ring_min_slots..
    # ring_max_slots 16-byte packs a CTA (a multiple of 32; the fewest CTAs); a thread takes the most packs (1, 2, 4)
    # that leave ring_min_threads threads a CTA (the ring is issue-bound). 1024x32768 bf16 layer, H100: 85.7 us (one
    # pack) -> 80.1 (two) -> 79.6 (four); H200 81.0 -> 65.8 -> 65.2; one-CTA rows stay with norm_bwd_shared (the
    # ring on them: 8192² bf16 rms 139.6 -> 146.7, H100). ring_packs forces a pack count (probes; 0: the rule).
    ring_min_slots: int = 512
    ring_max_slots: int = 1024
    ring_min_threads: int = 256
    ring_packs: int = 0
    # norm_bwd_parts' blocks: two an SM at 256 threads measured 2% faster than one of 512 (256x262144 f32: layer
    # 237.1 -> 231.6 us, rms 220.5 -> 217.6, H200).
    parts_bwd_threads: int = 256
    # Backward rows that are not whole packs of aligned arrays take shifted rows (norm_bwd SHIFTED) for these dtypes.
    # H100, us, shifted vs the element path, bf16 layer / rms: 167772x100 65.4 / 58.8 vs 77.6 / 71.8, 4095x4097
    # 108.2 / 93.2 vs 158.0 / 146.0; but float32 (one pack a thread where its element path holds two) 508400x33
    # 141.1 / 130.4 vs 113.8 / 90.8.
    shifted_bwd_dtypes: tuple = ("float16", "bfloat16")
    # column_sum launched as a programmatic dependent of the partial rows' kernel on sm_90 (its blocks start as that
    # kernel ends): 4096x4096 f32 layer backward 55.5 -> 53.6 us, 65536x128 31.9 -> 30.1 (H200).
    column_sum_after: bool = True


TUNING = Tuning()
PLANS = PlanCache()


# ---- instance names ---------------------------------------------------------------------------------------


def _group(g: int) -> str:
    return "ANY_GROUP" if not g else "ROW_BLOCK" if g == rw.ROW_BLOCK else str(g)


def _form(staged=False, full=False, shifted=False, no_dbias=False, warps=False) -> str:
    flags = [f for f, on in (("STAGED", staged), ("FULL_PACKS", full), ("SHIFTED", shifted), ("NO_DBIAS", no_dbias),
                             ("WARP_ROWS", warps)) if on]
    return " | ".join(flags) or "PLAIN"


def _op(mode, from_output=None, compiled=(False, False)) -> str:
    """The op's template arguments: ANY_MODE / ANY_SOURCE (the kernel reads its run-time `mode` / `source`), or the
    mode / source compiled in (compiled: which of the two)."""
    m = MODES[mode] if compiled[0] else "ANY_MODE"
    return m if from_output is None else f"{m}, {SOURCE_NAMES[bool(from_output)] if compiled[1] else 'ANY_SOURCE'}"


# Which forms compile their op in, rather than take it at run time (one instance for both ops and sources): those
# whose run-time op spilled or took more registers (ptxas, sm_80 / sm_90, against the one-op instances), and those
# only one op takes (no instance to save).


def _fwd_compiled(dtype, group, staged, shifted) -> tuple:
    """(mode compiled in, -) of a norm_fwd form: the element path's staged rows (rms_norm's only) and its shifted rows
    of a half type (80 bytes spilled, sm_90) or float64 (8-12 registers more)."""
    return (not group and (staged or shifted and dtype != "float32"), False)


def _bwd_compiled(dtype, mode, packs, group, staged, full, shifted) -> tuple:
    """(mode, source) compiled in of a norm_bwd form."""
    layer = mode == "layer_norm"
    if dtype in HALF_DTYPES:
        if packs == 2:  # the accumulators spill already
            return True, True
        if shifted:  # layer_norm's from y spill already, more with a run-time op; float16's staged block rows
            return True, layer or (staged and dtype == "float16")  # spill for every op (sm_90)
        if group in TUNING.stage_short_bwd_groups:  # staged for rms_norm, not for layer_norm: each form one op's
            return True, False
    if dtype == "float32" and not group:  # the element path: layer_norm's spill already (sm_80)
        return True, layer
    if dtype == "float32" and staged and not full:  # spilled 12 bytes (sm_90)
        return False, True
    if dtype == "float32" and staged and group == 16:  # 128-element rows: 4-5% slower with a run-time op and source
        return True, True                                 # (65536x128 layer 28.7 -> 30.1 us, rms 28.0 -> 29.1, H200)
    return False, False


def fwd_name(dtype, mode, group=0, staged=False, full=False, shifted=False) -> str:
    op = _op(mode, compiled=_fwd_compiled(dtype, group, staged, shifted))
    return f"norm_fwd<{CTYPES[dtype]}, {op}, {_group(group)}, {_form(staged, full, shifted)}>"


def fwd_tiled_name(dtype) -> str:
    return f"norm_fwd_tiled<{CTYPES[dtype]}>"


def fwd_parts_name(dtype, mode, full=False) -> str:
    return f"norm_fwd_parts<{CTYPES[dtype]}, {MODES[mode]}, {rw.TUNING.parts_packs_norm}, {_form(full=full)}>"


def bwd_name(dtype, mode, from_output, packs, group=0, staged=False, full=False, shifted=False, no_dbias=False) -> str:
    op = _op(mode, from_output, _bwd_compiled(dtype, mode, packs, group, staged, full, shifted))
    return f"norm_bwd<{CTYPES[dtype]}, {op}, {packs}, {_group(group)}, {_form(staged, full, shifted, no_dbias)}>"


def bwd_parts_name(dtype, mode, from_output) -> str:
    return f"norm_bwd_parts<{CTYPES[dtype]}, {_op(mode, from_output)}>"


def shared_name(dtype, mode, from_output, cl, staged=True, full=False, warps=False) -> str:
    # a half type's FULL_PACKS rows of one CTA: layer_norm's spill already, rms_norm's spilled 8-16 bytes with a
    # run-time source; warp rows with a run-time op and source ran 1.19x slower (layer 32768x1024 fp16 backward
    # 54.2 -> 64.5 us, H200, bb5fa5f)
    compiled = (True, True) if dtype in HALF_DTYPES and cl == 1 and full else (False, False)
    return (f"norm_bwd_shared<{CTYPES[dtype]}, {_op(mode, from_output, compiled)}, {cl}, "
            f"{_form(staged, full, warps=warps)}>")


def ring_name(dtype, mode, from_output, cl, packs) -> str:
    # float16's one-pack rows spilled with a run-time op (8-68 bytes, sm_90) but from x
    one = dtype == "float16" and packs == 1
    compiled = (one and bool(from_output), one)
    return f"norm_bwd_ring<{CTYPES[dtype]}, {_op(mode, from_output, compiled)}, {cl}, {packs}>"


def colsum_name(dtype, cw=1, ys=32, tw=32) -> str:
    return f"column_sum<{CTYPES[dtype]}, {cw}, {ys}{'' if tw == 32 else f', {tw}'}>"


# ---- launch geometry of the kernels' forms ------------------------------------------------------------------


def fwd_threads(dtype: str, n: int | None = None) -> int:
    return rw.fwd_threads(dtype, n)


def fwd_maxp(dtype: str) -> int:
    return rw.fwd_maxp(dtype)


def bwd_packs(dtype: str, n: int) -> int:
    """Packs of each of x and dy per thread in norm_bwd (its PACKS): 2 for float32 / float64 (8 / 4 elements), for a
    half type 1 (8 elements) or, on rows of TUNING.two_pack_from or more, 2."""
    if ITEMSIZE[dtype] != 2:
        return 2
    return 2 if n >= TUNING.two_pack_from else 1


def bwd_threads(dtype: str, packs: int = 1) -> int:
    """NormBwdThreads in norm_bwd.cu: 1024 for a half type's one-pack form (an 8192-element row in one block), 512 for
    its two-pack form and float32 (two resident an SM at 64 registers), 256 for float64."""
    if dtype == "float64":
        return 256
    return 1024 if ITEMSIZE[dtype] == 2 and packs == 1 else 512


def bwd_maxp(dtype: str, packs: int = 1) -> int:
    """The packs a launch of that form plans with: `packs` for a half type, 2 otherwise."""
    return packs if ITEMSIZE[dtype] == 2 else 2


def bwd_min_blocks(dtype: str, packs: int = 1) -> int:
    """Resident norm_bwd blocks an SM its __launch_bounds__ guarantee (NormBwdMinBlocks: 1 for a half type's
    1024-thread one-pack form, else 2); planning asks the occupancy calculator, this only when it cannot."""
    return 1 if bwd_threads(dtype, packs) == 1024 else 2


def bwd_smem(dtype: str, threads: int, group: int | None = None, packs: int = 1) -> int:
    """Dynamic shared memory of norm_bwd: where a block holds several groups (group < threads), one accumulator slot
    a thread a column element, to sum the groups' dweight / dbias partials in order; none for a block of one group."""
    if group is not None and group >= threads:
        return 0
    return threads * bwd_maxp(dtype, packs) * vec(dtype) * ITEMSIZE[ACC[dtype]]


def stage_short_bwd(dtype: str, mode: str, group: int, full: bool) -> bool:
    """Whether sub-warp backward rows of `group` threads take the staged instance (TUNING.stage_short_bwd_groups):
    float32 and a half type's rms_norm (a half layer_norm was within 1% or slower: 131072x256 bf16 69.7 -> 76.5 us),
    float32 groups of 32 only when full (its run-time-length form from the output also spilled: 65536x200)."""
    return (group in TUNING.stage_short_bwd_groups and (dtype == "float32" or mode == "rms_norm")
            and (full or group < 32 or dtype != "float32"))


def shared_plan(n: int, dtype: str, mode: str, cc: int):
    """(cluster CTAs, threads, packs, chunk, dynamic shared bytes, staged, full, warps) of norm_bwd_shared for aligned
    rows of n elements, or None where it does not apply (another type, too short, or too long for this device)."""
    T = TUNING
    if dtype not in SHARED_DTYPES:
        return None
    V = vec(dtype)
    sums = (2 if mode == "layer_norm" else 1) * V // 4  # dweight (and dbias) float4 slots a pack a thread

    def smem(packs, threads, stage):  # the sums, the weight's packs, the next row's x and dy
        return (sums + 1 + 2 * stage) * packs * threads * 16

    if (T.warps_from if ITEMSIZE[dtype] == 2 else T.warps_from_float32) <= n <= 128 * V:  # WARP_ROWS
        threads, packs = T.warps_threads, ceil_div(ceil_div(n, V), 32)
        return 1, threads, packs, n, smem(packs, threads, True), True, n == 128 * V, True
    cap = T.shared_threads
    cl = rw.next_pow2(ceil_div(n, cap * 2 * V))
    if cl == 4 and ITEMSIZE[dtype] == 2 and T.cl8_threads and n <= 8 * T.cl8_threads * 2 * V:
        cap, cl = T.cl8_threads, 8
    start = T.shared_from_float32 if dtype == "float32" else T.shared_from
    if n < start or (cl not in SHARED_CLUSTERS and cap == T.shared_threads) or (cl > 1 and cc < 90):
        return None
    chunk = ceil_div(ceil_div(n, cl), V) * V
    P = chunk // V
    threads = min(cap, ceil_div(ceil_div(P, 2), 32) * 32)
    packs = ceil_div(P, threads)
    stage = (1 < cl < 8) or threads >= T.shared_stage_threads  # clusters of 8: straight into registers
    full = packs == 2 and chunk == 2 * V * threads and cl * chunk == n
    return cl, threads, packs, chunk, smem(packs, threads, stage), stage, full, False


def ring_plan(n: int, dtype: str, cc: int):
    """(cluster CTAs, threads, packs a thread, dynamic shared bytes) of norm_bwd_ring for aligned rows of n elements,
    or None where it does not apply (another type, a row one CTA holds, a length it does not split into whole packs,
    before compute capability 9.0)."""
    T = TUNING
    V = vec(dtype)
    if cc < 90 or dtype not in SHARED_DTYPES or n % V or n // V <= T.ring_max_slots:
        return None  # (rows that fit one CTA: norm_bwd_shared)
    for cl in RING_CLUSTERS:
        slots, rest = divmod(n // V, cl)  # packs a CTA
        if rest or slots % 32 or not T.ring_min_slots <= slots <= T.ring_max_slots:
            continue
        for pk in (T.ring_packs,) if T.ring_packs else sorted(RING_PACKS, reverse=True):
            threads, rest = divmod(slots, pk)
            if not rest and threads % 32 == 0 and (T.ring_packs or threads >= T.ring_min_threads):
                return cl, threads, pk, 2 * RING_STAGES * slots * 16
        return None
    return None


def column_sum_shape(r: int, n: int, sm_count: int) -> tuple[int, int, int]:
    """(Y, CW, TW) of column_sum over r partial rows of n columns: Y threads down the rows, at least about 8 rows a
    thread below 32 (4 partial rows of 262144 columns in 32 x 32 blocks left 28 of 32 threads idle: ~90 us), four
    columns a thread where that still leaves a block an SM and tensor, and warps of 8 columns (4 rows a load) where
    32-column tiles would leave three quarters of the SMs idle. Measured alone (H200, us): 2112 x 1024 TW 8 9.2 vs
    10.1; 62 x 32768 CW 4 8.9 vs 11.6; but 264 x 4096 TW 8 12.0 vs 6.4 (so from 1024 columns only)."""
    ys = next(y for y in COLUMN_SUM_Y if y == COLUMN_SUM_Y[-1] or r <= 16 * y)
    cw = 4 if n % 4 == 0 and n >= sm_count * 32 * 4 else 1
    tw = 8 if ys == 32 and cw == 1 and 1024 <= n <= 32 * (sm_count // 4) else 32
    return ys, cw, tw


def _shifted_fwd_groups() -> dict:
    """dtype -> the sub-warp groups of shifted forward rows longer than TUNING.tiled_max_n (planned for n + V - 1
    elements): the only ones compiled; other shifted rows take the run-time group."""
    out = {}
    for t in rw.SHORT_DTYPES:
        V = vec(t)
        out[t] = tuple(sorted({p.group for n in range(TUNING.tiled_max_n + 1, 33 * fwd_maxp(t) * V) if n % V
                               for p in (rw.plan(1, n + V - 1, t, fwd_maxp(t), fwd_threads(t, n + V - 1), 132),)
                               if p.path == "subwarp"}))
    return out


SHIFTED_FWD_GROUPS = _shifted_fwd_groups()


# ---- the instances production takes -------------------------------------------------------------------------


def _declare():
    T, S, M = TUNING, rw.SHORT_DTYPES, tuple(MODES)
    groups = rw.SHORT_GROUPS
    fwd = ([fwd_tiled_name(t) for t in FLOAT_DTYPES]
           # the element path, float64, long rows over several blocks; shifted block rows
           + [fwd_name(t, m, shifted=sh) for t in FLOAT_DTYPES for m in M for sh in (False, True)]
           + [fwd_name(t, m, g, shifted=True) for t in S for m in M for g in SHIFTED_FWD_GROUPS[t]]
           # aligned rows of one segment compiled for their group; float32 groups of 8 staged
           + [fwd_name(t, m, g, full=f) for t in S for m in M for g in groups for f in (False, True)
              if not (g in T.stage_short_fwd_groups and t in T.stage_short_fwd_dtypes)]
           + [fwd_name(t, m, g, staged=True, full=f) for t in T.stage_short_fwd_dtypes for m in M
              for g in T.stage_short_fwd_groups for f in (False, True)]
           # block rows: unstaged up to 256 threads (FULL_PACKS where it does not spill), staged from 512
           + [fwd_name(t, m, rw.ROW_BLOCK, full=f) for t in S for m in M for f in (False, True)
              if not f or rw.has_full(t, rw.ROW_BLOCK, 0)]
           + [fwd_name(t, m, rw.ROW_BLOCK, staged=True, full=f) for t in S for m in M for f in (False, True)]
           # long rows: pipelined, or (more parts than fit at once) split over two launches, rms_norm's staged
           + [fwd_parts_name(t, m, f) for t in rw.STAGE_FWD_DTYPES for m in M for f in (False, True)]
           + [fwd_name(t, "rms_norm", staged=True) for t in rw.STAGE_FWD_DTYPES] + [rw.ZERO_WORDS])
    FWD.declare(fwd)
    bwd = []
    for f in (False, True):
        for m in M:
            # the element path (unaligned rows, float64, rows longer than the other forms take)
            bwd += [bwd_name(t, m, f, p) for t in FLOAT_DTYPES for p in sorted({bwd_packs(t, 0), 2})]
            bwd += [bwd_name(t, m, f, 2, no_dbias=True) for t in HALF_DTYPES if m == "layer_norm"]
            # aligned rows of one segment compiled for their group, staged or not, full or not
            for t, packs in BWD_GROUP_PACKS.items():
                for g, full in _bwd_groups(t):
                    bwd.append(bwd_name(t, m, f, packs, g, staged=stage_short_bwd(t, m, g, full), full=full))
            # shifted rows: sub-warp groups, block rows (1024-thread ones staged)
            for t in T.shifted_bwd_dtypes:
                bwd += [bwd_name(t, m, f, 1, g, shifted=True) for g in (0,) + _shifted_bwd_groups()]
                bwd += [bwd_name(t, m, f, 1, staged=True, shifted=True)] if T.stage_shifted_bwd else []
            bwd += [bwd_parts_name(t, m, f) for t in rw.STAGE_FWD_DTYPES]
    bwd += [rw.ZERO_WORDS] + [colsum_name(t, cw, y) for t in FLOAT_DTYPES for cw in (1, 4) for y in COLUMN_SUM_Y]
    bwd += [colsum_name(t, 1, 32, 8) for t in FLOAT_DTYPES]
    BWD.declare(bwd)
    cluster = []
    for f in (False, True):
        for m in M:
            for t in SHARED_DTYPES:
                cluster += [shared_name(t, m, f, *form) for form in _shared_forms(t)]
                cluster += [ring_name(t, m, f, cl, pk) for cl in RING_CLUSTERS for pk in RING_PACKS]
    CLUSTER.declare(cluster)


def _bwd_groups(dtype):
    """(group, full) of the aligned one-segment backward rows below norm_bwd_shared's lengths (and between its warp
    rows and one-CTA rows for float32): float32 two packs a thread, any group either way; a half type one pack, so a
    row that fills its group of 1 or 2 is full, and its block rows (264..504 elements) are not."""
    if dtype == "float32":
        return [(g, f) for g in rw.SHORT_GROUPS + (rw.ROW_BLOCK,) for f in (False, True)]
    return [(g, f) for g in rw.SHORT_GROUPS for f in (False, True) if f or g > 2] + [(rw.ROW_BLOCK, False)]


def _shifted_bwd_groups():
    """The sub-warp groups of shifted half backward rows (one pack a thread of n + V - 1 elements, n > V): 2 to 32."""
    return tuple(g for g in rw.SHORT_GROUPS if g > 1)


def _shared_forms(dtype):
    """(cluster CTAs, staged, full, warps) of the norm_bwd_shared instances the default shared_plan takes, before
    norm_bwd_ring (which takes every cluster row of whole 16-byte packs a CTA, so no cluster's full form remains)."""
    warps = [(1, True, f, True) for f in (False, True)]
    if dtype == "float32":
        return [(1, True, True, False), (2, True, False, False), (4, True, False, False)] + warps
    return ([(1, st, f, False) for st in (False, True) for f in (False, True)]
            + [(2, True, False, False), (8, False, False, False)] + warps)


_declare()


# ---- forward planning ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FwdArgs:
    """The Buffers of a forward call (None: absent) and its row geometry."""
    x: object
    y: object
    w: object
    b: object
    mean: object
    rstd: object
    rows: int
    n: int
    dtype: str
    mode: str
    eps: float

    def stats(self):
        return self.x, self.y, self.w, self.b, self.mean, self.rstd

    @property
    def mode_arg(self):
        return MODE_ARGS[self.mode]  # norm_fwd's and norm_fwd_tiled's last argument (norm_fwd_parts: compiled in)

    def acc(self, v):
        return ACC_SCALAR[ACC[self.dtype]](v)


def plan_forward(b: PlanBuilder, a: FwdArgs) -> str:
    """Record the launches of a forward over (rows, n), n >= 1; returns the form taken: "tiled", "shifted", "parts"
    or "rows"."""
    al = rw.row_aligned(a.n, a.dtype, a.x, a.y, a.w, a.b)
    if rw.tiled_rows(TUNING.tiled_max_n, a.n, al, "auto", a.x, a.y):
        _plan_fwd_tiled(b, a)
        return "tiled"
    if rw.shifted_rows(a.n, a.dtype, al, "auto", a.x, a.y, a.w, a.b) and _plan_fwd_shifted(b, a):
        return "shifted"
    return _plan_fwd_rows(b, a, al)


def _plan_fwd_tiled(b, a: FwdArgs) -> None:
    """Short rows that are not whole packs through shared-memory tiles (x and y aligned; w and b read by element)."""
    grid, threads, k, smem = rw.tiled_plan(a.rows, a.n, a.dtype, 1)
    b.launch(FWD.kernel(fwd_tiled_name(a.dtype), smem), grid, threads,
             (*a.stats(), np.int64(a.rows), np.int32(a.n), np.int32(k), a.acc(a.eps), a.acc(1.0 / a.n), a.mode_arg),
             shared_mem=smem)


def _plan_fwd_shifted(b, a: FwdArgs) -> bool:
    """Shifted rows (rows of a pack or more that are not whole packs of 16-byte aligned arrays) that one block holds
    (planned for n + V - 1 elements); longer rows keep the element path. Whether it launched."""
    V = vec(a.dtype)
    p = rw.plan(a.rows, a.n + V - 1, a.dtype, fwd_maxp(a.dtype), fwd_threads(a.dtype, a.n + V - 1), current().sm_count)
    if p.parts > 1:
        return False
    g = rw.short_group(p, a.dtype, 1) if p.path == "subwarp" else 0
    g = g if g in SHIFTED_FWD_GROUPS.get(a.dtype, ()) else 0  # groups compiled for shifted rows, else the run-time one
    smem = 16 * (p.threads // p.group) if p.group < 32 else 0  # store_shifted's slots
    b.launch(FWD.kernel(fwd_name(a.dtype, a.mode, g, shifted=True)), p.grid, p.threads,
             (*a.stats(), np.int64(a.rows), np.int64(a.n), np.int64(p.chunk), np.int32(p.group), np.int32(p.packs),
              np.int32(1), np.int32(0), a.acc(a.eps), a.acc(1.0 / a.n), np.int32(0), None, None, a.mode_arg),
             shared_mem=smem)
    return True


def _plan_fwd_rows(b, a: FwdArgs, al: int) -> str:
    """Aligned rows (pipelined when they span blocks; staged, compiled for their group) and the element path."""
    T, maxp = TUNING, fwd_maxp(a.dtype)
    kernel = FWD.kernel(fwd_name(a.dtype, a.mode))
    sms = current().sm_count
    p = rw.plan(a.rows, a.n, a.dtype, maxp, fwd_threads(a.dtype, a.n), sms, occupancy=rw.occupancy(kernel))
    pp = rw.pipelined_plan(FWD, fwd_parts_name(a.dtype, a.mode), a.rows, a.n, a.dtype, al, rw.TUNING.parts_packs_norm,
                           p.threads, full_name=fwd_parts_name(a.dtype, a.mode, True) if T.full_parts else None)
    if pp:
        kernel, p, smem = pp
        rw.plan_pipelined(b, FWD, kernel, p, (*a.stats(), np.int64(a.rows), np.int64(a.n), np.int64(p.chunk),
                                              np.int32(p.packs), np.int32(p.parts), np.float32(a.eps),
                                              np.float32(1.0 / a.n)), smem, k=2)
        return "parts"
    smem = 0
    # (layer_norm's rows split over blocks are not staged: 2% slower at 256x262144 float32)
    stage = (rw.stage_fwd(p, a.dtype, al, T.stage_fwd_min_threads)
             if T.stage_fwd and (a.mode == "rms_norm" or p.parts == 1) else 0)
    stage = stage or int(rw.stage_short(T.stage_short_fwd_groups, T.stage_short_fwd_dtypes, p, a.dtype, al))
    g = rw.short_group(p, a.dtype, al, staged=bool(stage))
    if stage and not g and a.mode != "rms_norm":
        stage = 0  # (layer_norm's staged instances are compiled for their group only)
    if stage:
        name = fwd_name(a.dtype, a.mode, g, staged=True)
        kernel = FWD.kernel(name)
        p, smem = rw.staged_plan(kernel, name, a.rows, a.n, a.dtype, maxp, fwd_threads(a.dtype, a.n), tensors=stage)
    if g:  # FULL_PACKS or not, the same launch bounds: the plan stands
        kernel = FWD.kernel(fwd_name(a.dtype, a.mode, g, bool(stage), rw.full_rows(p, a.dtype, maxp, g, stage)),
                            smem)
    sync, slots = rw.exchange_buffers(b, p, a.dtype)
    for phase in rw.phases(p):
        b.launch(kernel, p.grid, p.threads,
                 (*a.stats(), np.int64(a.rows), np.int64(a.n), np.int64(p.chunk), np.int32(p.group),
                  np.int32(p.packs), np.int32(p.parts), np.int32(al), a.acc(a.eps), a.acc(1.0 / a.n), np.int32(phase),
                  sync, slots, a.mode_arg), shared_mem=smem)
    return "rows"


# ---- backward planning --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BwdArgs:
    """The Buffers of a backward call (None: absent or not wanted) and its row geometry."""
    src: object
    dy: object
    dx: object
    w: object
    b: object
    mean: object
    rstd: object
    dw: object
    db: object
    rows: int
    n: int
    dtype: str
    mode: str
    from_output: bool

    def inputs(self):
        return self.src, self.dy, self.dx, self.w, self.b, self.mean, self.rstd

    @property
    def op_args(self):
        """The backward kernels' `mode` and `source` arguments (their last, but norm_bwd_parts' words)."""
        return MODE_ARGS[self.mode], SOURCE_ARGS[self.from_output]

    @property
    def inv_n(self):
        return ACC_SCALAR[ACC[self.dtype]](1.0 / self.n)  # c1 / n, c2 / n as products: no IEEE division a row

    def partial_rows(self, b, nrg: int, dbias: bool = True):
        """Workspaces of nrg partial rows of dweight / dbias column sums (None where not wanted)."""
        size = nrg * self.n * ITEMSIZE[ACC[self.dtype]]
        return (b.workspace(size) if self.dw is not None else None,
                b.workspace(size) if self.db is not None and dbias else None)


@dataclass(frozen=True)
class BwdChoice:
    """The backward's kernel family for a call, and that family's plan: "ring" (ring_plan), "shared" (shared_plan),
    "parts" (rw.pipelined_plan's (kernel, plan, smem)), "shifted" or "rows" (None: planned by their functions)."""
    family: str
    detail: object = None


def choose_backward(a: BwdArgs, cc: int) -> BwdChoice:
    """The form for aligned rows: a ring across a cluster (sm_90), column sums in shared memory (a CTA or a cluster
    a row), pipelined blocks for longer rows; shifted rows for half rows that are not whole packs; else the register
    rows (compiled for their group where aligned, the element path otherwise)."""
    al = rw.row_aligned(a.n, a.dtype, a.src, a.dy, a.dx, a.w, a.b)
    if al and (ring := ring_plan(a.n, a.dtype, cc)):
        return BwdChoice("ring", ring)
    if al and (shared := shared_plan(a.n, a.dtype, a.mode, cc)):
        return BwdChoice("shared", shared)
    if al and (pp := rw.pipelined_plan(BWD, bwd_parts_name(a.dtype, a.mode, a.from_output), a.rows, a.n, a.dtype, al,
                                       rw.maxp(a.dtype), TUNING.parts_bwd_threads, inputs=2)):
        return BwdChoice("parts", pp)
    if (a.dtype in TUNING.shifted_bwd_dtypes and rw.shifted_rows(a.n, a.dtype, al, "auto", *a.inputs()[:5])
            and _shifted_bwd_plan(a).parts == 1):
        return BwdChoice("shifted")
    return BwdChoice("rows")


def plan_backward(b: PlanBuilder, a: BwdArgs) -> str:
    """Record the launches of a backward over (rows, n), rows and n >= 1: the chosen family's kernel, then column_sum
    over its partial rows (and dbias by a column sum of dy where the kernel leaves it). Returns the family."""
    props = current()
    choice = choose_backward(a, props.cc)
    nrg, dw_part, db_part, db_by_reduce = PLANNERS[choice.family](b, a, choice)
    if dw_part is not None or db_part is not None:
        ys, cw, tw = column_sum_shape(nrg, a.n, props.sm_count)
        first = (dw_part, a.dw) if dw_part is not None else (db_part, a.db)
        second = (db_part, a.db) if dw_part is not None and db_part is not None else (None, None)
        b.launch(BWD.kernel(colsum_name(a.dtype, cw, ys, tw)), (ceil_div(a.n, tw * cw), 2), (32, ys),
                 (first[0], second[0], first[1], second[1], np.int64(nrg), np.int64(a.n)),
                 after_previous=TUNING.column_sum_after and props.cc >= 90)
    if db_by_reduce:  # float sums in a fixed order: deterministic
        _reduce.plan_cols(b, "sum", a.dy, a.db, a.dtype, 1, a.rows, a.n, a.rows)
    return choice.family


def _plan_bwd_cluster(b, a: BwdArgs, choice: BwdChoice):
    """norm_bwd_ring or norm_bwd_shared: a CTA or a cluster a row, one partial row a row group (the grid resident)."""
    if choice.family == "ring":
        cl, threads, pk, smem = choice.detail
        name, extra, warps = ring_name(a.dtype, a.mode, a.from_output, cl, pk), (), False
    else:
        cl, threads, packs, chunk, smem, stage, full, warps = choice.detail
        name = shared_name(a.dtype, a.mode, a.from_output, cl, stage, full, warps)
        extra = (np.int64(chunk), np.int32(packs))
    kernel = CLUSTER.kernel(name, smem)
    resident = resident_blocks(kernel, threads, smem) if cl == 1 else max_active_clusters(kernel, threads, smem, cl)
    groups = min(ceil_div(a.rows, threads // 32) if warps else a.rows, resident)  # warp rows: a row a warp
    dw_part, db_part = a.partial_rows(b, groups)
    b.launch(kernel, cl * groups, threads,
             (*a.inputs(), dw_part, db_part, np.int64(a.rows), np.int64(a.n), np.float32(1.0 / a.n), *extra,
              *a.op_args), shared_mem=smem, cluster=cl)
    return groups, dw_part, db_part, False


def _plan_bwd_parts(b, a: BwdArgs, choice: BwdChoice):
    """Aligned rows longer than a block, pipelined over co-resident blocks (norm_bwd_parts)."""
    kernel, p, smem = choice.detail
    nrg = p.grid // p.parts
    dw_part, db_part = a.partial_rows(b, nrg)
    rw.plan_pipelined(b, BWD, kernel, p, (*a.inputs(), dw_part, db_part, np.int64(a.rows), np.int64(a.n), a.inv_n,
                                          np.int64(p.chunk), np.int32(p.packs), np.int32(p.parts), *a.op_args), smem,
                      k=2)
    return nrg, dw_part, db_part, False


def _shifted_bwd_plan(a: BwdArgs, kernel=None):
    """The plan of shifted backward rows: n + V - 1 elements, one pack a thread, a persistent grid."""
    V = vec(a.dtype)
    occupancy = rw.occupancy(kernel, lambda t: bwd_smem(a.dtype, t, packs=1)) if kernel is not None else None
    return rw.plan(a.rows, a.n + V - 1, a.dtype, bwd_maxp(a.dtype, 1), bwd_threads(a.dtype, 1), current().sm_count,
                   persistent=True, occupancy=occupancy, min_blocks=bwd_min_blocks(a.dtype, 1))


def _plan_bwd_shifted(b, a: BwdArgs, choice: BwdChoice):
    """Half rows that are not whole packs of aligned arrays, one block or group a row (norm_bwd SHIFTED): the groups'
    rows stepped by a multiple of V so that all start at the same head (its weight / bias columns read once)."""
    V = vec(a.dtype)
    kernel = BWD.kernel(bwd_name(a.dtype, a.mode, a.from_output, 1, shifted=True))
    p = _shifted_bwd_plan(a, kernel)
    smem = bwd_smem(a.dtype, p.threads, p.group, 1)
    if p.path == "subwarp" and (g := rw.short_group(p, a.dtype, 1)):  # the group compiled in, with its occupancy
        kernel = BWD.kernel(bwd_name(a.dtype, a.mode, a.from_output, 1, g, shifted=True))
        p = _shifted_bwd_plan(a, kernel)
        smem = bwd_smem(a.dtype, p.threads, p.group, 1)
    elif p.threads == 1024 and TUNING.stage_shifted_bwd:  # a block row alone on its SM: the next row staged
        kernel, smem = BWD.kernel(bwd_name(a.dtype, a.mode, a.from_output, 1, staged=True, shifted=True)), 2 * 1024 * 16
    gpb = p.threads // p.group if p.group <= 32 else 1
    grid = p.grid
    if grid * gpb < a.rows:  # a group takes several rows: stepped by a multiple of V, all start at the same head
        unit = V // math.gcd(gpb, V)
        grid = grid // unit * unit
    dw_part, db_part = a.partial_rows(b, grid)
    b.launch(kernel, grid, p.threads,
             (*a.inputs(), dw_part, db_part, np.int64(a.rows), np.int64(a.n), a.inv_n, np.int64(p.chunk),
              np.int32(p.group), np.int32(p.packs), np.int32(1), np.int32(0), np.int32(0), None, None, *a.op_args),
             shared_mem=smem)
    return grid, dw_part, db_part, False


def _plan_bwd_rows(b, a: BwdArgs, choice: BwdChoice):
    """The register rows (norm_bwd) on a persistent grid, one partial row a block: compiled for their group where
    aligned and one segment (staged sub-warp groups: stage_short_bwd), the element path otherwise; rows over several
    blocks exchange their sums (one launch, or two where the blocks cannot all be resident)."""
    dtype, packs = a.dtype, bwd_packs(a.dtype, a.n)
    al = rw.row_aligned(a.n, dtype, *a.inputs()[:5])
    # dbias from a column sum of dy instead of the kernel's accumulators (the two-pack half layer form)
    db_by_reduce = (a.db is not None and packs == 2 and dtype in HALF_DTYPES and a.mode == "layer_norm"
                    and TUNING.db_by_reduce)
    maxp, threads = bwd_maxp(dtype, packs), bwd_threads(dtype, packs)

    def planned(stage=False, group=0, full=False):
        """(kernel, plan, dynamic shared bytes): at most 32 KB, no attribute to raise."""
        kernel = BWD.kernel(bwd_name(dtype, a.mode, a.from_output, packs, group, stage, full, no_dbias=db_by_reduce))
        smem = (lambda t: 2 * packs * t * 16) if stage else (lambda t: bwd_smem(dtype, t, packs=packs))
        p = rw.plan(a.rows, a.n, dtype, maxp, threads, current().sm_count, persistent=True,
                    occupancy=rw.occupancy(kernel, smem), min_blocks=bwd_min_blocks(dtype, packs))
        return kernel, p, max(smem(p.threads) if stage else 0, bwd_smem(dtype, p.threads, p.group, packs))

    kernel, p, smem = planned()
    if BWD_GROUP_PACKS.get(dtype) == packs and (g := rw.short_group(p, dtype, al)):
        # planned with its own occupancy (the persistent grid may differ; the group and packs do not)
        full = rw.whole_rows(p, dtype, maxp)
        kernel, p, smem = planned(stage_short_bwd(dtype, a.mode, g, full), g, full)
    sync, slots = rw.exchange_buffers(b, p, dtype)
    nrg = p.grid // p.parts
    dw_part, db_part = a.partial_rows(b, nrg, dbias=not db_by_reduce)
    for phase in rw.phases(p):
        last = phase != 1  # the column partials come from the launch that writes dx
        b.launch(kernel, p.grid, p.threads,
                 (*a.inputs(), dw_part if last else None, db_part if last else None, np.int64(a.rows), np.int64(a.n),
                  a.inv_n, np.int64(p.chunk), np.int32(p.group), np.int32(p.packs), np.int32(p.parts), np.int32(al),
                  np.int32(phase), sync, slots, *a.op_args), shared_mem=smem)
    return nrg, dw_part, db_part, db_by_reduce


PLANNERS = {"ring": _plan_bwd_cluster, "shared": _plan_bwd_cluster, "parts": _plan_bwd_parts,
            "shifted": _plan_bwd_shifted, "rows": _plan_bwd_rows}


# ---- calls --------------------------------------------------------------------------------------------------


def _array_key(kind, a):
    """What a plan depends on of an optional further input (None: absent); an input the checks will refuse gets a
    key of its own (the plan's build raises the error naming it)."""
    if a is None:
        return None
    try:
        return kind.key(a)
    except Exception:  # not an array of this kind: _check_* raises
        return ("unusable", id(a))


def _check_affine(kind, op, weight, bias, mode, dtype, n, device):
    """weight / bias: x's kind, device and dtype, shape (n,), contiguous; rms_norm takes no bias."""
    for name, a in (("weight", weight), ("bias", bias)):
        if a is None:
            continue
        if mode == "rms_norm" and name == "bias":
            raise TypeError(f"{op}: rms_norm takes no bias")
        check_like(kind, a, op, name, device, (dtype,))
        if tuple(a.shape) != (n,):
            raise ValueError(f"{op}: {name} must have shape ({n},) (the last dimension of x); got {tuple(a.shape)}")
        if not kind.contiguous(a):
            raise ValueError(f"{op}: {name} must be contiguous; got strides {kind.strides(a)}")


def _aligns(kind, *arrays):
    """The alignments a plan may assume of the call's arrays: their own (None: absent, 256)."""
    return [256 if a is None else alignment(kind.ptr(a)) for a in arrays]


def check_inplace(op, x):
    """In-place forms need a C-contiguous x (checked before anything is written)."""
    kind = kind_of(x, op)
    if not kind.contiguous(x):
        raise ValueError(f"{op}: x must be C-contiguous to be written in place; got a non-contiguous view of shape "
                         f"{tuple(x.shape)} (use the out-of-place op, or .contiguous() first)")


@dataclass(frozen=True)
class _FwdEntry:
    """A planned forward: copy x first (not C-contiguous), the statistics' shape and dtype and which are made, the
    plan (None: nothing to launch), NaN statistics (rows of nothing), new_stat() (an empty statistic: None when
    none is made)."""
    copy: bool
    stats_shape: tuple
    acc: str
    mean: bool
    rstd: bool
    plan: object
    nan_stats: bool
    new_stat: object = None


def _build_forward(kind, op, x, weight, bias, eps, mode, inplace, save_stats, device) -> _FwdEntry:
    """Validate a forward call and plan it (a miss of PLANS: every check happens here)."""
    if mode not in MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(MODES)}; got {mode!r}")
    dtype = checked_dtype(x, op, "x", FLOAT_DTYPES)
    shape = tuple(x.shape)
    if not shape:
        raise ValueError(f"{op}: x must have at least one dimension; got a 0-d array")
    if inplace:
        check_inplace(op, x)
    n = shape[-1]
    _check_affine(kind, op, weight, bias, mode, dtype, n, device)
    rows = math.prod(shape[:-1])
    contiguous = kind.contiguous(x)
    x_al = alignment(kind.ptr(x)) if contiguous else 256  # a copy is a fresh allocation
    b = PlanBuilder(device, [x_al, x_al if inplace else 256] + _aligns(kind, weight, bias) + [256, 256])
    xb, yb, wb, bb, mb, rb = b.buffers
    want_mean = save_stats and mode == "layer_norm"
    if rows and n:
        plan_forward(b, FwdArgs(xb, yb, wb if weight is not None else None, bb if bias is not None else None,
                                mb if want_mean else None, rb if save_stats else None, rows, n, dtype, mode,
                                float(eps)))
    return _FwdEntry(not contiguous, shape[:-1], ACC[dtype], want_mean, save_stats, b.plan() if b.launches else None,
                     bool(rows) and not n, kind.empty_fn(shape[:-1], ACC[dtype], device) if save_stats else None)


def norm_forward_impl(x, weight=None, bias=None, eps=1e-5, mode="layer_norm", inplace=False, save_stats=True):
    """(y, mean, rstd) through the kernels for either kind of input (no autograd): one plan per (mode, dtypes,
    shapes, strides, alignments, eps, device), replayed. mean is None for rms_norm, both statistics None unless
    save_stats (float32, float64 for float64); with inplace, y is x (C-contiguous), written only after every check
    passed. Rows of no elements give NaN statistics, like torch."""
    op = mode + "_" if inplace else mode
    kind = kind_of(x, op)
    device = kind.device(x)
    if kind.current_device() != device:
        with kind.on_device(device):
            return norm_forward_impl(x, weight, bias, eps, mode, inplace, save_stats)
    ptr = kind.ptr(x)
    key = (op, save_stats, kind.key(x), eps, _array_key(kind, weight), _array_key(kind, bias))
    e = PLANS.get(key)
    if e is None:
        e = PLANS.put(key, _build_forward(kind, op, x, weight, bias, eps, mode, inplace, save_stats, device))
    if e.copy:
        x = kind.as_contiguous(x)
        ptr = kind.ptr(x)
    y = x if inplace else kind.empty_like(x)
    mean = e.new_stat() if e.mean else None
    rstd = e.new_stat() if e.rstd else None
    if e.plan is not None:
        e.plan.run((ptr, kind.ptr(y), 0 if weight is None else kind.ptr(weight), 0 if bias is None else kind.ptr(bias),
                    0 if mean is None else kind.ptr(mean), 0 if rstd is None else kind.ptr(rstd)),
                   kind.stream(device), kind.alloc(device) if e.plan.workspaces else None)
    elif e.nan_stats:  # the mean of nothing, like torch (a fill on the stream: no sync)
        for s in (mean, rstd):
            if s is not None:
                kind.fill(s, float("nan"))
    return y, mean, rstd


@dataclass(frozen=True)
class _BwdEntry:
    """A planned backward: copies of dy / src first (not C-contiguous), the gradients made, the plan (None: nothing
    to launch; dweight / dbias are then zeros)."""
    copy_dy: bool
    copy_src: bool
    n: int
    dtype: str
    want_w: bool
    want_b: bool
    want_mean: bool
    plan: object


def _build_backward(kind, op, dy, src, weight, bias, mean, rstd, mode, from_output, need_dw, need_db,
                    device) -> _BwdEntry:
    """Validate a backward call and plan it (a miss of PLANS: every check happens here)."""
    if mode not in MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(MODES)}; got {mode!r}")
    dtype = checked_dtype(dy, op, "dy", FLOAT_DTYPES)
    if src is None:
        raise TypeError(f"{op}: {'y' if from_output else 'x'} (the forward's {'output' if from_output else 'input'}) "
                        f"is required")
    check_like(kind, src, op, "y" if from_output else "x", device, (dtype,))
    shape = tuple(dy.shape)
    if tuple(src.shape) != shape or not shape:
        raise ValueError(f"{op}: dy has shape {shape}; expected the shape of the forward's "
                         f"{'output' if from_output else 'input'} {tuple(src.shape)} (at least 1-d)")
    n = shape[-1]
    _check_affine(kind, op, weight, bias, mode, dtype, n, device)
    rows = math.prod(shape[:-1])
    acc = ACC[dtype]
    want_mean = mode == "layer_norm" and not from_output
    for name, a, wanted in (("rstd", rstd, True), ("mean", mean, want_mean)):
        if not wanted:
            continue
        if a is None:
            raise TypeError(f"{op}: {name} (saved by the forward) is required")
        check_like(kind, a, op, name, device, (acc,))
        if math.prod(a.shape) != rows or not kind.contiguous(a):
            raise ValueError(f"{op}: {name} must be a contiguous array of {rows} row statistics; got shape "
                             f"{tuple(a.shape)}")
    want_w, want_b = need_dw and weight is not None, need_db and bias is not None
    copy_dy, copy_src = not kind.contiguous(dy), not kind.contiguous(src)
    aligns = [256 if copy_src else alignment(kind.ptr(src)), 256 if copy_dy else alignment(kind.ptr(dy)), 256]
    b = PlanBuilder(device, aligns + _aligns(kind, weight, bias) + [256] * 4)
    sb, dyb, dxb, wb, bb, mb, rb, dwb, dbb = b.buffers
    if rows and n:
        plan_backward(b, BwdArgs(sb, dyb, dxb, wb if weight is not None else None, bb if bias is not None else None,
                                 mb if want_mean else None, rb, dwb if want_w else None, dbb if want_b else None, rows,
                                 n, dtype, mode, bool(from_output)))
    return _BwdEntry(copy_dy, copy_src, n, dtype, want_w, want_b, want_mean, b.plan() if b.launches else None)


def norm_backward_impl(dy, src, weight=None, bias=None, mean=None, rstd=None, mode="layer_norm", from_output=False,
                       need_dw=True, need_db=True):
    """(dx, dweight, dbias) through the kernels (either kind of input, no autograd), fresh arrays (none aliases an
    input). `src` is the forward input x with its saved mean / rstd, or (from_output) the forward output y with rstd:
    the normalised input is then recomputed as (y - bias) / weight, so a weight entry of exactly zero gives NaN in
    that column of dx and dweight. dweight / dbias are None when not wanted or absent."""
    op = f"{mode}_backward"
    kind = kind_of(dy, op, "dy")
    device = kind.device(dy)
    if kind.current_device() != device:
        with kind.on_device(device):
            return norm_backward_impl(dy, src, weight, bias, mean, rstd, mode, from_output, need_dw, need_db)
    key = (op, bool(from_output), bool(need_dw), bool(need_db), kind.key(dy), _array_key(kind, src),
           _array_key(kind, weight), _array_key(kind, bias), _array_key(kind, mean), _array_key(kind, rstd))
    e = PLANS.get(key)
    if e is None:
        e = PLANS.put(key, _build_backward(kind, op, dy, src, weight, bias, mean, rstd, mode, from_output, need_dw,
                                           need_db, device))
    if e.copy_dy:
        dy = kind.as_contiguous(dy)
    if e.copy_src:
        src = kind.as_contiguous(src)
    dx = kind.empty_like(src)
    dw = kind.empty_like(weight) if e.want_w else None  # (n,), contiguous, dy's dtype: as checked
    db = kind.empty_like(bias) if e.want_b else None
    if e.plan is not None:
        e.plan.run((kind.ptr(src), kind.ptr(dy), kind.ptr(dx), 0 if weight is None else kind.ptr(weight),
                    0 if bias is None else kind.ptr(bias), kind.ptr(mean) if e.want_mean else 0, kind.ptr(rstd),
                    0 if dw is None else kind.ptr(dw), 0 if db is None else kind.ptr(db)),
                   kind.stream(device), kind.alloc(device) if e.plan.workspaces else None)
    else:  # no rows or no columns: sums of nothing
        for a in (dw, db):
            if a is not None:
                kind.fill(a, 0)
    return dx, dw, db
