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
SUBWARP_BLOCK = 256  # threads per block on the sub-warp path
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

    @property
    def path(self) -> str:
        return "subwarp" if self.group <= 32 else ("block" if self.parts == 1 else "multiblock")


def plan(rows: int, n: int, dtype: str, maxp: int, max_threads: int, sm_count: int, persistent: bool = False,
         force: str | None = None, min_blocks: int | None = None) -> Plan:
    """Geometry for a row length: a sub-warp group of G <= 32 threads when a row is <= 32 * TARGET_PACKS
    packs, else a block of up to `max_threads` threads, else `parts` co-resident blocks per row.
    `persistent` caps the grid at the resident block count (norm backward: one partial row per block).
    `force="block"` takes the block path even for short rows (a ladder variant and a test hook).
    `min_blocks`: resident blocks per SM the kernel's __launch_bounds__ guarantees (default: rows.cuh's)."""
    V = vec(dtype)
    P = ceil_div(n, V)  # packs per row
    target = min(TARGET_PACKS, maxp)
    group = next_pow2(ceil_div(P, target))
    resident = (min_blocks or min_blocks_per_sm(dtype)) * sm_count
    if group <= 32 and force != "block":
        threads = SUBWARP_BLOCK
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
            if parts > resident:
                raise ValueError(
                    f"rows of {n} elements need {parts} co-resident blocks of {threads} threads; this device holds "
                    f"{resident} ({sm_count} SMs): at most {resident * threads * maxp * V} elements per row")
        gpb = 1
    groups = ceil_div(rows, gpb)
    if parts > 1:
        grid = parts * min(groups, resident // parts)
    elif persistent:
        grid = min(groups, 2 * resident)  # all resident when registers allow 4 blocks per SM, else 2 even waves
    else:
        grid = min(groups, 1 << 30)
    return Plan(rows, n, group, threads, packs, parts, chunk, max(grid, parts))


def aligned(n: int, dtype: str, *arrays) -> int:
    """1 when every array is 16-byte aligned and rows are whole packs (16-byte accesses allowed)."""
    if n % vec(dtype):
        return 0
    return int(all(a is None or a.data.ptr % 16 == 0 for a in arrays))


def exchange_buffers(call, p: Plan, dtype: str, k: int = 2):
    """The per-row counters (zeroed) and slots the blocks of one row meet through (parts > 1), else
    null pointers."""
    if p.parts == 1:
        return np.uint64(0), np.uint64(0)
    sync = call.empty((p.rows,), "int32")
    sync.fill(0)
    slots = call.empty((p.rows * p.parts * k,), ACC[dtype])
    return sync, slots


def ptr(a):
    """An array, or a null pointer for an absent optional argument."""
    return np.uint64(0) if a is None else a
