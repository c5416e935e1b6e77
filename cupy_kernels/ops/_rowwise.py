"""Host side shared by the row-wise kernels of softmax.cu and norm.cu (cu_src/common/rows.cuh): how a row
length becomes a launch (group size, packs per thread, parts per row, grid), and the choices both ops share."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._runtime import ACC, ACC_SCALAR, ITEMSIZE, aligned, ceil_div, vec  # noqa: F401  (re-exported to the ops)

MAX_THREADS_PER_SM = 2048    # sm_80 / sm_90
MAX_EXCHANGE_PARTS = 256     # rows.cuh: the most blocks one row's tagged exchange holds
SHORT_DTYPES = ("float16", "bfloat16", "float32")  # dtypes with compile-time-group instances (float64: run-time)
SHORT_GROUPS = (1, 2, 4, 8, 16, 32)
ROW_BLOCK = 1024             # rows.cuh: the GT of a block a row
UNSTAGED_BLOCK_THREADS = 256  # the most threads of an unstaged forward ROW_BLOCK instance (FwdBounds in rows.cuh)
STAGE_FWD_DTYPES = ("float16", "bfloat16", "float32")
PARTS_SETS = 3               # rows a pipelined long-row block stages (pipelined_parts in rows.cuh)
ZERO_WORDS = "zero_words"    # declared by every source with pipelined kernels
ZERO_THREADS = 256


@dataclass(frozen=True)
class Tuning:
    # Threads a block on the sub-warp path: one-pass launches 4-6% faster than 256 on 32768x1024 half, equal on
    # 65536x128 f32.
    subwarp_block: int = 128
    # Persistent sub-warp grids (norm backward: one partial row a block, so larger blocks leave fewer for
    # column_sum), capped at the kernel's largest block: 512 beat 256 on 65536x128 / x256 and 131072x64 f32
    # (H200, by 0.2-0.7 us); 128 was slower on each.
    persistent_subwarp_block: int = 512
    # 16-byte packs a thread aims at: 64 B in flight per thread per tensor.
    target_packs: int = 4
    # Rows longer than one block's registers: "exchange", one launch whose co-resident blocks meet in global
    # memory (one read); "split", two launches (partial statistics, then apply: one more read, any grid).
    long_rows: str = "exchange"
    # Rows of one aligned segment take instances compiled for their group (GT): the row tests, divisions and
    # shuffle predicates fold away (log_softmax float32 G 8: 1296 -> 392 SASS instructions).
    compiled_groups: bool = True
    # Forward rows where every thread holds the kernel's MAXP whole packs take the FULL instances (no pack count
    # or bounds test): 1024x32768 bf16 layer_norm 47.3 -> 45.7 us, 65536x128 f32 softmax 21.4 -> 20.9 (H100).
    full_rows: bool = True
    # Long aligned rows (parts > 1) take the pipelined kernels (*_parts): each block's segments staged PARTS_SETS
    # rows deep, a row's exchange overlapping the next row's reduction.
    pipelined_fwd: bool = True
    pipelined_bwd: bool = True
    # Packs a thread of the pipelined forwards: 8 (192 KB of slots, one 512-thread block an SM) measured faster
    # for softmax (256x262144 f32: 146.8 -> 143.2 us), slower for layer_norm (150.0 -> 172.8) and rms_norm.
    parts_packs_softmax: int = 8
    parts_packs_norm: int = 4
    # The pipelined launches' exchange words zeroed by the zero_words kernel, the pipelined kernel its
    # programmatic dependent on sm_90 (False: a memset first).
    zero_words_kernel: bool = True
    # Tiled rows (softmax_tiled, norm_fwd_tiled): shared memory a block's tiles aim at (7 blocks an SM), and
    # the most rows a row slot takes (256 slots of 16 rows of 2 float32 fill the 32 KB).
    tile_bytes: int = 32 * 1024
    tile_rows_per_thread: int = 16


TUNING = Tuning()


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
    """Largest block of the forward kernels (FwdThreads in rows.cuh: __launch_bounds__(1024, 1) at 64 registers;
    float64 512 at 128). With a row length n: 1024 only where it holds the row in one block that 512 threads could
    not; longer rows split over 512-thread blocks, two an SM (faster than 1024-thread parts: 256x262144 f32)."""
    if dtype == "float64":
        return 512
    if n is None:
        return 1024
    P = -(-n // vec(dtype))
    return 1024 if 512 * fwd_maxp(dtype) < P <= 1024 * fwd_maxp(dtype) else 512


def next_pow2(v: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(v, 1))))


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
    """Geometry for a row length: a sub-warp group of G <= 32 threads when a row is <= 32 * target_packs packs,
    else a block of up to `max_threads` threads, else `parts` blocks per row. `persistent` caps the grid at the
    resident block count (norm backward: one partial row per block). `force="block"` takes the block path even for
    short rows (a ladder variant). `min_blocks`: resident blocks per SM the kernel's __launch_bounds__ guarantees
    (default: rows.cuh's); `occupancy(threads)`, when given, the device's exact figure. `long_rows`: "split" or
    "exchange" (default: TUNING.long_rows)."""
    t = TUNING
    V = vec(dtype)
    P = ceil_div(n, V)  # packs per row
    target = min(t.target_packs, maxp)
    group = next_pow2(ceil_div(P, target))
    if group <= 32 and force != "block":
        threads = min(t.persistent_subwarp_block, max_threads) if persistent else t.subwarp_block
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
    groups = ceil_div(rows, gpb)
    split = False
    if parts > 1 or persistent:
        # (asked only here: the occupancy query compiles `occupancy`'s kernel, often not the one launched)
        per_sm = (occupancy(threads) if occupancy else 0) or min(min_blocks or min_blocks_per_sm(dtype),
                                                                 max(1, MAX_THREADS_PER_SM // threads))
        resident = per_sm * sm_count
    if parts > 1:
        # too long to be co-resident, or more parts than the tagged exchange holds: split
        split = (long_rows or t.long_rows) == "split" or parts > resident or parts > MAX_EXCHANGE_PARTS
        if not split:
            grid = parts * min(groups, resident // parts)
        else:
            grid = parts * (min(groups, max(1, resident // parts)) if persistent else groups)
    elif persistent:
        grid = min(groups, resident)  # one wave, all resident
    else:
        grid = min(groups, (1 << 30) // gpb)  # the kernels step rows by grid * gpb / parts in 32 bits
    return Plan(rows, n, group, threads, packs, parts, chunk, max(grid, parts), split)


def group_token(group: int, full: bool = False) -> str:
    """A row kernel name's GT argument (none for the run-time group), and its FULL argument."""
    return ("" if not group else ", ROW_BLOCK" if group == ROW_BLOCK else f", {group}") + (", true" if full else "")


def has_full(dtype: str, group: int, stage: int) -> bool:
    """Whether the forward kernels have a FULL instance for this group (GT) and stage: not the unstaged half block
    rows (at their 48 registers the FULL form spilled 4-48 bytes), nor rows staged two ahead (1024x32768 bf16
    46.2 -> 46.6 us)."""
    return bool(group) and stage != 2 and (group != ROW_BLOCK or bool(stage) or ITEMSIZE[dtype] > 2)


def whole_rows(p: Plan, dtype: str, maxp: int) -> bool:
    """Whether every thread of a one-segment plan `p` holds `maxp` whole packs of every row."""
    return p.parts == 1 and p.packs == maxp and p.n == p.group * maxp * vec(dtype)


def full_rows(p: Plan, dtype: str, maxp: int, group: int, stage: int) -> bool:
    """Whether a forward planned as `p` with compile-time group `group` (short_group) takes a FULL instance."""
    return TUNING.full_rows and has_full(dtype, group, stage) and whole_rows(p, dtype, maxp)


def short_group(p: Plan, dtype: str, al: int, variant: str = "auto", staged: bool = True) -> int:
    """The compile-time group (GT) of a launch planned as `p`, or 0 for the run-time form. `staged`: whether a
    forward block row would be staged (unstaged ROW_BLOCK instances take up to UNSTAGED_BLOCK_THREADS)."""
    if not (TUNING.compiled_groups and variant == "auto" and al and dtype in SHORT_DTYPES and p.parts == 1):
        return 0
    if p.path == "subwarp":
        return p.group
    return ROW_BLOCK if staged or p.threads <= UNSTAGED_BLOCK_THREADS else 0


def stage_fwd(p: Plan, dtype: str, al: int, min_threads: int, two_ahead: bool = False) -> int:
    """Rows a forward launch planned as `p` stages ahead in shared memory (the STAGE of its kernel; the next row
    copied in by cp.async while this one is reduced, for blocks of >= min_threads threads, one or two an SM): 0,
    1, or with `two_ahead` 2 where one 1024-thread block alone on its SM takes a row."""
    if not (al and dtype in STAGE_FWD_DTYPES and p.path != "subwarp" and p.threads >= min_threads):
        return 0
    return 2 if two_ahead and p.threads == 1024 and p.parts == 1 else 1


def stage_short(groups, dtypes, p: Plan, dtype: str, al: int, variant: str = "auto") -> bool:
    """Whether a launch planned as `p` stages its sub-warp rows (a resident grid, each group copying its next row in
    while it does this one): `groups` and `dtypes` name those measured faster."""
    return variant == "auto" and bool(al) and p.path == "subwarp" and dtype in dtypes and p.group in groups


def stage_token(stage: int) -> str:
    """A kernel name's STAGE argument."""
    return "2" if stage == 2 else "true" if stage else "false"


def staged_plan(kernel, name: str, rows: int, n: int, dtype: str, maxp: int, max_threads: int, tensors: int = 1,
                **args):
    """(plan, dynamic shared bytes) of a staged launch: a resident grid looping over rows, one 16-byte slot per pack
    per thread per staged row segment (`tensors`: the backward's y / x and dy, or a forward staged two rows ahead;
    above the default 48 KB window the attribute is raised)."""
    from .._runtime import current, use_shared_memory

    smem = lambda t: tensors * maxp * t * 16  # noqa: E731
    use_shared_memory(kernel, smem(max_threads), name)
    p = plan(rows, n, dtype, maxp, max_threads, current().sm_count, persistent=True,
             occupancy=occupancy(kernel, smem), **args)
    return p, smem(p.threads)


def pipelined_plan(source, name: str, rows: int, n: int, dtype: str, al: int, maxp: int, threads: int,
                   inputs: int = 1, full_name: str | None = None):
    """(kernel, plan, dynamic shared bytes) of the pipelined long-row launch `name` of `source` (blocks of
    `threads`, `maxp` packs a thread, `inputs` row tensors: 1 forward, 2 backward), or None where it does not
    apply: rows one block holds, unaligned, float64, or too few blocks resident for a row. `full_name`: the kernel's
    FULL instance, taken where every part is whole (full_parts) and its own occupancy gives the same plan."""
    on = TUNING.pipelined_fwd if inputs == 1 else TUNING.pipelined_bwd
    if not (on and al and dtype in STAGE_FWD_DTYPES and n > threads * maxp * vec(dtype)):
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
    """Whether every part of a pipelined plan `p` holds `maxp` packs of every thread (the FULL instances)."""
    return p.parts > 1 and p.packs == maxp and p.chunk == p.threads * maxp * vec(dtype) and p.n % p.chunk == 0


def plan_pipelined(b, source, kernel, p: Plan, args, smem: int, k: int) -> None:
    """Record a pipelined long-row launch planned as `p` (pipelined_plan) with `args` and then its exchange words:
    rows * parts * k tagged 64-bit slots in a workspace, zeroed by zero_words before its first publish (the
    pipelined kernel a programmatic dependent launch of it on sm_90)."""
    from .._runtime import current

    count = p.rows * p.parts * k
    words = b.workspace(8 * count, zero=not TUNING.zero_words_kernel)
    if TUNING.zero_words_kernel:
        b.launch(source.kernel(ZERO_WORDS), min(ceil_div(count, ZERO_THREADS), 4 * current().sm_count), ZERO_THREADS,
                 (words, np.int64(count)))
    b.launch(kernel, p.grid, p.threads, (*args, words), shared_mem=smem,
             after_previous=TUNING.zero_words_kernel and current().cc >= 90)


def occupancy(kernel, smem=0):
    """threads -> resident blocks per SM of this kernel (the driver's occupancy calculator), or 0 when it cannot be
    asked (then plan() uses the __launch_bounds__ guarantee); `smem` may be a function of the block size."""
    def per_sm(threads: int):
        from .._runtime import current, resident_blocks

        try:
            return resident_blocks(kernel, threads, smem(threads) if callable(smem) else smem) // current().sm_count
        except Exception:
            return 0

    return per_sm


def tiled_plan(rows: int, n: int, dtype: str, tensors: int, lanes: int = 1) -> tuple[int, int, int, int]:
    """(grid, threads, rows a row slot, dynamic shared memory) of a tiled launch of `lanes` threads a row: 256 row
    slots (down to 32 for long rows) and as many rows each, up to tile_rows_per_thread, as keep `tensors` tiles
    within tile_bytes."""
    t = TUNING
    row_bytes = tensors * n * ITEMSIZE[dtype]
    slots = 256
    while slots > 32 and slots * row_bytes > t.tile_bytes:
        slots //= 2
    k = max(1, min(t.tile_rows_per_thread, t.tile_bytes // (slots * row_bytes)))
    return ceil_div(rows, k * slots), slots * lanes, k, tensors * ceil_div(k * slots * n, vec(dtype)) * 16


def pointers_aligned(*arrays) -> bool:
    """Every array or Buffer (None: absent) starts on a 16-byte boundary."""
    return all(aligned(a) for a in arrays)


def shifted_rows(n: int, dtype: str, al: int, variant: str, *arrays) -> bool:
    """Whether rows of n elements take the shifted instances (rows.cuh shift_row): the automatic variant, rows of a
    pack or more that are not whole packs (`al` 0), every array 16-byte aligned. Shorter rows keep the element path:
    every pack of theirs is shared with other rows (measured slower)."""
    return variant == "auto" and not al and n >= vec(dtype) and pointers_aligned(*arrays)


def tiled_rows(max_n: int, n: int, al: int, variant: str, *arrays) -> bool:
    """Whether rows of n elements take a tiled kernel: the automatic variant, n up to max_n (0: never), rows not
    whole packs (`al` 0), every array 16-byte aligned."""
    return variant == "auto" and n <= max_n and not al and pointers_aligned(*arrays)


def row_aligned(n: int, dtype: str, *arrays) -> int:
    """1 when every array is 16-byte aligned and rows are whole packs (16-byte accesses allowed)."""
    return int(n % vec(dtype) == 0 and pointers_aligned(*arrays))


def exchange_buffers(b, p: Plan, dtype: str, k: int = 2, counter: bool = False):
    """The per-row counters and slots the blocks of one row meet through (parts > 1), as workspaces of the plan
    builder `b`, else null pointers (None). One launch (phase 0) with float accumulators: no counters, zeroed 64-bit
    tagged slots (exchange_tagged in rows.cuh); with double or `counter`: zeroed counters and plain slots; two
    launches: slots."""
    if p.parts == 1:
        return None, None
    slots = p.rows * p.parts * k
    if p.split:
        return None, b.workspace(slots * ITEMSIZE[ACC[dtype]])
    if ACC[dtype] == "float32" and not counter:
        return None, b.workspace(8 * slots, zero=True)
    return b.workspace(4 * p.rows, zero=True), b.workspace(slots * ITEMSIZE[ACC[dtype]])


def phases(p: Plan, counter: bool = False):
    """The phase argument of each launch: (0,) in one launch (tagged exchange for float accumulators; (3,) with
    `counter`: the counter exchange), (1, 2) for a split long row."""
    if p.parts > 1 and p.split:
        return (1, 2)
    return (3,) if counter and p.parts > 1 else (0,)


def ptr(a):
    """A Buffer, or a null pointer for an absent optional argument."""
    return np.uint64(0) if a is None else a
