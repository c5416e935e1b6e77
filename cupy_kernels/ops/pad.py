"""Host side of cu_src/pad.cu: numpy.pad, every mode, and brick-wall tiling.

`pad(x, pad_width, mode="constant", constant_values=0, stagger=0, **kwargs)` follows numpy.pad: its arguments,
its keywords per mode (end_values, stat_length, reflect_type), the types of its errors, its results
(bit-identical for the modes that copy), its memory order for CuPy arrays. Mode "brick" repeats the array's last
two axes as a tile on a brick lattice: out[..., r, c] = x[..., (r - p0) mod th,
(c - p1 - stagger * floor((r - p0) / th)) mod tw] (leading axes wrap; stagger 0 is "wrap").

The modes that copy (constant, edge, reflect, symmetric, wrap, empty, brick) take one kernel per call and have a
deterministic gather-sum backward. numpy's computing modes (linear_ramp, maximum, minimum, mean, median,
reflect_type='odd') copy x into the output's interior and then pad one axis after another in numpy's order, a
launch (two for linear_ramp) per padded axis (`plan_stages`). A function as mode runs numpy.pad itself on a host
copy (`_host_pad`): numpy's protocol calls Python on every 1-D vector.

A call is planned once per (spec, dtype, shape, strides, rung, device): `geometry` merges axes and
`choose_path` picks the kernel, `plan_pad` records the launch (or two through an intermediate workspace when
too many axes stay after merging), `plan_stages` the per-axis passes, and every later call with that key replays
the plan.
"""
from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from .._runtime import (ACC, CTYPES, CUPY, ITEMSIZE, UNSIGNED_CTYPES, KernelSource, PlanBuilder, ceil_div,
                        checked_dtype, current, dtype_name, kind_of, numpy_dtype, resident_blocks)
from .._runtime.tuning import PlanCache

SOURCE = KernelSource("pad.cu")
MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "brick")  # the index maps of the copying kernels
STATS = ("maximum", "minimum", "mean", "median")                       # PAD_STAT_* in pad.cu, in order
# Every mode and the keywords it takes (numpy.pad's table; brick takes `stagger`, checked on its own).
KEYWORDS = {"constant": ("constant_values",), "edge": (), "linear_ramp": ("end_values",),
            "maximum": ("stat_length",), "mean": ("stat_length",), "median": ("stat_length",),
            "minimum": ("stat_length",), "reflect": ("reflect_type",), "symmetric": ("reflect_type",), "wrap": (),
            "empty": (), "brick": ()}
KMODE = {"constant": 0, "empty": 0, "edge": 1, "reflect": 2, "symmetric": 2, "wrap": 2, "brick": 3}  # forward MODE
KMODE_NAMES = ("PAD_CONSTANT", "PAD_EDGE", "PAD_PERIODIC", "PAD_BRICK")                # ... as pad.cu spells it
FOLD = {"wrap": 0, "reflect": 1, "symmetric": 2, "constant": 0, "empty": 0, "edge": 0, "brick": 0}  # FOLD_* in pad.cu
FOLD_KIND = {"edge": 0, "reflect": 1, "symmetric": 1, "wrap": 1, "brick": 2}         # pad_gather's FMODE
FOLD_KIND_NAMES = ("FOLD_EDGE_AXIS", "FOLD_PERIODIC_AXIS", "FOLD_BRICK_AXIS")
# The dtypes pad takes, in the order of pad.cu's dtype codes (PAD_BOOL, ...).
DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128")
GRAD_DTYPES = ("float16", "bfloat16", "float32", "float64")
RAMP_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")  # linear_ramp's compute dtypes
RAW_CTYPES = {**UNSIGNED_CTYPES, 16: "PadRaw16"}  # the copying kernels' element type by size
MAXD = 6          # PAD_MAXD in pad.cu
NCONST = 2 * MAXD + 2
LINE_GROUPS = 8   # PAD_LINE_GROUPS in pad.cu: the other axes of a per-axis pass's lines
THREADS = 256     # the block of pad_flat, pad_rows, pad_gather, pad_gather2 and the per-axis passes
GATHER_QUADS = 4  # PAD_GATHER_QUADS in pad.cu: quads of 4 columns a thread of pad_gather2 loads before it adds
MASK64 = (1 << 64) - 1


class _Unset:
    """The default of keywords whose presence matters (numpy.pad refuses a keyword its mode does not take, even
    with its default value)."""

    def __repr__(self):
        return "<unset>"


UNSET = _Unset()
_numpy_pad = np.pad  # numpy's own (a caller may route np.pad through this module)
# The kernels (paths): "flat" one chunk a thread, element by element (pad_flat); "rows" a warp a row segment
# (pad_rows); "periodic" brick and short-period wrap rows, stores only (pad_periodic). The ladder's rungs force
# one: "flat" (a thread per output chunk, as the original article's kernel takes a thread per pixel), "rows"
# (no periodic rows), "default" (the fastest that applies).
PATHS = ("flat", "rows", "periodic")
RUNGS = ("flat", "rows", "default")


@dataclass(frozen=True)
class Tuning:
    # Rows of fewer 16-byte chunks than this take pad_flat: pad_rows gives a row (segment) a warp of 32 lanes, one
    # chunk a lane a step, so a shorter row leaves lanes idle. (The warp's width; not swept.)
    narrow_chunks: int = 32
    # pad_flat's grid: at most this many waves of 256-thread blocks (counted by threads), grid-striding. (Not swept.)
    flat_waves: int = 4
    # pad_rows' grid: waves of short-lived warps from the occupancy calculator. 32x3x1024x1024 +64 (H, W) float32:
    # 1 wave 88.9-89.9% of copy, 4 waves 92.2-93.4%, 8 waves 94.4-94.5%, 16 waves 95.5-95.7% (H200, f8637c0).
    rows_waves: int = 16
    # A pad_rows unit: at most this many 16-byte chunks of one row; longer rows are cut into segments. (Not swept.)
    row_unit_chunks: int = 1024
    # Rows of one unit and at most this many chunks share a warp, 32 / row_group_lanes rows: a warp's row decode and
    # per-step work cover more bytes. 160 (144-chunk uint16 1152-element rows on 8 lanes): constant / reflect 93.8 /
    # 90.0% of copy -> 88.0 / 87.6% (H200, 3471360).
    row_group_chunks: int = 96
    # Lanes a row of those (a power of two). % of copy, constant / reflect, at 32 (no groups), 4, 8, 16 lanes (H200,
    # 3471360): uint8 32x3x1024x1024 +64: 88 / 76, 82 / 82, 87 / 87, 89 / 85; the same +3: 31 / 28, 37 / 38,
    # 48 / 51, 42 / 41; float32 512x3x256x256 +8: 87 / 68, 88 / 89, 93 / 93, 95 / 86.
    row_group_lanes: int = 8
    # pad_periodic's grid: brick 48x32 -> 4144x8224 float32 with thread 0 decoding the block's next row: 36.8 us
    # at 1 wave, 35.8 at 2-4 waves (H200, f8637c0).
    periodic_waves: int = 4
    # pad_periodic: a long row's units are this many stores a thread (rows of up to twice that: one unit). 1-D wrap
    # to 136 MB: 106.5% of a fill_ of the output with 8, 112.9% with 16 (H200, 7fe75c4).
    periodic_unit_stores: int = 8
    # pad_gather's grid (the backward): the column blocks of a row capped at this many waves of 256-thread blocks
    # (counted by threads) over the rows. (Not swept.)
    gather_waves: int = 4
    # A per-axis pass gives a line a warp (lanes striding along it) when its axis is contiguous in the output and
    # the line has at least this many elements; else a thread. (Not swept.)
    warp_line: int = 64


TUNING = Tuning()
PLANS = PlanCache()


def flat_name(kmode, itemsize):
    return f"pad_flat<{KMODE_NAMES[kmode]}, {RAW_CTYPES[itemsize]}>"


def rows_name(kmode, itemsize):
    return f"pad_rows<{KMODE_NAMES[kmode]}, {RAW_CTYPES[itemsize]}>"


def periodic_name(itemsize):
    return f"pad_periodic<{RAW_CTYPES[itemsize]}>"


def dtype_code(dtype):
    """pad.cu's dtype code of a dtype name (PAD_FLOAT32, ...)."""
    return "PAD_" + dtype.upper()


def fill_name(itemsize):
    return f"pad_axis_fill<{RAW_CTYPES[itemsize]}>"


def odd_name(dtype):
    return f"pad_axis_odd<{dtype_code(dtype)}>"


def stat_name(dtype):
    return f"pad_axis_stat<{dtype_code(dtype)}>"


def ramp_names(compute):
    """The two passes of linear_ramp computing in `compute` (one of RAMP_DTYPES): flags, then ramps."""
    return f"pad_ramp_flags<{dtype_code(compute)}>", f"pad_axis_ramp<{dtype_code(compute)}>"


def gather_name(fkind, tin, tout):
    return f"pad_gather<{FOLD_KIND_NAMES[fkind]}, {CTYPES[tin]}, {CTYPES[tout]}>"


def gather2_name(fkind, tin, tout):
    return f"pad_gather2<{FOLD_KIND_NAMES[fkind]}, {CTYPES[tin]}, {CTYPES[tout]}>"


def gather_pairs(fkind):
    """(input, output) dtypes of pad_gather's launches: the first padded axis reads the gradient's dtype, the
    last writes it, those between hold the accumulator type. Brick columns are always the first of two axes (a
    brick pads the rows too), so their fold reads the gradient and writes the accumulator type."""
    pairs = []
    for t in GRAD_DTYPES:
        acc = ACC[t]
        pairs += [(t, acc)] if fkind == FOLD_KIND["brick"] else [(t, t), (t, acc), (acc, acc), (acc, t)]
    return list(dict.fromkeys(pairs))


SOURCE.declare([flat_name(m, s) for m in range(4) for s in RAW_CTYPES]
               + [rows_name(m, s) for m in range(4) for s in RAW_CTYPES]
               + [periodic_name(s) for s in RAW_CTYPES]
               + [fill_name(s) for s in RAW_CTYPES]
               + [odd_name(t) for t in DTYPES] + [stat_name(t) for t in DTYPES]
               + [name for c in RAMP_DTYPES for name in ramp_names(c)]
               + [gather_name(k, a, b) for k in range(3) for a, b in gather_pairs(k)]
               + [gather2_name(k, a, b) for k in range(2)  # always the first launch: reads the gradient's dtype
                  for a, b in dict.fromkeys(p for t in GRAD_DTYPES for p in ((t, t), (t, ACC[t])))])


# ---- arguments, exactly as numpy.pad reads them ---------------------------------------------------

def _scalar(v) -> bool:
    return type(v) in (int, float)


def _python_pairs(x, ndim):
    """_as_pairs for the common Python forms (a number, a pair, one pair per axis) without NumPy, which
    torch.compile would trace as tensors; None for any other form."""
    if _scalar(x):
        return [(x, x)] * ndim
    if type(x) not in (tuple, list):
        return None
    if len(x) == 1 and _scalar(x[0]):
        return [(x[0], x[0])] * ndim
    if len(x) == 2 and _scalar(x[0]) and _scalar(x[1]):
        return [(x[0], x[1])] * ndim
    if len(x) == 1 and type(x[0]) in (tuple, list):
        x = list(x) * ndim
    if len(x) == ndim and all(type(p) in (tuple, list) and len(p) == 2 and _scalar(p[0]) and _scalar(p[1])
                              for p in x):
        return [(p[0], p[1]) for p in x]
    return None


def _as_pairs(x, ndim, as_index=False, what="constant_values", python=True):
    """numpy.pad's broadcast of pad_width / constant_values / stat_length / end_values to ndim (before, after)
    pairs. python=False: exactly numpy's objects (NumPy scalars for one or two values), never the Python fast
    path (a linear ramp's compute dtype depends on them)."""
    if python:
        pairs = _python_pairs(x, ndim)
        if pairs is not None and (not as_index or all(type(v) is int and v >= 0 for p in pairs for v in p)):
            return pairs
    x = np.array(x)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
    if x.ndim < 3:
        if x.size == 1:
            x = x.ravel()
            if as_index and x[0] < 0:
                raise ValueError(f"pad: {what} can't contain negative values; got {x[0]}")
            return [(x[0], x[0])] * ndim
        if x.size == 2 and x.shape != (2, 1):
            x = x.ravel()
            if as_index and (x[0] < 0 or x[1] < 0):
                raise ValueError(f"pad: {what} can't contain negative values; got {x.tolist()}")
            return [(x[0], x[1])] * ndim
    if as_index and x.size and x.min() < 0:
        raise ValueError(f"pad: {what} can't contain negative values; got {x.tolist()}")
    try:
        return [tuple(p) for p in np.broadcast_to(x, (ndim, 2)).tolist()]
    except ValueError:
        raise ValueError(f"pad: {what} must be a scalar, a (before, after) pair or one pair per axis "
                         f"(shape ({ndim}, 2)) for an array of {ndim} dimensions; got shape {x.shape}") from None


def normalize_pad_width(pad_width, ndim):
    """[(before, after)] * ndim as Python ints, with numpy.pad's rules (dicts, integral type, rounding)."""
    if isinstance(pad_width, dict):
        seq = [(0, 0)] * ndim
        for axis, width in pad_width.items():
            if not isinstance(axis, (int, np.integer)):
                raise TypeError(f"pad: pad_width key {axis!r} is not an axis (an int)")
            if not -ndim <= axis < ndim:
                raise IndexError(f"pad: pad_width key {axis} is not an axis of an array of {ndim} dimensions")
            seq[axis] = (width, width) if isinstance(width, (int, np.integer)) else tuple(width)
        pad_width = seq
    pairs = _python_pairs(pad_width, ndim)  # Python ints: no NumPy (torch.compile would trace it as tensors)
    if pairs is not None and all(type(v) is int and v >= 0 for p in pairs for v in p):
        return pairs
    arr = np.asarray(pad_width)
    if arr.dtype.kind != "i":
        raise TypeError(f"pad: pad_width must be of integral type; got dtype {arr.dtype}")
    return [(int(b), int(a)) for b, a in _as_pairs(arr, ndim, as_index=True, what="pad_width")]


def _bits_of(cell) -> int:
    """The raw bits of a one-element array, as an int (the first byte lowest)."""
    size = cell.dtype.itemsize
    return int(cell.view(f"u{size}")[0]) if size <= 8 else int.from_bytes(cell.tobytes(), "little")


def constant_bits(np_dtype, constant_values, ndim, pads):
    """Raw bits of each (axis, side) pad value after numpy's assignment cast into the array's dtype."""
    values = _as_pairs(constant_values, ndim)
    bits = []
    for (lo, hi), (b, a) in zip(values, pads):
        for v, w in ((lo, b), (hi, a)):
            if not w or (type(v) in (int, float, bool) and v == 0 and math.copysign(1.0, v) > 0):
                bits.append(0)  # zero's bits are zero in every dtype (and torch.compile need not trace NumPy)
                continue
            cell = np.zeros(1, dtype=np_dtype)
            cell[:] = np.array(v)  # numpy.pad assigns np.array(value) to the pad area: the same cast, the same errors
            bits.append(_bits_of(cell))
    return bits


def stat_lengths(stat_length, shape):
    """numpy's stat_length per axis and side: None (the whole axis) or a count (rounded, >= 0), clipped to the
    axis' length."""
    pairs = [(None, None)] * len(shape) if stat_length is None else \
        _as_pairs(stat_length, len(shape), as_index=True, what="stat_length")
    return tuple((n if lo is None or lo > n else int(lo), n if hi is None or hi > n else int(hi))
                 for n, (lo, hi) in zip(shape, pairs))


def ramp_values(np_dtype, end_values, ndim):
    """linear_ramp's compute dtype (numpy.linspace's: the result type of the end value, as numpy.pad passes it,
    and the array, made inexact) and each (axis, side) end value's bits in it. bfloat16 (no NumPy type) follows
    float16's rules."""
    pairs = _as_pairs(end_values, ndim, what="end_values", python=False)
    like = np.dtype(np.float16) if np_dtype.name == "bfloat16" else np_dtype
    computes = {np.linspace(v, np.zeros(1, like), 1, endpoint=False).dtype for pair in pairs for v in pair}
    if not computes:
        return "float64", []
    if len(computes) > 1 or next(iter(computes)).name not in RAMP_DTYPES:
        raise TypeError(f"pad: linear_ramp computes in {', '.join(sorted(d.name for d in computes))} for "
                        f"end_values {end_values!r}; the GPU has no such type")
    compute = next(iter(computes))
    if compute.kind == "c" and np_dtype.kind in "iu":
        raise TypeError(f"pad: linear_ramp of an integer array floors its ramps, which complex end_values "
                        f"({end_values!r}) cannot be")
    name = "bfloat16" if compute.name == "float16" and np_dtype.name == "bfloat16" else compute.name
    bits = []
    for pair in pairs:
        for v in pair:
            cell = np.array(v).astype(compute, copy=True).reshape(1)
            if name == "bfloat16":
                cell = np.array(v).astype(np.float32).astype(np_dtype).reshape(1)
            bits.append(_bits_of(cell))
    return name, bits


@dataclass
class Spec:
    """A validated pad call: pads per axis, mode, raw bits per (axis, side) (constant values, or linear_ramp's end
    values in its compute dtype), stagger (brick), reflect_type='odd', the statistic's lengths, a function as
    mode (run on the host)."""
    shape: tuple
    pads: list
    mode: str
    bits: list = field(default_factory=list)  # 2 per axis: constant, empty (zeros), linear_ramp
    stagger: int = 0
    odd: bool = False                         # reflect / symmetric with reflect_type='odd'
    stat: tuple = ()                          # maximum / minimum / mean / median: (before, after) counts per axis
    ramp: str = ""                            # linear_ramp: numpy's compute dtype (RAMP_DTYPES)
    host: tuple | None = None                 # a function as mode: (function, its keyword arguments)
    _token: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def out_shape(self):
        return tuple(n + b + a for n, (b, a) in zip(self.shape, self.pads))

    @property
    def token(self) -> int:
        """A small int naming the spec's value (equal specs share it): the plan caches' key, cheap to hash. Every
        function as mode shares HOST_TOKEN: its plan only says "on the host" (the function and its keywords need
        not hash)."""
        t = self._token
        if t is None:
            t = self._token = HOST_TOKEN if self.host is not None else _token(
                (tuple(self.shape), tuple(tuple(p) for p in self.pads), self.mode, tuple(self.bits), self.stagger,
                 self.odd, self.stat, self.ramp))
        return t

    @property
    def differentiable(self) -> bool:
        """Whether pad_backward_impl takes the spec: the copying modes (numpy's computing modes and functions
        have no backward)."""
        return self.host is None and not self.odd and self.mode in KMODE

    def reversed(self) -> "Spec":
        """The same padding of the axes in reverse order (a Fortran-ordered array seen as its C-ordered
        transpose): exact for the per-axis index maps, and for constants when the padded sides share one value."""
        n = len(self.shape)
        bits = [v for i in reversed(range(n)) for v in self.bits[2 * i:2 * i + 2]]
        return Spec(tuple(self.shape[::-1]), list(self.pads[::-1]), self.mode, bits, self.stagger)


HOST_TOKEN = -1
_TOKENS: dict = {}
_NEXT_TOKEN = itertools.count()


def _token(value) -> int:
    t = _TOKENS.get(value)
    if t is None:
        if len(_TOKENS) >= 4096:
            _TOKENS.clear()  # later specs get fresh tokens: the plans keyed by the old ones only miss
        t = _TOKENS[value] = next(_NEXT_TOKEN)
    return t


def normalize(shape, np_dtype, pad_width, mode="constant", constant_values=UNSET, stagger=0, options=None) -> Spec:
    """A pad call validated as numpy.pad validates it, in its order (pad_width, then the mode and its keywords,
    then the mode's own arguments) and with its exception types. `options`: the keywords besides constant_values
    (end_values, stat_length, reflect_type; any, for a function as mode). Keywords are told apart from their
    defaults by UNSET: numpy.pad refuses a keyword its mode does not take."""
    shape = tuple(int(s) for s in shape)
    ndim = len(shape)
    options = options or {}
    if not isinstance(stagger, (int, np.integer)) or isinstance(stagger, bool):
        raise TypeError(f"pad: stagger must be an int; got {type(stagger).__name__}")
    pads = normalize_pad_width(pad_width, ndim)
    if callable(mode):
        if stagger:
            raise ValueError(f"pad: stagger applies to mode 'brick' only; got stagger={stagger} with a function")
        kwargs = dict(options)
        if constant_values is not UNSET:
            kwargs["constant_values"] = constant_values
        return Spec(shape, pads, getattr(mode, "__name__", "function"), host=(mode, kwargs))
    try:
        allowed = KEYWORDS[mode]
    except KeyError:
        raise ValueError(f"pad: mode '{mode}' is not supported; expected one of {', '.join(KEYWORDS)} or a "
                         f"function") from None
    except TypeError:
        raise TypeError(f"pad: mode must be a string or a function; got {type(mode).__name__}") from None
    given = list(options) + ([] if constant_values is UNSET else ["constant_values"])
    unsupported = sorted(k for k in given if k not in allowed)
    if unsupported:
        takes = ", ".join(allowed) if allowed else "none"
        raise ValueError(f"pad: unsupported keyword arguments for mode '{mode}': {', '.join(unsupported)} "
                         f"(the keywords it takes: {takes})")
    mode = str(mode)
    if stagger and mode != "brick":
        raise ValueError(f"pad: stagger applies to mode 'brick' only; got stagger={stagger} with mode {mode!r}")
    if mode == "constant":
        return Spec(shape, pads, mode, constant_bits(np_dtype, 0 if constant_values is UNSET else constant_values,
                                                     ndim, pads))
    if mode == "empty":
        return Spec(shape, pads, mode, [0] * (2 * ndim))
    if mode == "brick" and ndim < 2:
        raise ValueError(f"pad: mode 'brick' tiles the last two axes; got an array of shape {shape}")
    for axis, (n, (b, a)) in enumerate(zip(shape, pads)):
        if n == 0 and (b or a):
            raise ValueError(f"pad: can't extend empty axis {axis} using modes other than 'constant' or 'empty' "
                             f"(mode {mode!r}, shape {shape}, pad {(b, a)})")
    if math.prod(shape) == 0:
        return Spec(shape, pads, mode)  # an empty result: numpy reads no further argument
    if mode in STATS:
        stat = stat_lengths(options.get("stat_length"), shape)
        if mode in ("maximum", "minimum") and any(0 in pair for pair in stat):
            raise ValueError(f"pad: stat_length of 0 yields no value for padding (mode '{mode}', stat_length "
                             f"{options.get('stat_length')!r})")
        return Spec(shape, pads, mode, stat=stat)
    if mode == "linear_ramp":
        ramp, bits = ramp_values(np_dtype, options.get("end_values", 0), ndim)
        return Spec(shape, pads, mode, bits, ramp=ramp)
    if mode in ("reflect", "symmetric"):
        method = options.get("reflect_type", "even")
        return Spec(shape, pads, mode, odd=isinstance(method, str) and method == "odd")  # numpy: any other is even
    stagger = int(stagger)
    if mode == "brick":
        tw = shape[-1]
        if stagger % tw == 0 or pads[-2] == (0, 0):
            mode, stagger = "wrap", 0  # no band is shifted: brick is wrap
        else:
            stagger %= tw
    return Spec(shape, pads, mode, [], stagger)


# ---- pure NumPy reference: the per-axis index maps the kernel computes ---------------------------

def index_map(mode, n, before, after):
    """Source index of each output coordinate of one axis (-1: constant pad), as numpy.pad pads."""
    k = np.arange(-before, n + after, dtype=np.int64)
    if mode in ("constant", "empty"):
        return np.where((k >= 0) & (k < n), k, -1)
    if mode == "edge":
        return np.clip(k, 0, n - 1)
    fold = FOLD["wrap" if mode == "brick" else mode]
    P = n if fold == 0 else (2 * n - 2 if n > 1 else 1) if fold == 1 else 2 * n
    q = np.mod(k, P)
    return np.where(q < n, q, P - q if fold == 1 else P - 1 - q)


def reference(a, spec: Spec):
    """numpy.pad of the copying modes by gathering through index_map (brick: shifted rows; empty: zero pads), for
    CPU checks and docs."""
    a = np.asarray(a)
    maps = [index_map(spec.mode, n, b, e) for n, (b, e) in zip(a.shape, spec.pads)]
    if spec.mode in ("constant", "empty"):
        out = np.empty(spec.out_shape, dtype=a.dtype)
        if a.size:
            out[...] = a[np.ix_(*[np.clip(m, 0, None) for m in maps])]
        size = a.dtype.itemsize
        vals = np.frombuffer(b"".join(int(v).to_bytes(size, "little") for v in spec.bits), dtype=a.dtype)
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
class Geometry:
    """A forward launch: the merged axes, the kernel (path) and its units."""
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
    threads: int = THREADS
    tpr: int = 0        # units per row (rows, periodic)
    chunks: int = 0     # 16-byte chunks per unit (0: flat)
    group: int = 32     # lanes a unit (rows)
    path: str = "flat"  # one of PATHS

    @property
    def tiles(self):
        return self.rows * self.tpr

    def args(self):
        """Kernel arguments after (x, y), in the forward kernels' order (PAD_FORWARD_ARGS)."""
        outer = list(self.outer) + [(1, 1, 0, 0)] * (MAXD - len(self.outer))
        a = [np.int64(self.rows), np.int64(self.wtot), np.int64(self.tiles), np.int64(self.tpr),
             np.int32(self.chunks), np.int32(self.group), np.int32(len(self.outer)), np.int32(self.fold)]
        for ax in outer:
            a += [np.int64(v) for v in ax]
        a += [np.int64(v) for v in self.last] + [np.int64(self.blk), np.int64(self.stagger),
                                                 np.int32(int(self.contig))]
        a += [np.uint64(v) for v in self.cval]
        return tuple(a)


def geometry(shape, strides, itemsize, spec: Spec) -> Geometry:
    """Merge axes; `strides` in elements of x. Raises _TooManyAxes (more outer axes than one launch takes)."""
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
    g = Geometry(kmode=kmode, fold=FOLD[mode], outer=[(n + b + a, n, b, st) for n, b, a, st, _, _ in outer],
                 last=(lout, ln, lb, ls), blk=blk, contig=ls == blk, cval=cval, stagger=spec.stagger,
                 rows=math.prod(n + b + a for n, b, a, _, _, _ in outer), wtot=lout * blk)
    if g.wtot >= 2**31 - 64:
        raise ValueError(f"pad: output rows of {g.wtot} elements (after merging unpadded trailing axes) "
                         "exceed the kernel's 32-bit column indexing (2^31 - 64)")
    return g


def _chunks_per_row(g: Geometry, itemsize):
    vec = 16 // itemsize
    return g.wtot // vec if g.wtot % vec == 0 else ceil_div(g.wtot + vec - 1, vec)


def _periodic_threads(g: Geometry, itemsize):
    """Block size for pad_periodic (a multiple of the row's period in chunks, <= 256), or 0 when the
    row is not periodic in a way it can use."""
    periodic = g.kmode == KMODE["brick"] or (g.kmode == KMODE["wrap"] and g.fold == FOLD["wrap"])
    if not periodic or g.blk != 1:
        return 0
    period = g.last[1] // math.gcd(g.last[1], 16 // itemsize)  # chunks
    step = math.lcm(period, 32) if math.lcm(period, 32) <= 256 else period
    threads = step * (256 // step) if step <= 256 else 0
    return threads if threads and _chunks_per_row(g, itemsize) >= 2 * threads else 0


def choose_path(g: Geometry, itemsize, rung="default"):
    """Set g's path and unit geometry for a rung of the ladder ("default": the fastest path that applies)."""
    cpr = _chunks_per_row(g, itemsize)
    g.path, g.tpr, g.chunks, g.threads, g.group = "flat", 0, 0, THREADS, 32
    if cpr < TUNING.narrow_chunks or rung == "flat":
        return g
    periodic_threads = _periodic_threads(g, itemsize) if rung == "default" else 0
    if periodic_threads:
        g.path, g.threads = "periodic", periodic_threads
        rounds = ceil_div(cpr, g.threads)  # stores a thread per row: a row is one unit unless it is long
        stores = TUNING.periodic_unit_stores
        g.chunks = g.threads * (rounds if rounds <= 2 * stores else stores)
        g.tpr = ceil_div(cpr, g.chunks)
    else:
        g.path = "rows"
        g.tpr = ceil_div(cpr, TUNING.row_unit_chunks)
        if g.tpr == 1 and cpr <= TUNING.row_group_chunks:
            g.group = TUNING.row_group_lanes
        g.chunks = ceil_div(ceil_div(cpr, g.tpr), g.group) * g.group
    return g


# ---- planning -----------------------------------------------------------------------------------------


def _launch(b: PlanBuilder, x, y, g: Geometry, itemsize):
    """Record the forward launch of `g` (x, y: Buffers of b)."""
    if g.path == "flat":
        kernel = SOURCE.kernel(flat_name(g.kmode, itemsize))
        grid = min(ceil_div(ceil_div(g.rows * g.wtot, 16 // itemsize), THREADS),
                   current().resident_blocks(THREADS) * TUNING.flat_waves)
    elif g.path == "rows":
        kernel = SOURCE.kernel(rows_name(g.kmode, itemsize))
        grid = min(ceil_div(g.tiles, g.threads // g.group), resident_blocks(kernel, g.threads) * TUNING.rows_waves)
    else:
        kernel = SOURCE.kernel(periodic_name(itemsize))
        grid = min(g.tiles, resident_blocks(kernel, g.threads) * TUNING.periodic_waves)
    b.launch(kernel, max(grid, 1), g.threads, (x, y) + g.args())


def contiguous_strides(shape) -> tuple:
    """C-contiguous element strides of `shape`."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def plan_pad(b: PlanBuilder, x, y, shape, strides, itemsize, spec: Spec, rung="default") -> None:
    """Record the launches padding x (`shape`, element `strides`) into the C-contiguous y by `spec` (x, y: Buffers
    of b): one launch, or, when too many axes stay after merging a contiguous x, the leading padded axes first into
    a workspace and then the rest (exactly how numpy.pad composes axes, corners included). Raises _TooManyAxes
    when x's strides leave too many axes (the caller plans for a contiguous copy)."""
    try:
        g = choose_path(geometry(shape, strides, itemsize, spec), itemsize, rung)
    except _TooManyAxes:
        if tuple(strides) != contiguous_strides(shape):
            raise
        ndim = len(shape)
        padded = [i for i, pw in enumerate(spec.pads) if tuple(pw) != (0, 0)]
        cut = padded[len(padded) // 2]
        if spec.mode == "brick":
            cut = min(cut, ndim - 2)
        keep = [(0, 0)] * ndim
        first = Spec(tuple(shape), list(spec.pads[:cut]) + keep[cut:], "wrap" if spec.mode == "brick" else spec.mode,
                     spec.bits[: 2 * cut] + [0] * (2 * (ndim - cut)) if spec.bits else [])
        mid = b.workspace(math.prod(first.out_shape) * itemsize)
        plan_pad(b, x, mid, shape, strides, itemsize, first, rung)
        second = Spec(first.out_shape, keep[:cut] + list(spec.pads[cut:]), spec.mode,
                      [0] * (2 * cut) + spec.bits[2 * cut:] if spec.bits else [], spec.stagger)
        plan_pad(b, mid, y, first.out_shape, contiguous_strides(first.out_shape), itemsize, second, rung)
        return
    _launch(b, x, y, g, itemsize)


# ---- numpy's computing modes: per-axis passes over the output ------------------------------------------


def fortran_strides(shape) -> tuple:
    """Fortran-contiguous element strides of `shape`."""
    return tuple(reversed(contiguous_strides(tuple(reversed(shape)))))


def fortran_only(shape, strides) -> bool:
    """numpy's flags.fnc for these element strides: Fortran-contiguous and not C-contiguous (numpy.pad then
    returns a Fortran-ordered array). Axes of length 1 do not count, as in numpy's flags."""
    if len(shape) < 2 or math.prod(shape) == 0:
        return False

    def dense(axes):
        step = 1
        for i in axes:
            if shape[i] != 1:
                if strides[i] != step:
                    return False
                step *= shape[i]
        return True

    return dense(range(len(shape))) and not dense(reversed(range(len(shape))))


def staged(spec: Spec, dtype, fortran=False) -> bool:
    """Whether a call takes the per-axis passes (plan_stages) after a copy, rather than one copying kernel: numpy's
    computing modes, and constants the copying kernels cannot place (a complex128 constant with an imaginary part;
    in a Fortran-ordered result, sides of different values, whose corners go to the later axis)."""
    if spec.odd or spec.mode in STATS or spec.mode == "linear_ramp":
        return True
    if spec.mode != "constant":
        return False
    if dtype == "complex128" and any(v >> 64 for v in spec.bits):
        return True
    sides = {spec.bits[2 * i + s] for i, pair in enumerate(spec.pads) for s in (0, 1) if pair[s]}
    return fortran and len(sides) > 1


def line_geometry(out_shape, shape, pads, ystrides, axis):
    """The lines (1-D vectors along `axis`) that numpy pads at that axis' turn, as pad.cu's PadLines take them:
    the other axes as [(count, stride)], slowest first, merged where contiguous, and the element offset of the
    first line's first element. Axes before `axis` run over their whole (already padded) extent, axes after it
    over their interior (numpy's _view_roi)."""
    groups, base = [], 0
    for i, (o, n, (before, _), st) in enumerate(zip(out_shape, shape, pads, ystrides)):
        if i < axis:
            groups.append((o, st))
        elif i > axis:
            groups.append((n, st))
            base += before * st
    merged = []
    for count, st in sorted((g for g in groups if g[0] != 1), key=lambda g: -g[1]):
        if merged and merged[-1][1] == count * st:
            merged[-1] = (merged[-1][0] * count, st)
        else:
            merged.append((count, st))
    return merged, base


LINE_LIMIT = 1 << 31  # lines of a launch: pad.cu decodes them in 32 bits


def _line_launches(groups, base):
    """(LINE_GROUPS groups, base) per launch, each of fewer than LINE_LIMIT lines: the slowest group is looped over
    here (a launch per coordinate while there are more groups than pad.cu takes, else in chunks) until the rest
    fits."""
    if len(groups) <= LINE_GROUPS and math.prod(c for c, _ in groups) < LINE_LIMIT:
        yield [(1, 0)] * (LINE_GROUPS - len(groups)) + list(groups), base
        return
    (count, st), rest = groups[0], groups[1:]
    take = 1 if len(groups) > LINE_GROUPS else max(1, (LINE_LIMIT - 1) // math.prod(c for c, _ in rest))
    for i in range(0, count, take):
        k = min(take, count - i)
        yield from _line_launches(([(k, st)] if k > 1 else []) + list(rest), base + i * st)


def _words(v) -> tuple:
    """A value's raw bits (up to 16 bytes) as two 64-bit kernel arguments."""
    return np.uint64(v & MASK64), np.uint64(v >> 64)


def plan_stages(b: PlanBuilder, y, dtype, spec: Spec, ystrides) -> None:
    """Record the per-axis passes over the output y (a Buffer of b, holding x in its interior; element strides
    `ystrides`): for each padded axis in numpy's order, the lines of that axis' turn, padded by pad_axis_fill
    (constants), pad_axis_odd (reflect_type='odd'), pad_axis_stat (statistics) or pad_ramp_flags then
    pad_axis_ramp (linear_ramp, with a zeroed workspace for its two flags)."""
    shape, pads, out = spec.shape, spec.pads, spec.out_shape
    code = np.int32(DTYPES.index(dtype))
    for axis, (n, (before, after)) in enumerate(zip(shape, pads)):
        if not before and not after:
            continue
        step = ystrides[axis]
        group = 32 if step == 1 and before + n + after >= TUNING.warp_line else 1
        geometry_args = (np.int64(step), np.int64(before), np.int64(n), np.int64(after))
        if spec.mode == "constant":
            passes = [(SOURCE.kernel(fill_name(ITEMSIZE[dtype])), (y,), group,
                       _words(spec.bits[2 * axis]) + _words(spec.bits[2 * axis + 1]))]
        elif spec.odd:
            passes = [(SOURCE.kernel(odd_name(dtype)), (y,), group, (np.int32(spec.mode == "symmetric"),))]
        elif spec.mode in STATS:
            llen, rlen = spec.stat[axis]
            passes = [(SOURCE.kernel(stat_name(dtype)), (y,), group,
                       (np.int32(STATS.index(spec.mode)), np.int64(llen), np.int64(rlen)))]
        else:
            flags = b.workspace(8, zero=True)
            ends = (code,) + _words(spec.bits[2 * axis]) + _words(spec.bits[2 * axis + 1])
            flag_name, ramp_name = ramp_names(spec.ramp)
            passes = [(SOURCE.kernel(flag_name), (y, flags), 1, ends),
                      (SOURCE.kernel(ramp_name), (y, flags), group, ends)]
        lines = list(_line_launches(*line_geometry(out, shape, pads, ystrides, axis)))
        for kernel, buffers, lanes, extra in passes:
            for groups, base in lines:
                nlines = math.prod(c for c, _ in groups)
                grid = max(1, ceil_div(nlines, THREADS // lanes))  # a group of `lanes` threads a line
                line_args = tuple(np.int64(v) for g in groups for v in g)
                b.launch(kernel, grid, THREADS, buffers + (np.int64(nlines),) + line_args + (np.int64(base),)
                         + geometry_args + (np.int32(lanes),) + extra)


def plan_forward(b: PlanBuilder, x, y, shape, strides, itemsize, dtype, spec: Spec, rung="default",
                 fortran=False) -> None:
    """Record a call's launches from x (`shape`, element `strides`) into y (Buffers of b): the copying kernel, or,
    for the staged calls, the copy of x into y's interior followed by plan_stages. fortran: y is Fortran-ordered
    (x Fortran-contiguous: both are planned as their C-ordered transposes). Raises _TooManyAxes as plan_pad."""
    stages = staged(spec, dtype, fortran)
    copy = Spec(tuple(shape), list(spec.pads), "constant", [0] * (2 * len(shape))) if stages else spec
    if fortran:
        plan_pad(b, x, y, tuple(shape)[::-1], tuple(strides)[::-1], itemsize, copy.reversed(), rung)
    else:
        plan_pad(b, x, y, shape, strides, itemsize, copy, rung)
    if stages:
        out = spec.out_shape
        plan_stages(b, y, dtype, spec, fortran_strides(out) if fortran else contiguous_strides(out))


def backward_steps(spec: Spec, axes) -> list[tuple[int, ...]]:
    """The backward's launches, each the axes it folds: the last two axes together (pad_gather2) when both are
    padded and the mode is not brick (whose column origin moves with the row band), every other axis alone
    (pad_gather), last first."""
    ndim = len(spec.shape)
    if spec.mode != "brick" and len(axes) >= 2 and tuple(axes[:2]) == (ndim - 1, ndim - 2):
        return [(ndim - 2, ndim - 1)] + [(a,) for a in axes[2:]]
    return [(a,) for a in axes]


INTERIOR_SCAN = 1 << 22  # pad coordinates interior_span enumerates at most (beyond: no interior, every element summed)


def interior_span(mode, n, before, after) -> tuple[int, int]:
    """[lo, hi): the longest run of indices of one axis that no pad coordinate folds onto (each has exactly one
    source, the coordinate before + index); (0, 0) when the pads are too wide to enumerate."""
    if before + after > INTERIOR_SCAN:
        return 0, 0
    m = index_map(mode, n, before, after)
    hits = np.unique(np.concatenate([m[:before], m[before + n:]]))
    edges = np.concatenate([[-1], hits, [n]])
    k = int(np.argmax(np.diff(edges)))
    return int(edges[k]) + 1, int(edges[k + 1])


def plan_backward(b: PlanBuilder, g, r, dtype, spec: Spec, axes) -> None:
    """Record the backward's gather-sums (backward_steps: padded axes in `axes`, last first), from the C-contiguous
    gradient g into r (Buffers of b); the sums between launches in the accumulator type, in two workspaces used in
    turn."""
    ndim = len(spec.shape)
    acc = ACC[dtype]
    steps = backward_steps(spec, axes)
    shapes = [list(spec.out_shape)]
    for step in steps:
        shapes.append([spec.shape[i] if i in step else v for i, v in enumerate(shapes[-1])])
    middle = [math.prod(s) * ITEMSIZE[acc] for s in shapes[1:-1]]  # the intermediate results
    work = [b.workspace(max(middle[k::2])) for k in range(min(2, len(middle)))]
    blocks = current().resident_blocks(THREADS) * TUNING.gather_waves
    cur = g
    for j, step in enumerate(steps):
        last = j == len(steps) - 1
        tin = dtype if j == 0 else acc
        tout = dtype if last else acc
        shape = shapes[j]
        res = r if last else work[j % 2]
        fold = FOLD["wrap" if spec.mode == "brick" else spec.mode]
        if len(step) == 2:
            fkind = FOLD_KIND[spec.mode]
            A, nh, nw = math.prod(shape[:-2]), spec.shape[-2], spec.shape[-1]
            jlo, jhi = interior_span(spec.mode, nw, *spec.pads[-1])
            grid = min(ceil_div(A * nh * nw, THREADS * 4 * GATHER_QUADS), blocks)  # (a quad: 4 columns)
            b.launch(SOURCE.kernel(gather2_name(fkind, tin, tout)), grid, THREADS,
                     (cur, res, np.int64(A), np.int64(shape[-2]), np.int64(nh), np.int64(shape[-1]), np.int64(nw),
                      np.int64(spec.pads[-2][0]), np.int64(spec.pads[-1][0]), np.int32(fold),
                      *(np.int64(v) for v in interior_span(spec.mode, nh, *spec.pads[-2])), np.int64(jlo), np.int64(jhi)))
            cur = res
            continue
        (axis,) = step
        n = spec.shape[axis]
        A, C = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
        brick_cols = spec.mode == "brick" and axis == ndim - 1
        fkind = FOLD_KIND["brick" if brick_cols else "wrap" if spec.mode == "brick" else spec.mode]
        brows = shape[-2] if brick_cols else 1
        bp0 = spec.pads[-2][0] if brick_cols else 0
        bth = spec.shape[-2] if brick_cols else 1
        rows, cols = (A, n) if C == 1 else (A * n, C)
        grid = (min(ceil_div(cols, THREADS), max(1, blocks // min(rows, 65535))), min(rows, 65535))
        b.launch(SOURCE.kernel(gather_name(fkind, tin, tout)), grid, THREADS,
                 (cur, res, np.int64(A), np.int64(shape[axis]), np.int64(n), np.int64(C),
                  np.int64(spec.pads[axis][0]), np.int32(fold), np.int64(brows), np.int64(bp0), np.int64(bth),
                  np.int64(spec.stagger)))
        cur = res


# ---- calls --------------------------------------------------------------------------------------------------


def numpy_dtype_of(x):
    """The NumPy dtype of a CuPy array or a torch tensor (bool and bfloat16 included)."""
    return numpy_dtype(dtype_name(x))


def _freeze(v):
    """A hashable, type-preserving key of a pad argument (TypeError if it has none): ints and strings as they are,
    a tuple of exact ints or of such tuples (the common pad widths) too, other containers tagged with their type
    (1, 1.0 and True, [1] and (1,) stay apart: no tagged key equals an untagged one)."""
    t = type(v)
    if t is int or t is str:
        return v
    if t is tuple and all(type(e) is int or type(e) is tuple and all(type(f) is int for f in e) for e in v):
        return v
    if isinstance(v, (list, tuple)):
        return (t, *[_freeze(e) for e in v])
    if isinstance(v, dict):
        return (dict, *[(_freeze(k), _freeze(e)) for k, e in v.items()])
    if isinstance(v, np.ndarray):
        return (np.ndarray, v.dtype.str, v.shape) + _freeze(v.tolist())
    hash(v)
    return (t, v)


_SPECS: dict = {}  # argument key -> Spec: repeated calls skip the validation (host time per call)
_WIDTHS: dict = {}  # id(pad_width) -> (pad_width, its key), for exact tuples of ints (immutable): a constant
                    # tuple passed call after call is keyed by identity, without _freeze's walk (~1.5 us)


def _width_key(pad_width):
    hit = _WIDTHS.get(id(pad_width))
    if hit is not None and hit[0] is pad_width:
        return hit[1]
    key = _freeze(pad_width)
    if key is pad_width and type(pad_width) is tuple:
        if len(_WIDTHS) >= 256:
            _WIDTHS.clear()
        _WIDTHS[id(pad_width)] = (pad_width, key)
    return key


def spec_for(x, pad_width, mode="constant", constant_values=UNSET, stagger=0, by_identity=True,
             options=None) -> Spec:
    """The validated Spec of a pad call, cached by its arguments and x's shape and dtype: a repeated call skips the
    validation (x's kind is checked where it is read, by pad_impl). by_identity=False: no identity cache of the
    widths (torch.compile's tracer does not follow id()). options: the other keywords (normalize's)."""
    try:
        key = (x.shape, x.dtype, _width_key(pad_width) if by_identity else _freeze(pad_width),
               mode if type(mode) is str else _freeze(mode),
               constant_values if constant_values is UNSET or type(constant_values) is int
               else _freeze(constant_values),
               stagger if type(stagger) is int else _freeze(stagger))
        if options:
            key += (_freeze(options),)
        spec = _SPECS.get(key)
    except (TypeError, AttributeError):  # unhashable arguments, or x is no array: validated below
        key = spec = None
    if spec is None:
        kind_of(x, "pad")  # a CUDA tensor or a CuPy array, else the TypeError naming x
        dt = checked_dtype(x, "pad", "x", DTYPES)
        spec = normalize(tuple(x.shape), numpy_dtype(dt), pad_width, mode, constant_values, stagger, options)
        if key is not None:
            if len(_SPECS) >= 1024:
                _SPECS.clear()
            _SPECS[key] = spec
    return spec


@dataclass(frozen=True)
class _Entry:
    """A planned call: the result's shape and dtype, whether the input is copied (contiguous) first, the plan (None:
    no kernel; then `part` is the input's region that is the result: a 0-d, empty or unpadded array, or the
    constant backward's slice; or, with `host`, a function as mode, run on the host)."""
    shape: tuple
    dtype: str
    copy: bool
    plan: object
    part: tuple = ()
    new_output: object = None  # the empty result, made by a call of no arguments
    host: bool = False


def _build(kind, x, spec: Spec, rung, device) -> _Entry:
    """Validate a pad call and plan it (a miss of PLANS: every check happens here). A Fortran-ordered CuPy array
    (numpy's flags.fnc) pads into a Fortran-ordered result, as numpy.pad's does (brick, no NumPy mode: C order)."""
    if rung not in RUNGS:
        raise ValueError(f"pad: rung must be one of {', '.join(RUNGS)}; got {rung!r}")
    dt = checked_dtype(x, "pad", "x", DTYPES)
    if spec.host is not None:
        return _Entry((), dt, False, None, new_output=tuple, host=True)
    shape = tuple(x.shape)
    if shape != tuple(spec.shape):
        raise ValueError(f"pad: x has shape {shape}; the spec was made for {tuple(spec.shape)}")
    out_shape = spec.out_shape
    strides = tuple(kind.strides(x))
    fortran = kind is CUPY and spec.mode != "brick" and fortran_only(shape, strides)
    new_output = kind.empty_fn(out_shape, dt, device, "F") if fortran else kind.empty_fn(out_shape, dt, device)
    if not shape or math.prod(out_shape) == 0:
        return _Entry(out_shape, dt, False, None, new_output=new_output)
    itemsize = ITEMSIZE[dt]
    b = PlanBuilder(device, (1, 256))  # x is read at any alignment; y is a fresh allocation
    try:
        plan_forward(b, *b.buffers, shape, strides, itemsize, dt, spec, rung, fortran)
        copy = False
    except _TooManyAxes:  # x's strides keep too many axes apart: a contiguous copy merges them (never Fortran)
        b = PlanBuilder(device, (256, 256))
        plan_forward(b, *b.buffers, shape, contiguous_strides(shape), itemsize, dt, spec, rung)
        copy = True
    return _Entry(out_shape, dt, copy, b.plan(), new_output=new_output)


def _to_host(kind, x) -> np.ndarray:
    """x on the host, in numpy's memory order where it has one (CuPy: Fortran-ordered stays Fortran-ordered)."""
    if kind is CUPY:
        return x.get(order="A")
    t = x.detach().cpu()
    if dtype_name(t) == "bfloat16":
        return t.view(sys.modules["torch"].int16).numpy().view(numpy_dtype("bfloat16"))
    return t.numpy()


def _to_device(kind, a: np.ndarray, like):
    """The host array `a` on `like`'s device, as `like`'s kind (CuPy: a's memory order; torch: C-contiguous)."""
    if kind is CUPY:
        import cupy

        return cupy.asarray(a, order="F" if a.flags.fnc else "C")
    torch = sys.modules["torch"]
    a = np.ascontiguousarray(a)
    if a.dtype == numpy_dtype("bfloat16"):
        return torch.from_numpy(a.view(np.int16)).to(like.device).view(torch.bfloat16)
    return torch.from_numpy(a).to(like.device)


def _host_pad(kind, x, spec: Spec):
    """A function as mode: numpy.pad itself on a host copy of x (numpy's protocol: the function modifies each 1-D
    vector of a zero-padded array in place, axis by axis), copied back to x's device. Synchronizes with the
    stream."""
    function, kwargs = spec.host
    return _to_device(kind, _numpy_pad(_to_host(kind, x), spec.pads, mode=function, **kwargs), x)


def _copy_part(kind, dst, src, part):
    if kind is CUPY:
        dst[...] = src[part]
    else:
        dst.copy_(src[part])


def pad_impl(x, spec: Spec, rung: str = "default"):
    """pad by `spec` (spec_for's) for either kind of input, the same kind out (no autograd). `rung` picks a step of
    the ladder (benchmark, tests): "flat" the per-element kernel on every row, "rows" a warp a row segment (no
    periodic rows); "default" the fastest that applies ("periodic" for brick and short-period wrap rows, "rows"
    for other rows of >= TUNING.narrow_chunks chunks, else "flat")."""
    kind = kind_of(x, "pad")
    device = kind.device(x)
    if kind.current_device() != device:
        with kind.on_device(device):
            return pad_impl(x, spec, rung)
    key = (spec.token, x.dtype, x.shape, kind.strides(x), rung, device)
    e = PLANS.get(key)
    if e is None:
        e = PLANS.put(key, _build(kind, x, spec, rung, device))
    y = e.new_output()
    if e.plan is None:
        if e.host:
            return _host_pad(kind, x, spec)
        if not x.shape and not e.shape:
            _copy_part(kind, y, x, ())  # a 0-d array pads to itself
        return y
    src = kind.as_contiguous(x) if e.copy else x
    e.plan.run((kind.ptr(src), kind.ptr(y)), kind.stream(device), kind.alloc(device) if e.plan.workspaces else None)
    return y


def no_gradient(spec: Spec) -> str:
    """The NotImplementedError's message for a gradient through a spec without a backward."""
    what = "a function as mode" if spec.host is not None else \
        f"mode {spec.mode!r}" + (" with reflect_type='odd'" if spec.odd else "")
    return (f"pad: {what} has no backward (gradients: constant, edge, reflect, symmetric, wrap, empty, brick); "
            "call it under torch.no_grad() or on a tensor that does not require grad")


def wire(spec: Spec) -> tuple[str, list]:
    """The spec's mode and values as int64-schema arguments (torch's custom op): the mode with "+odd" or
    "+<compute dtype>" appended; the statistic's counts, or the raw bits of each (axis, side) value as signed
    64-bit words (two a value where any needs more than 64 bits)."""
    mode = spec.mode + ("+odd" if spec.odd else "") + (f"+{spec.ramp}" if spec.ramp else "")
    if spec.stat:
        return mode, [v for pair in spec.stat for v in pair]
    words = 2 if any(v >> 64 for v in spec.bits) else 1
    out = []
    for v in spec.bits:
        for k in range(words):
            w = (v >> (64 * k)) & MASK64
            out.append(w - (1 << 64) if w >= 1 << 63 else w)
    return mode, out


def from_wire(shape, pads, mode, ints, stagger) -> Spec:
    """wire's inverse (`pads`: (before, after) per axis)."""
    name, *tags = mode.split("+")
    odd = "odd" in tags
    ramp = next((t for t in tags if t != "odd"), "")
    if name in STATS:
        return Spec(tuple(shape), pads, name, stat=tuple(zip(ints[0::2], ints[1::2])))
    words = len(ints) // (2 * len(shape)) if ints else 1
    bits = [sum((ints[i + k] & MASK64) << (64 * k) for k in range(words)) for i in range(0, len(ints), words)]
    return Spec(tuple(shape), pads, name, bits, stagger, odd=odd, ramp=ramp)


# ---- backward -------------------------------------------------------------------------------------


def _build_backward(kind, grad, spec: Spec, device) -> _Entry:
    dt = checked_dtype(grad, "pad_backward", "grad", GRAD_DTYPES)
    if tuple(grad.shape) != spec.out_shape:
        raise ValueError(f"pad_backward: grad has shape {tuple(grad.shape)}; expected {spec.out_shape}")
    if not spec.differentiable:
        raise NotImplementedError(no_gradient(spec))
    shape = tuple(spec.shape)
    new_output = kind.empty_fn(shape, dt, device)
    if spec.mode in ("constant", "empty"):  # the interior of the gradient
        return _Entry(shape, dt, False, None, tuple(slice(b, b + n) for n, (b, _) in zip(shape, spec.pads)),
                      new_output)
    ndim = len(shape)
    axes = [i for i in range(ndim) if tuple(spec.pads[i]) != (0, 0)]
    if spec.mode == "brick" and ndim - 1 not in axes:
        axes.append(ndim - 1)  # the columns of a brick are rotated even without column pads
    axes.sort(reverse=True)
    if not axes or math.prod(shape) == 0:
        return _Entry(shape, dt, False, None, new_output=new_output)
    copy = not kind.contiguous(grad)
    b = PlanBuilder(device, (256 if copy else 1, 256))
    plan_backward(b, *b.buffers, dt, spec, axes)
    return _Entry(shape, dt, copy, b.plan(), new_output=new_output)


def pad_backward_impl(grad, spec: Spec):
    """Gradient of pad with respect to x (either kind, no autograd): for each padded axis (last first) one
    gather-sum launch that folds the output axis onto the input axis; sums in float32 (float64 for float64);
    deterministic. Constant mode: the gradient's interior (a copy)."""
    kind = kind_of(grad, "pad_backward", "grad")
    device = kind.device(grad)
    if kind.current_device() != device:
        with kind.on_device(device):
            return pad_backward_impl(grad, spec)
    key = ("backward", spec.token, grad.dtype, grad.shape, kind.strides(grad), device)
    e = PLANS.get(key)
    if e is None:
        e = PLANS.put(key, _build_backward(kind, grad, spec, device))
    r = e.new_output()
    if e.plan is None:
        if math.prod(e.shape):
            _copy_part(kind, r, grad, e.part)
        return r
    src = kind.as_contiguous(grad) if e.copy else grad
    e.plan.run((kind.ptr(src), kind.ptr(r)), kind.stream(device), kind.alloc(device) if e.plan.workspaces else None)
    return r
