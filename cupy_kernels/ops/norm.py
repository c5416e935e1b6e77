"""Host side of cu_src/norm.cu: layer_norm, rms_norm, their in-place forms and backward."""
from __future__ import annotations

import math

import numpy as np

from .._runtime import (CTYPES, FLOAT_DTYPES, Call, KernelSource, ceil_div, current, is_cupy, is_torch, launch,
                        resident_blocks)
from .._runtime.tma import max_active_clusters
from . import _rowwise as rw
from ._rowwise import next_pow2

SOURCE = KernelSource("norm.cu")
MODES = {"layer_norm": 0, "rms_norm": 1}
# Largest blocks: norm_fwd rw.fwd_threads(dtype) (1024; float64 512), norm_bwd bwd_threads(dtype).
VARIANTS = ("auto", "block", "scalar", "split", "exchange", "counter")
COUNTER_EXCHANGE = {"fwd": False, "bwd": False}  # one-launch long rows: tagged words (False) or counters


def fwd_threads(dtype: str, n: int | None = None) -> int:
    return rw.fwd_threads(dtype, n)


# Half-type backward rows from these lengths take the two-pack form of norm_bwd (512-thread blocks, two
# per SM; it spills accumulators), shorter ones the spill-free one-pack form (1024-thread blocks). Measured
# (H200, us, one-pack staged vs two-pack): layer 8192² bf16 191 vs 215, 1024x32768 bf16 170 vs 156; rms
# 8192² 161 vs 139 (pipelined one-pack: 133-138), 1024x32768 145 vs 114; 32768x1024 fp16 layer 79 vs 118,
# rms 69 vs 69.
TWO_PACK_FROM = {"layer_norm": 8193, "rms_norm": 8193}


def bwd_packs(dtype: str, mode: str, n: int) -> int:
    """Packs of each of x and dy per thread in norm_bwd (its PACKS): 2 for float32 / float64 (8 / 4
    elements), for a half type 1 (8 elements) or, on rows of TWO_PACK_FROM[mode] or more, 2."""
    if rw.ITEMSIZE[dtype] != 2:
        return 2
    return 2 if n >= TWO_PACK_FROM[mode] else 1


def bwd_threads(dtype: str, packs: int = 1) -> int:
    """NormBwdThreads in norm.cu: 1024 for a half type's one-pack form (an 8192-element row in one block),
    512 for its two-pack form and float32 (two resident per SM at 64 registers), 256 for float64."""
    if dtype == "float64":
        return 256
    return 1024 if rw.ITEMSIZE[dtype] == 2 and packs == 1 else 512


def bwd_maxp(dtype: str, packs: int = 1) -> int:
    """The packs a launch of that form plans with: `packs` for a half type, 2 otherwise."""
    return packs if rw.ITEMSIZE[dtype] == 2 else 2


def bwd_smem(dtype: str, threads: int, group: int | None = None, packs: int = 1) -> int:
    """Dynamic shared memory of norm_bwd: where a block holds several groups (group < threads), one
    accumulator slot per thread per column element, to sum the groups' dweight / dbias partials in
    order; none for a block of one group."""
    if group is not None and group >= threads:
        return 0
    return threads * bwd_maxp(dtype, packs) * rw.vec(dtype) * rw.ITEMSIZE[rw.ACC[dtype]]


def fwd_maxp(dtype: str) -> int:
    return rw.fwd_maxp(dtype)


def bwd_min_blocks(dtype: str, packs: int = 1) -> int:
    """Resident norm_bwd blocks per SM guaranteed at its largest block (NormBwdMinBlocks: 1 for a half
    type's 1024-thread one-pack form, else 2); the persistent grid uses the occupancy calculator's
    figure, this only when that cannot be asked."""
    return 1 if bwd_threads(dtype, packs) == 1024 else 2


STAGE_FWD = {"on": True}  # rows of >= 512-thread blocks staged in shared memory (rw.stage_fwd); a probe switch
# Short forward rows that are not whole packs (1 <= n <= max_n) through shared-memory tiles (norm_fwd_tiled, as
# softmax's TILED); a probe switch.
TILED_FWD = {"on": True, "max_n": 128}
FULL_PARTS = {"on": True}  # norm_fwd_parts' FULL instances where every part is whole (rw.full_parts); a probe switch
STAGE_BWD = {"on": True}  # half-type rows of 1024-thread backward blocks staged likewise; a probe switch
# float32 sub-warp forward rows of 8-thread groups (65..128 elements) staged too: H100, same process
# (`benchmarks/runs/issue4-session23/06-*`), 65536x128 layer 22.1 -> 21.5 us, rms 22.0 -> 20.9; groups of 16 and 32
# and the half types measured equal or slower (layer 131072x256 bf16 44.8 -> 48.0). A probe switch.
STAGE_SHORT_FWD = {"on": True, "groups": (8,), "dtypes": ("float32",)}


def _fwd(dtype, mode, stage=0, group=0, full=False, shift=False):
    tail = f", {group}, false, true" if shift else rw.group_token(group, full)
    return f"norm_fwd<{CTYPES[dtype]}, {MODES[mode]}, {rw.stage_token(stage)}{tail}>"


def _fwd_tiled(dtype, mode):
    return f"norm_fwd_tiled<{CTYPES[dtype]}, {MODES[mode]}>"


def _parts(dtype, mode, full=False):
    return f"norm_fwd_parts<{CTYPES[dtype]}, {MODES[mode]}, {rw.TUNING.parts_packs_norm}{', true' if full else ''}>"


def _bwd(dtype, mode, from_output, stage=False, packs=2, db=True, group=0, full=False, shift=False):
    st = "true" if stage else "false"
    tail = (f", true, {group}, false, true" if shift else
            f", {'true' if db else 'false'}{rw.group_token(group, full)}" if group else "" if db else ", false")
    return f"norm_bwd<{CTYPES[dtype]}, {MODES[mode]}, {int(bool(from_output))}, {st}, {packs}{tail}>"


# Backward rows of one segment take norm_bwd instances compiled for their group (GT, as the forward's
# rw.short_group) where the type's form has them: float32's two-pack form (1640 -> 728 SASS instructions, layer
# G 16), a half type's one-pack form (rows below 1024, where norm_bwd_shared starts). dtype -> PACKS.
SHORT_BWD = {"float32": 2, "float16": 1, "bfloat16": 1}
# Sub-warp backward rows with the group's next row staged in shared memory (cp.async) while this one is reduced
# and written (STAGE instances of SHORT_BWD's forms). A probe switch.
STAGE_SHORT_BWD = {"on": True}


def stage_short_bwd(dtype: str, mode: str, group: int, full: bool) -> bool:
    """Whether sub-warp rows of `group` threads take the staged instance. Measured on the H100 (same process,
    `benchmarks/runs/issue4-session23/03-*`, `04-*`): groups of 8 to 32 gain 2-5% (65536x128 f32 layer 35.5 -> 34.4 us,
    rms 34.4 -> 32.9; 131072x192 bf16 rms 58.6 -> 56.0), groups of 4 do not (262144x32 f32); a half type's layer_norm
    is within 1% or slower (131072x256 bf16 69.7 -> 76.5), and so is float32's 32-thread run-time form (65536x200,
    whose from-output instance also spills)."""
    return (STAGE_SHORT_BWD["on"] and group in (8, 16, 32) and (dtype == "float32" or mode == "rms_norm")
            and (full or group < 32 or dtype != "float32"))


# The two-pack half layer_norm backward leaves dbias to a column sum of dy (reduce.cu) rather than keep
# 16 more accumulators per thread in its already spilling registers. A switch for the ladder and tests.
DB_BY_REDUCE = {"on": True}


# The staged one-pack backward with one block per row takes norm_bwd_pipelined: two rows in flight, the next
# row's reduction overlapping this row's dx (a 1024-thread block is alone on its SM). A ladder switch.
PIPELINE_BWD = {"on": True}


def _pipelined(dtype, mode, from_output):
    return f"norm_bwd_pipelined<{CTYPES[dtype]}, {MODES[mode]}, {int(bool(from_output))}>"


# Aligned backward rows of a type in SHARED_BWD["dtypes"] from SHARED_BWD["from"] elements (float32: from
# "from_float32") take norm_bwd_shared: 2 packs of x and dy a thread (CTAs of up to SHARED_BWD["threads"]),
# the dweight / dbias column sums in shared memory rather than registers, one CTA per row, or on compute
# capability 9.0 a cluster of 2, 4 (or 8: cl8_threads below) CTAs whose sums meet in distributed shared memory
# (up to 4 * 2 * 16 / itemsize * threads elements); longer rows keep the register forms.
# Measured against the register forms (H200, us, 1024-thread CTAs): layer 8192² bf16 177.5 -> 132.9,
# 1024x32768 145.0 -> 107.8, 32768x1024 f16 76.8 -> 68.8; rms 118.8 -> 111.5, 110.9 -> 81.2, 68.1 -> 58.8;
# CTAs of up to 512 threads (clusters of 4 at 32768): layer 1024x32768 100.0 -> 97.0, rms 83.0 -> 76.3;
# float32 4096²: layer 61.0 -> 56.3, rms 57.0 -> 54.9 (benchmarks/notes.md). One-CTA rows in CTAs of fewer than
# "stage_threads" load x and dy straight into registers rather than staging the next row (many CTAs an SM
# already overlap rows; less shared memory, more CTAs): 32768x1024 f16 layer 68.1 -> 66.2 us, rms 58.7 -> 58.2.
# Rows that fill every CTA's 2 packs a thread exactly (1024 / 8192 / 32768 half, 4096 / 16384 float32: every
# issue shape) take the FULL instances, with no pack count or bounds test at run time: the loop body of the
# layer bfloat16 cluster of 4 went from 688 to 490 instructions.
# Aligned half-type rows from SHARED_BWD["warps_from"] up to 128 * V elements (float32: "warps_from_float32") take
# the WARPS form: each warp its own rows (up to 4 packs a lane, sums by shuffles alone), staged, in CTAs of
# "warps_threads" that fold their warps' column sums into one partial row at the end (32768x1024: 264 partial rows
# instead of 2112 from 64-thread CTAs).
# Measured against the forms before it (H200, us, with column_sum launched after_previous; staged / unstaged at
# 256 threads): layer 32768x1024 f16 60.9 -> 53.6 / 54.0, 32768x768 bf16 65.7 -> 45.6 / 47.3, 65536x512 f16
# 69.4 -> 60.3 / 62.3; rms 55.5 -> 52.6, 56.3 -> 41.8, 61.6 -> 56.7 (CTAs of 512 threads within 1-3%). float32 rows
# from "warps_from_float32" to 512 too (were norm_bwd's one-row blocks of 64 threads): 65536x512 layer 107.6 -> 100.3,
# 65536x384 83.9 -> 76.8; rms 106.7 -> 99.2, 82.0 -> 76.4; but 131072x256 (a sub-warp group of 32) 103.9 -> 108.8.
# Half-type rows that would take a cluster of 4 CTAs of "threads" take 8 CTAs of "cl8_threads" (four an SM
# instead of two): 1024x32768 bf16 layer 86.1 -> 83.8 us, rms 72.0 -> 70.5; but one-CTA rows in 256-thread CTAs
# (clusters of 2) were slower (8192² bf16 layer 118.6 -> 140.3 us, 4096² f32 53.7 -> 56.2).
# Clusters of 8 load their rows straight into registers ("stage_cl8" off): layer_norm's staged CTA (56 KB of
# dynamic shared memory) fits three an SM, and the GPCs then place 45 clusters (2.7 CTAs an SM, unevenly); unstaged
# (40 KB) four, 62 clusters: 1024x32768 bf16 layer 84.0 -> 81.1 us, rms (62 either way) 70.1 -> 69.1.
# The switches are for the ladder, the probes and the tests.
SHARED_BWD = {"on": True, "from": 1024, "from_float32": 4096, "threads": 512, "stage_threads": 512,
              "dtypes": ("float16", "bfloat16", "float32"), "full": True, "warps_from": 512, "warps_from_float32": 257,
              "warps_threads": 256, "cl8_threads": 256, "stage_cl8": False}
SHARED_CLUSTERS = (1, 2, 4)  # norm_bwd_shared's CL instances at SHARED_BWD["threads"] (and CL 8: cl8_threads)


def _shared(dtype, mode, from_output, cl, stage=True, full=False, warps=False):
    tail = (f", {str(stage).lower()}, {str(full).lower()}, true" if warps else
            f", {str(stage).lower()}, true" if full else "" if stage else ", false")
    return f"norm_bwd_shared<{CTYPES[dtype]}, {MODES[mode]}, {int(bool(from_output))}, {cl}{tail}>"


def shared_plan(n: int, dtype: str, mode: str, cc: int):
    """(cluster CTAs, threads, packs, chunk, dynamic shared bytes, staged, full, warps) of norm_bwd_shared for
    rows of n elements, or None where it does not apply (another type, too short, or too long for this device)."""
    if dtype not in SHARED_BWD["dtypes"]:
        return None
    V = rw.vec(dtype)
    sums = (2 if mode == "layer_norm" else 1) * V // 4  # dweight (and dbias) float4 slots a pack per thread

    def smem(packs, threads, stage):  # the sums, the weight's packs, the next row's x and dy
        return (sums + 1 + 2 * stage) * packs * threads * 16

    if SHARED_BWD["warps_from" if rw.ITEMSIZE[dtype] == 2 else "warps_from_float32"] <= n <= 128 * V:  # WARPS
        threads, packs = SHARED_BWD["warps_threads"], ceil_div(ceil_div(n, V), 32)
        return 1, threads, packs, n, smem(packs, threads, True), True, n == 128 * V, True
    cap = SHARED_BWD["threads"]
    cl = next_pow2(ceil_div(n, cap * 2 * V))
    if cl == 4 and rw.ITEMSIZE[dtype] == 2 and (t8 := SHARED_BWD["cl8_threads"]) and n <= 8 * t8 * 2 * V:
        cap, cl = t8, 8
    start = SHARED_BWD["from_float32" if dtype == "float32" else "from"]
    if n < start or (cl not in SHARED_CLUSTERS and cap == SHARED_BWD["threads"]) or (cl > 1 and cc < 90):
        return None
    chunk = ceil_div(ceil_div(n, cl), V) * V
    P = chunk // V
    threads = min(cap, ceil_div(ceil_div(P, 2), 32) * 32)
    packs = ceil_div(P, threads)
    # one-CTA rows in CTAs below "stage_threads", and clusters of 8 unless "stage_cl8": rows straight into registers
    stage = (cl > 1 and (cl < 8 or SHARED_BWD["stage_cl8"])) or threads >= SHARED_BWD["stage_threads"]
    full = SHARED_BWD["full"] and packs == 2 and chunk == 2 * V * threads and cl * chunk == n
    return cl, threads, packs, chunk, smem(packs, threads, stage), stage, full, False


# Aligned rows that split over a cluster of 2, 4 or 8 CTAs into RING_BWD["min_slots"]-["max_slots"] 16-byte packs a
# CTA (a multiple of 32; the fewest CTAs) take norm_bwd_ring on compute capability 9.0: the rows streamed through a
# ring of shared-memory stages by bulk copies, each CTA's row sums sent to its peers by st.async and awaited `lag` rows
# later, RING_BWD["form"] = (stages, lag). A thread takes the most packs (RING_PACKS) that leave at least
# RING_BWD["min_threads"] threads a CTA: the ring is issue-bound, and the per-row work of a warp (reductions, waits,
# addressing) spreads over more elements. Measured (us, layer / rms from x; benchmarks/notes.md, issue 4, session
# 19), H100: 1024x32768 bf16 85.7 (one pack, session 18) -> 82.6 (32-bit row counters) -> 80.1 (two
# packs) -> 79.6 (four) / 80.3 -> 78.3 -> 76.2 -> 75.2; H200: 81.0 -> 71.1 -> 65.8 -> 65.2 / 71.9 -> 64.3 -> 60.5 ->
# 60.8; 4096x24576 bf16 (768 packs a CTA), H200: 187.2 (one) -> 174.4 (two) vs 182.5 (four: 192 threads). One-CTA
# rows stay with norm_bwd_shared (the ring on them: 8192² bf16 rms 139.6 -> 146.7, 4096² f32 70.2 -> 72.6, H100,
# session 18); clusters of 8 at 32768 were slower (H200 66.7 / 63.2 us with two packs), and so were three stages
# with a lag of 1 (two CTAs an SM: ~100 us). RING_BWD["packs"] forces a count (the probes).
RING_BWD = {"on": True, "form": (6, 2), "packs": None, "min_slots": 512, "max_slots": 1024, "min_threads": 256,
            "dtypes": ("float16", "bfloat16", "float32")}
RING_CLUSTERS, RING_FORMS, RING_PACKS = (2, 4, 8), ((6, 2),), (1, 2, 4)


def _ring(dtype, mode, from_output, cl, form, packs):
    return (f"norm_bwd_ring<{CTYPES[dtype]}, {MODES[mode]}, {int(bool(from_output))}, {cl}, {form[0]}, {form[1]}, "
            f"{packs}>")


def ring_plan(n: int, dtype: str, cc: int):
    """(cluster CTAs, threads, (stages, lag), packs a thread, dynamic shared bytes) of norm_bwd_ring for rows of n
    elements, or None where it does not apply (another type, a row one CTA holds, a length it does not split into
    whole packs, before compute capability 9.0)."""
    V = rw.vec(dtype)
    if not RING_BWD["on"] or cc < 90 or dtype not in RING_BWD["dtypes"] or n % V or n // V <= RING_BWD["max_slots"]:
        return None  # (rows that fit one CTA: norm_bwd_shared)
    form = RING_BWD["form"]
    for cl in RING_CLUSTERS:
        slots, rest = divmod(n // V, cl)  # packs a CTA
        if rest or slots % 32 or not RING_BWD["min_slots"] <= slots <= RING_BWD["max_slots"]:
            continue
        forced = RING_BWD["packs"]
        for pk in (forced,) if forced else sorted(RING_PACKS, reverse=True):
            threads, rest = divmod(slots, pk)
            if not rest and threads % 32 == 0 and (forced or threads >= RING_BWD["min_threads"]):
                return cl, threads, form, pk, 2 * form[0] * slots * 16
        return None
    return None


def _bwd_parts(dtype, mode, from_output):
    return f"norm_bwd_parts<{CTYPES[dtype]}, {MODES[mode]}, {int(bool(from_output))}>"


# norm_bwd_parts' blocks (RowPacks packs of x and dy a thread, in shared memory): two per SM at 256 threads
# measured 2% faster than one of 512 (256x262144 f32: layer 237.1 -> 231.6 us, rms 220.5 -> 217.6).
PARTS_BWD_THREADS = 256


def _colsum(dtype, cw=1, ys=32, tw=32):
    return f"column_sum<{CTYPES[dtype]}, {cw}, {ys}{'' if tw == 32 else f', {tw}'}>"


COLUMN_SUM_Y = (1, 8, 32)  # column_sum's Y instances
# column_sum launched as a programmatic dependent of the kernel writing the partial rows (compute capability 9.0):
# its blocks start as that kernel ends instead of after a launch gap. A switch for the probes.
COLUMN_SUM_AFTER = {"on": True}


def column_sum_shape(r: int, n: int, sm_count: int) -> tuple[int, int, int]:
    """(Y, CW, TW) of column_sum over r partial rows of n columns: Y threads down the rows, at least about 8
    rows a thread below 32 (4 partial rows of 262144 columns in 32 x 32 blocks left 28 of 32 threads idle:
    ~90 us), four columns a thread where that still leaves a block per SM and tensor, and warps of 8 columns
    (4 rows a load) where 32-column tiles would leave three quarters of the SMs idle. Measured alone
    (scripts/probe_column_sum.py, H200, us): 2112 x 1024 TW 8 9.2 vs 10.1; 62 x 32768 CW 4 8.9 vs 11.6; but
    264 x 4096 TW 8 12.0 vs 6.4; 65536x128 backward read ~1 us slower with TW 8 in a bench (not taken below 1024)."""
    ys = next(y for y in COLUMN_SUM_Y if y == COLUMN_SUM_Y[-1] or r <= 16 * y)
    cw = 4 if n % 4 == 0 and n >= sm_count * 32 * 4 else 1
    tw = 8 if ys == 32 and cw == 1 and 1024 <= n <= 32 * (sm_count // 4) else 32  # measured at 1024 only
    return ys, cw, tw


# Backward rows that are not whole packs of aligned arrays take shifted rows (norm_bwd's SHIFT, the one-pack form) for
# the half types only. H100 (`benchmarks/runs/issue4-session25/04-*`, us, shifted vs the element path): bf16 layer /
# rms 167772x100 65.4 / 58.8 vs 77.6 / 71.8, 16760x1001 58.1 / 51.5 vs 86.4 / 82.6, 4095x4097 108.2 / 93.2 vs 158.0 /
# 146.0, 508400x33 equal / 84.7 vs 89.1; but float32 (one pack a thread, where its element path holds two) 2396745x7
# 154.2 / 146.0 vs 129.0 / 101.2, 508400x33 141.1 / 130.4 vs 113.8 / 90.8, 16760x1001 equal / 89.2 vs 79.2.
SHIFTED_BWD_DTYPES = ("float16", "bfloat16")


SOURCE.declare([_fwd(t, m, shift=sh) for t in FLOAT_DTYPES for m in MODES for sh in (False, True)]
               + [_fwd_tiled(t, m) for t in FLOAT_DTYPES for m in MODES]
               + [_fwd(t, m, group=g, shift=True) for t in rw.SHORT_DTYPES for m in MODES for g in rw.SHORT_GROUPS]
               + [_fwd(t, m, True) for t in rw.STAGE_FWD_DTYPES for m in MODES]
               + [_fwd(t, m, group=g) for t in rw.SHORT_DTYPES for m in MODES for g in rw.SHORT_GROUPS]
               + [_fwd(t, m, st, group=rw.ROW_BLOCK, full=f) for t in rw.SHORT_DTYPES for m in MODES for st in (0, 1)
                  for f in (False, True) if not f or rw.has_full(t, rw.ROW_BLOCK, st)]
               + [_fwd(t, m, group=g, full=True) for t in rw.SHORT_DTYPES for m in MODES for g in rw.SHORT_GROUPS]
               + [_fwd(t, m, 1, group=g, full=f) for t in STAGE_SHORT_FWD["dtypes"] for m in MODES
                  for g in STAGE_SHORT_FWD["groups"] for f in (False, True)]
               + [_parts(t, m, f) for t in rw.STAGE_FWD_DTYPES for m in MODES for f in (False, True)] + [rw.ZERO_WORDS]
               + [_bwd(t, m, f) for t in FLOAT_DTYPES for m in MODES for f in (0, 1)]
               + [_bwd(t, m, f, packs=1, group=g, shift=True) for t in SHIFTED_BWD_DTYPES for m in MODES for f in (0, 1)
                  for g in (0,) + rw.SHORT_GROUPS]
               + [_bwd(t, m, f, True, packs=1, shift=True) for t in SHIFTED_BWD_DTYPES for m in MODES for f in (0, 1)]
               + [_bwd(t, m, f, packs=k, group=g, full=fl) for t, k in SHORT_BWD.items() for m in MODES for f in (0, 1)
                  for g in rw.SHORT_GROUPS + (rw.ROW_BLOCK,) for fl in (False, True)]
               + [_bwd(t, m, f, True, k, group=g, full=fl) for t, k in SHORT_BWD.items() for m in MODES for f in (0, 1)
                  for g in rw.SHORT_GROUPS for fl in (False, True) if stage_short_bwd(t, m, g, fl)]
               + [_bwd(t, m, f, st, 1) for t in ("float16", "bfloat16") for m in MODES for f in (0, 1)
                  for st in (False, True)]
               + [_bwd(t, "layer_norm", f, False, 2, db=False) for t in ("float16", "bfloat16") for f in (0, 1)]
               + [_pipelined(t, m, f) for t in ("float16", "bfloat16") for m in MODES for f in (0, 1)]
               + [_shared(t, m, f, cl) for t in ("float16", "bfloat16", "float32") for m in MODES for f in (0, 1)
                  for cl in SHARED_CLUSTERS]
               + [_shared(t, m, f, 8, st, full) for t in ("float16", "bfloat16") for m in MODES for f in (0, 1)
                  for full in (False, True) for st in (False, True)]
               + [_shared(t, m, f, 1, False) for t in ("float16", "bfloat16", "float32") for m in MODES for f in (0, 1)]
               + [_shared(t, m, f, cl, st, True) for t in ("float16", "bfloat16", "float32") for m in MODES
                  for f in (0, 1) for cl, st in ((1, False),) + tuple((c, True) for c in SHARED_CLUSTERS)]
               + [_shared(t, m, f, 1, True, full, True) for t in ("float16", "bfloat16", "float32") for m in MODES
                  for f in (0, 1) for full in (False, True)]
               + [_ring(t, m, f, cl, form, pk) for t in RING_BWD["dtypes"] for m in MODES for f in (0, 1)
                  for cl in RING_CLUSTERS for form in RING_FORMS for pk in RING_PACKS]
               + [_bwd_parts(t, m, f) for t in rw.STAGE_FWD_DTYPES for m in MODES for f in (0, 1)]
               + [_colsum(t, cw, y) for t in FLOAT_DTYPES for cw in (1, 4) for y in COLUMN_SUM_Y]
               + [_colsum(t, 1, 32, 8) for t in FLOAT_DTYPES])


def _detach(x):
    return x.detach() if is_torch(x) else x


def _contiguous(x):
    return x.is_contiguous() if is_torch(x) else x.flags.c_contiguous


def _affine(call, op, x, weight, bias, mode):
    """weight / bias as CuPy arrays (or None), checked: dtype of x, shape (n,), contiguous."""
    dtype = str(x.dtype)
    n = x.shape[-1] if x.ndim else 1
    out = []
    for name, a in (("weight", weight), ("bias", bias)):
        if a is None:
            out.append(None)
            continue
        if mode == "rms_norm" and name == "bias":
            raise TypeError(f"{op}: rms_norm takes no bias")
        ac = call.arg(_detach(a), name, dtypes=(dtype,))
        if tuple(ac.shape) != (n,):
            raise ValueError(f"{op}: {name} must have shape ({n},) (the last dimension of x); got {tuple(ac.shape)}")
        if not ac.flags.c_contiguous:
            raise ValueError(f"{op}: {name} must be contiguous; got strides {ac.strides}")
        out.append(ac)
    return out


def check_inplace(op, x):
    if (is_torch(x) or is_cupy(x)) and not _contiguous(x):
        raise ValueError(f"{op}: x must be C-contiguous to be written in place; got a non-contiguous view of shape "
                         f"{tuple(x.shape)} (use the out-of-place op, or .contiguous() first)")


def norm_forward_impl(x, weight=None, bias=None, eps=1e-5, mode="layer_norm", inplace=False, save_stats=True,
                      variant="auto"):
    """(y, mean, rstd) through the kernels for either kind of input (no autograd). mean is None for
    rms_norm, both stats None unless save_stats; with inplace, y is x (C-contiguous), written only
    after every check passed."""
    op = mode + ("_" if inplace else "")
    if variant not in VARIANTS:
        raise ValueError(f"{op}: variant must be one of {VARIANTS}; got {variant!r}")
    if inplace:
        check_inplace(op, x)
    with Call(op, x) as call:
        xc = call.arg(_detach(x), "x", dtypes=FLOAT_DTYPES)
        if xc.ndim == 0:
            raise ValueError(f"{op}: x must have at least one dimension; got a 0-d array")
        w, b = _affine(call, op, xc, weight, bias, mode)
        dtype = str(xc.dtype)
        acc = rw.ACC[dtype]
        n = xc.shape[-1]
        rows = xc.size // n if n else 0
        if not inplace and not xc.flags.c_contiguous:
            tmp = call.empty(xc.shape, dtype)
            tmp[...] = xc
            xc = tmp
        x2 = xc.reshape(rows, n)
        y = xc if inplace else call.empty(xc.shape, dtype)
        y2 = y.reshape(rows, n)
        mean = call.empty(xc.shape[:-1], acc) if save_stats and mode == "layer_norm" else None
        rstd = call.empty(xc.shape[:-1], acc) if save_stats else None
        if rows and n:
            args = dict(force=variant if variant == "block" else None,
                        long_rows="exchange" if variant == "counter" else
                        variant if variant in ("split", "exchange") else None)
            al = 0 if variant == "scalar" else rw.aligned(n, dtype, x2, y2, w, b)
            if not (_forward_tiled(x2, y2, w, b, mean, rstd, rows, n, dtype, mode, eps, al, variant)
                    or _forward_shifted(x2, y2, w, b, mean, rstd, rows, n, dtype, mode, eps, al, variant)):
                _forward(call, x2, y2, w, b, mean, rstd, rows, n, dtype, mode, eps, al, variant, args)
        elif rows and rstd is not None:  # n == 0: mean of nothing, like torch
            rstd.fill(np.nan)
            if mean is not None:
                mean.fill(np.nan)
        res = (x if inplace else call.result(y), None if mean is None else call.result(mean),
               None if rstd is None else call.result(rstd))
        return res


def _forward_tiled(x2, y2, w, b, mean, rstd, rows, n, dtype, mode, eps, al, variant) -> bool:
    """The forward on short rows through shared-memory tiles where it applies (rw.tiled_rows; x and y aligned: w and b
    are read by element). Whether it launched."""
    if not rw.tiled_rows(TILED_FWD, n, al, variant, x2, y2):
        return False
    grid, threads, k, smem = rw.tiled_plan(rows, n, dtype, 1)
    acc = rw.ACC_SCALAR[rw.ACC[dtype]]
    SOURCE.kernel(_fwd_tiled(dtype, mode), smem)(
        (grid,), (threads,), (x2, y2, rw.ptr(w), rw.ptr(b), rw.ptr(mean), rw.ptr(rstd), np.int64(rows), np.int32(n),
                              np.int32(k), acc(eps), acc(1.0 / n)), shared_mem=smem)
    return True


def _forward_shifted(x2, y2, w, b, mean, rstd, rows, n, dtype, mode, eps, al, variant) -> bool:
    """The forward on shifted rows (rows.cuh: norm_fwd's SHIFT instances) where they apply: rows of a pack or more
    that are not whole packs of 16-byte aligned arrays and that one block holds (planned for n + V - 1 elements).
    Shorter rows, skewed bases and longer rows keep the element path. Whether it launched."""
    V = rw.vec(dtype)
    if not rw.shifted_rows(n, dtype, al, variant, x2, y2, w, b):
        return False
    p = rw.plan(rows, n + V - 1, dtype, fwd_maxp(dtype), fwd_threads(dtype, n + V - 1), current().sm_count)
    if p.parts > 1:
        return False
    g = rw.short_group(p, dtype, 1, variant) if p.path == "subwarp" else 0  # the group compiled in, if any
    kernel = SOURCE.kernel(_fwd(dtype, mode, group=g, shift=True))
    smem = 16 * (p.threads // p.group) if p.group < 32 else 0  # store_shifted's slots
    acc = rw.ACC_SCALAR[rw.ACC[dtype]]
    kernel((p.grid,), (p.threads,),
           (x2, y2, rw.ptr(w), rw.ptr(b), rw.ptr(mean), rw.ptr(rstd), np.int64(rows), np.int64(n), np.int64(p.chunk),
            np.int32(p.group), np.int32(p.packs), np.int32(1), np.int32(0), acc(eps), acc(1.0 / n), np.int32(0),
            np.uint64(0), np.uint64(0)), shared_mem=smem)
    return True


def _forward(call, x2, y2, w, b, mean, rstd, rows, n, dtype, mode, eps, al, variant, args):
    """The forward on aligned rows and the element path."""
    name = _fwd(dtype, mode)
    kernel = SOURCE.kernel(name)
    p = rw.plan(rows, n, dtype, fwd_maxp(dtype), fwd_threads(dtype, n), current().sm_count,
                occupancy=rw.occupancy(kernel, name), **args)
    acc = rw.ACC[dtype]
    pp = variant == "auto" and rw.pipelined_plan(
        SOURCE, _parts(dtype, mode), rows, n, dtype, al, rw.TUNING.parts_packs_norm, p.threads,
        full_name=_parts(dtype, mode, True) if FULL_PARTS["on"] else None)
    if pp:
        kernel, p, smem = pp
        rw.launch_pipelined(call, SOURCE, kernel, p,
                            (x2, y2, rw.ptr(w), rw.ptr(b), rw.ptr(mean), rw.ptr(rstd), np.int64(rows),
                             np.int64(n), np.int64(p.chunk), np.int32(p.packs), np.int32(p.parts),
                             np.float32(eps), np.float32(1.0 / n)), smem, k=2)
    else:
        smem = 0
        # layer_norm over several blocks per row measured 2% slower staged (256x262144 float32)
        stage = rw.stage_fwd(p, dtype, al) if STAGE_FWD["on"] and (mode == "rms_norm" or p.parts == 1) else 0
        stage = stage or int(rw.stage_short(STAGE_SHORT_FWD, p, dtype, al, variant))
        g = rw.short_group(p, dtype, al, variant, staged=bool(stage))
        if stage:
            name = _fwd(dtype, mode, stage=stage, group=g)
            kernel = SOURCE.kernel(name)
            p, smem = rw.staged_plan(kernel, name, rows, n, dtype, fwd_maxp(dtype), fwd_threads(dtype, n),
                                     tensors=stage, **args)
        if g:  # FULL or not, the same launch bounds: the plan stands
            name = _fwd(dtype, mode, stage, g, rw.full_rows(p, dtype, fwd_maxp(dtype), g, stage))
            kernel = SOURCE.kernel(name, smem)
        counter = variant == "counter" or (variant == "auto" and COUNTER_EXCHANGE["fwd"])
        sync, slots = rw.exchange_buffers(call, p, dtype, counter=counter)
        for phase in rw.phases(p, counter):
            kernel((p.grid,), (p.threads,),
                   (x2, y2, rw.ptr(w), rw.ptr(b), rw.ptr(mean), rw.ptr(rstd), np.int64(rows), np.int64(n),
                    np.int64(p.chunk), np.int32(p.group), np.int32(p.packs), np.int32(p.parts), np.int32(al),
                    rw.ACC_SCALAR[acc](eps), rw.ACC_SCALAR[acc](1.0 / n), np.int32(phase), sync, slots),
                   shared_mem=smem)


def norm_backward_impl(dy, src, weight=None, bias=None, mean=None, rstd=None, mode="layer_norm", from_output=False,
                       need_dw=True, need_db=True, variant="auto"):
    """(dx, dweight, dbias) through the kernels (either kind of input, no autograd). `src` is the forward
    input x with its saved mean / rstd, or (from_output) the forward output y with rstd: the normalised
    input is then recomputed as (y - bias) / weight, so weight must have no zero entry (not checked
    here: torch_ops checks it before the in-place forward). dweight / dbias are None when not wanted
    or absent."""
    op = f"{mode}_backward"
    with Call(op, dy, "dy") as call:
        dyc = call.arg(_detach(dy), "dy", dtypes=FLOAT_DTYPES)
        dtype = str(dyc.dtype)
        sc = call.arg(_detach(src), "y" if from_output else "x", dtypes=(dtype,))
        if tuple(sc.shape) != tuple(dyc.shape) or dyc.ndim == 0:
            raise ValueError(f"{op}: dy has shape {tuple(dyc.shape)}; expected the shape of the forward's "
                             f"{'output' if from_output else 'input'} {tuple(sc.shape)} (at least 1-d)")
        w, b = _affine(call, op, sc, weight, bias, mode)
        acc = rw.ACC[dtype]
        n = sc.shape[-1]
        rows = sc.size // n if n else 0
        stats = {}
        for name, a, wanted in (("rstd", rstd, True), ("mean", mean, mode == "layer_norm" and not from_output)):
            if not wanted:
                continue
            if a is None:
                raise TypeError(f"{op}: {name} (saved by the forward) is required")
            ac = call.arg(_detach(a), name, dtypes=(acc,))
            if ac.size != rows or not ac.flags.c_contiguous:
                raise ValueError(f"{op}: {name} must be a contiguous array of {rows} row statistics; got shape "
                                 f"{tuple(ac.shape)}")
            stats[name] = ac
        d2, s2 = (a if a.flags.c_contiguous else _copy(call, a, dtype) for a in (dyc, sc))
        d2, s2 = d2.reshape(rows, n), s2.reshape(rows, n)
        dx = call.empty(sc.shape, dtype)
        dx2 = dx.reshape(rows, n)
        want_w = need_dw and w is not None
        want_b = need_db and b is not None
        dw = call.empty((n,), dtype) if want_w else None
        db = call.empty((n,), dtype) if want_b else None
        inv_n = rw.ACC_SCALAR[acc](1.0 / n) if n else None  # c1 / n, c2 / n as products: no IEEE division a row
        al = 0 if variant == "scalar" or not n else rw.aligned(n, dtype, s2, d2, dx2, w, b)
        ring = rows and al and variant == "auto" and ring_plan(n, dtype, current().cc)
        shared = (rows and al and variant == "auto" and not ring and SHARED_BWD["on"]
                  and shared_plan(n, dtype, mode, current().cc))
        pipe = (rows and variant == "auto" and not shared and not ring
                and rw.pipelined_plan(SOURCE, _bwd_parts(dtype, mode, from_output), rows, n, dtype, al,
                                      rw.maxp(dtype), PARTS_BWD_THREADS, inputs=2))
        if pipe:  # long rows over several blocks, pipelined
            kernel, p, smem = pipe
            db_by_reduce, nrg = False, p.grid // p.parts
            dw_part = call.empty((nrg, n), acc) if want_w else None
            db_part = call.empty((nrg, n), acc) if want_b else None
            rw.launch_pipelined(call, SOURCE, kernel, p,
                                (s2, d2, dx2, rw.ptr(w), rw.ptr(b), rw.ptr(stats.get("mean")), stats["rstd"],
                                 rw.ptr(dw_part), rw.ptr(db_part), np.int64(rows), np.int64(n), inv_n,
                                 np.int64(p.chunk), np.int32(p.packs), np.int32(p.parts)), smem, k=2)
        elif ring or shared:  # a CTA or a cluster a row, one partial row per row group
            if ring:
                cl, threads, form, pk, smem = ring
                name, extra, warps = _ring(dtype, mode, from_output, cl, form, pk), (), False
            else:
                cl, threads, spacks, chunk, smem, stage, full, warps = shared
                name = _shared(dtype, mode, from_output, cl, stage, full, warps)
                extra = (np.int64(chunk), np.int32(spacks))
            kernel = SOURCE.kernel(name, smem)
            resident = (resident_blocks(kernel, threads, smem) if cl == 1 else
                        max_active_clusters(kernel, threads, smem, cl))
            groups = min(ceil_div(rows, threads // 32) if warps else rows, resident)  # warp rows: a row a warp
            db_by_reduce, nrg = False, groups
            dw_part = call.empty((nrg, n), acc) if want_w else None
            db_part = call.empty((nrg, n), acc) if want_b else None
            launch(kernel, cl * groups, threads,
                   (s2, d2, dx2, rw.ptr(w), rw.ptr(b), rw.ptr(stats.get("mean")), stats["rstd"], rw.ptr(dw_part),
                    rw.ptr(db_part), np.int64(rows), np.int64(n), inv_n) + extra, shared_mem=smem, cluster=cl)
        elif rows and n and (sh := _backward_shifted(call, s2, d2, dx2, w, b, stats, rows, n, dtype, mode, from_output,
                                                     want_w, want_b, al, variant)):
            db_by_reduce, nrg, dw_part, db_part = False, *sh
        elif rows and n:
            packs = bwd_packs(dtype, mode, n)
            args = dict(force=variant if variant == "block" else None, min_blocks=bwd_min_blocks(dtype, packs),
                        long_rows="exchange" if variant == "counter" else
                        variant if variant in ("split", "exchange") else None)

            # dbias from a column sum of dy instead of the kernel's accumulators (two-pack half form)
            db_by_reduce = (want_b and packs == 2 and rw.ITEMSIZE[dtype] == 2 and mode == "layer_norm"
                            and DB_BY_REDUCE["on"])

            def planned(stage, group=0, full=False):
                """(kernel, plan, dynamic shared bytes): at most 32 KB, no attribute to raise."""
                name = _bwd(dtype, mode, from_output, stage, packs, db=not db_by_reduce, group=group, full=full)
                kernel = SOURCE.kernel(name)
                smem = ((lambda t: 2 * packs * t * 16) if stage  # the next row's two inputs
                        else (lambda t: bwd_smem(dtype, t, packs=packs)))
                p = rw.plan(rows, n, dtype, bwd_maxp(dtype, packs), bwd_threads(dtype, packs),
                            current().sm_count, persistent=True, occupancy=rw.occupancy(kernel, name, smem), **args)
                return kernel, p, max(smem(p.threads) if stage else 0, bwd_smem(dtype, p.threads, p.group, packs))

            kernel, p, smem = planned(False)
            if STAGE_BWD["on"] and al and p.path != "subwarp" and p.threads == 1024:
                kernel, p, smem = planned(True)  # a block alone on its SM: the next row staged
            elif SHORT_BWD.get(dtype) == packs and (g := rw.short_group(p, dtype, al, variant)):
                # FULL rows as the forwards' (the plan's group and packs do not depend on the kernel's occupancy);
                # planned with its own occupancy: the persistent grid may differ
                full = rw.FULL_ROWS["on"] and rw.whole_rows(p, dtype, bwd_maxp(dtype, packs))
                kernel, p, smem = planned(stage_short_bwd(dtype, mode, g, full), g, full)
            counter = variant == "counter" or (variant == "auto" and COUNTER_EXCHANGE["bwd"])
            sync, slots = rw.exchange_buffers(call, p, dtype, counter=counter)
            nrg = p.grid // p.parts
            dw_part = call.empty((nrg, n), acc) if want_w else None
            db_part = call.empty((nrg, n), acc) if want_b and not db_by_reduce else None
            pipelined = PIPELINE_BWD["on"] and smem and p.threads == 1024 and p.group == p.threads and p.parts == 1
            if pipelined:  # same plan (a resident grid of one-row blocks) and staging as the staged norm_bwd
                SOURCE.kernel(_pipelined(dtype, mode, from_output))(
                    (p.grid,), (p.threads,),
                    (s2, d2, dx2, rw.ptr(w), rw.ptr(b), rw.ptr(stats.get("mean")), stats["rstd"], rw.ptr(dw_part),
                     rw.ptr(db_part), np.int64(rows), np.int64(n), inv_n, np.int32(p.packs)), shared_mem=smem)
            for phase in () if pipelined else rw.phases(p, counter):
                last = phase != 1  # the column partials come from the launch that writes dx
                kernel((p.grid,), (p.threads,),
                       (s2, d2, dx2, rw.ptr(w), rw.ptr(b), rw.ptr(stats.get("mean")), stats["rstd"],
                        rw.ptr(dw_part if last else None), rw.ptr(db_part if last else None), np.int64(rows),
                        np.int64(n), inv_n, np.int64(p.chunk), np.int32(p.group), np.int32(p.packs), np.int32(p.parts),
                        np.int32(al), np.int32(phase), sync, slots),
                       shared_mem=smem)
            if db_by_reduce:
                from .reduce import reduce_impl

                reduce_impl("sum", d2, axis=0, out=db)  # float sums in a fixed order: deterministic
        if rows and n:
            if want_w or (want_b and not db_by_reduce):
                ys, cw, tw = column_sum_shape(nrg, n, current().sm_count)
                launch(SOURCE.kernel(_colsum(dtype, cw, ys, tw)), (ceil_div(n, tw * cw), 2), (32, ys),
                       (rw.ptr(dw_part) if want_w else rw.ptr(db_part), rw.ptr(db_part) if want_w else np.uint64(0),
                        rw.ptr(dw) if want_w else rw.ptr(db), rw.ptr(db) if want_w else np.uint64(0),
                        np.int64(nrg), np.int64(n)), after_previous=COLUMN_SUM_AFTER["on"] and current().cc >= 90)
        else:
            for a in (dw, db):
                if a is not None:
                    a.fill(0)
        return tuple(None if a is None else call.result(a) for a in (dx, dw, db))


def _backward_shifted(call, s2, d2, dx2, w, b, stats, rows, n, dtype, mode, from_output, want_w, want_b, al, variant):
    """The backward on shifted rows (norm_bwd's SHIFT instances) where they apply, as _forward_shifted: launched, its
    (partial rows, dweight partials, dbias partials); else None."""
    V = rw.vec(dtype)
    if not (dtype in SHIFTED_BWD_DTYPES and rw.shifted_rows(n, dtype, al, variant, s2, d2, dx2, w, b)):
        return None
    packs = 1

    def planned(group=0):
        name = _bwd(dtype, mode, from_output, packs=packs, group=group, shift=True)
        kernel = SOURCE.kernel(name)
        smem = lambda t: bwd_smem(dtype, t, packs=packs)  # noqa: E731  (the column sums by group, the slots)
        return kernel, rw.plan(rows, n + V - 1, dtype, bwd_maxp(dtype, packs), bwd_threads(dtype, packs),
                               current().sm_count, persistent=True, occupancy=rw.occupancy(kernel, name, smem),
                               min_blocks=bwd_min_blocks(dtype, packs))

    if rw.plan(rows, n + V - 1, dtype, bwd_maxp(dtype, packs), bwd_threads(dtype, packs), current().sm_count).parts > 1:
        return None
    kernel, p = planned()
    smem = None
    if p.path == "subwarp" and dtype in SHORT_BWD and (g := rw.short_group(p, dtype, 1, variant)):
        kernel, p = planned(g)  # the group compiled in, with its own occupancy
    elif p.threads == 1024 and STAGE_BWD["on"]:  # a block row alone on its SM: the next row staged, as aligned rows
        kernel, smem = SOURCE.kernel(_bwd(dtype, mode, from_output, True, packs=1, shift=True)), 2 * p.threads * 16
    smem = bwd_smem(dtype, p.threads, p.group, packs) if smem is None else smem
    gpb = p.threads // p.group if p.group <= 32 else 1
    grid = p.grid
    if grid * gpb < rows:  # a group takes several rows: stepped by a multiple of V, all start at the same head
        unit = V // math.gcd(gpb, V)
        grid = grid // unit * unit
    dw_part = call.empty((grid, n), rw.ACC[dtype]) if want_w else None
    db_part = call.empty((grid, n), rw.ACC[dtype]) if want_b else None
    inv_n = rw.ACC_SCALAR[rw.ACC[dtype]](1.0 / n)
    kernel((grid,), (p.threads,),
           (s2, d2, dx2, rw.ptr(w), rw.ptr(b), rw.ptr(stats.get("mean")), stats["rstd"], rw.ptr(dw_part),
            rw.ptr(db_part), np.int64(rows), np.int64(n), inv_n, np.int64(p.chunk), np.int32(p.group),
            np.int32(p.packs), np.int32(1), np.int32(0), np.int32(0), np.uint64(0), np.uint64(0)),
           shared_mem=smem)
    return grid, dw_part, db_part


def _copy(call, a, dtype):
    out = call.empty(a.shape, dtype)
    out[...] = a
    return out
