"""Host side shared by the row-wise kernels of softmax.cu and norm.cu (cu_src/common/rows.cuh):
how a row length becomes a launch (group size, packs per thread, parts per row, grid)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._runtime import ceil_div

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
ACC = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
ACC_SCALAR = {"float32": np.float32, "float64": np.float64}
SUBWARP_BLOCK = 128  # threads per block on the sub-warp path (one-pass launches: 4-6% faster than 256 on
                     # 32768x1024 half, equal on 65536x128 f32; benchmarks/notes.md, issue 4)
# Persistent grids (norm backward): one partial row per block, so larger blocks leave fewer for column_sum; capped
# at the kernel's largest block. 512 against 256 (H200, us, float32 layer / rms bwd): 65536x128 30.2 -> 30.0 /
# 29.5 -> 28.8, 65536x256 54.2 -> 54.0 / 52.8 -> 52.4, 131072x64 30.4 -> 30.4 / 29.6 -> 29.1; 128 slower on each.
PERSISTENT_SUBWARP_BLOCK = 512
TARGET_PACKS = 4     # 16-byte packs per thread we aim for: 64 B in flight per thread per tensor


def vec(dtype: str) -> int:
    return 16 // ITEMSIZE[dtype]


def maxp(dtype: str) -> int:
    """Packs per thread per tensor (RowPacks in rows.cuh): 16 elements, 4 for float64."""
    return 4 if vec(dtype) == 4 else 2


def fwd_maxp(dtype: str) -> int:
    """Packs per thread of the forward kernels (FwdPacks in rows.cuh): one tensor, 4 packs (2 for float64)."""
    return 2 if dtype == "float64" else 4


def min_blocks_per_sm(dtype: str) -> int:
    """Resident blocks per SM the kernels' __launch_bounds__ guarantee (RowMinBlocks in rows.cuh)."""
    return 1 if dtype == "float64" else 2


def fwd_threads(dtype: str, n: int | None = None) -> int:
    """Largest block of the forward kernels (FwdThreads in rows.cuh: __launch_bounds__(1024, 1) at 64
    registers; float64 512 at 128). With a row length n: 1024 only where it holds the row in one block
    that 512 threads could not (no exchange between blocks); rows longer than that split over
    512-thread blocks, two per SM (measured faster than 1024-thread parts: 256x262144 float32)."""
    if dtype == "float64":
        return 512
    if n is None:
        return 1024
    P = -(-n // vec(dtype))
    return 1024 if 512 * fwd_maxp(dtype) < P <= 1024 * fwd_maxp(dtype) else 512


MAX_THREADS_PER_SM = 2048  # sm_80 / sm_90
# A probe switch: sub-warp grids capped at this many blocks an SM, each block looping over rows. Session 7 capped
# layer_norm's forward at 32 (the run-time-group kernel's set-up paid once for several rows); with the compile-time
# groups (GT) the cap measured slower (32768x1024 f16 35.0-35.5 -> 34.8 us), so nothing is capped (notes.md).
SUBWARP_GRID = {"per_sm": None}
MAX_EXCHANGE_PARTS = 256   # rows.cuh


def next_pow2(v: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(v, 1))))


# Rows longer than one block's registers: "split" = two launches (partial statistics, then apply; one
# more read of the input, any grid); "exchange" = one launch whose co-resident blocks meet in global
# memory (one read, but a grid-wide wait per row). See docs/softmax.md for the measured choice.
LONG_ROWS = "exchange"


@dataclass(frozen=True)
class Plan:
    """One launch over a (rows, n) matrix; see rows.cuh for the layout."""
    rows: int
    n: int
    group: int    # G: threads per row segment (power of two; the block when > 32)
    threads: int  # block size
    packs: int    # 16-byte packs per thread (<= the kernel's MAXP)
    parts: int    # blocks per row (> 1 only on the block path)
    chunk: int    # elements per segment (a multiple of V when parts > 1)
    grid: int
    split: bool = False  # parts > 1 done as two launches (phase 1 then 2) instead of one (phase 0)

    @property
    def path(self) -> str:
        if self.group <= 32:
            return "subwarp"
        return "block" if self.parts == 1 else "multiblock"


def plan(rows: int, n: int, dtype: str, maxp: int, max_threads: int, sm_count: int, persistent: bool = False,
         force: str | None = None, min_blocks: int | None = None, occupancy=None, long_rows: str | None = None) -> Plan:
    """Geometry for a row length: a sub-warp group of G <= 32 threads when a row is <= 32 * TARGET_PACKS
    packs, else a block of up to `max_threads` threads, else `parts` blocks per row.
    `persistent` caps the grid at the resident block count (norm backward: one partial row per block).
    `force="block"` takes the block path even for short rows (a ladder variant and a test hook).
    `min_blocks`: resident blocks per SM the kernel's __launch_bounds__ guarantees (default: rows.cuh's);
    `occupancy(threads)`, when given, the device's exact figure. `long_rows`: "split" or "exchange"."""
    V = vec(dtype)
    P = ceil_div(n, V)  # packs per row
    target = min(TARGET_PACKS, maxp)
    group = next_pow2(ceil_div(P, target))
    if group <= 32 and force != "block":
        threads = min(PERSISTENT_SUBWARP_BLOCK, max_threads) if persistent else SUBWARP_BLOCK
        packs = ceil_div(P, group)
        parts, chunk = 1, n
        gpb = threads // group
    else:
        group = threads = max(32, min(max(group, 32), max_threads))
        packs = ceil_div(P, threads)
        parts, chunk = 1, n
        if packs > maxp:
            parts = ceil_div(P, threads * maxp)
            per_part = ceil_div(P, parts)
            packs = ceil_div(per_part, threads)
            chunk = per_part * V
            parts = ceil_div(n, chunk)
        gpb = 1
    per_sm = (occupancy(threads) if occupancy else 0) or min(min_blocks or min_blocks_per_sm(dtype),
                                                             max(1, MAX_THREADS_PER_SM // threads))
    resident = per_sm * sm_count
    groups = ceil_div(rows, gpb)
    split = False
    if parts > 1:
        # too long to be co-resident, or more parts than the tagged exchange holds: split
        split = (long_rows or LONG_ROWS) == "split" or parts > resident or parts > MAX_EXCHANGE_PARTS
        if not split:
            grid = parts * min(groups, resident // parts)
        else:
            grid = parts * (min(groups, max(1, resident // parts)) if persistent else groups)
    elif persistent:
        grid = min(groups, resident)  # one wave, all resident
    else:
        grid = min(groups, (1 << 30) // gpb)  # the kernels step rows by grid * gpb / parts in 32 bits
        if group <= 32 and SUBWARP_GRID["per_sm"]:
            grid = min(grid, SUBWARP_GRID["per_sm"] * sm_count)
    return Plan(rows, n, group, threads, packs, parts, chunk, max(grid, parts), split)


# Rows of one aligned segment take instances compiled for their group (the GT of softmax_fwd / softmax_bwd /
# norm_fwd, and norm_bwd's where norm.SHORT_BWD has them): G threads of a sub-warp group, or ROW_BLOCK (a block a
# row). With the group, one segment and aligned packs known at compile time, the row tests, the row grid's
# divisions and the shuffle predicates fold away (log_softmax float32 G 8: 1296 -> 392 SASS instructions).
# float64 keeps the run-time form.
SHORT_DTYPES = ("float16", "bfloat16", "float32")
SHORT_GROUPS = (1, 2, 4, 8, 16, 32)
ROW_BLOCK = 1024  # rows.cuh
COMPILED_GROUPS = {"on": True}  # a probe / ladder switch


def group_token(group: int, full: bool = False) -> str:
    """A row kernel name's GT argument (none for the run-time group), and its FULL argument."""
    return ("" if not group else ", ROW_BLOCK" if group == ROW_BLOCK else f", {group}") + (", true" if full else "")


# Forward rows of a compile-time group where every thread holds the kernel's MAXP whole packs (n = MAXP * V * G: the
# power-of-two rows from 4 * V) take the FULL instances of softmax_fwd / norm_fwd: no pack count or bounds test a
# pass (bf16 ROW_BLOCK staged layer_norm 1456 -> 736 SASS instructions; H100, same process: 1024x32768 bf16 layer
# 47.3 -> 45.7 us, 65536x128 f32 softmax 21.4 -> 20.9). Not the unstaged half block rows: at their 48 registers
# (FwdBounds) the FULL form spilled 4-48 bytes; nor softmax's rows staged two ahead (STAGE 2: 1024x32768 bf16 46.2 ->
# 46.6 us, three runs alike). Probe switches ("two_ahead": those too, where the probe declared them).
FULL_ROWS = {"on": True, "two_ahead": False}


def has_full(dtype: str, group: int, stage: int) -> bool:
    """Whether the forward kernels have a FULL instance for this group (GT) and stage."""
    return (bool(group) and (stage != 2 or FULL_ROWS["two_ahead"])
            and (group != ROW_BLOCK or bool(stage) or ITEMSIZE[dtype] > 2))


def whole_rows(p: Plan, dtype: str, maxp: int) -> bool:
    """Whether every thread of a one-segment plan `p` holds `maxp` whole packs of every row."""
    return p.parts == 1 and p.packs == maxp and p.n == p.group * maxp * vec(dtype)


def full_rows(p: Plan, dtype: str, maxp: int, group: int, stage: int) -> bool:
    """Whether a forward planned as `p` with compile-time group `group` (short_group) takes a FULL instance."""
    return FULL_ROWS["on"] and has_full(dtype, group, stage) and whole_rows(p, dtype, maxp)


UNSTAGED_BLOCK_THREADS = 256  # the most threads of an unstaged forward ROW_BLOCK instance (FwdBounds in rows.cuh)


def short_group(p: Plan, dtype: str, al: int, variant: str = "auto", staged: bool = True) -> int:
    """The compile-time group (GT) of a launch planned as `p`, or 0 for the run-time form. `staged`: whether a
    forward block row would be staged (unstaged ROW_BLOCK instances take up to UNSTAGED_BLOCK_THREADS)."""
    if not (COMPILED_GROUPS["on"] and variant == "auto" and al and dtype in SHORT_DTYPES and p.parts == 1):
        return 0
    if p.path == "subwarp":
        return p.group
    return ROW_BLOCK if staged or p.threads <= UNSTAGED_BLOCK_THREADS else 0


# Forward rows staged in shared memory (the STAGE instances of softmax_fwd / norm_fwd): the next row is
# copied in (cp.async) while this one is reduced and written, for rows that fill blocks of >= 512 threads
# (one or two resident per SM, which alone cannot overlap a row's loads with the previous row's stores).
STAGE_FWD_DTYPES = ("float16", "bfloat16", "float32")
STAGE_FWD_MIN_THREADS = 512


def stage_fwd(p: Plan, dtype: str, al: int, two_ahead: bool = False) -> int:
    """Rows a forward launch planned as `p` stages ahead (the STAGE of its kernel): 0, 1, or with
    `two_ahead` 2 where one 1024-thread block, alone on its SM, takes a row (half rows of 16385..32768
    elements, float32 8193..16384: 128 KB of shared memory, the next two rows' loads in flight)."""
    if not (al and dtype in STAGE_FWD_DTYPES and p.path != "subwarp" and p.threads >= STAGE_FWD_MIN_THREADS):
        return 0
    return 2 if two_ahead and p.threads == 1024 and p.parts == 1 else 1


def stage_short(switch: dict, p: Plan, dtype: str, al: int, variant: str = "auto") -> bool:
    """Whether a launch planned as `p` stages its sub-warp rows (a resident grid, each group copying its next row
    in while it does this one): `switch` ({"on", "groups", "dtypes"}) names the groups and dtypes measured faster."""
    return (switch["on"] and variant == "auto" and bool(al) and p.path == "subwarp" and dtype in switch["dtypes"]
            and p.group in switch["groups"])


def stage_token(stage: int) -> str:
    """A kernel name's STAGE argument."""
    return "2" if stage == 2 else "true" if stage else "false"


def staged_plan(kernel, name: str, rows: int, n: int, dtype: str, maxp: int, max_threads: int, tensors: int = 1,
                **args):
    """(plan, dynamic shared bytes) of a staged launch: a resident grid looping over rows, one 16-byte
    slot per pack per thread per staged row segment (`tensors`: the backward's y / x and dy, or a forward
    staged two rows ahead; above the default 48 KB window the attribute is raised: 64 KB for a 1024-thread
    forward)."""
    from .._runtime import current, use_shared_memory

    smem = lambda t: tensors * maxp * t * 16  # noqa: E731
    use_shared_memory(kernel, smem(max_threads), name)
    p = plan(rows, n, dtype, maxp, max_threads, current().sm_count, persistent=True,
             occupancy=occupancy(kernel, name, smem), **args)
    return p, smem(p.threads)


# Long rows (parts > 1, aligned float / half rows, one launch) take the pipelined kernels (softmax_fwd_parts,
# softmax_bwd_parts, norm_fwd_parts, norm_bwd_parts): each block's segments staged PARTS_SETS rows deep, a
# row's exchange of partial statistics overlapping the next row's reduction (pipelined_parts in rows.cuh).
# A switch for the ladder, the probes and the tests.
PARTS_PIPELINED = {"fwd": True, "bwd": True}
PARTS_SETS = 3
PARTS_THREADS = {"fwd": None, "bwd": None}  # a probe switch: blocks of this many threads instead of the plan's
# 16-byte packs a thread of the pipelined forwards (their MAXP): 8 (192 KB of slots, one 512-thread block per
# SM) measured faster for softmax (256x262144 f32: 146.8 -> 143.2 us, log_softmax 144.8 -> 142.8), slower for
# layer_norm (150.0 -> 172.8) and rms_norm (136.8 -> 138.3), which keep 4. A probe switch.
PARTS_PACKS = {"softmax": 8, "norm": 4}


def pipelined_plan(source, name: str, rows: int, n: int, dtype: str, al: int, maxp: int, threads: int,
                   inputs: int = 1, full_name: str | None = None):
    """(kernel, plan, dynamic shared bytes) of the pipelined long-row launch `name` of `source` (blocks of
    `threads`, `maxp` packs a thread, `inputs` row tensors: 1 forward, 2 backward), or None where it does not
    apply: rows one block holds, unaligned, float64, or too few blocks resident for a row. `full_name`: the
    kernel's FULL instance, taken where every part is whole (full_parts) and its own occupancy gives the same
    plan (the grid must stay co-resident)."""
    kind = "fwd" if inputs == 1 else "bwd"
    threads = PARTS_THREADS[kind] or threads
    if not (PARTS_PIPELINED[kind] and al and dtype in STAGE_FWD_DTYPES and n > threads * maxp * vec(dtype)):
        return None
    kernel = source.kernel(name)
    p, smem = staged_plan(kernel, name, rows, n, dtype, maxp, threads, tensors=PARTS_SETS * inputs)
    if p.split:
        return None
    if full_name and full_parts(p, dtype, maxp):
        full = source.kernel(full_name)
        q, smem_q = staged_plan(full, full_name, rows, n, dtype, maxp, threads, tensors=PARTS_SETS * inputs)
        if q == p:
            return full, q, smem_q
    return kernel, p, smem


def full_parts(p: Plan, dtype: str, maxp: int) -> bool:
    """Whether every part of a pipelined plan `p` holds `maxp` packs of every thread (the FULL instances: no pack
    count or bounds test a pass)."""
    return p.parts > 1 and p.packs == maxp and p.chunk == p.threads * maxp * vec(dtype) and p.n % p.chunk == 0


# The pipelined launches' exchange words zeroed by zero_words (rows.cuh), the launch its programmatic dependent on
# sm_90 (False: a memset, then a plain launch; a probe switch).
ZERO_WORDS_AFTER = {"on": True}
ZERO_WORDS = "zero_words"  # declared by every source with pipelined kernels
ZERO_THREADS = 256


def launch_pipelined(call, source, kernel, p: Plan, args, smem: int, k: int) -> None:
    """Launch a pipelined long-row kernel planned as `p` (pipelined_plan) with `args` and then its exchange
    words: rows * parts * k tagged 64-bit slots, zero before its first publish."""
    from .._runtime import current, launch

    words = call.empty((p.rows * p.parts * k,), "int64")
    if not ZERO_WORDS_AFTER["on"]:
        words.fill(0)
        kernel((p.grid,), (p.threads,), (*args, words), shared_mem=smem)
        return
    count = words.size
    launch(source.kernel(ZERO_WORDS), min(ceil_div(count, ZERO_THREADS), 4 * current().sm_count), ZERO_THREADS,
           (words, np.int64(count)))
    launch(kernel, p.grid, p.threads, (*args, words), shared_mem=smem, after_previous=current().cc >= 90)


def occupancy(kernel, name: str, smem: int = 0):
    """threads -> resident blocks per SM of this kernel (the runtime's occupancy calculator), or None
    when it cannot be asked (then plan() uses the __launch_bounds__ guarantee). `name` is unused
    (kept for callers); `smem` may be a function of the block size."""
    def per_sm(threads: int):
        from .._runtime import current, resident_blocks

        try:
            return resident_blocks(kernel, threads, smem(threads) if callable(smem) else smem) // current().sm_count
        except Exception:
            return 0

    return per_sm


# Tiled rows (rows.cuh tile_in / tile_out: softmax_tiled, norm_fwd_tiled): shared memory a block's tiles aim at (7
# blocks an SM) and the most rows a row slot takes (256 slots of 16 rows of 2 float32 fill the 32 KB).
TILE_BYTES = 32 * 1024
TILE_ROWS_PER_THREAD = 16


def tiled_plan(rows: int, n: int, dtype: str, tensors: int, lanes: int = 1) -> tuple[int, int, int, int]:
    """(grid, threads, rows a row slot, dynamic shared memory) of a tiled launch of `lanes` threads a row: 256 row
    slots (down to 32 for long rows) and as many rows each, up to TILE_ROWS_PER_THREAD, as keep `tensors` tiles
    within TILE_BYTES."""
    row_bytes = tensors * n * ITEMSIZE[dtype]
    slots = 256
    while slots > 32 and slots * row_bytes > TILE_BYTES:
        slots //= 2
    k = max(1, min(TILE_ROWS_PER_THREAD, TILE_BYTES // (slots * row_bytes)))
    return ceil_div(rows, k * slots), slots * lanes, k, tensors * ceil_div(k * slots * n, vec(dtype)) * 16


def pointers_aligned(*arrays) -> bool:
    """Every array (None: absent) starts on a 16-byte boundary."""
    return all(a is None or a.data.ptr % 16 == 0 for a in arrays)


def shifted_rows(n: int, dtype: str, al: int, variant: str, *arrays) -> bool:
    """Whether rows of n elements take the shifted instances (rows.cuh shift_row): the automatic variant, rows of a
    pack or more that are not whole packs (`al` 0), every array 16-byte aligned. Shorter rows keep the element path:
    every pack of theirs is shared with other rows (measured slower, docs/softmax.md)."""
    return variant == "auto" and not al and n >= vec(dtype) and pointers_aligned(*arrays)


def tiled_rows(switch: dict, n: int, al: int, variant: str, *arrays) -> bool:
    """Whether rows of n elements take a tiled kernel (softmax.TILED, norm.TILED_FWD): the automatic variant, the
    switch on, n up to its max_n, rows not whole packs (`al` 0; the switch's "aligned" probe takes those too), every
    array 16-byte aligned."""
    return (variant == "auto" and switch["on"] and n <= switch["max_n"] and (switch.get("aligned", False) or not al)
            and pointers_aligned(*arrays))


def aligned(n: int, dtype: str, *arrays) -> int:
    """1 when every array is 16-byte aligned and rows are whole packs (16-byte accesses allowed)."""
    return int(n % vec(dtype) == 0 and pointers_aligned(*arrays))


def exchange_buffers(call, p: Plan, dtype: str, k: int = 2, counter: bool = False):
    """The per-row counters and slots the blocks of one row meet through (parts > 1), else null
    pointers. One launch (phase 0) with float accumulators: no counters, zeroed 64-bit tagged slots
    (exchange_tagged in rows.cuh); with double: zeroed counters and plain slots; two launches: slots."""
    if p.parts == 1:
        return np.uint64(0), np.uint64(0)
    if p.split:
        return np.uint64(0), call.empty((p.rows * p.parts * k,), ACC[dtype])
    if ACC[dtype] == "float32" and not counter:
        words = call.empty((p.rows * p.parts * k,), "int64")
        words.fill(0)
        return np.uint64(0), words
    slots = call.empty((p.rows * p.parts * k,), ACC[dtype])
    sync = call.empty((p.rows,), "int32")
    sync.fill(0)
    return sync, slots


def phases(p: Plan, counter: bool = False):
    """The phase argument of each launch: (0,) in one launch (tagged exchange for float accumulators;
    (3,) with `counter`: the counter exchange), (1, 2) for a split long row."""
    if p.parts > 1 and p.split:
        return (1, 2)
    return (3,) if counter and p.parts > 1 else (0,)


def ptr(a):
    """An array, or a null pointer for an absent optional argument."""
    return np.uint64(0) if a is None else a
