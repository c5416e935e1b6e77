"""Host side of cu_src/pad.cu: numpy.pad's constant / edge / reflect / symmetric / wrap modes and
brick-wall tiling in one kernel per call, with a deterministic gather-sum backward.

`pad(x, pad_width, mode="constant", constant_values=0, stagger=0)` follows numpy.pad for pad_width
and constant_values (bit-identical results on every dtype); mode "brick" repeats the array's last
two axes as a tile on a brick lattice: out[..., r, c] = x[..., (r - p0) mod th,
(c - p1 - stagger * floor((r - p0) / th)) mod tw] (leading axes wrap; stagger 0 is "wrap").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._runtime import Call, KernelSource, kind_of, ceil_div, cupy_dtype, current, dtype_name, is_torch, resident_blocks

SOURCE = KernelSource("pad.cu")
MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "brick")
KMODE = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 2, "wrap": 2, "brick": 3}
FOLD = {"wrap": 0, "reflect": 1, "symmetric": 2, "constant": 0, "edge": 0, "brick": 0}
UTYPE = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64")
GRAD_DTYPES = ("float16", "bfloat16", "float32", "float64")
MAXD = 6          # PAD_MAXD in pad.cu
NCONST = 2 * MAXD + 2
NARROW_CHUNKS = 32  # rows with fewer 16-byte chunks take the flat (per-element) path
FOLD_KIND = {"edge": 0, "reflect": 1, "symmetric": 1, "wrap": 1, "brick": 2}  # FOLD_*_AXIS
ACC = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
CT = {"float16": "half", "bfloat16": "bfloat16", "float32": "float", "float64": "double"}


def _forward_name(kmode, itemsize):
    return f"pad_forward<{kmode}, {UTYPE[itemsize]}>"


def _gather_name(fkind, tin, tout):
    return f"pad_gather<{fkind}, {CT[tin]}, {CT[tout]}>"


def _gather_pairs():
    pairs = []
    for t in GRAD_DTYPES:
        acc = ACC[t]
        pairs += [(t, t), (t, acc), (acc, acc), (acc, t)]
    return list(dict.fromkeys(pairs))


def _staged_name(itemsize):
    return f"pad_brick_staged<{UTYPE[itemsize]}>"


def _rows_name(kmode, itemsize):
    return f"pad_rows<{kmode}, {UTYPE[itemsize]}>"


def _periodic_name(itemsize):
    return f"pad_periodic<{UTYPE[itemsize]}>"


SOURCE.declare([_forward_name(m, s) for m in range(4) for s in UTYPE] + [_staged_name(s) for s in UTYPE]
               + [_rows_name(m, s) for m in range(4) for s in UTYPE] + [_periodic_name(s) for s in UTYPE]
               + [_gather_name(k, a, b) for k in range(3) for a, b in _gather_pairs()])


# ---- arguments, exactly as numpy.pad reads them ---------------------------------------------------

def _as_pairs(x, ndim, as_index=False):
    """numpy.pad's broadcast of pad_width / constant_values to ndim (before, after) pairs."""
    x = np.array(x)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
    if x.ndim < 3:
        if x.size == 1:
            x = x.ravel()
            if as_index and x[0] < 0:
                raise ValueError(f"pad: pad_width can't contain negative values; got {x[0]}")
            return [(x[0], x[0])] * ndim
        if x.size == 2 and x.shape != (2, 1):
            x = x.ravel()
            if as_index and (x[0] < 0 or x[1] < 0):
                raise ValueError(f"pad: pad_width can't contain negative values; got {x.tolist()}")
            return [(x[0], x[1])] * ndim
    if as_index and x.size and x.min() < 0:
        raise ValueError(f"pad: pad_width can't contain negative values; got {x.tolist()}")
    try:
        return [tuple(p) for p in np.broadcast_to(x, (ndim, 2)).tolist()]
    except ValueError:
        what = "pad_width" if as_index else "constant_values"
        raise ValueError(f"pad: {what} must be a scalar, a (before, after) pair or one pair per axis "
                         f"(shape ({ndim}, 2)) for an array of {ndim} dimensions; got shape {x.shape}") from None


def normalize_pad_width(pad_width, ndim):
    """[(before, after)] * ndim as Python ints, with numpy.pad's rules (dicts, integral type, rounding)."""
    if isinstance(pad_width, dict):
        seq = [(0, 0)] * ndim
        for axis, width in pad_width.items():
            if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
                raise ValueError(f"pad: pad_width key {axis!r} is not an axis of an array of {ndim} dimensions")
            seq[axis] = (width, width) if isinstance(width, (int, np.integer)) else tuple(width)
        pad_width = seq
    arr = np.asarray(pad_width)
    if arr.dtype.kind != "i":
        raise TypeError(f"pad: pad_width must be of integral type; got dtype {arr.dtype}")
    return [(int(b), int(a)) for b, a in _as_pairs(arr, ndim, as_index=True)]


def constant_bits(np_dtype, constant_values, ndim, pads):
    """Raw bits of each (axis, side) pad value after numpy's assignment cast into the array's dtype."""
    values = _as_pairs(constant_values, ndim)
    size = np_dtype.itemsize
    bits = []
    for (lo, hi), (b, a) in zip(values, pads):
        for v, w in ((lo, b), (hi, a)):
            cell = np.zeros(1 if w else 0, dtype=np_dtype)
            cell[:] = v  # numpy.pad does padded[pad area] = value: the same cast, the same errors
            bits.append(int(cell.view(f"u{size}")[0]) if w else 0)
    return bits


@dataclass
class Spec:
    """A validated pad call: pads per axis, mode, raw constant bits, stagger (brick)."""
    shape: tuple
    pads: list
    mode: str
    bits: list = field(default_factory=list)  # 2 per axis, constant mode only
    stagger: int = 0

    @property
    def out_shape(self):
        return tuple(n + b + a for n, (b, a) in zip(self.shape, self.pads))


def normalize(shape, np_dtype, pad_width, mode="constant", constant_values=0, stagger=0) -> Spec:
    shape = tuple(int(s) for s in shape)
    ndim = len(shape)
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"pad: mode {mode!r} is not supported; expected one of {', '.join(MODES)}")
    if not isinstance(stagger, (int, np.integer)) or isinstance(stagger, bool):
        raise TypeError(f"pad: stagger must be an int; got {type(stagger).__name__}")
    if stagger and mode != "brick":
        raise ValueError(f"pad: stagger applies to mode 'brick' only; got stagger={stagger} with mode {mode!r}")
    pads = normalize_pad_width(pad_width, ndim)
    if mode == "constant":
        return Spec(shape, pads, mode, constant_bits(np_dtype, constant_values, ndim, pads))
    if mode == "brick" and ndim < 2:
        raise ValueError(f"pad: mode 'brick' tiles the last two axes; got an array of shape {shape}")
    for axis, (n, (b, a)) in enumerate(zip(shape, pads)):
        if n == 0 and (b or a):
            raise ValueError(f"pad: can't extend empty axis {axis} using modes other than 'constant' "
                             f"(mode {mode!r}, shape {shape}, pad {(b, a)})")
    stagger = int(stagger)
    if mode == "brick":
        th, tw = shape[-2], shape[-1]
        if tw == 0 or th == 0 or stagger % tw == 0 or pads[-2] == (0, 0):
            mode, stagger = "wrap", 0  # no band is shifted: brick is wrap
        else:
            stagger %= tw
    return Spec(shape, pads, mode, [], stagger)


# ---- pure NumPy reference: the per-axis index maps the kernel computes ---------------------------

def index_map(mode, n, before, after):
    """Source index of each output coordinate of one axis (-1: constant pad), as numpy.pad pads."""
    k = np.arange(-before, n + after, dtype=np.int64)
    if mode == "constant":
        return np.where((k >= 0) & (k < n), k, -1)
    if mode == "edge":
        return np.clip(k, 0, n - 1)
    fold = FOLD["wrap" if mode == "brick" else mode]
    P = n if fold == 0 else (2 * n - 2 if n > 1 else 1) if fold == 1 else 2 * n
    q = np.mod(k, P)
    return np.where(q < n, q, P - q if fold == 1 else P - 1 - q)


def reference(a, spec: Spec):
    """numpy.pad by gathering through index_map (brick: shifted rows), for CPU checks and docs."""
    a = np.asarray(a)
    maps = [index_map(spec.mode, n, b, e) for n, (b, e) in zip(a.shape, spec.pads)]
    if spec.mode == "constant":
        out = np.empty(spec.out_shape, dtype=a.dtype)
        if a.size:
            out[...] = a[np.ix_(*[np.clip(m, 0, None) for m in maps])]
        vals = np.array(spec.bits, dtype=np.uint64).astype(f"u{a.dtype.itemsize}").view(a.dtype)
        for axis, (n, (b, _)) in enumerate(zip(a.shape, spec.pads)):  # later axes overwrite corners
            coord = np.arange(out.shape[axis]).reshape([-1 if i == axis else 1 for i in range(a.ndim)])
            for side, mask in ((0, coord < b), (1, coord >= b + n)):
                out[np.broadcast_to(mask, out.shape)] = vals[2 * axis + side]
        return out
    if spec.mode == "brick":
        th, tw = a.shape[-2:]
        p0, p1 = spec.pads[-2][0], spec.pads[-1][0]
        rows = np.arange(spec.out_shape[-2]) - p0
        cols = np.arange(spec.out_shape[-1]) - p1
        band = np.floor_divide(rows, th)
        src_c = np.mod(cols[None, :] - spec.stagger * band[:, None], tw)
        lead = a[np.ix_(*maps[:-2])] if a.ndim > 2 else a
        return lead[..., np.mod(rows, th)[:, None], src_c]
    return a[np.ix_(*maps)]


# ---- the kernel's view of a problem ---------------------------------------------------------------

class _TooManyAxes(Exception):
    pass


@dataclass
class Plan:
    kmode: int
    fold: int
    outer: list         # [(out, n, before, stride)]
    last: tuple         # (out, n, before, stride)
    blk: int
    contig: bool
    cval: list
    stagger: int
    rows: int
    wtot: int
    threads: int = 256
    unroll: int = 0     # chunks a thread per tile ("tiled" path)
    tpr: int = 0        # units (tiles) per row
    chunks: int = 0     # 16-byte chunks per unit
    path: str = "flat"  # the kernel: one of PATHS

    @property
    def tiles(self):
        return self.rows * self.tpr

    def args(self):
        """Kernel arguments after (x, y), in pad_forward's order."""
        outer = list(self.outer) + [(1, 1, 0, 0)] * (MAXD - len(self.outer))
        a = [np.int64(self.rows), np.int64(self.wtot), np.int64(self.tiles), np.int64(self.tpr),
             np.int32(self.chunks), np.int32(self.unroll), np.int32(len(self.outer)),
             np.int32(self.fold)]
        for ax in outer:
            a += [np.int64(v) for v in ax]
        a += [np.int64(v) for v in self.last] + [np.int64(self.blk), np.int64(self.stagger),
                                                 np.int32(int(self.contig))]
        a += [np.uint64(v) for v in self.cval]
        return tuple(a)


def _choose_tiling(cpr, max_unroll=4):
    """(threads, unroll, tiles per row) covering `cpr` chunks with the fewest idle slots."""
    best = None
    for unroll in range(max_unroll, 0, -1):
        for threads in range(256, 63, -32):
            tile = threads * unroll
            tpr = ceil_div(cpr, tile)
            util = cpr / (tpr * tile)
            key = (math.floor(util * 25), unroll, threads)  # within 4% of utilisation: more chunks a thread
            if best is None or key > best[0]:
                best = (key, threads, unroll, tpr)
    return best[1:]


def plan(shape, strides, itemsize, spec: Spec) -> Plan:
    """Merge axes and pick the launch; `strides` in elements of x. Raises _TooManyAxes."""
    mode = spec.mode
    kmode = KMODE[mode]
    brick = mode == "brick"
    ndim = len(shape)
    bits = spec.bits or [0] * (2 * ndim)
    # (n, before, after, stride, (lo bits, hi bits)) per axis
    axes = [(n, b, a, st, (bits[2 * i], bits[2 * i + 1])) for i, (n, (b, a), st) in
            enumerate(zip(shape, spec.pads, strides))]
    keep = ndim - 2 if brick else ndim
    axes = [ax for i, ax in enumerate(axes) if i >= keep or not (ax[0] == 1 and ax[1] == 0 and ax[2] == 0)]
    merged = []
    for i, ax in enumerate(axes):
        special = brick and i >= len(axes) - 2
        if merged and not special and not merged[-1][5]:
            n0, b0, a0, s0, _, _ = merged[-1]
            n, b, a, st, _ = ax
            if b0 == a0 == 0 and b == a == 0 and s0 == st * n:
                merged[-1] = (n0 * n, 0, 0, st, (0, 0), False)
                continue
        merged.append(ax + (special,))
    blk = 1
    if not brick and len(merged) >= 2 and merged[-1][1] == merged[-1][2] == 0 and merged[-1][3] == 1:
        blk = merged.pop()[0]
    if not merged:
        merged = [(1, 0, 0, 0, (0, 0), False)]
    *outer, last = merged
    if len(outer) > MAXD:
        raise _TooManyAxes(len(outer))
    cval = [0] * NCONST
    for d, ax in enumerate(outer):
        cval[2 * d], cval[2 * d + 1] = ax[4]
    cval[2 * MAXD], cval[2 * MAXD + 1] = last[4]
    ln, lb, la, ls = last[0], last[1], last[2], last[3]
    lout = ln + lb + la
    p = Plan(kmode=kmode, fold=FOLD[mode], outer=[(n + b + a, n, b, st) for n, b, a, st, _, _ in outer],
             last=(lout, ln, lb, ls), blk=blk, contig=ls == blk, cval=cval, stagger=spec.stagger,
             rows=math.prod(n + b + a for n, b, a, _, _, _ in outer), wtot=lout * blk)
    if p.wtot >= 2**31 - 64:
        raise ValueError(f"pad: output rows of {p.wtot} elements (after merging unpadded trailing axes) "
                         "exceed the kernel's 32-bit column indexing (2^31 - 64)")
    return p


# The kernels (paths) and the ladder's rungs: "flat" one chunk per thread, element by element;
# "tiled" block tiles of a row (pad_forward); "staged" brick rows through shared memory;
# "rows" a warp per row segment (pad_rows); "periodic" brick / short wrap rows, stores only.
PATHS = ("flat", "tiled", "staged", "rows", "periodic")
RUNGS = ("flat", "tiled", "staged", "rows", "default")
ROW_UNIT_CHUNKS = 1024       # a pad_rows unit: at most this many 16-byte chunks of one row
PERIODIC_UNIT_STORES = 8     # pad_periodic: a long row's units are this many stores a thread (shorter rows: one unit)
STAGED_MAX_BYTES = 32 << 10  # shared memory for one staged tile row (brick, "staged" rung)
# Grids: at most this many full waves (scripts/sweep_pad.py: more, shorter-lived blocks balance better).
GRID_WAVES = {"tiled": 1, "staged": 1, "rows": 16, "periodic": 4}


def _chunks_per_row(p: Plan, itemsize):
    vec = 16 // itemsize
    return p.wtot // vec if p.wtot % vec == 0 else ceil_div(p.wtot + vec - 1, vec)


def _periodic_threads(p: Plan, itemsize):
    """Block size for pad_periodic (a multiple of the row's period in chunks, <= 256), or 0 when the
    row is not periodic in a way it can use."""
    periodic = p.kmode == KMODE["brick"] or (p.kmode == KMODE["wrap"] and p.fold == FOLD["wrap"])
    if not periodic or p.blk != 1:
        return 0
    period = p.last[1] // math.gcd(p.last[1], 16 // itemsize)  # chunks
    step = math.lcm(period, 32) if math.lcm(period, 32) <= 256 else period
    threads = step * (256 // step) if step <= 256 else 0
    return threads if threads and _chunks_per_row(p, itemsize) >= 2 * threads else 0


def choose_path(p: Plan, itemsize, rung="default"):
    """Set p's path and unit geometry for a rung of the ladder ("default": the fastest path that applies)."""
    cpr = _chunks_per_row(p, itemsize)
    wide = cpr >= NARROW_CHUNKS
    p.path, p.unroll, p.tpr, p.chunks, p.threads = "flat", 0, 0, 0, 256
    if not wide or rung == "flat":
        return p
    periodic_threads = _periodic_threads(p, itemsize) if rung == "default" else 0
    if periodic_threads:
        p.path, p.threads = "periodic", periodic_threads
        rounds = ceil_div(cpr, p.threads)  # stores a thread per row: a row is one unit unless it is long
        p.chunks = p.threads * (rounds if rounds <= 2 * PERIODIC_UNIT_STORES else PERIODIC_UNIT_STORES)
        p.tpr = ceil_div(cpr, p.chunks)
    elif rung in ("rows", "default"):
        p.path = "rows"
        p.tpr = ceil_div(cpr, ROW_UNIT_CHUNKS)
        p.chunks = ceil_div(ceil_div(cpr, p.tpr), 32) * 32
    elif rung == "staged" and p.kmode == KMODE["brick"] and (p.last[1] + 16 // itemsize) * itemsize <= STAGED_MAX_BYTES:
        p.path = "staged"
        p.threads, p.unroll, p.tpr = _choose_tiling(cpr, 4)  # shared loads: up to 4 chunks a thread
        p.chunks = p.threads * p.unroll
    else:
        p.path = "tiled"
        p.threads, p.unroll, p.tpr = _choose_tiling(cpr, min(itemsize, 4))  # UMAX in pad.cu
        p.chunks = p.threads * p.unroll
    return p


def _launch(xc, y, p: Plan, args):
    itemsize = y.dtype.itemsize
    props = current()
    smem = 0
    if p.path == "flat":
        kernel = SOURCE.kernel(_forward_name(p.kmode, itemsize))
        chunks = ceil_div(p.rows * p.wtot, 16 // itemsize)
        grid = min(ceil_div(chunks, 256), props.resident_blocks(256) * 4)
    elif p.path == "rows":
        kernel = SOURCE.kernel(_rows_name(p.kmode, itemsize))
        grid = min(ceil_div(p.tiles, p.threads // 32), resident_blocks(kernel, p.threads) * GRID_WAVES["rows"])
    else:
        if p.path == "staged":
            kernel = SOURCE.kernel(_staged_name(itemsize))
            smem = ceil_div((p.last[1] + 16 // itemsize) * itemsize, 16) * 16
        elif p.path == "periodic":
            kernel = SOURCE.kernel(_periodic_name(itemsize))
        else:
            kernel = SOURCE.kernel(_forward_name(p.kmode, itemsize))
        grid = min(p.tiles, resident_blocks(kernel, p.threads, smem) * GRID_WAVES[p.path])
    kernel((max(grid, 1),), (p.threads,), (xc, y) + args, shared_mem=smem)


# ---- public API -----------------------------------------------------------------------------------

def _np_dtype(x):
    return np.dtype(np.bool_) if dtype_name(x) == "bool" else cupy_dtype(dtype_name(x))


def _freeze(v):
    """A hashable, type-preserving key of a pad argument (TypeError if it has none)."""
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_freeze(e) for e in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((_freeze(k), _freeze(e)) for k, e in v.items())
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape) + _freeze(v.tolist())
    hash(v)
    return (type(v), v)


_SPECS: dict = {}  # argument key -> Spec: repeated calls skip the validation (host time per call)


def spec_for(x, pad_width, mode="constant", constant_values=0, stagger=0) -> Spec:
    """The validated Spec of a pad call (cached by its arguments: repeated calls skip the validation)."""
    kind_of(x, "pad")  # a CUDA tensor or a CuPy array, else the TypeError naming x
    dt = dtype_name(x)
    if dt not in DTYPES:
        raise TypeError(f"pad: x has dtype {dt}; expected one of {', '.join(DTYPES)}")
    try:
        key = (tuple(x.shape), dt, _freeze(pad_width), _freeze(mode), _freeze(constant_values), _freeze(stagger))
    except TypeError:
        key = None
    spec = _SPECS.get(key) if key is not None else None
    if spec is None:
        spec = normalize(tuple(x.shape), _np_dtype(x), pad_width, mode, constant_values, stagger)
        if key is not None:
            if len(_SPECS) >= 1024:
                _SPECS.clear()
            _SPECS[key] = spec
    return spec


def pad_impl(x, spec: Spec, rung: str = "default"):
    """The kernels' path for either kind of input (no autograd). `rung` picks a step of the ladder
    (benchmark, tests): "flat" forces the per-element path on every row, "tiled" block tiles,
    "staged" brick rows through shared memory (other modes: "tiled"), "rows" a warp per row segment;
    "default" the fastest that applies ("periodic" for brick and short-period wrap rows, else "rows")."""
    if rung not in RUNGS:
        raise ValueError(f"pad: rung must be one of {', '.join(RUNGS)}; got {rung!r}")
    with Call("pad", x) as call:
        xc = call.arg(x, "x", dtypes=DTYPES)
        if tuple(xc.shape) != spec.shape:
            raise ValueError(f"pad: x has shape {tuple(xc.shape)}; the spec was made for {spec.shape}")
        y = call.empty(spec.out_shape, dtype_name(x))
        _pad_into(xc, y, spec, rung)
        return call.result(y)


def _pad_into(xc, y, spec: Spec, rung="default"):
    import cupy

    if y.size == 0:
        return
    if xc.ndim == 0:
        y[...] = xc
        return
    itemsize = xc.dtype.itemsize
    raw = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    xr, yr = xc.view(raw), y.view(raw)
    if y.data.ptr % 16:
        raise ValueError("pad: the output buffer is not 16-byte aligned")  # our own allocation always is
    strides = [s // itemsize for s in xr.strides]
    try:
        p, args = _cached_plan(xr.shape, strides, itemsize, spec, rung)
    except _TooManyAxes:
        if not xr.flags.c_contiguous:
            xr = cupy.ascontiguousarray(xr)
            try:
                p = choose_path(plan(xr.shape, [s // itemsize for s in xr.strides], itemsize, spec), itemsize, rung)
            except _TooManyAxes:
                p = None
        else:
            p = None
        if p is None:  # separable: pad the leading padded axes first, then the rest
            padded = [i for i, pw in enumerate(spec.pads) if pw != (0, 0)]
            cut = padded[len(padded) // 2]
            if spec.mode == "brick":
                cut = min(cut, xr.ndim - 2)
            keep = [(0, 0)] * xr.ndim
            first = Spec(spec.shape, spec.pads[:cut] + keep[cut:], "wrap" if spec.mode == "brick" else spec.mode,
                         spec.bits[: 2 * cut] + [0] * (2 * (xr.ndim - cut)) if spec.bits else [])
            mid = cupy.empty(first.out_shape, dtype=raw)
            _pad_into(xr, mid, first, rung)
            second = Spec(first.out_shape, keep[:cut] + spec.pads[cut:], spec.mode,
                          [0] * (2 * cut) + spec.bits[2 * cut:] if spec.bits else [], spec.stagger)
            _pad_into(mid, yr, second, rung)
            return
    else:
        _launch(xr, yr, p, args)
        return
    _launch(xr, yr, p, p.args())


_PLANS: dict = {}


def _cached_plan(shape, strides, itemsize, spec: Spec, rung):
    key = (tuple(shape), tuple(strides), itemsize, spec.shape, tuple(spec.pads), spec.mode, tuple(spec.bits),
           spec.stagger, rung)
    hit = _PLANS.get(key)
    if hit is None:
        p = choose_path(plan(shape, strides, itemsize, spec), itemsize, rung)
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        hit = _PLANS[key] = (p, p.args())
    return hit


# ---- backward -------------------------------------------------------------------------------------

def pad_backward_impl(grad, spec: Spec):
    """Gradient of pad with respect to x: for each padded axis (last first) one gather-sum launch that
    folds the output axis onto the input axis; sums in float32 (float64 for float64); deterministic."""
    import cupy

    with Call("pad_backward", grad) as call:
        g = call.arg(grad, "grad", dtypes=GRAD_DTYPES)
        dtype = dtype_name(grad)
        if tuple(g.shape) != spec.out_shape:
            raise ValueError(f"pad_backward: grad has shape {tuple(g.shape)}; expected {spec.out_shape}")
        if spec.mode == "constant":
            sl = tuple(slice(b, b + n) for n, (b, _) in zip(spec.shape, spec.pads))
            r = call.empty(spec.shape, dtype)
            r[...] = g[sl]
            return call.result(r)
        ndim = len(spec.shape)
        axes = [i for i in range(ndim) if spec.pads[i] != (0, 0)]
        if spec.mode == "brick" and ndim - 1 not in axes:
            axes.append(ndim - 1)  # the columns of a brick are rotated even without column pads
        axes.sort(reverse=True)
        if not axes or math.prod(spec.shape) == 0:
            r = call.empty(spec.shape, dtype)
            if r.size:
                r[...] = g
            return call.result(r)
        cur = cupy.ascontiguousarray(g)
        shape = list(spec.out_shape)
        props = current()
        for j, axis in enumerate(axes):
            last = j == len(axes) - 1
            tin = dtype if j == 0 else ACC[dtype]
            tout = dtype if last else ACC[dtype]
            n = spec.shape[axis]
            shape_out = shape[:axis] + [n] + shape[axis + 1:]
            res = call.empty(shape_out, tout)  # the caller's allocator: capturable in torch's CUDA graphs
            A, C = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
            brick_cols = spec.mode == "brick" and axis == ndim - 1
            kind = FOLD_KIND["brick" if brick_cols else "wrap" if spec.mode == "brick" else spec.mode]
            fold = FOLD["wrap" if spec.mode == "brick" else spec.mode]
            brows = shape[-2] if brick_cols else 1
            bp0 = spec.pads[-2][0] if brick_cols else 0
            bth = spec.shape[-2] if brick_cols else 1
            if res.size:
                rows_, cols_ = (A, n) if C == 1 else (A * n, C)
                grid = (min(ceil_div(cols_, 256), max(1, props.resident_blocks(256) * 4 // min(rows_, 65535))),
                        min(rows_, 65535))
                SOURCE.kernel(_gather_name(kind, tin, tout))(
                    grid, (256,), (cur, res, np.int64(A), np.int64(shape[axis]), np.int64(n), np.int64(C),
                                      np.int64(spec.pads[axis][0]), np.int32(fold), np.int64(brows),
                                      np.int64(bp0), np.int64(bth), np.int64(spec.stagger)))
            cur, shape = res, shape_out
        return call.result(cur)
