"""Host side of cu_src/softmax.cu: softmax, log_softmax, in-place softmax_ and their backward.

A call is planned once per (direction, mode, variant, dtype, shape, strides, axis, alignment, device) into a
Plan (the kernel instance, its geometry and workspaces) and replayed after that (`_run`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._runtime import (CTYPES, CUPY, FLOAT_DTYPES, HALF_DTYPES, KernelSource, PlanBuilder, ceil_div, check_like,
                        checked_dtype, current, dtype_name, kind_of, normalize_axes)
from .._runtime.launch import alignment
from .._runtime.tuning import PlanCache
from . import _rowwise as rw

SOURCE = KernelSource("softmax.cu")
MODES = {"softmax": 0, "log_softmax": 1}  # the kernels' run-time `mode` argument (SoftmaxMode in softmax.cu)
BWD_THREADS = 512          # __launch_bounds__(512, 2) of softmax_bwd; softmax_fwd: rw.fwd_threads(dtype)
VARIANTS = ("auto", "block", "scalar", "split", "exchange", "counter")  # the ladder: see docs/softmax.md
STAGE_MAX_BYTES = 40 * 1024  # the default 48 KB dynamic window, less the static scratch and exchange copy
WIDE_BWD_MAX = 32768         # the wide backward's longest half row: one 1024-thread block, 4 packs of y and dy a thread
SHIFTED_PARTS_PACKS = 4      # packs a thread of the pipelined forward on shifted rows (8 spilled 32-74 bytes)
SMALL_THREADS, SMALL_BLOCKS_PER_SM = 256, 8  # softmax_small_rows' block and grid cap
TILED_LANES = {4: (1, 2, 4), 2: (1, 2), 8: (1,)}  # threads a row of the compiled softmax_tiled, by element size


@dataclass(frozen=True)
class Tuning:
    # Backward: the next row's y and dy staged in shared memory (cp.async) for half rows that fill a BWD_THREADS
    # block, on these paths: 8192² bf16 104.9 -> 96.5 us, 1024x32768 bf16 79.9 -> 71.5. Smaller blocks keep
    # several rows an SM in flight already and measured slower staged (4096² f32 -5%, 32768x1024 f16 -3.5%).
    stage_bwd_paths: tuple = ("block", "multiblock")
    # ... except full 8192-element half rows from this many row steps of the staged grid (two blocks an SM): one
    # block a row then lets the GPU hand rows to the SMs that free first (8192² bf16 131.3 -> 127.8 us H100,
    # 96.0 -> 94.8 H200); fewer steps measured slower unstaged (2048x8192: +2% H100, +3.5% H200).
    stage_bwd_full_steps: int = 16
    # Forward rows of >= 512-thread blocks staged, one-block rows two ahead: 1024x32768 bf16 softmax 44.1 -> 42.2 us,
    # log_softmax 41.9 -> 40.8.
    stage_fwd: bool = True
    stage_fwd_two_ahead: bool = True
    stage_fwd_min_threads: int = 512
    # float32 sub-warp rows of 8-thread groups (65..128 elements) staged, as norm's: 65536x128 forward 20.7 ->
    # 20.1 us, backward 30.6 -> 29.9 (H100); groups of 16 and 32 measured equal, so only 8.
    stage_short_fwd_groups: tuple = (8,)
    stage_short_bwd_groups: tuple = (8,)
    stage_short_dtypes: tuple = ("float32",)
    # Backward half rows longer than a 512-thread block holds (8192) and up to WIDE_BWD_MAX: the wide form, one
    # 1024-thread block a row staged in 128 KB, no exchange between blocks.
    wide_bwd: bool = True
    # Rows of 1, 2 or 4 elements (whole rows in a 16-byte pack) take the elementwise softmax_small_rows: the
    # row kernels spent a group's per-row work on each element (2^24 rows of one: 215-270 us against torch's
    # 43-57, H100), the tiles' shared-memory round trip left bf16 rows of two at 48.0 us (torch 43.3).
    small_rows_max_n: int = 4
    # Short rows that are not whole packs go through shared-memory tiles (softmax_tiled) up to this length.
    tiled_max_n: int = 128
    # Threads a tiled row, forced (0: by tiled_lanes_from; tests and probes).
    tiled_lanes: int = 0
    # Threads a tiled row from these lengths, by (direction, element size), the others one (H100, us, lanes
    # 1 / 2 / 4): float32 forward x99 47.3 / 42.6 / 45.4, x127 51.6 / 46.4 / 43.0; backward x63 65.6 / 63.8 /
    # 64.0, x127 76.5 / 71.5 / 64.2; half backward x100 36.4 / 33.1 / 36.5; half forward one thread (bf16 x127
    # 25.2 / 27.7 / 42.4).
    tiled_lanes_from: tuple = ((("fwd", 4), ((80, 2), (112, 4))), (("bwd", 4), ((48, 2), (96, 4))),
                               (("bwd", 2), ((96, 2),)))


TUNING = Tuning()
PLANS = PlanCache()


def small_lengths(dtype: str) -> list[int]:
    """The row lengths softmax_small_rows is compiled for."""
    return [n for n in (1, 2, 4) if n == 1 or (n < rw.vec(dtype) and rw.vec(dtype) % n == 0)]


def small_rows(n: int, dtype: str) -> bool:
    return n <= TUNING.small_rows_max_n and n in small_lengths(dtype)


def tiled_lanes(kind: str, n: int, dtype: str) -> int:
    size = rw.ITEMSIZE[dtype]
    if TUNING.tiled_lanes:
        return TUNING.tiled_lanes if TUNING.tiled_lanes in TILED_LANES[size] else 1
    lanes = 1
    for start, k in dict(TUNING.tiled_lanes_from).get((kind, size), ()):
        lanes = k if n >= start else lanes
    return lanes


# ---- instance names ---------------------------------------------------------------------------------------
# Template arguments by name (softmax.cu): the group GT (ANY_GROUP, 1..32, ROW_BLOCK), the FORM flags (PLAIN, STAGED,
# TWO_AHEAD, FULL_PACKS, SHIFTED), the direction (FORWARD, BACKWARD). Every kernel takes the mode at run time, its
# argument after the arrays (MODES); the per_mode forms are also compiled for each mode (a last template argument,
# SOFTMAX or LOG_SOFTMAX).

MODE_NAMES = {"softmax": "SOFTMAX", "log_softmax": "LOG_SOFTMAX"}


def per_mode(kernel: str, kind: str, dtype: str, stage: int = 0, wide: bool = False, group: int = 0,
             shift: bool = False) -> bool:
    """Forms compiled for each mode: where one instance for both spilled (the float32 run-time-group backward: 32
    bytes on sm_80 against 8) or took registers that cost occupancy (the half tiled backward: 40 against 32 on
    sm_90)."""
    if kernel == "softmax_bwd":
        return dtype == "float32" and not (stage or wide or group or shift)
    return kernel == "softmax_tiled" and kind == "bwd" and dtype in HALF_DTYPES


def _mode_arg(fixed: bool, mode: str | None) -> str:
    if not fixed:
        return ""
    assert mode in MODE_NAMES, f"a per-mode form needs its mode; got {mode!r}"
    return f", {MODE_NAMES[mode]}"


def _direction(kind: str) -> str:
    return "BACKWARD" if kind == "bwd" else "FORWARD"


def _group(g: int) -> str:
    return "ANY_GROUP" if not g else "ROW_BLOCK" if g == rw.ROW_BLOCK else str(g)


def _form(stage: int = 0, full: bool = False, shift: bool = False) -> str:
    """FORM flags: stage 1 STAGED, 2 STAGED | TWO_AHEAD (softmax_fwd's two rows ahead)."""
    flags = [f for f, on in (("STAGED", stage), ("TWO_AHEAD", stage == 2), ("FULL_PACKS", full), ("SHIFTED", shift))
             if on]
    return " | ".join(flags) or "PLAIN"


def _small_name(kind: str, dtype: str, n: int) -> str:
    return f"softmax_small_rows<{CTYPES[dtype]}, {_direction(kind)}, {n}>"


def _tiled_name(kind: str, dtype: str, lanes: int = 1, mode: str | None = None) -> str:
    fixed = per_mode("softmax_tiled", kind, dtype)
    return f"softmax_tiled<{CTYPES[dtype]}, {_direction(kind)}, {lanes}{_mode_arg(fixed, mode)}>"


def _parts_name(dtype: str, kind: str = "fwd", packs: int | None = None, shift: bool = False) -> str:
    if kind == "bwd":
        return f"softmax_bwd_parts<{CTYPES[dtype]}, {_form(shift=shift)}>"
    return f"softmax_fwd_parts<{CTYPES[dtype]}, {packs or rw.TUNING.parts_packs_softmax}, {_form(shift=shift)}>"


def _name(kind: str, dtype: str, stage: int = 0, wide: bool = False, group: int = 0, full: bool = False,
          shift: bool = False, mode: str | None = None) -> str:
    if kind == "fwd":
        return f"softmax_fwd<{CTYPES[dtype]}, {_group(group)}, {_form(stage, full, shift)}>"
    packs = rw.maxp(dtype) * (2 if wide else 1)
    fixed = per_mode("softmax_bwd", kind, dtype, stage, wide, group, shift)
    return (f"softmax_bwd<{CTYPES[dtype]}, {packs}, {_group(group)}, {_form(int(bool(stage)), shift=shift)}"
            f"{_mode_arg(fixed, mode)}>")


def _declare():
    T, S = TUNING, rw.SHORT_DTYPES
    names = (
        # the run-time-group rows (every dtype, the ladder's variants), plain and shifted
        [_name(k, t, shift=sh, mode=m) for k in ("fwd", "bwd") for t in FLOAT_DTYPES for sh in (False, True)
         for m in MODES]
        # shifted rows of a compile-time group
        + [_name(k, t, group=g, shift=True) for k in ("fwd", "bwd") for t in S for g in rw.SHORT_GROUPS]
        # staged half backward, one or two packs of y and dy a thread (wide)
        + [_name("bwd", t, True, w) for t in HALF_DTYPES for w in (False, True)]
        # staged forward, one or two rows ahead
        + [_name("fwd", t, st) for t in rw.STAGE_FWD_DTYPES for st in (1, 2)]
        + [_name("fwd", t, st, group=rw.ROW_BLOCK) for t in S for st in (1, 2)]
        # compile-time groups, and their FULL forms
        + [_name(k, t, group=g) for k in ("fwd", "bwd") for t in S for g in rw.SHORT_GROUPS + (rw.ROW_BLOCK,)]
        + [_name("fwd", t, st, group=g, full=True) for t in S
           for st, g in tuple((s, rw.ROW_BLOCK) for s in (0, 1)) + tuple((0, g) for g in rw.SHORT_GROUPS)
           if rw.has_full(t, g, st)]
        + [_name("bwd", t, True, group=rw.ROW_BLOCK) for t in HALF_DTYPES]
        # staged short rows
        + [_name("fwd", t, 1, group=g, full=f) for t in T.stage_short_dtypes for g in T.stage_short_fwd_groups
           for f in (False, True)]
        + [_name("bwd", t, True, group=g) for t in T.stage_short_dtypes for g in T.stage_short_bwd_groups]
        # pipelined long rows, plain and shifted
        + [_parts_name(t, "fwd") for t in rw.STAGE_FWD_DTYPES]
        + [_parts_name(t, "bwd") for t in rw.STAGE_FWD_DTYPES] + [rw.ZERO_WORDS]
        + [_parts_name(t, k, SHIFTED_PARTS_PACKS, shift=True) for k in ("fwd", "bwd") for t in rw.STAGE_FWD_DTYPES]
        # rows of 1, 2, 4 elements; tiled short rows
        + [_small_name(k, t, n) for k in ("fwd", "bwd") for t in FLOAT_DTYPES for n in small_lengths(t)]
        + [_tiled_name(k, t, g, m) for k in ("fwd", "bwd") for t in FLOAT_DTYPES for g in TILED_LANES[rw.ITEMSIZE[t]]
           for m in MODES])
    SOURCE.declare(names)


_declare()


# ---- planning ---------------------------------------------------------------------------------------------


def threads_of(kind: str, dtype: str, n: int | None = None) -> int:
    """Largest block of softmax_fwd / softmax_bwd (for rows of length n, when given)."""
    return rw.fwd_threads(dtype, n) if kind == "fwd" else BWD_THREADS


def stage_bytes(dtype: str, threads: int) -> int:
    """Dynamic shared memory of softmax_bwd's staged next row: y and dy, packs * threads 16-byte slots each."""
    return 2 * rw.maxp(dtype) * threads * 16


def staged_bwd(p, dtype: str, al: int, rows: int, n: int, sm_count: int) -> bool:
    """Whether a backward planned as `p` (the one-pass plan) takes the staged instance: aligned half rows that fill a
    BWD_THREADS block, on stage_bwd_paths, but not full rows with stage_bwd_full_steps row steps or more."""
    if not (dtype in HALF_DTYPES and al and p.path in TUNING.stage_bwd_paths and p.threads == BWD_THREADS
            and stage_bytes(dtype, p.threads) <= STAGE_MAX_BYTES):
        return False
    full = p.parts == 1 and n == rw.maxp(dtype) * BWD_THREADS * rw.vec(dtype)
    return not (full and rows >= TUNING.stage_bwd_full_steps * 2 * sm_count)


def _plan_small_rows(b, kind, mode, dtype, srcs, out, rows, n):
    """Rows of 1, 2 or 4 elements, elementwise: a thread's 16-byte pack holds whole rows."""
    al = rw.pointers_aligned(*srcs, out)
    work = rows * n // rw.vec(dtype) if al else rows
    grid = max(1, min(ceil_div(work, SMALL_THREADS), SMALL_BLOCKS_PER_SM * current().sm_count))
    a, g = srcs if kind == "bwd" else (srcs[0], srcs[0])
    b.launch(SOURCE.kernel(_small_name(kind, dtype, n)), grid, SMALL_THREADS,
             (a, g, out, np.int32(MODES[mode]), np.int64(rows), np.int32(al)))


def _plan_tiled(b, kind, mode, dtype, srcs, out, rows, n):
    """Short rows that are not whole packs, through a block's tile of 16-byte packs in shared memory."""
    lanes = tiled_lanes(kind, n, dtype)
    grid, threads, k, smem = rw.tiled_plan(rows, n, dtype, len(srcs), lanes)
    a, g = srcs if kind == "bwd" else (srcs[0], srcs[0])
    b.launch(SOURCE.kernel(_tiled_name(kind, dtype, lanes, mode), smem), grid, threads,
             (a, g, out, np.int32(MODES[mode]), np.int64(rows), np.int32(n), np.int32(k)), shared_mem=smem)


@dataclass(frozen=True)
class RowsChoice:
    """The kernel family that a call's rows take, and its launch: "small" (_plan_small_rows) and "tiled" (_plan_tiled)
    plan their own; "pipelined" runs blocks of parts (rw.plan_pipelined); the row kernels ("rows", "group": compiled
    for a sub-warp group, "staged_fwd", "staged_short_bwd", "staged_bwd": a resident grid, "wide_bwd": a half
    backward's two-tile rows) launch once a phase (rw.phases). kernel, plan (rw.Plan), smem, al: that launch's."""
    form: str
    kernel: object = None
    plan: object = None
    smem: int = 0
    al: int = 0


def choose_rows(kind: str, mode: str, dtype: str, srcs, out, rows: int, n: int, variant: str = "auto") -> RowsChoice:
    """The form of softmax ("fwd": srcs (x,)) or its backward ("bwd": srcs (y, dy)) over (rows, n) rows, out the
    result (Buffers, for their alignment)."""
    T = TUNING
    if variant == "auto" and small_rows(n, dtype):
        return RowsChoice("small")
    if rw.tiled_rows(T.tiled_max_n, n, rw.row_aligned(n, dtype, *srcs, out), variant, *srcs, out):
        return RowsChoice("tiled")
    long_rows = "exchange" if variant == "counter" else variant if variant in ("split", "exchange") else None
    args = dict(force=variant if variant == "block" else None, long_rows=long_rows)
    al = 0 if variant == "scalar" else rw.row_aligned(n, dtype, *srcs, out)
    shift = rw.shifted_rows(n, dtype, al, variant, *srcs, out)  # planned for n + V - 1 elements
    plan_n = n + rw.vec(dtype) - 1 if shift else n
    maxp = rw.fwd_maxp(dtype) if kind == "fwd" else rw.maxp(dtype)
    parts_packs = SHIFTED_PARTS_PACKS if shift else rw.TUNING.parts_packs_softmax  # the pipelined forward's
    sms = current().sm_count
    kernel = SOURCE.kernel(_name(kind, dtype, shift=shift, mode=mode))
    p = rw.plan(rows, plan_n, dtype, maxp, threads_of(kind, dtype, plan_n), sms, occupancy=rw.occupancy(kernel), **args)
    stage = kind == "fwd" and T.stage_fwd and rw.stage_fwd(p, dtype, al, T.stage_fwd_min_threads, T.stage_fwd_two_ahead)
    stage = stage or int(kind == "fwd" and rw.stage_short(T.stage_short_fwd_groups, T.stage_short_dtypes, p, dtype, al,
                                                          variant))
    g = rw.short_group(p, dtype, al, variant, staged=kind == "bwd" or bool(stage))  # compile-time group, if any
    smem = 16 * (p.threads // p.group) if shift and p.group < 32 else 0  # store_shifted's slots
    if shift and p.path == "subwarp" and (sg := rw.short_group(p, dtype, shift, variant)):  # the group compiled in
        kernel = SOURCE.kernel(_name(kind, dtype, group=sg, shift=True, mode=mode))
    if (kind == "bwd" and dtype in HALF_DTYPES and al and T.wide_bwd and variant == "auto" and p.parts > 1
            and n <= WIDE_BWD_MAX):
        name = _name(kind, dtype, stage=True, wide=True, mode=mode)
        kernel = SOURCE.kernel(name)
        p, smem = rw.staged_plan(kernel, name, rows, n, dtype, 2 * maxp, 1024, tensors=2, **args)
        return RowsChoice("wide_bwd", kernel, p, smem, al)
    if variant == "auto" and (pp := rw.pipelined_plan(SOURCE, _parts_name(dtype, kind, parts_packs, shift), rows,
                                                      plan_n, dtype, al or shift,
                                                      parts_packs if kind == "fwd" else maxp, p.threads, len(srcs))):
        kernel, p, smem = pp
        return RowsChoice("pipelined", kernel, p, smem, al)
    if kind == "bwd" and g and rw.stage_short(T.stage_short_bwd_groups, T.stage_short_dtypes, p, dtype, al, variant):
        name = _name(kind, dtype, stage=True, group=g, mode=mode)
        p, smem = rw.staged_plan(SOURCE.kernel(name), name, rows, n, dtype, maxp, BWD_THREADS, tensors=2, **args)
        return RowsChoice("staged_short_bwd", SOURCE.kernel(name, smem), p, smem, al)
    if kind == "bwd" and staged_bwd(p, dtype, al, rows, n, sms):
        # a resident grid that loops over rows, so each block has a next row to stage
        kernel = SOURCE.kernel(_name(kind, dtype, stage=True, group=g, mode=mode))
        p = rw.plan(rows, n, dtype, maxp, threads_of(kind, dtype, n), sms, persistent=True,
                    occupancy=rw.occupancy(kernel, lambda t: stage_bytes(dtype, t)), **args)
        return RowsChoice("staged_bwd", kernel, p, stage_bytes(dtype, p.threads), al)
    if stage:  # forward rows staged one or two rows ahead
        name = _name(kind, dtype, stage=stage, group=g, mode=mode)
        kernel = SOURCE.kernel(name)
        p, smem = rw.staged_plan(kernel, name, rows, n, dtype, maxp, threads_of(kind, dtype, n), tensors=stage, **args)
        if rw.full_rows(p, dtype, maxp, g, stage):  # the same launch bounds: the plan stands
            kernel = SOURCE.kernel(_name(kind, dtype, stage=stage, group=g, full=True, mode=mode), smem)
        return RowsChoice("staged_fwd", kernel, p, smem, al)
    if g:
        full = kind == "fwd" and rw.full_rows(p, dtype, maxp, g, 0)
        return RowsChoice("group", SOURCE.kernel(_name(kind, dtype, group=g, full=full, mode=mode)), p, smem, al)
    return RowsChoice("rows", kernel, p, smem, al)


def plan_rows(b: PlanBuilder, kind: str, mode: str, dtype: str, srcs, out, rows: int, n: int, variant: str = "auto"):
    """Record the launches of choose_rows' form for these rows (srcs, out: Buffers of `b`); returns the row plan
    (rw.Plan) where one applies."""
    c = choose_rows(kind, mode, dtype, srcs, out, rows, n, variant)
    if c.form == "small":
        return _plan_small_rows(b, kind, mode, dtype, srcs, out, rows, n)
    if c.form == "tiled":
        return _plan_tiled(b, kind, mode, dtype, srcs, out, rows, n)
    p, mode_arg = c.plan, np.int32(MODES[mode])  # every launch's argument after the arrays
    if c.form == "pipelined":
        rw.plan_pipelined(b, SOURCE, c.kernel, p, (*srcs, out, mode_arg, np.int64(rows), np.int64(n),
                                                    np.int64(p.chunk), np.int32(p.packs), np.int32(p.parts)),
                          c.smem, k=2 if kind == "fwd" else 1)
        return p
    counter = variant == "counter"
    sync, slots = rw.exchange_buffers(b, p, dtype, counter=counter)
    for phase in rw.phases(p, counter):
        b.launch(c.kernel, p.grid, p.threads,
                 (*srcs, out, mode_arg, np.int64(rows), np.int64(n), np.int64(p.chunk), np.int32(p.group),
                  np.int32(p.packs), np.int32(p.parts), np.int32(c.al), np.int32(phase), rw.ptr(sync), rw.ptr(slots)),
                 shared_mem=c.smem)
    return p


# ---- calls ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """A planned call: the axis to move last first (a copy, or None), the plan over (rows, n), and `direct`: the
    forward's one launch reads the input itself (C-contiguous, axis last) and needs no workspace."""
    moved: int | None
    plan: object
    direct: object = None


def _axis(axis, ndim: int, op: str) -> int:
    if isinstance(axis, (tuple, list)) or axis is None:
        raise TypeError(f"{op}: axis must be an int; got {axis!r}")
    return normalize_axes(axis, max(ndim, 1), op)[0]


def _build(kind, direction, mode, variant, arrays, axis, device, op) -> _Entry:
    """Validate a call of softmax ("fwd", arrays (x,)), its backward ("bwd", (y, dy)) or the in-place forward
    ("inplace", (x,)) and plan it (a miss of PLANS: every check happens here)."""
    first = arrays[0]
    dtype = checked_dtype(first, op, "y" if direction == "bwd" else "x", FLOAT_DTYPES)
    if direction == "bwd":
        check_like(kind, arrays[1], op, "dy", device, (dtype,))
        if tuple(arrays[1].shape) != tuple(first.shape):
            raise ValueError(f"{op}: dy has shape {tuple(arrays[1].shape)}; expected the shape of y {tuple(first.shape)}")
    shape = tuple(first.shape)
    ndim = len(shape)
    ax = _axis(axis, ndim, op)
    if direction == "inplace":
        check_inplace(op, first, axis)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return _Entry(None, None)
    n = shape[ax] if ndim else 1
    rows = size // n
    moved = ax if ndim and ax != ndim - 1 else None
    # the arrays the kernels read: the inputs themselves where C-contiguous with the axis last (a moved view of
    # size-one axes can be: .contiguous() returns it as it is), else fresh copies (256-byte aligned)
    aligns = [alignment(kind.ptr(a)) if kind.contiguous(a if moved is None else _moved_view(kind, a, moved)) else 256
              for a in arrays]
    aligns.append(aligns[0] if direction == "inplace" else 256)
    b = PlanBuilder(device, aligns)
    *srcs, out = b.buffers
    if direction == "inplace":
        out = srcs[0]
    plan_rows(b, "bwd" if direction == "bwd" else "fwd", mode, dtype, tuple(srcs), out, rows, n, variant)
    plan = b.plan()
    direct = plan.single if direction == "fwd" and moved is None and kind.contiguous(first) else None
    return _Entry(moved, plan, direct)


def _run(op, direction, mode, variant, arrays, axis):
    """One call on CuPy arrays or torch tensors (no autograd): plan on a miss, replay on a hit."""
    if variant != "auto" and variant not in VARIANTS:
        raise ValueError(f"{op}: variant must be one of {VARIANTS}; got {variant!r}")
    first = arrays[0]
    kind = kind_of(first, op, "y" if direction == "bwd" else "x")
    first_key = kind.key(first)  # (dtype, shape, strides, alignment, device)
    device = first_key[4]
    stream = kind.stream_on(device)
    if stream is None:  # another device is current: run on the input's
        with kind.on_device(device):
            return _run(op, direction, mode, variant, arrays, axis)
    ptr = kind.ptr(first)
    if len(arrays) == 1:
        key = (direction, mode, variant, axis, first_key)
    else:
        dy = arrays[1]
        if type(dy) is not type(first):  # (a kind check the key needs before it reads dy)
            check_like(kind, dy, op, "dy", device)
        key = (direction, mode, variant, axis, first_key, kind.key(dy))
    e = PLANS.get(key)
    if e is None:
        e = PLANS.build(key, device, _build, kind, direction, mode, variant, arrays, axis, device, op)
    direct = e.direct
    if direct is not None:  # the common call: straight to the launch
        y = kind.empty_like(first)
        direct((ptr, kind.ptr(y)), stream)
        return y
    plan = e.plan
    if direction == "inplace":
        if plan is not None:
            plan.run((ptr, ptr), stream, kind.alloc(device) if plan.workspaces else None)
        return first
    if plan is None:  # an empty array
        return kind.empty_like(first) if kind is CUPY else first.new_empty(first.shape)
    if e.moved is not None:
        ins = [_moved_last(kind, a, e.moved) for a in arrays]
    else:
        ins = [a if kind.contiguous(a) else kind.as_contiguous(a) for a in arrays]
    y = kind.empty_like(ins[0])
    pointers = [kind.ptr(a) for a in ins]
    pointers.append(kind.ptr(y))
    plan.run(pointers, stream, kind.alloc(device) if plan.workspaces else None)
    if e.moved is not None:
        y = kind.as_contiguous(_move_back(kind, y, e.moved))
    return y


def _moved_view(kind, a, axis):
    if kind is CUPY:
        import cupy

        return cupy.moveaxis(a, axis, -1)
    return a.movedim(axis, -1)


def _moved_last(kind, a, axis):
    return kind.as_contiguous(_moved_view(kind, a, axis))


def _move_back(kind, a, axis):
    if kind is CUPY:
        import cupy

        return cupy.moveaxis(a, -1, axis)
    return a.movedim(-1, axis)


def softmax_impl(x, axis=-1, mode="softmax", variant="auto"):
    """Out-of-place softmax / log_softmax through the kernels, for either kind of input (no autograd)."""
    return _run(mode, "fwd", mode, variant, (x,), axis)


def softmax_inplace_impl(x, axis=-1, variant="auto"):
    """softmax written into x (C-contiguous, axis last); returns x. No autograd."""
    return _run("softmax_", "inplace", "softmax", variant, (x,), axis)


def softmax_backward_impl(y, dy, axis=-1, mode="softmax", variant="auto"):
    """dx from the forward output y and the output gradient dy (either kind; no autograd)."""
    return _run(f"{mode}_backward", "bwd", mode, variant, (y, dy), axis)


def check_inplace(op, x, axis=-1):
    """In-place ops need a C-contiguous x with the axis last (checked before anything is written)."""
    kind = kind_of(x, op)
    if not kind.contiguous(x):
        raise ValueError(f"{op}: x must be C-contiguous to be written in place; got a non-contiguous view of shape "
                         f"{tuple(x.shape)} (use the out-of-place op, or .contiguous() first)")
    nd = len(x.shape)
    if nd and not (type(axis) is int and (axis == -1 or axis == nd - 1)) and _axis(axis, nd, op) != nd - 1:
        raise ValueError(f"{op}: in place works over the last axis only; got axis={axis} for {len(x.shape)} dimensions")


def cast_input(x, dtype, op):
    """x converted to `dtype` for softmax(dtype=) on CuPy arrays (a NumPy dtype or its name; None: as it is)."""
    if dtype is None:
        return x
    kind_of(x, op)
    import numpy

    name = "bfloat16" if str(dtype) == "bfloat16" else numpy.dtype(dtype).name
    if name not in FLOAT_DTYPES:
        raise TypeError(f"{op}: dtype must be one of {', '.join(FLOAT_DTYPES)}; got {dtype!r}")
    from .._runtime import numpy_dtype

    return x if dtype_name(x) == name else x.astype(numpy_dtype(name))
