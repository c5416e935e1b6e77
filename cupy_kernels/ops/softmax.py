"""Host side of cu_src/softmax.cu: softmax, log_softmax, in-place softmax_ and their backward."""
from __future__ import annotations

import numpy as np

from .._runtime import CTYPES, FLOAT_DTYPES, Call, KernelSource, ceil_div, current, is_torch, normalize_axes
from . import _rowwise as rw

SOURCE = KernelSource("softmax.cu")
MODES = {"softmax": 0, "log_softmax": 1}
BWD_THREADS = 512          # __launch_bounds__(512, 2) of softmax_bwd; softmax_fwd: rw.fwd_threads(dtype)
VARIANTS = ("auto", "block", "scalar", "split", "exchange", "counter")  # the ladder: see docs/softmax.md
COUNTER_EXCHANGE = {"fwd": False, "bwd": False}  # one-launch long rows: tagged words (False) or counters


# Backward: the next row's y and dy staged in shared memory (cp.async; softmax_bwd<..., true>) for
# half-type rows that fill a BWD_THREADS block (block and multi-block paths): 8192² bf16 104.9 -> 96.5 us,
# 1024x32768 bf16 79.9 -> 71.5. Smaller blocks already keep several rows per SM in flight and measured
# slower staged (4096² f32 -5%, 32768x1024 f16 -3.5%): benchmarks/notes.md.
STAGE_BWD = ("block", "multiblock")
# Full 8192-element half rows (every thread's two packs whole) stay unstaged, one block a row, from this many row
# steps of the staged grid (two blocks an SM): the GPU then hands rows to the SMs that free first, which measured
# faster there (session 17, 8192x8192 bf16: 131.3 -> 127.8 us H100, 96.0 -> 94.8 H200; 16384x8192 f16 -3.5% /
# -2.5%; 4096x8192 bf16, 15.5 steps and left staged, -1% H100) and slower with fewer steps (2048x8192: +2% H100,
# +3.5% H200) or partial packs (16384x4608 f16 +8%). A probe switch.
STAGE_BWD_FULL_STEPS = 16
STAGE_MAX_BYTES = 40 * 1024  # the default 48 KB dynamic window, less the static scratch and exchange copy
# Forward rows of >= 512-thread blocks staged too (rw.stage_fwd), one-block rows two rows ahead: 1024x32768 bf16
# softmax 44.1 -> 42.2 us, log_softmax 41.9 -> 40.8 (layer_norm / rms_norm measured slower: 44.8 -> 49.6,
# 36.5 -> 37.2, so norm.py stages one row ahead). Probe switches.
STAGE_FWD = {"on": True, "two_ahead": True}
# float32 sub-warp rows of 8-thread groups (65..128 elements) staged, forward and backward, as norm's (a resident
# grid, each group copying its next row in). H100, same process (`benchmarks/runs/issue4-session23/10-*`, us):
# forward 65536x128 softmax 20.7 -> 20.1, log_softmax 20.9 -> 20.2, 131072x128 42.8 -> 42.5; backward 65536x128
# 30.6 -> 29.9 / 30.7 -> 30.1 but 131072x128 63.4 -> 63.7 / 63.3 -> 63.8, and groups of 16 and 32 (65536x256,
# 32768x512) equal: only groups of 8. Probe switches.
STAGE_SHORT_BWD = {"on": True, "groups": (8,), "dtypes": ("float32",)}
STAGE_SHORT_FWD = {"on": True, "groups": (8,), "dtypes": ("float32",)}


# Backward half rows longer than one 512-thread block holds (8192 elements) and up to 32768: the wide
# form (4 packs of y and dy per thread, 1024-thread blocks, staged in 128 KB): one block per row, no
# exchange between blocks. A switch for the ladder row and the tests.
WIDE_BWD = {"on": True}
WIDE_BWD_MAX = 32768


# Rows of one element, and rows shorter than a 16-byte pack that divide it (2 float32, 2 or 4 half), take an
# elementwise kernel (softmax_small_rows: a thread's pack holds whole rows): the row kernels spent a group's per-row
# instructions on each element (H100, 2^24 rows of one: 215-270 us against torch's 43-57, the floor 21-42), the
# tiles' shared-memory round trip left bf16 rows of two at 48.0 us and of four at 35.3 (torch 43.3 / 45.2, the floor
# 21). max_n 1 sends rows of 2 and 4 to the tiles (probes, tests).
SMALL_ROWS = {"max_n": 4}
SMALL_THREADS, SMALL_BLOCKS_PER_SM = 256, 8


def small_lengths(dtype: str) -> list[int]:
    """The row lengths softmax_small_rows is compiled for."""
    return [n for n in (1, 2, 4) if n == 1 or (n < rw.vec(dtype) and rw.vec(dtype) % n == 0)]


def small_rows(n: int, dtype: str) -> bool:
    return n <= SMALL_ROWS["max_n"] and n in small_lengths(dtype)


def _small_name(kind: str, dtype: str, mode: str, n: int) -> str:
    return f"softmax_small_rows<{CTYPES[dtype]}, {MODES[mode]}, {'true' if kind == 'bwd' else 'false'}, {n}>"


# Short rows that are not whole packs take the tiled kernels (softmax_tiled: a block's rows as one tile of 16-byte
# packs in shared memory) up to max_n elements; "aligned" sends whole-pack rows there too, "lanes" forces that many
# threads a row (probes).
TILED = {"on": True, "max_n": 128, "aligned": False, "lanes": 0}
# Threads a row of the instances compiled, by element size (probes force any of them; half types' 4 spilled 48 bytes
# in the softmax backward, sm_90).
TILED_LANES = {4: (1, 2, 4), 2: (1, 2), 8: (1,)}
# Rows take 2 or 4 threads a row from these lengths, the others one, by element size (H100, `scripts/tiled_probe.py
# --lanes`, us, lanes 1 / 2 / 4). float32 (`benchmarks/runs/issue4-session26/08-*`): forward x65 42.4 / 43.2 / 49.9,
# x99 47.3 / 42.6 / 45.4, x127 51.6 / 46.4 / 43.0 (torch 46.5); backward x63 65.6 / 63.8 / 64.0, x99 72.4 / 67.0 /
# 63.6, x127 76.5 / 71.5 / 64.2. Half types, rows by words (`issue4-session27/04-*`): forward one thread (bf16 x127
# 25.2 / 27.7 / 42.4); backward x65 32.0 / 33.6 / 37.5, x100 36.4 / 33.1 / 36.5, x127 40.8 / 36.6 / 41.8.
TILED_LANES_FROM = {("fwd", 4): ((80, 2), (112, 4)), ("bwd", 4): ((48, 2), (96, 4)), ("fwd", 2): (),
                    ("bwd", 2): ((96, 2),)}


def tiled_lanes(kind: str, n: int, dtype: str) -> int:
    if TILED["lanes"]:
        return TILED["lanes"] if TILED["lanes"] in TILED_LANES[rw.ITEMSIZE[dtype]] else 1
    lanes = 1
    for start, k in TILED_LANES_FROM.get((kind, rw.ITEMSIZE[dtype]), ()):
        lanes = k if n >= start else lanes
    return lanes


def _tiled_name(kind: str, dtype: str, mode: str, lanes: int = 1) -> str:
    return (f"softmax_tiled<{CTYPES[dtype]}, {MODES[mode]}, {'true' if kind == 'bwd' else 'false'}"
            f"{f', {lanes}' if lanes > 1 else ''}>")


# Packs a thread of the pipelined forward on shifted rows: at 8 (rw.PARTS_PACKS) the half instances spilled 32-74 bytes.
SHIFTED_PARTS_PACKS = 4


def _parts_name(mode: str, dtype: str, kind: str = "fwd", packs: int | None = None, shift: bool = False) -> str:
    if kind == "bwd":
        return f"softmax_bwd_parts<{CTYPES[dtype]}, {MODES[mode]}{', true' if shift else ''}>"
    return (f"softmax_fwd_parts<{CTYPES[dtype]}, {MODES[mode]}, {packs or rw.PARTS_PACKS['softmax']}"
            f"{', true' if shift else ''}>")


def _name(kind: str, dtype: str, mode: str, stage: int = 0, wide: bool = False, group: int = 0,
          full: bool = False, shift: bool = False) -> str:
    st = rw.stage_token(stage)
    if kind == "fwd":
        tail = f", {group}, false, true" if shift else rw.group_token(group, full)
        return f"softmax_fwd<{CTYPES[dtype]}, {MODES[mode]}, {st}{tail}>"
    tail = f", {group}, true" if shift else rw.group_token(group)
    return f"softmax_bwd<{CTYPES[dtype]}, {MODES[mode]}, {st}, {rw.maxp(dtype) * (2 if wide else 1)}{tail}>"


SOURCE.declare([_name(k, t, m, shift=sh) for k in ("fwd", "bwd") for t in FLOAT_DTYPES for m in MODES
                for sh in (False, True)]
               + [_name(k, t, m, group=g, shift=True) for k in ("fwd", "bwd") for t in rw.SHORT_DTYPES for m in MODES
                  for g in rw.SHORT_GROUPS]
               + [_name("bwd", t, m, True, w) for t in ("float16", "bfloat16") for m in MODES for w in (False, True)]
               + [_name("fwd", t, m, st) for t in rw.STAGE_FWD_DTYPES for m in MODES for st in (1, 2)]
               + [_name(k, t, m, group=g) for k in ("fwd", "bwd") for t in rw.SHORT_DTYPES for m in MODES
                  for g in rw.SHORT_GROUPS + (rw.ROW_BLOCK,)]
               + [_name("fwd", t, m, st, group=rw.ROW_BLOCK) for t in rw.SHORT_DTYPES for m in MODES for st in (1, 2)]
               + [_name("fwd", t, m, st, group=g, full=True) for t in rw.SHORT_DTYPES for m in MODES
                  for st, g in tuple((s, rw.ROW_BLOCK) for s in (0, 1)) + tuple((0, g) for g in rw.SHORT_GROUPS)
                  if rw.has_full(t, g, st)]
               + [_name("bwd", t, m, True, group=rw.ROW_BLOCK) for t in ("float16", "bfloat16") for m in MODES]
               + [_name("fwd", t, m, 1, group=g, full=f) for t in STAGE_SHORT_FWD["dtypes"] for m in MODES
                  for g in STAGE_SHORT_FWD["groups"] for f in (False, True)]
               + [_name("bwd", t, m, True, group=g) for t in STAGE_SHORT_BWD["dtypes"] for m in MODES
                  for g in STAGE_SHORT_BWD["groups"]]
               + [_parts_name(m, t, "fwd", k) for t in rw.STAGE_FWD_DTYPES for m in MODES for k in (4, 8)]
               + [_parts_name(m, t, "bwd") for t in rw.STAGE_FWD_DTYPES for m in MODES] + [rw.ZERO_WORDS]
               + [_parts_name(m, t, k, SHIFTED_PARTS_PACKS, shift=True) for k in ("fwd", "bwd")
                  for t in rw.STAGE_FWD_DTYPES for m in MODES]
               + [_small_name(k, t, m, n) for k in ("fwd", "bwd") for t in FLOAT_DTYPES for m in MODES
                  for n in small_lengths(t)]
               + [_tiled_name(k, t, m, g) for k in ("fwd", "bwd") for t in FLOAT_DTYPES for m in MODES
                  for g in TILED_LANES[rw.ITEMSIZE[t]]])


def _detach(x):
    return x.detach() if is_torch(x) else x


def _axis(axis, ndim: int, op: str) -> int:
    if isinstance(axis, (tuple, list)) or axis is None:
        raise TypeError(f"{op}: axis must be an int; got {axis!r}")
    return normalize_axes(axis, max(ndim, 1), op)[0]


def threads_of(kind: str, dtype: str, n: int | None = None) -> int:
    """Largest block of softmax_fwd / softmax_bwd (for rows of length n, when given)."""
    return rw.fwd_threads(dtype, n) if kind == "fwd" else BWD_THREADS


def stage_bytes(dtype: str, threads: int) -> int:
    """Dynamic shared memory of softmax_bwd's staged next row: y and dy, packs * threads 16-byte slots each."""
    return 2 * rw.maxp(dtype) * threads * 16


def staged_bwd(p, dtype: str, al: int, rows: int, n: int, sm_count: int) -> bool:
    """Whether a backward planned as `p` (the one-pass plan) takes the staged instance: aligned half rows that fill
    a BWD_THREADS block, on STAGE_BWD's paths, but not full rows with STAGE_BWD_FULL_STEPS row steps or more."""
    if not (dtype in ("float16", "bfloat16") and al and p.path in STAGE_BWD and p.threads == BWD_THREADS
            and stage_bytes(dtype, p.threads) <= STAGE_MAX_BYTES):
        return False
    full = p.parts == 1 and n == rw.maxp(dtype) * BWD_THREADS * rw.vec(dtype)
    return not (full and rows >= STAGE_BWD_FULL_STEPS * 2 * sm_count)


def _launch_small_rows(kind, mode, dtype, srcs, out, rows, n):
    al = rw.pointers_aligned(*srcs, out)
    work = rows * n // rw.vec(dtype) if al else rows
    grid = max(1, min(ceil_div(work, SMALL_THREADS), SMALL_BLOCKS_PER_SM * current().sm_count))
    a, g = srcs if kind == "bwd" else (srcs[0], srcs[0])
    SOURCE.kernel(_small_name(kind, dtype, mode, n))((grid,), (SMALL_THREADS,),
                                                     (a, g, out, np.int64(rows), np.int32(al)))


def _launch_tiled(kind, mode, dtype, srcs, out, rows, n):
    lanes = tiled_lanes(kind, n, dtype)
    grid, threads, k, smem = rw.tiled_plan(rows, n, dtype, len(srcs), lanes)
    a, g = srcs if kind == "bwd" else (srcs[0], srcs[0])
    SOURCE.kernel(_tiled_name(kind, dtype, mode, lanes), smem)(
        (grid,), (threads,), (a, g, out, np.int64(rows), np.int32(n), np.int32(k)), shared_mem=smem)


def _launch(call, kind, mode, dtype, srcs, out, rows, n, variant="auto"):
    if variant == "auto" and small_rows(n, dtype):
        return _launch_small_rows(kind, mode, dtype, srcs, out, rows, n)
    if rw.tiled_rows(TILED, n, rw.aligned(n, dtype, *srcs, out), variant, *srcs, out):  # (shorter rows: above)
        return _launch_tiled(kind, mode, dtype, srcs, out, rows, n)
    long_rows = "exchange" if variant == "counter" else variant if variant in ("split", "exchange") else None
    args = dict(force=variant if variant == "block" else None, long_rows=long_rows)
    al = 0 if variant == "scalar" else rw.aligned(n, dtype, *srcs, out)
    shift = rw.shifted_rows(n, dtype, al, variant, *srcs, out)  # planned for n + V - 1 elements
    plan_n = n + rw.vec(dtype) - 1 if shift else n
    maxp = rw.fwd_maxp(dtype) if kind == "fwd" else rw.maxp(dtype)
    parts_packs = SHIFTED_PARTS_PACKS if shift else rw.PARTS_PACKS["softmax"]  # the pipelined forward's
    name = _name(kind, dtype, mode, shift=shift)
    kernel = SOURCE.kernel(name)
    p = rw.plan(rows, plan_n, dtype, maxp, threads_of(kind, dtype, plan_n), current().sm_count,
                occupancy=rw.occupancy(kernel, name), **args)
    stage = kind == "fwd" and STAGE_FWD["on"] and rw.stage_fwd(p, dtype, al, STAGE_FWD["two_ahead"])
    stage = stage or int(kind == "fwd" and rw.stage_short(STAGE_SHORT_FWD, p, dtype, al, variant))
    g = rw.short_group(p, dtype, al, variant, staged=kind == "bwd" or bool(stage))  # compile-time group, if any
    smem = 16 * (p.threads // p.group) if shift and p.group < 32 else 0  # store_shifted's slots
    if shift and p.path == "subwarp" and (sg := rw.short_group(p, dtype, shift, variant)):  # the group compiled in
        kernel = SOURCE.kernel(_name(kind, dtype, mode, group=sg, shift=True))
    if (kind == "bwd" and dtype in ("float16", "bfloat16") and al and WIDE_BWD["on"] and variant == "auto"
            and p.parts > 1 and n <= WIDE_BWD_MAX):
        name = _name(kind, dtype, mode, stage=True, wide=True)
        kernel = SOURCE.kernel(name)
        p, smem = rw.staged_plan(kernel, name, rows, n, dtype, 2 * maxp, 1024, tensors=2, **args)
    elif variant == "auto" and (pp := rw.pipelined_plan(SOURCE, _parts_name(mode, dtype, kind, parts_packs, shift),
                                                        rows, plan_n, dtype, al or shift,
                                                        parts_packs if kind == "fwd" else maxp, p.threads, len(srcs))):
        kernel, p, smem = pp
        rw.launch_pipelined(call, SOURCE, kernel, p, (*srcs, out, np.int64(rows), np.int64(n), np.int64(p.chunk),
                                                       np.int32(p.packs), np.int32(p.parts)),
                            smem, k=2 if kind == "fwd" else 1)
        return p
    elif kind == "bwd" and g and rw.stage_short(STAGE_SHORT_BWD, p, dtype, al, variant):  # sub-warp groups
        name = _name(kind, dtype, mode, stage=True, group=g)
        p, smem = rw.staged_plan(SOURCE.kernel(name), name, rows, n, dtype, maxp, BWD_THREADS, tensors=2, **args)
        kernel = SOURCE.kernel(name, smem)
    elif kind == "bwd" and staged_bwd(p, dtype, al, rows, n, current().sm_count):
        # a resident grid that loops over rows, so each block has a next row to stage
        name = _name(kind, dtype, mode, stage=True, group=g)
        kernel = SOURCE.kernel(name)
        p = rw.plan(rows, n, dtype, maxp, threads_of(kind, dtype, n), current().sm_count, persistent=True,
                    occupancy=rw.occupancy(kernel, name, lambda t: stage_bytes(dtype, t)), **args)
        smem = stage_bytes(dtype, p.threads)
    elif stage:  # forward rows staged one or two rows ahead
        name = _name(kind, dtype, mode, stage=stage, group=g)
        kernel = SOURCE.kernel(name)
        p, smem = rw.staged_plan(kernel, name, rows, n, dtype, maxp, threads_of(kind, dtype, n), tensors=stage, **args)
        if rw.full_rows(p, dtype, maxp, g, stage):  # the same launch bounds: the plan stands
            kernel = SOURCE.kernel(_name(kind, dtype, mode, stage=stage, group=g, full=True), smem)
    elif g:
        full = kind == "fwd" and rw.full_rows(p, dtype, maxp, g, 0)
        kernel = SOURCE.kernel(_name(kind, dtype, mode, group=g, full=full))
    counter = variant == "counter" or (variant == "auto" and COUNTER_EXCHANGE[kind])
    sync, slots = rw.exchange_buffers(call, p, dtype, counter=counter)
    for phase in rw.phases(p, counter):
        kernel((p.grid,), (p.threads,),
               (*srcs, out, np.int64(rows), np.int64(n), np.int64(p.chunk), np.int32(p.group), np.int32(p.packs),
                np.int32(p.parts), np.int32(al), np.int32(phase), sync, slots), shared_mem=smem)
    return p


def _rows_of(call, a, axis):
    """(rows, n) C-contiguous data of `a` with `axis` last (a view when it already is), the moved shape."""
    import cupy

    moved = a if axis == a.ndim - 1 else cupy.moveaxis(a, axis, -1)
    if not moved.flags.c_contiguous:
        tmp = call.empty(moved.shape, _dtype(a))
        tmp[...] = moved
        moved = tmp
    n = moved.shape[-1] if moved.ndim else 1
    return moved.reshape(-1, n), moved.shape


def _dtype(a) -> str:
    return "bfloat16" if a.dtype.name == "bfloat16" else str(a.dtype)


def _finish(call, y2, moved_shape, shape, axis, ndim):
    """The result in the input's layout (a copy only when the axis was moved)."""
    import cupy

    y = y2.reshape(moved_shape)
    if ndim and axis != ndim - 1:
        out = call.empty(shape, _dtype(y))
        out[...] = cupy.moveaxis(y, -1, axis)
        y = out
    return y.reshape(shape)


def softmax_impl(x, axis=-1, mode="softmax", variant="auto"):
    """Out-of-place softmax / log_softmax through the kernels, for either kind of input (no autograd)."""
    if variant not in VARIANTS:
        raise ValueError(f"{mode}: variant must be one of {VARIANTS}; got {variant!r}")
    with Call(mode, x) as call:
        xc = call.arg(_detach(x), "x", dtypes=FLOAT_DTYPES)
        dtype = _dtype(xc)
        ax = _axis(axis, xc.ndim, mode)
        shape0 = xc.shape
        if xc.ndim == 0:  # one element: a row of length 1
            xc, ax = xc.reshape(1), 0
        if xc.size == 0:
            return call.result(call.empty(shape0, dtype))
        x2, moved_shape = _rows_of(call, xc, ax)
        y2 = call.empty(x2.shape, dtype)
        _launch(call, "fwd", mode, dtype, (x2,), y2, x2.shape[0], x2.shape[1], variant)
        return call.result(_finish(call, y2, moved_shape, xc.shape, ax, xc.ndim).reshape(shape0))


def check_inplace(op, x, axis=-1):
    """In-place ops need a C-contiguous x with the axis last (checked before anything is written)."""
    if not is_torch(x):
        from .._runtime import is_cupy

        if not is_cupy(x):
            return  # Call reports the kind
    if not (x.is_contiguous() if is_torch(x) else x.flags.c_contiguous):
        raise ValueError(f"{op}: x must be C-contiguous to be written in place; got a non-contiguous view of "
                         f"shape {tuple(x.shape)} (use the out-of-place op, or .contiguous() first)")
    if x.ndim and _axis(axis, x.ndim, op) != x.ndim - 1:
        raise ValueError(f"{op}: in place works over the last axis only; got axis={axis} for {x.ndim} dimensions")


def softmax_inplace_impl(x, axis=-1, variant="auto"):
    """softmax written into x (C-contiguous, axis last); returns x. No autograd."""
    check_inplace("softmax_", x, axis)
    with Call("softmax_", x) as call:
        xc = call.arg(_detach(x), "x", dtypes=FLOAT_DTYPES)
        if xc.size:
            n = xc.shape[-1] if xc.ndim else 1
            x2 = xc.reshape(-1, n)
            _launch(call, "fwd", "softmax", _dtype(xc), (x2,), x2, x2.shape[0], n, variant)
    return x


def softmax_backward_impl(y, dy, axis=-1, mode="softmax", variant="auto"):
    """dx from the forward output y and the output gradient dy (either kind; no autograd)."""
    op = f"{mode}_backward"
    with Call(op, y, "y") as call:
        yc = call.arg(_detach(y), "y", dtypes=FLOAT_DTYPES)
        dyc = call.arg(_detach(dy), "dy", dtypes=(_dtype(yc),))
        if tuple(dyc.shape) != tuple(yc.shape):
            raise ValueError(f"{op}: dy has shape {tuple(dyc.shape)}; expected the shape of y {tuple(yc.shape)}")
        dtype = _dtype(yc)
        ax = _axis(axis, yc.ndim, op)
        shape0 = yc.shape
        if yc.ndim == 0:
            yc, dyc, ax = yc.reshape(1), dyc.reshape(1), 0
        if yc.size == 0:
            return call.result(call.empty(shape0, dtype))
        y2, moved_shape = _rows_of(call, yc, ax)
        d2, _ = _rows_of(call, dyc, ax)
        dx2 = call.empty(y2.shape, dtype)
        _launch(call, "bwd", mode, dtype, (y2, d2), dx2, y2.shape[0], y2.shape[1], variant)
        return call.result(_finish(call, dx2, moved_shape, yc.shape, ax, yc.ndim).reshape(shape0))


# ---- public API: torch tensors go through the custom ops (autograd, torch.compile) -------------


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along `axis`, in the input's dtype (statistics in float32)."""
    if is_torch(x):
        from .. import torch_ops

        return torch_ops.softmax(x, axis)
    return softmax_impl(x, axis, "softmax")


def log_softmax(x, axis=-1):
    """x - max - log(sum(exp(x - max))) along `axis`."""
    if is_torch(x):
        from .. import torch_ops

        return torch_ops.log_softmax(x, axis)
    return softmax_impl(x, axis, "log_softmax")


def softmax_(x, axis=-1):
    """softmax written into x (C-contiguous, axis last); returns x. Torch tensors keep autograd: the
    backward uses only the output."""
    if is_torch(x):
        from .. import torch_ops

        return torch_ops.softmax_(x, axis)
    return softmax_inplace_impl(x, axis)


def softmax_backward(y, dy, axis=-1):
    """Gradient of softmax: y * (dy - sum(dy * y)) along `axis`, from the output y."""
    return softmax_backward_impl(y, dy, axis, "softmax")


def log_softmax_backward(y, dy, axis=-1):
    """Gradient of log_softmax: dy - exp(y) * sum(dy) along `axis`, from the output y."""
    return softmax_backward_impl(y, dy, axis, "log_softmax")
