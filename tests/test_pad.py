"""pad: the copying modes bit-identical to numpy.pad in every dtype (GPU sweep of thousands of cases), numpy's
computing modes (linear_ramp, maximum, minimum, mean, median, reflect_type='odd') and functions as mode against
numpy.pad, numpy's keyword rules and exception types, memory order, brick tiling, torch interop and autograd; CPU
checks of the index maps, the argument rules and (with g++) the kernels' own device code run on the host, numpy's
pad test suite included (emulated_pad)."""
from __future__ import annotations

import functools
import itertools
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import gpu, rng, torch_gpu
from cupy_kernels.ops import pad as P
from planning import HOST, Array, Recorder, check_launch, fake_device

try:
    import ml_dtypes
except ImportError:  # bfloat16 needs it (present on the GPU machine)
    ml_dtypes = None

MODES = ("constant", "edge", "reflect", "symmetric", "wrap")
DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64"] + (["bfloat16"] if ml_dtypes else [])
GPU_DTYPES = DTYPES + ["complex128"]  # (the host harness of the copying kernels moves up to 8 bytes an element)


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def random_bits(shape, dtype, g):
    """Random bit patterns of `dtype` (NaNs with payloads, infinities, -0.0 included); bool 0/1."""
    dt = np_dtype(dtype)
    if dt == np.bool_:
        return g.integers(0, 2, size=shape, dtype=np.uint8).view(np.bool_)
    raw = g.integers(0, 256, size=tuple(shape) + (dt.itemsize,), dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def same_bits(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),  # bytes: complex128 has no u16
                          np.ascontiguousarray(b).reshape(-1).view(np.uint8))


def random_case(g, max_dims=4, max_side=9, wide=3, max_out=300_000):
    """A random shape, pad_width (often wider than the axis), mode and constant_values; at most
    `max_out` output elements."""
    while True:
        case = _random_case(g, max_dims, max_side, wide)
        shape, pad_width = case[:2]
        pads = P.normalize_pad_width(pad_width, len(shape))
        if math.prod(n + b + a for n, (b, a) in zip(shape, pads)) <= max_out:
            return case


def _random_case(g, max_dims, max_side, wide):
    nd = int(g.integers(1, max_dims + 1))
    shape = tuple(int(s) for s in g.choice([1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33], size=nd)) if g.random() < 0.5 \
        else tuple(int(s) for s in g.integers(1, max_side + 1, size=nd))
    if g.random() < 0.3:  # wide rows: the row paths of the kernels (>= 32 chunks of 16 bytes a row)
        axis = int(g.integers(0, nd))
        shape = shape[:axis] + (int(g.integers(60, 700)),) + shape[axis + 1:]
    mode = str(g.choice(MODES + ("brick",) if nd >= 2 else MODES))
    pads = []
    for n in shape:
        hi = max(1, wide * n + 2) if g.random() < 0.4 else 4
        pads.append((int(g.integers(0, hi + 1)), int(g.integers(0, hi + 1))) if g.random() < 0.8 else (0, 0))
    form = g.random()
    if form < 0.15:
        pad_width = pads[0][0]
    elif form < 0.25:
        pad_width = pads[0]
    else:
        pad_width = pads
    cv = P.UNSET  # numpy.pad refuses constant_values with another mode
    if mode == "constant":
        c = g.random()
        cv = int(g.integers(0, 100)) if c < 0.5 else [(int(g.integers(0, 100)), int(g.integers(0, 100))) for _ in shape]
    stagger = int(g.integers(-50, 50)) if mode == "brick" else 0
    return shape, pad_width, mode, cv, stagger


def numpy_pad(a, pad_width, mode, cv, stagger):
    """numpy.pad, or the brick formula of the issue written directly (numpy has no brick)."""
    if mode == "constant":
        return np.pad(a, pad_width, mode="constant", constant_values=cv)
    if mode != "brick":
        return np.pad(a, pad_width, mode=mode)
    pads = P.normalize_pad_width(pad_width, a.ndim)
    lead = np.pad(a, pads[:-2] + [(0, 0), (0, 0)], mode="wrap")
    th, tw = a.shape[-2:]
    (p0, q0), (p1, q1) = pads[-2:]
    r = np.arange(th + p0 + q0)[:, None] - p0
    c = np.arange(tw + p1 + q1)[None, :] - p1
    return lead[..., np.mod(r, th), np.mod(c - stagger * np.floor_divide(r, th), tw)]


# ---- CPU: the index maps against numpy.pad --------------------------------------------------------

def test_reference_index_maps_match_numpy_pad():
    """The per-axis maps the kernel computes (pure NumPy form) reproduce numpy.pad exactly,
    wide pads and NumPy's repeated reflection included."""
    g = rng()
    for _ in range(2500):
        shape, pad_width, mode, cv, stagger = random_case(g, max_dims=3)
        if mode == "brick":
            continue
        a = random_bits(shape, str(g.choice(["uint8", "int16", "float32", "float64", "bool"])), g)
        spec = P.normalize(shape, a.dtype, pad_width, mode, cv)
        assert same_bits(P.reference(a, spec), numpy_pad(a, pad_width, mode, cv, 0)), (shape, pad_width, mode, cv)


def test_index_map_edge_cases():
    # reflect of a single element repeats it (numpy's legacy rule); symmetric and wrap likewise.
    for mode in ("reflect", "symmetric", "wrap", "edge"):
        assert P.index_map(mode, 1, 5, 7).tolist() == [0] * 13
    # period 2n - 2 for reflect, 2n for symmetric, n for wrap, across many periods
    a = np.arange(3)
    for mode in ("reflect", "symmetric", "wrap"):
        assert P.index_map(mode, 3, 11, 13).tolist() == np.pad(a, (11, 13), mode=mode).tolist()
    assert P.index_map("constant", 0, 2, 3).tolist() == [-1] * 5


def test_brick_formula():
    g = rng()
    for _ in range(200):
        th, tw = int(g.integers(1, 7)), int(g.integers(1, 7))
        pads = [(int(g.integers(0, 15)), int(g.integers(0, 15))) for _ in range(2)]
        s = int(g.integers(-20, 20))
        a = random_bits((th, tw), "int32", g)
        spec = P.normalize(a.shape, a.dtype, pads, "brick", stagger=s)
        got = P.reference(a, spec)
        (p0, _), (p1, _) = pads
        for r in range(got.shape[0]):
            for c in range(got.shape[1]):
                assert got[r, c] == a[(r - p0) % th, (c - p1 - s * ((r - p0) // th)) % tw]
        assert same_bits(got, numpy_pad(a, pads, "brick", 0, s))
    a = random_bits((3, 4, 5), "float32", g)
    assert same_bits(P.reference(a, P.normalize(a.shape, a.dtype, 3, "brick", stagger=0)), np.pad(a, 3, mode="wrap"))


# ---- CPU: argument rules ---------------------------------------------------------------------------

def test_errors_like_numpy():
    f32 = np.dtype("float32")
    with pytest.raises(ValueError, match="negative"):
        P.normalize((3, 4), f32, -1)
    with pytest.raises(ValueError, match="negative"):
        P.normalize((3, 4), f32, ((1, 2), (0, -1)))
    with pytest.raises(ValueError, match="pad_width"):
        P.normalize((3, 4), f32, ((1, 2), (3, 4), (5, 6)))
    with pytest.raises(ValueError, match="pad_width"):
        P.normalize((3, 4, 5), f32, ((1, 2, 3), (3, 4, 5)))
    with pytest.raises(TypeError, match="integral"):
        P.normalize((3, 4), f32, 1.5)
    with pytest.raises(ValueError, match="empty axis 1"):
        P.normalize((3, 0), f32, 1, "reflect")
    P.normalize((3, 0), f32, ((1, 1), (0, 0)), "reflect")  # an empty axis without pads is fine
    P.normalize((3, 0), f32, 1, "constant")
    with pytest.raises(ValueError, match="mode 'average' is not supported"):
        P.normalize((3, 4), f32, 1, "average")
    with pytest.raises(ValueError, match="brick"):
        P.normalize((5,), f32, 1, "brick")
    with pytest.raises(ValueError, match="stagger"):
        P.normalize((3, 4), f32, 1, "wrap", stagger=2)
    with pytest.raises(TypeError, match="stagger"):
        P.normalize((3, 4), f32, 1, "brick", stagger=1.5)
    with pytest.raises(ValueError, match="constant_values"):
        P.normalize((3, 4), f32, 1, "constant", constant_values=[1, 2, 3])
    # the same cases numpy itself rejects
    for args in [(-1,), (((1, 2), (3, 4), (5, 6)),)]:
        with pytest.raises(ValueError):
            np.pad(np.zeros((3, 4)), *args)


def test_pad_width_forms_like_numpy():
    for pw in [2, (1, 3), [[1, 2]], [[1], [2]], ((1, 2), (3, 4)), {1: (1, 2)}, {-1: 3}, {0: 2, 1: (0, 1)},
               np.array([[0, 1], [2, 3]])]:
        a = np.arange(12).reshape(3, 4)
        spec = P.normalize(a.shape, a.dtype, pw)
        assert spec.out_shape == np.pad(a, pw).shape, pw


def test_cached_arguments_stay_apart_by_type(monkeypatch):
    """spec_for caches specs by their arguments: widths that compare equal but differ in type ((1, 1) against
    (1.0, 1), tuples against lists, ints against bools) get specs, or errors, of their own, as numpy.pad would."""
    monkeypatch.setattr(P, "kind_of", lambda x, op: None)  # a NumPy array stands in for a device array
    monkeypatch.setattr(P, "_SPECS", {})
    a = np.zeros((2, 3), np.float32)
    for pw in [((0, 0), (1, 1)), ((0, 0), (1.0, 1)), [[0, 0], [1, 1]], ((0, 0), (True, 1)), ((0, 0), (1, 1)),
               (1, 1), ((0, 0), (1.5, 1))]:
        try:
            want = np.pad(a, pw).shape
        except Exception as e:
            with pytest.raises(type(e)):
                P.spec_for(a, pw)
            continue
        assert P.spec_for(a, pw).out_shape == want, pw


def test_constant_values_cast_like_numpy():
    """The pad value is cast into the array's dtype by numpy's own assignment (same bits, same errors)."""
    for dtype, cv in [("uint8", 3.7), ("int16", -2.9), ("bool", 5), ("float16", 1e-8), ("float32", np.nan),
                      ("uint8", np.int64(-1)), ("int32", [(1, 2), (3, 4)]), ("float64", -0.0), ("uint8", 300)]:
        a = np.ones((2, 3), dtype=dtype)
        try:
            ref = np.pad(a, 1, constant_values=cv)
        except Exception as e:
            with pytest.raises(type(e)):
                P.normalize(a.shape, a.dtype, 1, "constant", cv)
            continue
        spec = P.normalize(a.shape, a.dtype, 1, "constant", cv)
        assert same_bits(P.reference(a, spec), ref), (dtype, cv)


def test_python_arguments_need_no_numpy(monkeypatch):
    """Pad widths and constants given as Python numbers are normalised without NumPy arrays (torch.compile traces
    NumPy calls as tensor ops, and fails on the dtype views)."""
    def refuse(*args, **kwargs):
        raise AssertionError("NumPy array made")

    monkeypatch.setattr(P.np, "asarray", refuse)
    monkeypatch.setattr(P.np, "array", refuse)
    for pw in (1, (2, 3), ((0, 0), (3, 2)), [[1, 2], [0, 4]]):
        spec = P.normalize((4, 5), np.dtype("float32"), pw, "constant", 0)
        assert spec.bits == [0, 0, 0, 0]
        P.normalize((4, 5), np.dtype("float32"), pw, "reflect")


def test_host_arrays_rejected():
    import cupy_kernels as ck

    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        ck.pad(np.ones(3), 1)
    with pytest.raises(TypeError, match="x must be"):
        ck.pad([1, 2, 3], 1)


def test_units_cover_each_row():
    """pad_rows' segments and pad_periodic's units cover every chunk of a row, in whole warps / blocks."""
    g = rng()
    for _ in range(300):
        shape = (int(g.integers(1, 4)), int(g.integers(1, 200)), int(g.integers(1, 5000)))
        pads = [(0, 0), (int(g.integers(0, 5)), int(g.integers(0, 5))), (int(g.integers(0, 9000)), int(g.integers(0, 9000)))]
        mode = str(g.choice(["reflect", "wrap", "brick", "constant"]))
        itemsize = int(g.choice([1, 2, 4, 8]))
        spec = P.normalize(shape, np.dtype(f"u{itemsize}"), pads, mode, stagger=3 if mode == "brick" else 0)
        for rung in P.RUNGS:
            geo = P.choose_path(P.geometry(shape, P.contiguous_strides(shape), itemsize, spec), itemsize, rung)
            cpr = P._chunks_per_row(geo, itemsize)
            if geo.path == "flat":
                assert geo.chunks == 0 and (cpr < P.TUNING.narrow_chunks or rung == "flat")
                continue
            assert geo.tpr * geo.chunks >= cpr > (geo.tpr - 1) * geo.chunks
            if geo.path == "rows":
                assert geo.group in (P.TUNING.row_group_lanes, 32) and geo.chunks % geo.group == 0
                assert geo.chunks <= P.TUNING.row_unit_chunks and geo.threads == P.THREADS
                assert geo.group == 32 or (geo.tpr == 1 and cpr <= P.TUNING.row_group_chunks)
            else:
                assert rung == "default" and geo.chunks % geo.threads == 0 and geo.threads <= 256


def test_tuning_changes_the_paths():
    """The thresholds are data: tuned() changes what a shape takes, and the table is restored after."""
    from cupy_kernels._runtime.tuning import tuned

    shape = (4, 100)
    spec = P.normalize(shape, np.dtype("float32"), 1, "reflect")

    def path():
        return P.choose_path(P.geometry(shape, (100, 1), 4, spec), 4).path

    assert path() == "flat"  # rows of 102 float32: 27 chunks, narrower than a warp's 32
    with tuned(P, narrow_chunks=16):
        assert path() == "rows"
    assert path() == "flat" and P.TUNING.narrow_chunks == 32


# ---- CPU: the kernel's device code, compiled for the host ----------------------------------------

HARNESS_SRC = Path(__file__).with_name("pad_host_harness.cpp")


@functools.lru_cache(maxsize=None)
def harness(tmp=Path("/tmp")) -> str | None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return None
    from cupy_kernels._runtime import cu_src_dir

    import hashlib

    digest = hashlib.sha1((HARNESS_SRC.read_text() + (cu_src_dir() / "pad.cu").read_text()).encode()).hexdigest()[:12]
    exe = tmp / f"cupy_kernels_pad_harness_{digest}"
    if not exe.exists():
        subprocess.run([cxx, "-O1", "-std=c++17", "-w", f"-I{cu_src_dir()}", "-o", str(exe), str(HARNESS_SRC)],
                       check=True)
    return str(exe)


def harness_forward(exe, base, x, spec, xshift=0, rung="default"):
    """Run the device functions over the launch the GPU would get, for the view `x` of `base`."""
    size = x.dtype.itemsize
    offset = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // size
    geo = P.choose_path(P.geometry(x.shape, [s // size for s in x.strides], size, spec), size, rung)
    out = run_harness(exe, geo.path, size, geo.kmode, geo.threads, geo.args(), base, xshift, offset)
    return np.frombuffer(out, dtype=x.dtype).reshape(spec.out_shape), geo


def run_harness(exe, path, itemsize, kmode, threads, args, base, xshift=0, offset=0) -> bytes:
    """One forward kernel (path "flat", "rows" or "periodic") over x = base[offset:] (raw bytes) on the host."""
    raw = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    data = np.ascontiguousarray(base).view(raw)
    head = f"{path} {itemsize} {kmode} {threads} {xshift} {offset} {data.size}\n"
    head += " ".join(str(int(v)) for v in args) + "\n"
    return subprocess.run([exe], input=head.encode() + data.tobytes(), capture_output=True, check=True).stdout


def random_view(g, shape, dtype):
    """A view of `shape` inside a larger random buffer: contiguous, permuted, or a window with some
    axes reversed, at an element offset. Returns (buffer, view)."""
    kind = g.random()
    if kind < 0.45:
        base = random_bits((math.prod(shape),), dtype, g)
        return base, base.reshape(shape)
    if kind < 0.7:  # a transposed view (channels-last style)
        perm = g.permutation(len(shape))
        full = tuple(shape[i] for i in perm)
        base = random_bits((math.prod(full),), dtype, g)
        return base, base.reshape(full).transpose(np.argsort(perm))
    big = tuple(s + int(g.integers(0, 3)) for s in shape)
    off = int(g.integers(0, 4))
    base = random_bits((math.prod(big) + off,), dtype, g)
    arr = base[off:].reshape(big)
    for axis in range(len(shape)):
        if g.random() < 0.3:
            arr = np.flip(arr, axis)
    starts = [int(g.integers(0, b - s + 1)) for s, b in zip(shape, big)]
    return base, arr[tuple(slice(st, st + s) for st, s in zip(starts, shape))]


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_device_code_on_host_matches_numpy():
    exe = harness()
    g = rng()
    cases = 0
    for i in range(700):
        shape, pad_width, mode, cv, stagger = random_case(g, max_dims=4, max_side=40 if i % 4 == 0 else 9)
        dtype = str(g.choice(DTYPES))
        base, x = random_view(g, shape, dtype)
        spec = P.normalize(shape, x.dtype, pad_width, mode, cv, stagger)
        try:
            got, p = harness_forward(exe, base, x, spec, xshift=int(g.integers(0, 16 // x.dtype.itemsize)) * x.dtype.itemsize,
                                     rung=P.RUNGS[i % len(P.RUNGS)])
        except P._TooManyAxes:
            continue
        ref = numpy_pad(np.ascontiguousarray(x), pad_width, mode, cv, stagger)
        assert same_bits(got, ref), (shape, x.strides, pad_width, mode, cv, stagger, dtype, p)
        cases += 1
    # wide rows with every path: channels-last merge, interior vector loads, misaligned sources
    for shape, pw, mode, dtype in [((3, 40, 500, 3), ((0, 0), (5, 7), (9, 2), (0, 0)), "reflect", "uint8"),
                                   ((2, 3, 61, 300), ((0, 0), (0, 0), (64, 64), (64, 64)), "reflect", "float32"),
                                   ((2, 3, 61, 300), ((0, 0), (0, 0), (64, 64), (64, 64)), "constant", "float32"),
                                   ((2, 3, 61, 300), ((0, 0), (0, 0), (64, 64), (64, 64)), "edge", "float16"),
                                   ((1, 1003), ((0, 0), (1, 1)), "symmetric", "float64"),
                                   ((48, 32), ((100, 100), (300, 300)), "brick", "float32")]:
        for xshift in (0, {1: 3, 2: 6, 4: 4, 8: 8}[np.dtype(dtype).itemsize]):
            base = random_bits((math.prod(shape),), dtype, g)
            x = base.reshape(shape)
            spec = P.normalize(shape, x.dtype, pw, mode, 7 if mode == "constant" else P.UNSET, 10 if mode == "brick" else 0)
            for rung in ("rows", "default"):
                got, p = harness_forward(exe, base, x, spec, xshift=xshift, rung=rung)
                assert p.path != "flat", "expected a wide-row path"
                assert same_bits(got, numpy_pad(x, pw, mode, 7 if mode == "constant" else 0, 10 if mode == "brick" else 0))
                cases += 1
    assert cases > 500


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_small_type_rows_on_host_match_numpy():
    """pad_rows with 1- and 2-byte elements: chunks built from word loads (runs of x ascending, reflected, or one
    element repeated), folds inside a chunk (short last axes), unaligned sources and reversed views."""
    exe = harness()
    g = rng()
    rows = 0
    for i in range(160):
        dtype = str(g.choice(["uint8", "int16", "float16", "bool"]))
        nd = int(g.integers(1, 4))
        shape = tuple(int(v) for v in g.integers(1, 4, size=nd - 1)) + (
            int(g.choice([1, 2, 3, 15, 16, 17, 40, 333, 1024])),)
        mode = str(g.choice(["constant", "edge", "reflect", "symmetric", "wrap"]))
        pads = [(int(g.integers(0, 3)), int(g.integers(0, 3))) for _ in range(nd - 1)]
        pads.append((int(g.integers(0, 700)), int(g.integers(0, 700))))
        size = np.dtype(dtype).itemsize
        off = int(g.integers(0, 4))
        base = random_bits((math.prod(shape) + 3,), dtype, g)
        x = base[off:off + math.prod(shape)].reshape(shape)
        if g.random() < 0.2:
            x = np.flip(x, -1)
        cv = int(g.integers(0, 2)) if dtype == "bool" else int(g.integers(0, 100))
        spec = P.normalize(x.shape, x.dtype, pads, mode, cv if mode == "constant" else P.UNSET)
        try:
            got, p = harness_forward(exe, base, x, spec, xshift=int(g.integers(0, 16 // size)) * size,
                                     rung=("rows", "default")[i % 2])
        except P._TooManyAxes:
            continue
        assert same_bits(got, numpy_pad(np.ascontiguousarray(x), pads, mode, cv, 0)), (
            dtype, shape, x.strides, pads, mode, cv, off, p)
        rows += p.path == "rows"
    assert rows > 100


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_grouped_rows_on_host_match_numpy():
    """pad_rows with several rows a warp (units of TUNING.row_group_lanes lanes) and with whole warps: odd widths, rows
    not a whole number of chunks, narrow pads, strided and channels-last sources, row counts that leave a warp's last
    groups idle, constant pads that differ per axis and side."""
    from cupy_kernels._runtime.tuning import tuned

    exe = harness()
    g = rng()
    grouped = 0
    cases = [((3, 5, 77), ((0, 0), (1, 2), (3, 3))), ((2, 3, 40, 1000), ((0, 0), (0, 0), (1, 1), (64, 64))),
             ((7, 1021), ((1, 0), (3, 5))), ((3, 37, 333), ((0, 0), (2, 1), (9, 2))), ((5, 61, 3), ((0, 0), (4, 4), (0, 0))),
             ((2, 9, 100, 3), ((0, 0), (1, 1), (5, 7), (0, 0))), ((4, 500), ((0, 0), (16, 32)))]
    for lanes in (P.TUNING.row_group_lanes, 4, 16, 32):
        with tuned(P, row_group_lanes=lanes, row_group_chunks=10**6 if lanes != 32 else 96):
            for shape, pw in cases:
                for dtype in ("uint8", "float16", "float32", "float64"):
                    for mode in ("constant", "edge", "reflect", "symmetric", "wrap"):
                        if mode in ("reflect", "symmetric", "wrap") and min(n for n, (b, a) in zip(shape, pw) if b + a) < 2:
                            continue
                        base, x = random_view(g, shape, dtype)
                        cv = [(int(g.integers(0, 9)), int(g.integers(0, 9))) for _ in shape] if mode == "constant" else 0
                        spec = P.normalize(shape, x.dtype, pw, mode, cv if mode == "constant" else P.UNSET)
                        size = x.dtype.itemsize
                        try:
                            got, p = harness_forward(exe, base, x, spec, xshift=int(g.integers(0, 16 // size)) * size,
                                                     rung="rows")
                        except P._TooManyAxes:
                            continue
                        ref = numpy_pad(np.ascontiguousarray(x), pw, mode, cv, 0)
                        assert same_bits(got, ref), (shape, x.strides, pw, mode, cv, dtype, p)
                        grouped += p.path == "rows" and p.group == lanes
    assert grouped > 300


def check_on_host(exe, base, x, pads, mode, stagger, rung="default", xshift=0):
    """One case through the host harness, bit-compared with numpy.pad: the plan, or None when the
    case has too many axes for one launch."""
    spec = P.normalize(x.shape, x.dtype, pads, mode, stagger=stagger)
    try:
        got, p = harness_forward(exe, base, x, spec, xshift=xshift, rung=rung)
    except P._TooManyAxes:
        return None
    assert same_bits(got, numpy_pad(np.ascontiguousarray(x), pads, mode, 0, stagger)), (x.shape, pads, mode, stagger, p)
    return p


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_periodic_rows_on_host_matches_numpy():
    """The stores-only path of brick and short-period wrap rows (pad_periodic), every thread of the launch."""
    exe = harness()
    g = rng()
    periodic = 0
    for i in range(400):
        nd = int(g.integers(1, 4))
        shape = tuple(int(v) for v in g.integers(1, 5, size=max(nd - 2, 0))) + tuple(
            int(v) for v in g.integers(1, 70, size=min(nd, 2)))
        mode = "brick" if nd >= 2 and i % 3 else "wrap"
        pads = [(int(g.integers(0, 3)), int(g.integers(0, 3))) for _ in range(nd - 1)]
        pads += [(int(g.integers(0, 2000)), int(g.integers(0, 2000)))]
        dtype = str(g.choice(["uint8", "int16", "float32", "float64", "bool"]))
        base, x = random_view(g, shape, dtype)
        stagger = int(g.integers(-100, 100)) if mode == "brick" else 0
        p = check_on_host(exe, base, x, pads, mode, stagger,
                          xshift=int(g.integers(0, 16 // x.dtype.itemsize)) * x.dtype.itemsize)
        periodic += p is not None and p.path == "periodic"
    x = random_bits((48, 32), "float32", g)
    assert check_on_host(exe, x, x, BRICK_CASE, "brick", 10).path == "periodic"
    assert periodic > 60  # ~125 +- 9 of the 400 draws take the path (91 once: > 100 was flaky)


BRICK_CASE = ((2048, 2048), (4096, 4096))


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_gather_code_on_host_matches_adjoint():
    """The backward's per-axis gather-sum (device code on the host) equals the adjoint of the index map."""
    exe = harness()
    g = rng()
    for _ in range(300):
        mode = str(g.choice(["edge", "reflect", "symmetric", "wrap", "brick"]))
        n = int(g.integers(1, 7))
        before, after = int(g.integers(0, 20)), int(g.integers(0, 20))
        outk = n + before + after
        A, C = int(g.integers(1, 4)), int(g.integers(1, 4))
        brows, bp0, bth, stagger = 1, 0, 1, 0
        if mode == "brick":
            C = 1
            bth = int(g.integers(1, 5))
            bp0 = int(g.integers(0, 6))
            brows = bth + bp0 + int(g.integers(0, 6))
            A = brows * int(g.integers(1, 3))
            stagger = int(g.integers(0, n))
        grad = g.standard_normal((A, outk, C))
        fkind = P.FOLD_KIND[mode]
        fold = P.FOLD["wrap" if mode == "brick" else mode]
        head = f"gather {fkind} {A} {outk} {n} {C} {before} {fold} {brows} {bp0} {bth} {stagger}\n"
        out = subprocess.run([exe], input=head.encode() + grad.tobytes(), capture_output=True, check=True).stdout
        got = np.frombuffer(out, dtype=np.float64).reshape(A, n, C)
        ref = np.zeros((A, n, C))
        for a in range(A):
            if mode == "brick":
                band = (a % brows - bp0) // bth
                m = np.mod(np.arange(outk) - before - stagger * band, n)
            else:
                m = P.index_map(mode, n, before, after)
            np.add.at(ref[a], m, grad[a])
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


# ---- CPU: whole plans (several launches, workspaces) through the host harness ----------------------

class RecordingBuilder:
    """A PlanBuilder that records launches instead of loading kernels (no GPU): buffers 0 and 1 are the call's
    arrays, workspaces follow."""

    def __init__(self):
        from cupy_kernels._runtime import Buffer

        self.Buffer = Buffer
        self.buffers = [Buffer(0), Buffer(1)]
        self.workspaces = []
        self.launches = []

    def workspace(self, nbytes, zero=False, persistent=None):
        w = self.Buffer(2 + len(self.workspaces), 256, nbytes, zero, persistent)
        self.workspaces.append(w)
        return w

    def launch(self, kernel, grid, block, args, shared_mem=0, cluster=1, after_previous=False):
        self.launches.append((kernel.name, grid, block, args))


@pytest.fixture
def no_device(monkeypatch):
    """Grids from a made-up device of 132 SMs (the planning functions only read its size)."""
    class Device:
        sm_count = 132

        @staticmethod
        def resident_blocks(threads, per_sm_cap=32):
            return 132 * max(1, min(per_sm_cap, 2048 // threads))

    monkeypatch.setattr(P, "current", lambda: Device)
    monkeypatch.setattr(P, "resident_blocks", lambda kernel, threads, smem=0: 132 * 4)


def template_args(name):
    return [a.strip() for a in name[name.index("<") + 1:-1].split(",")]


# ---- CPU: numpy's computing modes, the per-axis passes' device code on the host -------------------------

AXIS_HARNESS_SRC = r"""
// The per-axis passes of cu_src/pad.cu on the host (tests/test_pad.py writes and builds this): each launch's lines in
// turn, through the kernels' own device functions; a line's group of lanes runs lane by lane where the lanes are
// independent (fill, ramp), else as one lane (odd, statistics: G = 1).
// stdin: nbuf, then nbuf sizes in bytes (buffer 1: the output y, 2...: workspaces, zeroed), then y's bytes,
//        then nlaunch and per launch: kernel code npointers pointers... nscalars scalars...
//        (code: the element size for pad_axis_fill, else the dtype code); stdout: y's bytes.
#define PAD_HOST
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pad.cu"

static unsigned long long word() {
  char tok[64];
  if (scanf("%63s", tok) != 1) { fprintf(stderr, "bad input\n"); exit(2); }
  return tok[0] == '-' ? (unsigned long long)strtoll(tok, nullptr, 10) : strtoull(tok, nullptr, 10);
}

template <int DT>
static void odd_line(unsigned char* y, long long off, const PadLines& L, int symmetric) {
  pad_line_odd<DT>(y, off, L.step, L.before, L.n, L.after, symmetric, 0, 1);
}

template <int DT>
static void stat_line(unsigned char* y, long long off, const PadLines& L, int stat, long long llen, long long rlen) {
  pad_line_stat<DT>(y, off, L.step, L.before, L.n, L.after, stat, llen, rlen, 0, 1);
}

#define PAD_DT_SWITCH(dt, F, ...)                                                                              \
  switch (dt) {                                                                                                \
    case 0: F<0>(__VA_ARGS__); break; case 1: F<1>(__VA_ARGS__); break; case 2: F<2>(__VA_ARGS__); break;       \
    case 3: F<3>(__VA_ARGS__); break; case 4: F<4>(__VA_ARGS__); break; case 5: F<5>(__VA_ARGS__); break;       \
    case 6: F<6>(__VA_ARGS__); break; case 7: F<7>(__VA_ARGS__); break; case 8: F<8>(__VA_ARGS__); break;       \
    case 9: F<9>(__VA_ARGS__); break; case 10: F<10>(__VA_ARGS__); break; case 11: F<11>(__VA_ARGS__); break;   \
    case 12: F<12>(__VA_ARGS__); break; case 13: F<13>(__VA_ARGS__); break; default: F<14>(__VA_ARGS__);       \
  }

template <int CT>
static void ramp_line(unsigned char* y, long long off, const PadLines& L, unsigned* flags, bool flag_pass,
                      const unsigned long long* e) {
  const int dt = (int)e[0];
  const PadCx lo = pad_ct_value<CT>(e[1], e[2]), hi = pad_ct_value<CT>(e[3], e[4]);
  if (flag_pass) {
    const int bits = pad_line_ramp_zero<CT>(y, off, L.step, L.before, L.n, L.after, dt, lo, hi);
    flags[0] |= bits & 1;
    flags[1] |= (bits >> 1) & 1;
    return;
  }
  const int zero_bits = (flags[0] ? 1 : 0) | (flags[1] ? 2 : 0);
  for (int lane = 0; lane < L.group; ++lane)
    pad_line_ramp<CT>(y, off, L.step, L.before, L.n, L.after, dt, lo, hi, zero_bits, lane, L.group);
}

template <typename T>
static void fill_line(unsigned char* y, long long off, const PadLines& L, const unsigned long long* e) {
  for (int lane = 0; lane < L.group; ++lane)
    pad_line_fill<T>(reinterpret_cast<T*>(y), off, L.step, L.before, L.n, L.after, pad_raw<T>(e[0], e[1]),
                     pad_raw<T>(e[2], e[3]), lane, L.group);
}

int main() {
  const int nbuf = (int)word();
  std::vector<std::vector<unsigned long long>> buf(nbuf);  // 8-byte aligned, as device memory is
  std::vector<size_t> bytes(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    bytes[i] = (size_t)word();
    buf[i].assign(bytes[i] / 8 + 2, 0);
  }
  getchar();
  if (bytes[1] && fread(buf[1].data(), 1, bytes[1], stdin) != bytes[1]) return 3;
  const int nlaunch = (int)word();
  for (int k = 0; k < nlaunch; ++k) {
    char name[64];
    if (scanf("%63s", name) != 1) return 2;
    const int code = (int)word(), np = (int)word();
    std::vector<int> ptr(np);
    for (int i = 0; i < np; ++i) ptr[i] = (int)word();
    const int ns = (int)word();
    std::vector<unsigned long long> a(ns);
    for (int i = 0; i < ns; ++i) a[i] = word();
    PadLines L;  // the launch's PAD_LINE_ARGS
    L.nlines = (long long)a[0];
    for (int g = 0; g < PAD_LINE_GROUPS; ++g) {
      L.count[g] = (long long)a[1 + 2 * g];
      L.stride[g] = (long long)a[2 + 2 * g];
    }
    L.base = (long long)a[17]; L.step = (long long)a[18]; L.before = (long long)a[19]; L.n = (long long)a[20];
    L.after = (long long)a[21]; L.group = (int)a[22];
    const unsigned long long* e = a.data() + 23;
    unsigned char* y = reinterpret_cast<unsigned char*>(buf[ptr[0]].data());
    const std::string kernel = name;
    for (long long line = 0; line < L.nlines; ++line) {
      const long long off = pad_line_offset(L, line);
      if (kernel == "pad_axis_fill") {
        if (code == 1) fill_line<unsigned char>(y, off, L, e);
        else if (code == 2) fill_line<unsigned short>(y, off, L, e);
        else if (code == 4) fill_line<unsigned int>(y, off, L, e);
        else if (code == 8) fill_line<unsigned long long>(y, off, L, e);
        else fill_line<PadRaw16>(y, off, L, e);
      } else if (kernel == "pad_axis_odd") {
        PAD_DT_SWITCH(code, odd_line, y, off, L, (int)e[0])
      } else if (kernel == "pad_axis_stat") {
        PAD_DT_SWITCH(code, stat_line, y, off, L, (int)e[0], (long long)e[1], (long long)e[2])
      } else {
        unsigned* flags = reinterpret_cast<unsigned*>(buf[ptr[1]].data());
        const bool flag_pass = kernel == "pad_ramp_flags";
        switch (code) {
          case PAD_FLOAT16: ramp_line<PAD_FLOAT16>(y, off, L, flags, flag_pass, e); break;
          case PAD_BFLOAT16: ramp_line<PAD_BFLOAT16>(y, off, L, flags, flag_pass, e); break;
          case PAD_FLOAT32: ramp_line<PAD_FLOAT32>(y, off, L, flags, flag_pass, e); break;
          case PAD_FLOAT64: ramp_line<PAD_FLOAT64>(y, off, L, flags, flag_pass, e); break;
          case PAD_COMPLEX64: ramp_line<PAD_COMPLEX64>(y, off, L, flags, flag_pass, e); break;
          default: ramp_line<PAD_COMPLEX128>(y, off, L, flags, flag_pass, e); break;
        }
      }
    }
  }
  fwrite(buf[1].data(), 1, bytes[1], stdout);
  return 0;
}
"""


@functools.lru_cache(maxsize=None)
def axis_harness(tmp=Path("/tmp")) -> str | None:
    """The per-axis passes' host harness (AXIS_HARNESS_SRC with cu_src/pad.cu), built once per source version;
    None without a C++ compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return None
    import hashlib

    from cupy_kernels._runtime import cu_src_dir

    digest = hashlib.sha1((AXIS_HARNESS_SRC + (cu_src_dir() / "pad.cu").read_text()).encode()).hexdigest()[:12]
    exe = tmp / f"cupy_kernels_pad_axis_harness_{digest}"
    if not exe.exists():
        src = tmp / f"cupy_kernels_pad_axis_harness_{digest}.cpp"
        src.write_text(AXIS_HARNESS_SRC)
        subprocess.run([cxx, "-O1", "-std=c++17", "-w", f"-I{cu_src_dir()}", "-o", str(exe), str(src)], check=True)
    return str(exe)


def run_stages(exe, y0: np.ndarray, b: RecordingBuilder) -> bytes:
    """plan_stages' launches (recorded by b) run by the host harness over y0 (its memory order): y's bytes after."""
    from cupy_kernels._runtime import Buffer

    raw = {v: k for k, v in P.RAW_CTYPES.items()}
    sizes = [0, y0.nbytes] + [w.nbytes for w in b.workspaces]
    launches = []
    for name, _, _, args in b.launches:
        kernel, arg = name[:-1].split("<")
        code = raw[arg] if arg in raw else P.DTYPES.index(arg[len("PAD_"):].lower())
        pointers = [a.index for a in args if isinstance(a, Buffer)]
        scalars = [int(a) for a in args if not isinstance(a, Buffer)]
        launches.append(f"{kernel} {code} {len(pointers)} {' '.join(map(str, pointers))} {len(scalars)} "
                        + " ".join(map(str, scalars)))
    data = (f"{len(sizes)} {' '.join(map(str, sizes))}\n".encode() + y0.tobytes(order="A")
            + f"{len(launches)}\n{chr(10).join(launches)}\n".encode())
    return subprocess.run([exe], input=data, capture_output=True, check=True).stdout


def emulated_pad(array, pad_width, mode="constant", constant_values=P.UNSET, stagger=0, **kwargs):
    """ck.pad of a CuPy array, run on the host: its validation (normalize) and its choice of memory order and of
    plan; the copying modes by their index maps (P.reference), the staged ones by plan_stages' launches through
    the host harness (the passes' device code), after the interior copy; a function as mode by numpy.pad, as
    ck.pad does."""
    a = np.asarray(array)
    if a.dtype.name not in P.DTYPES:
        raise TypeError(f"pad: x has dtype {a.dtype.name}; expected one of {', '.join(P.DTYPES)}")
    spec = P.normalize(a.shape, a.dtype, pad_width, mode, constant_values, stagger, kwargs)
    if spec.host is not None:
        return P._numpy_pad(a, spec.pads, mode=spec.host[0], **spec.host[1])
    strides = tuple(s // a.itemsize for s in a.strides)
    fortran = spec.mode != "brick" and P.fortran_only(a.shape, strides)
    order = "F" if fortran else "C"
    if not a.shape:
        return a.copy()
    if math.prod(spec.out_shape) == 0:
        return np.empty(spec.out_shape, a.dtype, order=order)
    if not P.staged(spec, a.dtype.name, fortran):
        return np.array(P.reference(a, spec), order=order)
    y0 = np.array(P.reference(a, P.Spec(a.shape, spec.pads, "constant", [0] * (2 * a.ndim))), order=order)
    b = RecordingBuilder()
    out = spec.out_shape
    P.plan_stages(b, b.buffers[1], a.dtype.name, spec, P.fortran_strides(out) if fortran else P.contiguous_strides(out))
    exe = axis_harness()
    if exe is None:
        raise RuntimeError("emulated_pad needs a host C++ compiler")
    return np.frombuffer(run_stages(exe, y0, b), dtype=a.dtype).reshape(out, order=order).copy(order=order)


# numpy's computing modes in random cases: every numpy dtype pad takes (bfloat16 has no numpy reference), 1-D to 4-D,
# odd sizes, asymmetric and wide pads, every keyword form; C- and Fortran-ordered inputs
STAGED_MODES_ALL = ("maximum", "minimum", "mean", "median", "linear_ramp", "reflect", "symmetric")
NUMPY_DTYPES = [d for d in P.DTYPES if d != "bfloat16"]


def staged_case(g, dtype, max_side=7, wide=False, max_out=20_000):
    """(shape, pad_width, mode, kwargs) of one of numpy's computing modes, its keywords in one of numpy's forms."""
    while True:
        nd = int(g.integers(1, 5))
        shape = [int(v) for v in g.integers(1, max_side + 1, size=nd)]
        if wide:  # a long contiguous last axis: a warp a line on the GPU
            shape[-1] = int(g.integers(60, 400))
        pads = [(int(g.integers(0, 2 * n + 4)), int(g.integers(0, 2 * n + 4))) if g.random() < 0.8 else (0, 0)
                for n in shape]
        if math.prod(n + b + a for n, (b, a) in zip(shape, pads)) <= max_out:
            break
    form = g.random()
    pad_width = pads[0][0] if form < 0.1 else pads[0] if form < 0.2 else pads
    pads = P.normalize_pad_width(pad_width, nd)
    mode = str(g.choice(STAGED_MODES_ALL))
    kwargs = {}
    if mode in ("reflect", "symmetric"):
        kwargs["reflect_type"] = "odd"
    elif mode == "linear_ramp":
        kind = g.random()
        small = lambda: int(g.integers(-20, 20)) if dtype[0] != "u" else int(g.integers(0, 40))  # noqa: E731
        if kind < 0.2:
            pass  # numpy's default, 0
        elif kind < 0.4:
            kwargs["end_values"] = small()
        elif kind < 0.55:
            kwargs["end_values"] = (small(), small())
        elif kind < 0.75:
            kwargs["end_values"] = [(small(), small()) for _ in shape]  # Python numbers: weak, the array's type
        elif kind < 0.9 and dtype not in ("bool",) and dtype[0] not in "iu":
            kwargs["end_values"] = [(small() + 0.375, small() - 0.625) for _ in shape]
        elif dtype.startswith("complex"):
            kwargs["end_values"] = (complex(small(), small()), small())
    else:
        kind = g.random()
        # stat_length 0: numpy refuses it for maximum and minimum; means and medians of nothing are NaN, which an
        # integer dtype cannot hold (undefined in numpy)
        lowest = 1 if mode in ("maximum", "minimum") or dtype == "bool" or dtype[0] in "iu" else 0
        if kind < 0.2:
            pass
        elif kind < 0.3:
            kwargs["stat_length"] = None
        elif kind < 0.55:
            kwargs["stat_length"] = int(g.integers(lowest, max(shape) + 3))
        elif kind < 0.75:
            kwargs["stat_length"] = (int(g.integers(lowest, 5)), int(g.integers(lowest, 5)))
        else:
            kwargs["stat_length"] = [(int(g.integers(lowest, n + 3)), int(g.integers(lowest, n + 3))) for n in shape]
    return tuple(shape), pad_width if pads != [(0, 0)] * nd else 1, mode, kwargs


def staged_values(g, shape, dtype, exact_sums):
    """Random values of `dtype`; exact_sums: on a grid of 1/8 within +-64 (means summed in any order agree)."""
    if dtype == "bool":
        return g.integers(0, 2, size=shape).astype(bool)
    if dtype[0] in "iu":
        lo = 0 if dtype[0] == "u" else -30
        return g.integers(lo, lo + 60, size=shape).astype(dtype)
    if exact_sums:
        re = g.integers(-512, 512, size=shape) / 8
        im = g.integers(-512, 512, size=shape) / 8
    else:
        re, im = g.standard_normal(shape) * 10, g.standard_normal(shape) * 10
    return (re + 1j * im if dtype.startswith("complex") else re).astype(dtype)


def assert_like_numpy(got, want, mode, what):
    """ck.pad's result against numpy.pad's: shape, dtype, memory order, values (bit for bit for odd reflections
    and ramps; means of half-precision floats within their rounding)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype)
    if want.ndim >= 2:
        flags = ("C_CONTIGUOUS", "F_CONTIGUOUS")
        assert [got.flags[f] for f in flags] == [want.flags[f] for f in flags], what
    if mode == "mean" and want.dtype.kind in "fc":
        tol = {2: 2e-3, 4: 1e-6, 8: 1e-6 if want.dtype.kind == "c" else 1e-12, 16: 1e-12}[want.dtype.itemsize]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True, err_msg=str(what))
    else:
        assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"), (what, got, want)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_staged_modes_on_host_match_numpy():
    """linear_ramp, maximum, minimum, mean, median and reflect_type='odd' through emulated_pad (normalize,
    plan_stages, the passes' device code on the host) equal numpy.pad on fresh random inputs."""
    g = rng()
    for i in range(600):
        dtype = NUMPY_DTYPES[i % len(NUMPY_DTYPES)]
        shape, pad_width, mode, kwargs = staged_case(g, dtype, wide=i % 7 == 0)
        a = staged_values(g, shape, dtype, exact_sums=mode == "mean" or g.random() < 0.5)
        if len(shape) >= 2 and g.random() < 0.3:
            a = np.asfortranarray(a)
        what = (dtype, shape, a.flags.f_contiguous, pad_width, mode, kwargs)
        with np.errstate(all="ignore"):
            want = np.pad(a, pad_width, mode, **kwargs)
        assert_like_numpy(emulated_pad(a, pad_width, mode, **kwargs), want, mode, what)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_staged_corners_and_edge_cases_on_host():
    """Corners (later axes read earlier axes' pads), NaN, signed zeros, infinities, one-element and stat_length 0
    lines, integer wrap-around of odd reflections, linear_ramp's zero-step rule, launches split into pieces
    (LINE_LIMIT), more axes than a launch takes."""
    g = rng()
    cases = [
        (np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -0.0]]), 2, "maximum", {}),
        (np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -0.0]]), 2, "median", {}),
        (np.array([[1.0, np.inf, 3.0], [-np.inf, 5.0, 0.0]]), 2, "mean", {}),
        (np.array([1.0, 2.0]), (1, 2), "mean", {"stat_length": 0}),
        (np.array([1.0, 2.0]), (1, 2), "median", {"stat_length": 0}),
        (np.array([[1, 2, 3]], dtype=np.int8), (5, 7), "reflect", {"reflect_type": "odd"}),
        (np.array([[120, -100, 3]], dtype=np.int8), (4, 9), "symmetric", {"reflect_type": "odd"}),
        (np.array([250, 3, 7], dtype=np.uint8), 20, "reflect", {"reflect_type": "odd"}),
        (np.array([[True, False, True]]), (2, 5), "reflect", {"reflect_type": "odd"}),
        (np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0]]), (2, 3), "linear_ramp", {"end_values": 0}),
        (np.array([[0.5, 1.0, 2.0], [3.0, 7.0, 5.0]], np.float16), (3, 70000 // 20000), "linear_ramp",
         {"end_values": ((1, 2), (3, 4))}),
        (np.arange(6, dtype=np.uint64).reshape(2, 3) * (2 ** 60), 2, "mean", {}),
        (np.array([[1 + 2j, 3 - 1j], [np.nan, 2j]]), 1, "maximum", {}),
        (np.array([[1 + 2j, 3 - 1j, 1 - 5j], [-1j, 2j, 7]], np.complex64), 2, "median", {}),
        (np.array([[1 + 2j, 3 - 1j, 1 - 5j]], np.complex64), 3, "linear_ramp", {"end_values": ((1j, 2), (3, 4))}),
        (np.arange(24).reshape(2, 3, 4), ((1, 2), (3, 1), (2, 2)), "median", {"stat_length": ((1, 2), (2, 3), (3, 1))}),
        (np.ones((2,) * 10, np.int16) * np.arange(2, dtype=np.int16), 1, "minimum", {}),
    ]
    for a, pw, mode, kwargs in cases:
        with np.errstate(all="ignore"):
            want = np.pad(a, pw, mode, **kwargs)
        assert_like_numpy(emulated_pad(a, pw, mode, **kwargs), want, mode, (a.dtype, a.shape, pw, mode, kwargs))
    with pytest.MonkeyPatch.context() as m:  # every launch a few lines: the pieces cover each axis' lines once
        m.setattr(P, "LINE_LIMIT", 5)
        for mode, kwargs in (("mean", {}), ("reflect", {"reflect_type": "odd"}), ("linear_ramp", {"end_values": 3})):
            a = staged_values(g, (3, 4, 5), "float64", exact_sums=True)
            pw = ((1, 2), (3, 1), (2, 2))
            assert_like_numpy(emulated_pad(a, pw, mode, **kwargs), np.pad(a, pw, mode, **kwargs), mode, mode)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_numpy_suite_through_host_emulation():
    """NumPy's own pad tests (tests/test_numpy_pad.py) with np.pad routed through emulated_pad, without a GPU: all
    pass but the ones the target excludes (dtypes without a GPU type, expected to fail)."""
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, CUPY_KERNELS_PAD_EMULATE="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests / "test_numpy_pad.py")],
                         cwd=tests.parent, env=env, capture_output=True, text=True, timeout=900)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 550 and not re.search(r"\d+ (failed|errors?)\b", summary), summary


def test_line_geometry_covers_each_turn():
    """line_geometry's lines of axis d, decoded as pad.cu decodes them, are exactly the positions numpy pads at
    d's turn: the axes before d over their padded extent, the axes after over their interior (C and Fortran
    order; merged groups; more groups than a launch takes)."""
    g = rng()
    for _ in range(200):
        nd = int(g.integers(1, 10))
        shape = tuple(int(v) for v in g.integers(1, 4, size=nd))
        pads = [(int(g.integers(0, 3)), int(g.integers(0, 3))) for _ in shape]
        out = tuple(n + b + a for n, (b, a) in zip(shape, pads))
        fortran = bool(g.random() < 0.5)
        ystrides = P.fortran_strides(out) if fortran else P.contiguous_strides(out)
        for axis in range(nd):
            starts = []
            for groups, base in P._line_launches(*P.line_geometry(out, shape, pads, ystrides, axis)):
                assert len(groups) == P.LINE_GROUPS and math.prod(c for c, _ in groups) < P.LINE_LIMIT
                for line in range(math.prod(c for c, _ in groups)):
                    off, rest = base, line
                    for c, st in reversed(groups):
                        off, rest = off + (rest % c) * st, rest // c
                    starts.append(off)
            ranges = [range(o) if i < axis else range(b, b + n)
                      for i, (o, n, (b, _)) in enumerate(zip(out, shape, pads))]
            ranges[axis] = range(1)
            want = sorted(sum(c * s for c, s in zip(idx, ystrides)) for idx in itertools.product(*ranges))
            assert sorted(starts) == want, (shape, pads, axis, fortran)


def test_fortran_only_like_numpy_flags():
    """fortran_only is numpy's flags.fnc (the arrays numpy.pad returns Fortran-ordered)."""
    g = rng()
    for _ in range(300):
        shape = tuple(int(v) for v in g.integers(0, 4, size=int(g.integers(0, 5))))
        a = np.zeros(shape)
        for view in (a, np.asfortranarray(a), a.T, np.asfortranarray(a)[..., ::2] if a.ndim else a):
            strides = tuple(s // 8 for s in view.strides)
            assert P.fortran_only(view.shape, strides) == (view.flags.fnc and view.ndim >= 2 and view.size > 0), \
                (view.shape, view.strides)


# Bad calls and numpy's exception types for them (the messages are ck.pad's own).
BAD_CALLS = [((3, 4), 1, "edge", {"constant_values": 3}), ((3, 4), 1, "edge", {"constant_values": 0}),
             ((3, 4), 1, "wrap", {"stat_length": None}), ((3, 4), 1, "mean", {"end_values": 0}),
             ((3, 4), 1, "reflect", {"stat_length": 2}), ((3, 4), 1, "constant", {"reflect_type": "odd"}),
             ((3, 4), 1, "empty", {"constant_values": 1}), ((3, 4), 1, "median", {"foo": 1}),
             ((3, 4), 1, "maximum", {"stat_length": 0}), ((3, 4), 1, "minimum", {"stat_length": (1, 0)}),
             ((3, 4), 0, "maximum", {"stat_length": 0}), ((3, 4), 1, "mean", {"stat_length": -1}),
             ((3, 4), 1, "mean", {"stat_length": ((1, 2), (3, 4), (5, 6))}),
             ((3, 4), 1, "linear_ramp", {"end_values": ((1, 2), (3, 4), (5, 6))}),
             ((3, 4), 1, "linear_ramp", {"end_values": 1j}), ((3, 4), 1, "nonsense", {}), ((3, 4), 1, 7, {}),
             ((3, 4), 1, None, {}), ((3, 4), 1, True, {}), ((3, 4), 1, [1], {}), ((3, 4), 1.5, "mean", {}),
             ((3, 4), -1, "median", {}), ((3, 4), {5: 1}, "constant", {}), ((3, 4), {"a": 1}, "constant", {}),
             ((0, 3), 1, "mean", {}), ((0, 3), 1, "linear_ramp", {}), ((3, 4), ((1, 2), (3, 4), (5, 6)), "mean", {}),
             # accepted by numpy too
             ((3, 4), 1, "reflect", {"reflect_type": "even"}), ((3, 4), 1, "reflect", {"reflect_type": "other"}),
             ((3, 4), 1, "maximum", {"stat_length": None}), ((0, 3), ((0, 0), (1, 1)), "mean", {"stat_length": -1}),
             ((3, 4), 1, "empty", {}), ((3, 4), 1, "linear_ramp", {"end_values": 0}), ((3, 4), 2, "mean",
                                                                                   {"stat_length": 2.6})]


def numpy_exception(a, pw, mode, kwargs):
    """The exception type numpy.pad raises for this call, or None where it accepts it."""
    try:
        with np.errstate(all="ignore"):
            np.pad(a, pw, mode, **kwargs)
    except Exception as e:
        return type(e)
    return None


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_bad_calls_raise_numpy_exception_types():
    """For each bad call numpy.pad rejects, normalize raises the same exception type (before any kernel); the calls
    numpy accepts pass."""
    for shape, pw, mode, kwargs in BAD_CALLS:
        a = np.zeros(shape, np.int32)
        want = numpy_exception(a, pw, mode, kwargs)
        options = dict(kwargs)
        cv = options.pop("constant_values", P.UNSET)
        try:
            P.normalize(shape, a.dtype, pw, mode, cv, 0, options)
            got = None
        except Exception as e:
            got = type(e)
        assert got is want, (shape, pw, mode, kwargs, got, want)


def test_keywords_through_spec_for(monkeypatch):
    """spec_for keys the keywords too: a keyword the mode refuses raises every time (not only at the first call),
    equal keywords share a spec, a function as mode keeps its keywords for numpy's call."""
    monkeypatch.setattr(P, "kind_of", lambda x, op: None)  # a NumPy array stands in for a device array
    monkeypatch.setattr(P, "_SPECS", {})
    a = np.zeros((3, 4), np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match="unsupported keyword arguments for mode 'edge'"):
            P.spec_for(a, 1, "edge", 0)
        with pytest.raises(ValueError, match="unsupported keyword arguments for mode 'wrap'"):
            P.spec_for(a, 1, "wrap", options={"stat_length": 1})
    s1 = P.spec_for(a, 1, "mean", options={"stat_length": 2})
    assert P.spec_for(a, 1, "mean", options={"stat_length": 2}) is s1 and s1.stat == ((2, 2), (2, 2))
    assert P.spec_for(a, 1, "mean", options={"stat_length": 3}).stat == ((3, 3), (3, 3))

    def func(vector, pad_width, axis, kwargs):
        vector[:pad_width[0]] = kwargs["value"]

    spec = P.spec_for(a, 1, func, options={"value": 5})
    assert spec.host == (func, {"value": 5}) and spec.token == P.HOST_TOKEN and not spec.differentiable
    assert P.spec_for(a, 1, func, 3).host[1] == {"constant_values": 3}  # numpy passes every keyword along


def test_wire_round_trip():
    """The torch custom op's encoding of a spec (int64 words) gives the spec back, 128-bit constants included."""
    for shape, pw, mode, cv, options, dtype in [
            ((3, 4), 1, "constant", 7, {}, "float32"), ((3, 4), 2, "constant", -1.5, {}, "float64"),
            ((3, 4), 1, "constant", [(1 + 2j, 3), (4, -5j)], {}, "complex128"),
            ((2, 3), 1, "empty", P.UNSET, {}, "int8"),
            ((5, 6), 2, "mean", P.UNSET, {"stat_length": ((1, 2), (9, 0))}, "int16"),
            ((5, 6), 2, "reflect", P.UNSET, {"reflect_type": "odd"}, "float32"),
            ((5, 6), 2, "linear_ramp", P.UNSET, {"end_values": ((1j, 2), (3, -4))}, "complex128"),
            ((5, 6), 2, "linear_ramp", P.UNSET, {"end_values": [(1, 2), (3, 4)]}, "float16"),
            ((5, 6), 2, "brick", P.UNSET, {}, "uint8")]:
        spec = P.normalize(shape, np.dtype(dtype), pw, mode, cv, 3 if mode == "brick" else 0, options)
        m, ints = P.wire(spec)
        assert all(-(1 << 63) <= v < (1 << 63) for v in ints)
        back = P.from_wire(shape, list(spec.pads), m, ints, spec.stagger)
        assert back == spec and back.token == spec.token, (spec, back)


def test_linear_ramp_compute_dtype_as_numpy():
    """linear_ramp computes in numpy.linspace's result type: numpy scalars from one or two end values are strong
    (float64), Python numbers per axis weak (the array's float type); integers and bool in float64."""
    for dtype, end, want in [("float16", 0, "float64"), ("float32", (1, 2), "float64"),
                             ("float32", [(1, 2), (3, 4)], "float32"), ("float16", [(1, 2), (3, 4)], "float16"),
                             ("bfloat16", [(1, 2), (3, 4)], "bfloat16"), ("int8", [(1, 2), (3, 4)], "float64"),
                             ("bool", 1, "float64"), ("complex64", [(1, 2), (3, 4)], "complex64"),
                             ("complex64", 1, "complex128"), ("float32", 1j, "complex128")]:
        if dtype == "bfloat16" and ml_dtypes is None:
            continue
        spec = P.normalize((2, 2), np_dtype(dtype), 1, "linear_ramp", options={"end_values": end})
        assert spec.ramp == want, (dtype, end, spec.ramp)
    with pytest.raises(TypeError):
        P.normalize((2, 2), np.dtype("int32"), 1, "linear_ramp", options={"end_values": 1j})


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_split_plan_on_host_matches_numpy(no_device):
    """More padded axes than one launch takes: plan_pad's two launches through an intermediate workspace (each run
    by the host harness as the GPU would run it) give numpy.pad's bits."""
    exe = harness()
    g = rng()
    for mode in MODES + ("brick",):
        for dtype in ("int16", "uint8", "float64"):
            x = random_bits((2, 3, 2, 3, 2, 3, 2, 3, 4), dtype, g)
            pw = [(int(g.integers(0, 4)), int(g.integers(1, 4))) for _ in range(x.ndim)]
            cv = [(int(g.integers(0, 50)), int(g.integers(0, 50))) for _ in range(x.ndim)]
            spec = P.normalize(x.shape, x.dtype, pw, mode, cv if mode == "constant" else P.UNSET,
                               5 if mode == "brick" else 0)
            b = RecordingBuilder()
            size = x.dtype.itemsize
            P.plan_pad(b, *b.buffers, x.shape, P.contiguous_strides(x.shape), size, spec)
            assert len(b.launches) >= 2 and len(b.workspaces) >= 1
            memory = {0: x}
            for name, grid, block, args in b.launches:
                src, dst = args[0].index, args[1].index
                path = name[4:name.index("<")]
                kmode = 3 if path == "periodic" else P.KMODE_NAMES.index(template_args(name)[0])
                out = run_harness(exe, path, size, kmode, block, args[2:], memory[src])
                assert len(out) == int(args[2]) * int(args[3]) * size
                memory[dst] = np.frombuffer(out, dtype=x.dtype)
            ref = numpy_pad(x, pw, mode, cv, 5)
            assert same_bits(memory[1].reshape(ref.shape), ref), (mode, dtype, pw)


def test_interior_span_has_one_source_each():
    """interior_span: every index in [lo, hi) has exactly one source coordinate, before + index, and no index
    outside is such that the run could grow."""
    g = rng()
    for _ in range(400):
        mode = str(g.choice(["edge", "reflect", "symmetric", "wrap"]))
        n = int(g.integers(1, 40))
        before, after = (int(v) for v in g.integers(0, 90, size=2))
        if mode == "reflect" and n == 1:
            continue
        lo, hi = P.interior_span(mode, n, before, after)
        m = P.index_map(mode, n, before, after)
        single = np.bincount(m, minlength=n) == 1
        assert 0 <= lo <= hi <= n and single[lo:hi].all(), (mode, n, before, after, lo, hi)
        assert (m[before + np.arange(lo, hi)] == np.arange(lo, hi)).all()
        assert (lo == 0 or not single[lo - 1]) and (hi == n or not single[hi]), (mode, n, before, after, lo, hi)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_backward_plan_on_host_matches_adjoint(no_device):
    """plan_backward: one gather launch per padded axis, intermediates in two workspaces used in turn (run by the
    host harness in float64), equal to the adjoint of the index maps."""
    exe = harness()
    g = rng()
    # small axes with random pads; then pads narrow beside an interior, so that pad_gather2's quads lie in it, across
    # its ends and in border rows (an output width of 4k + 1: unaligned rows)
    cases = [((2, 3, 4, 5), None), ((1, 2, 40, 45), ((0, 0), (0, 0), (5, 6), (7, 4))),
             ((2, 1, 24, 32), ((0, 0), (0, 0), (4, 4), (4, 5)))]
    for (shape, fixed), mode in itertools.product(cases, ("edge", "reflect", "symmetric", "wrap", "brick")):
        pw = fixed or [(int(g.integers(0, 3)), int(g.integers(0, 9))) for _ in shape]
        spec = P.normalize(shape, np.dtype("float64"), pw, mode, stagger=2 if mode == "brick" else 0)
        axes = sorted({i for i, p in enumerate(spec.pads) if p != (0, 0)} | ({3} if mode == "brick" else set()),
                      reverse=True)
        b = RecordingBuilder()
        P.plan_backward(b, *b.buffers, "float64", spec, axes)
        steps = P.backward_steps(spec, axes)
        fused = mode != "brick" and axes[:2] == [3, 2]
        assert steps[0] == ((2, 3) if fused else (axes[0],)) and sum(map(len, steps)) == len(axes)
        assert len(b.launches) == len(steps) and len(b.workspaces) == min(2, len(steps) - 1)
        grad = g.standard_normal(spec.out_shape)
        memory = {0: grad.ravel()}
        for (name, grid, block, args), step in zip(b.launches, steps):
            fkind = P.FOLD_KIND_NAMES.index(template_args(name)[0])
            assert name.startswith("pad_gather2<" if len(step) == 2 else "pad_gather<"), (name, step)
            if len(step) == 2:
                A, outh, nh, outw, nw, bh, bw, fold, ilo, ihi, jlo, jhi = (int(v) for v in args[2:])
                head = f"gather2 {fkind} {A} {outh} {nh} {outw} {nw} {bh} {bw} {fold} {ilo} {ihi} {jlo} {jhi}\n"
                size = A * outh * outw
            else:
                A, outk, n, C, before, fold, brows, bp0, bth, stagger = (int(v) for v in args[2:])
                head = f"gather {fkind} {A} {outk} {n} {C} {before} {fold} {brows} {bp0} {bth} {stagger}\n"
                size = A * outk * C
            src = memory[args[0].index][:size]
            out = subprocess.run([exe], input=head.encode() + src.tobytes(), capture_output=True, check=True).stdout
            memory[args[1].index] = np.frombuffer(out, dtype=np.float64)
        np.testing.assert_allclose(memory[1].reshape(shape), adjoint(spec, grad), rtol=1e-12, atol=1e-12)
    # half types: the first launch reads float16, the sums between stay in float32, the last writes float16; the
    # last two axes fold in one launch
    spec = P.normalize((3, 4, 5), np.dtype("float16"), 2, "reflect")
    b = RecordingBuilder()
    P.plan_backward(b, *b.buffers, "float16", spec, [2, 1, 0])
    assert [n.split("<")[0] for n, *_ in b.launches] == ["pad_gather2", "pad_gather"]
    assert [template_args(n)[1:] for n, *_ in b.launches] == [["half", "float"], ["float", "half"]]
    assert [w.nbytes for w in b.workspaces] == [7 * 4 * 5 * 4]  # (7, 8, 9) -> (7, 4, 5) -> (3, 4, 5)


# (shape, pad_width, strides or None): narrow rows, wide rows, brick and short-period wrap rows (periodic, wide
# enough for 1-byte elements too), more padded axes than one launch takes (contiguous: two launches; strided: a copy
# first), an unpadded axis merged
FORWARD_CASES = [((5, 7), ((1, 2), (3, 1)), None), ((4, 1000), ((2, 1), (9, 40)), None),
                 ((48, 32), ((50, 60), (6000, 7000)), None), ((5, 7), ((3, 1), (9000, 13000)), None),
                 ((3, 40, 33), ((1, 2), (70, 9), (5, 300)), None), ((2, 3) * 4 + (4,), 1, None),
                 ((2, 3) * 4 + (4,), 1, tuple(2 * 3 ** k for k in range(9))),
                 ((8, 16, 300), ((0, 0), (1, 1), (0, 0)), None)]
BACKWARD_CASES = [((5, 7), ((1, 2), (0, 0))), ((5, 7), ((1, 2), (3, 1))), ((3, 4, 5), 2), ((6, 600), ((0, 0), (9, 40))),
                  ((3, 4, 5), ((1, 2), (0, 0), (2, 1)))]  # (the last: padded axes apart, one launch each)


@functools.lru_cache(maxsize=None)
def planned_instances():
    """_build and _build_backward over every dtype, mode, rung and path (flat, rows, periodic, a split over two
    launches, a strided input copied first), on sm_80 and sm_90: the instances planned. Each launch passes its
    kernel's parameters (check_launch), a one-launch plan covers the output (rows x wtot), each gather folds one
    padded axis (last first) of the gradient's shape onto x's."""
    calls, planned = [], set()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Recorder, "calls", calls)
        m.setattr(P, "PlanBuilder", Recorder)
        for cc in (80, 90):
            with fake_device(m, cc, P):
                for dtype, mode, (shape, pw, strides), rung in itertools.product(P.DTYPES, P.MODES, FORWARD_CASES,
                                                                                 P.RUNGS):
                    spec = P.normalize(shape, np_dtype(dtype), pw, mode, 7 if mode == "constant" else P.UNSET,
                                       5 if mode == "brick" else 0)
                    calls.clear()
                    e = P._build(HOST, Array(shape, dtype, strides), spec, rung, 0)
                    assert e.plan.launches and e.copy == (strides is not None), (shape, strides)
                    for kernel, args, _ in calls:
                        a = dict(check_launch("pad.cu", kernel.name, args))
                        assert 0 <= a["nd"] <= P.MAXD and a["contig"] in (0, 1), (kernel.name, a)
                        if len(calls) == 1:
                            assert a["rows"] * a["wtot"] == math.prod(spec.out_shape), (kernel.name, shape, mode)
                        planned.add(kernel.name)
                for dtype, mode, (shape, pw), dense in itertools.product(P.GRAD_DTYPES, P.MODES, BACKWARD_CASES,
                                                                         (True, False)):
                    spec = P.normalize(shape, np_dtype(dtype), pw, mode, stagger=3 if mode == "brick" else 0)
                    out = spec.out_shape
                    calls.clear()
                    e = P._build_backward(HOST, Array(out, dtype, None if dense else (0,) * len(out)), spec, 0)
                    assert (e.plan is None) == (mode == "constant") and e.copy == (not dense and e.plan is not None)
                    axes = sorted({i for i, p in enumerate(spec.pads) if p != (0, 0)}
                                  | ({len(shape) - 1} if spec.mode == "brick" else set()), reverse=True)
                    steps = [] if mode == "constant" else P.backward_steps(spec, axes)
                    assert len(calls) == len(steps), (shape, mode)
                    folded = list(out)
                    for (kernel, args, _), step in zip(calls, steps):
                        a = dict(check_launch("pad.cu", kernel.name, args))
                        if len(step) == 2:
                            assert (a["A"], a["outh"], a["nh"], a["outw"], a["nw"]) == (
                                math.prod(folded[:-2]), folded[-2], shape[-2], folded[-1], shape[-1])
                            folded[-2:] = shape[-2:]
                        else:
                            (axis,) = step
                            assert (a["A"], a["outk"], a["n"], a["C"]) == (math.prod(folded[:axis]), folded[axis],
                                                                           shape[axis], math.prod(folded[axis + 1:]))
                            folded[axis] = shape[axis]
                        planned.add(kernel.name)
                for dtype, (shape, pw), (mode, options) in itertools.product(P.DTYPES, STAGED_CASES, STAGED_MODES):
                    options = {k: [(1, 2)] * len(shape) if v == "per axis" else v for k, v in options.items()}
                    spec = P.normalize(shape, np_dtype(dtype), pw, mode, options=options)
                    calls.clear()
                    P._build(HOST, Array(shape, dtype), spec, "default", 0)
                    check_stage_launches(calls, spec, dtype, planned)
                for dtype, (shape, pw) in itertools.product(P.DTYPES, STAGED_CASES):
                    # constants the copying kernels cannot place: a Fortran-ordered result with sides of different
                    # values (every size), a complex128 constant with an imaginary part
                    cv = [(1 + 1j, 2)] + [(3, 4)] * (len(shape) - 1) if dtype == "complex128" else \
                        [(1, 2)] + [(3, 4)] * (len(shape) - 1)
                    spec = P.normalize(shape, np_dtype(dtype), pw, "constant", cv)
                    for fortran in (True, False):
                        calls.clear()
                        b = Recorder(0, (1, 256))
                        strides = P.fortran_strides(shape) if fortran else P.contiguous_strides(shape)
                        P.plan_forward(b, *b.buffers, shape, strides, P.ITEMSIZE[dtype], dtype, spec, "default",
                                       fortran)
                        sides = {spec.bits[2 * i + k] for i, pair in enumerate(spec.pads) for k in (0, 1) if pair[k]}
                        staged = (fortran and len(sides) > 1) or dtype == "complex128"
                        assert P.staged(spec, dtype, fortran) == staged, (dtype, shape, fortran)
                        check_stage_launches(calls, spec, dtype, planned, fortran) if staged else None
    return frozenset(planned)


# numpy's computing modes for planned_instances: 1-D to 10-D (more line groups than a launch takes), a contiguous
# axis long enough for a warp a line, each mode with its keywords (linear_ramp's end values as numpy scalars and as
# Python numbers per axis: every compute dtype)
STAGED_CASES = [((5,), (2, 3)), ((5, 7), ((1, 2), (3, 1))), ((3, 40, 33), ((1, 2), (70, 9), (5, 300))),
                ((2,) * 10, 1)]
STAGED_MODES = [("maximum", {}), ("minimum", {"stat_length": 2}), ("mean", {"stat_length": ((1, 3),)}),
                ("median", {}), ("reflect", {"reflect_type": "odd"}), ("symmetric", {"reflect_type": "odd"}),
                ("linear_ramp", {}), ("linear_ramp", {"end_values": "per axis"})]


def check_stage_launches(calls, spec, dtype, planned, fortran=False, copies=None):
    """The launches of a staged call (a Recorder's calls): the copy into the interior first (copying kernels, `copies`
    of them when given), then per padded axis in numpy's order the passes of its mode, whose lines cover that
    axis' turn (the axes before it over their padded extent, those after over their interior) in launches of fewer
    than 2^31 lines; every launch passes its kernel's parameters."""
    names = [kernel.name for kernel, _, _ in calls]
    copying = [n.startswith(("pad_flat<", "pad_rows<", "pad_periodic<")) for n in names]
    assert copying == sorted(copying, reverse=True), names  # the copy before the passes
    if copies is not None:
        assert sum(copying) == copies, names
    out = spec.out_shape
    ystrides = P.fortran_strides(out) if fortran else P.contiguous_strides(out)
    padded = [axis for axis, pair in enumerate(spec.pads) if pair != (0, 0)]
    order, lines = [], {}
    for (kernel, args, _), copy in zip(calls, copying):
        a = dict(check_launch("pad.cu", kernel.name, args))
        planned.add(kernel.name)
        if copy:
            continue
        assert 0 < a["nlines"] < 2 ** 31 and a["group"] in (1, 32), (kernel.name, a)
        assert a["nlines"] == math.prod(a[f"c{g}"] for g in range(P.LINE_GROUPS))
        (axis,) = [ax for ax in padded if ystrides[ax] == a["step"]]
        assert (a["before"], a["n"], a["after"]) == (spec.pads[axis][0], spec.shape[axis], spec.pads[axis][1])
        if not order or order[-1] != (kernel.name, axis):
            order.append((kernel.name, axis))
        lines[(kernel.name, axis)] = lines.get((kernel.name, axis), 0) + a["nlines"]
    assert order == [(name, axis) for axis in padded for name in stage_kernels(spec, dtype)], (order, spec)
    for name, axis in order:
        assert lines[(name, axis)] == math.prod(out[:axis]) * math.prod(spec.shape[axis + 1:]), (name, axis)


STAGE_KERNELS = ("pad_axis_fill", "pad_axis_odd", "pad_axis_stat", "pad_ramp_flags", "pad_axis_ramp")


def stage_kernels(spec, dtype):
    """The per-axis passes' kernels for `spec`, in launch order."""
    if spec.mode == "constant":
        return [P.fill_name(P.ITEMSIZE[dtype])]
    if spec.odd:
        return [P.odd_name(dtype)]
    if spec.mode in P.STATS:
        return [P.stat_name(dtype)]
    return list(P.ramp_names(spec.ramp))


def test_every_launch_matches_its_kernel_signature():
    """planned_instances' launches pass their kernels' parameters, and the planned instances are exactly the
    declared ones."""
    planned = planned_instances()
    assert planned == set(P.SOURCE.names), (planned - set(P.SOURCE.names), set(P.SOURCE.names) - planned)


# ---- GPU ------------------------------------------------------------------------------------------

def poison_pool(nbytes):
    """Leave a 0xA5-filled block in CuPy's pool so a fresh output of this size starts as garbage."""
    import cupy

    junk = cupy.full((max(nbytes, 1),), 0xA5, dtype=cupy.uint8)
    del junk


def to_device_view(base, x):
    """The same view (strides, offset) of a device copy of `base`."""
    import cupy

    raw = "u8" if base.dtype.itemsize == 16 else f"u{base.dtype.itemsize}"  # (the bits, through an unsigned type)
    dbase = cupy.asarray(base.view(raw)).view(base.dtype)
    offset = x.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return cupy.ndarray(x.shape, dtype=x.dtype, memptr=dbase.data + offset, strides=x.strides), dbase


@gpu
def test_random_sweep_bit_identical_to_numpy_pad():
    """>= 2000 random cases: every mode, every dtype, odd shapes, wide pads, strided views."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    done, failures = 0, []
    for i in range(2400):
        shape, pad_width, mode, cv, stagger = random_case(g, max_dims=4, max_side=70 if i % 5 == 0 else 9)
        dtype = GPU_DTYPES[i % len(GPU_DTYPES)]
        base, x = random_view(g, shape, dtype)
        case = (shape, x.strides, pad_width, mode, cv, stagger, dtype)
        try:
            xd, keep = to_device_view(base, x)
            ref = numpy_pad(np.ascontiguousarray(x), pad_width, mode, cv, stagger)
            poison_pool(ref.nbytes)
            got = ck.pad(xd, pad_width, mode=mode, constant_values=cv, stagger=stagger)
            assert isinstance(got, cupy.ndarray) and got.dtype == x.dtype
            if not same_bits(cupy.asnumpy(got), ref):
                failures.append(("mismatch",) + case)
        except Exception as e:  # keep going: one summary of every failing case
            failures.append((f"{type(e).__name__}: {str(e)[:200]}",) + case)
        done += 1
    assert not failures, f"{len(failures)} of {done} cases failed; first ones: {failures[:8]}"
    assert done >= 2000


@gpu
@pytest.mark.parametrize("mode", MODES + ("brick",))
@pytest.mark.parametrize("shape,pw", [((3, 127, 1000), ((0, 0), (64, 64), (64, 64))),
                                      ((2, 61, 37, 3), ((0, 0), (130, 7), (5, 200), (0, 0))),
                                      ((4097,), ((1, 3000),)),
                                      ((1, 1), ((5, 6), (7, 8))),
                                      ((48, 32), ((2048, 2048), (4096, 4096)))])
def test_larger_shapes(mode, shape, pw):
    import cupy

    import cupy_kernels as ck

    if mode == "brick" and len(shape) < 2:
        pytest.skip("brick needs two axes")
    g = rng()
    for dtype in ("float32", "uint8", "float64"):
        x = random_bits(shape, dtype, g)
        stagger = 10 if mode == "brick" else 0
        ref = numpy_pad(x, pw, mode, 3, stagger)
        poison_pool(ref.nbytes)
        kw = {"constant_values": 3} if mode == "constant" else {}
        got = ck.pad(cupy.asarray(x), pw, mode=mode, stagger=stagger, **kw)
        assert same_bits(cupy.asnumpy(got), ref)


@gpu
def test_ladder_rungs():
    """Every rung of the ladder (flat, rows, default) gives the same bits as numpy.pad."""
    import cupy

    g = rng()
    for shape, pw, mode, stagger in [((48, 32), BRICK_CASE, "brick", 10), ((3, 40, 33), ((1, 2), (70, 9), (5, 300)), "brick", -7),
                                     ((2, 61, 300), ((0, 0), (64, 64), (64, 64)), "reflect", 0),
                                     ((2, 61, 300), ((0, 0), (64, 64), (64, 64)), "constant", 0),
                                     ((5, 7), ((3, 1), (900, 1300)), "wrap", 0)]:
        for dtype in ("float32", "uint8", "float64", "float16"):
            x = random_bits(shape, dtype, g)
            spec = P.normalize(shape, x.dtype, pw, mode, P.UNSET, stagger)
            ref = numpy_pad(x, pw, mode, 0, stagger)
            for rung in P.RUNGS:
                poison_pool(ref.nbytes)
                assert same_bits(cupy.asnumpy(P.pad_impl(cupy.asarray(x), spec, rung=rung)), ref), (shape, mode, dtype, rung)


@gpu
def test_plans_take_the_expected_kernels():
    """Which kernels a call's plan launches (plan.kernels): narrow rows pad_flat, wide rows pad_rows, brick rows
    pad_periodic; too many axes two launches through a workspace (the leading axes' rows are wide, the last
    axis' 6 elements narrow); a second call replays the same plan."""
    import cupy

    for shape, pw, mode, kernels in [((64, 5), 1, "reflect", ["pad_flat<PAD_PERIODIC, unsigned int>"]),
                                     ((32, 1024), 1, "constant", ["pad_rows<PAD_CONSTANT, unsigned int>"]),
                                     ((48, 32), BRICK_CASE, "brick", ["pad_periodic<unsigned int>"]),
                                     ((2, 3) * 4 + (4,), 1, "edge", ["pad_rows<PAD_EDGE, unsigned int>",
                                                                     "pad_flat<PAD_EDGE, unsigned int>"])]:
        x = cupy.asarray(random_bits(shape, "float32", rng()))
        spec = P.spec_for(x, pw, mode, stagger=10 if mode == "brick" else 0)
        P.PLANS.clear()
        y = P.pad_impl(x, spec)
        (entry,) = P.PLANS.values()
        assert list(entry.plan.kernels) == kernels, (shape, mode, entry.plan.kernels)
        assert len(entry.plan.workspaces) == len(kernels) - 1
        y2 = P.pad_impl(x, spec)
        assert len(P.PLANS) == 1 and same_bits(cupy.asnumpy(y2), cupy.asnumpy(y))
        ref = numpy_pad(cupy.asnumpy(x), pw, mode, 0, 10)
        assert same_bits(cupy.asnumpy(y), ref)


@gpu
def test_repeated_calls_fresh_data():
    """Validated arguments and launch plans are cached per call signature: the data still is fresh."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    pw = [[3, 4], [5, 0]]
    for _ in range(3):
        x = random_bits((37, 300), "float32", g)
        for mode in MODES:
            ref = np.pad(x, pw, mode=mode)
            assert same_bits(cupy.asnumpy(ck.pad(cupy.asarray(x), pw, mode=mode)), ref)
        pw[1][1] += 2  # the same list object, new values: a new key


@gpu
def test_many_padded_axes_split():
    """More padded axes than the kernel takes in one launch: two separable launches, same bits."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    for mode in MODES + ("brick",):
        x = random_bits((2, 3, 2, 3, 2, 3, 2, 3, 4), "int16", g)
        pw = [(int(g.integers(0, 4)), int(g.integers(1, 4))) for _ in range(x.ndim)]
        cv = [(int(g.integers(0, 50)), int(g.integers(0, 50))) for _ in range(x.ndim)]
        ref = numpy_pad(x, pw, mode, cv, 5)
        got = ck.pad(cupy.asarray(x)[..., ::-1][..., ::-1], pw, mode=mode,
                     constant_values=cv if mode == "constant" else P.UNSET, stagger=5 if mode == "brick" else 0)
        assert same_bits(cupy.asnumpy(got), ref), mode


@gpu
def test_empty_and_zero_d():
    import cupy

    import cupy_kernels as ck

    for shape, pw, mode in [((0, 3), 2, "constant"), ((0, 3), ((0, 0), (1, 1)), "reflect"), ((4, 0), 0, "edge"),
                            ((), 3, "constant"), ((3,), 0, "wrap")]:
        x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + 1
        ref = np.pad(x, pw, mode=mode)
        got = ck.pad(cupy.asarray(x), pw, mode=mode)
        assert got.shape == ref.shape and same_bits(cupy.asnumpy(got), ref)
    with pytest.raises(ValueError, match="empty axis"):
        ck.pad(cupy.zeros((0, 3)), 1, mode="reflect")
    with pytest.raises(ValueError, match="pad_width"):
        ck.pad(cupy.zeros((2, 3)), [(1, 1)] * 3)
    with pytest.raises(ValueError, match="mode 'linear' is not supported"):
        ck.pad(cupy.zeros((2, 3)), 1, mode="linear")
    with pytest.raises(ValueError, match="unsupported keyword arguments for mode 'edge'"):
        ck.pad(cupy.zeros((2, 3)), 1, mode="edge", constant_values=3)


@gpu
def test_staged_modes_match_numpy():
    """linear_ramp, maximum, minimum, mean, median and reflect_type='odd' on the GPU against numpy.pad: every dtype
    CuPy has, 1-D to 4-D, odd sizes, asymmetric and wide pads, every keyword form, long contiguous lines (a warp a
    line), C, Fortran and strided inputs, pool memory poisoned first."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    failures = []
    for i in range(900):
        dtype = NUMPY_DTYPES[i % len(NUMPY_DTYPES)]
        shape, pad_width, mode, kwargs = staged_case(g, dtype, wide=i % 4 == 0, max_out=200_000)
        big = tuple(n + 2 for n in shape)
        base = staged_values(g, big, dtype, exact_sums=mode == "mean" or g.random() < 0.5)
        layout = g.random()
        if layout < 0.4:
            a, x = base[tuple(slice(0, n) for n in shape)].copy(), None
        elif layout < 0.6 and len(shape) >= 2:
            a, x = np.asfortranarray(base[tuple(slice(0, n) for n in shape)]), None
        else:  # a strided window, some axes reversed
            sl = tuple(slice(1, n + 1) if g.random() < 0.5 else slice(n, 0, -1) for n in shape)
            a, x = base[sl], cupy.asarray(base)[sl]
        if x is None:
            x = cupy.asarray(a, order="F" if a.flags.fnc else "C")
        what = (dtype, shape, a.strides, pad_width, mode, kwargs)
        try:
            with np.errstate(all="ignore"):
                want = np.pad(a, pad_width, mode, **kwargs)
            poison_pool(want.nbytes)
            got = ck.pad(x, pad_width, mode, **kwargs)
            assert isinstance(got, cupy.ndarray)
            assert_like_numpy(cupy.asnumpy(got, order="A"), want, mode, what)
        except Exception as e:  # keep going: one summary of every failing case
            failures.append((f"{type(e).__name__}: {str(e)[:300]}",) + what)
    assert not failures, f"{len(failures)} cases failed; first ones: {failures[:6]}"


@gpu
@pytest.mark.parametrize("mode, kwargs", [("maximum", {}), ("minimum", {"stat_length": 7}),
                                          ("mean", {"stat_length": ((3, 50),)}), ("median", {}),
                                          ("median", {"stat_length": (4, 9)}), ("linear_ramp", {"end_values": (5, 3)}),
                                          ("reflect", {"reflect_type": "odd"}), ("symmetric", {"reflect_type": "odd"})])
def test_staged_long_lines(mode, kwargs):
    """Lines of thousands of elements: a warp a line along the contiguous axis, a thread a line along the others;
    wide pads (numpy's repeated odd reflections)."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    for dtype in ("float32", "int16", "complex64", "float64", "uint8"):
        for shape, pw in [((3, 2000), ((2, 3), (40, 5000))), ((1500, 4), ((700, 30), (1, 2))), ((5000,), (9000, 10))]:
            a = staged_values(g, shape, dtype, exact_sums=True)
            with np.errstate(all="ignore"):
                want = np.pad(a, pw, mode, **kwargs)
            poison_pool(want.nbytes)
            got = cupy.asnumpy(ck.pad(cupy.asarray(a), pw, mode, **kwargs))
            assert_like_numpy(got, want, mode, (dtype, shape, pw))


@gpu
def test_staged_special_values():
    """NaN (propagated by maximum, minimum, median), infinities, signed zeros, stat_length 0 (NaN means and
    medians), integer wrap-around of odd reflections, bool, linear_ramp's zero-step rule, complex orderings."""
    import cupy

    import cupy_kernels as ck

    cases = [(np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -0.0]]), 2, "maximum", {}),
             (np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -0.0]], np.float32), 2, "median", {}),
             (np.array([[1.0, np.inf, 3.0], [-np.inf, 5.0, 0.0]]), 2, "mean", {}),
             (np.array([1.0, 2.0]), (1, 2), "mean", {"stat_length": 0}),
             (np.array([1.0, 2.0], np.float16), (1, 2), "median", {"stat_length": 0}),
             (np.array([[1, 2, 3]], np.int8), (5, 7), "reflect", {"reflect_type": "odd"}),
             (np.array([[120, -100, 3]], np.int8), (4, 9), "symmetric", {"reflect_type": "odd"}),
             (np.array([250, 3, 7], np.uint8), 20, "reflect", {"reflect_type": "odd"}),
             (np.array([[True, False, True]]), (2, 5), "reflect", {"reflect_type": "odd"}),
             (np.array([[True, False], [False, False]]), 2, "mean", {}),
             (np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0]]), (2, 3), "linear_ramp", {"end_values": 0}),
             (np.array([[1 + 2j, 3 - 1j], [np.nan, 2j]]), 1, "maximum", {}),
             (np.array([[1 + 2j, 3 - 1j, 1 - 5j], [-1j, 2j, 7]], np.complex64), 2, "median", {}),
             (np.array([[1 + 2j, 3 - 1j, 1 - 5j]]), 3, "linear_ramp", {"end_values": ((1j, 2), (3, 4))}),
             (np.arange(24, dtype=np.int64).reshape(2, 3, 4) * 3 ** 30, 2, "median", {}),
             (np.ones((2,) * 10, np.int16) * np.arange(2, dtype=np.int16), 1, "minimum", {})]
    for a, pw, mode, kwargs in cases:
        with np.errstate(all="ignore"):
            want = np.pad(a, pw, mode, **kwargs)
        got = cupy.asnumpy(ck.pad(cupy.asarray(a), pw, mode, **kwargs))
        assert_like_numpy(got, want, mode, (a.dtype, a.shape, pw, mode, kwargs))


@gpu
def test_memory_order_like_numpy():
    """A Fortran-ordered input pads into a Fortran-ordered result (numpy's flags.fnc rule) in every numpy mode,
    per-side constants included (their corners go to the later axis); C-ordered and 1-D inputs give C order; brick
    (no numpy mode) gives C order."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    for dtype in ("float32", "int8", "complex128", "float64"):
        a = np.asfortranarray(staged_values(g, (5, 7, 3), dtype, exact_sums=True))
        for mode, kwargs in [("constant", {}), ("constant", {"constant_values": ((1, 2), (3, 4), (5, 6))}),
                             ("edge", {}), ("reflect", {}), ("symmetric", {}), ("wrap", {}), ("empty", {}),
                             ("linear_ramp", {"end_values": 2}), ("maximum", {}), ("minimum", {"stat_length": 2}),
                             ("mean", {}), ("median", {}), ("reflect", {"reflect_type": "odd"})]:
            pw = ((2, 1), (0, 3), (4, 2))
            want = np.pad(a, pw, mode, **kwargs)
            got = ck.pad(cupy.asarray(a, order="F"), pw, mode, **kwargs)
            assert got.flags.f_contiguous and not got.flags.c_contiguous, (dtype, mode)
            if mode != "empty":
                assert_like_numpy(cupy.asnumpy(got, order="A"), want, mode, (dtype, mode, kwargs))
            assert np.array_equal(cupy.asnumpy(got)[2:7, 0:7, 4:7], a), (dtype, mode)
            got_c = ck.pad(cupy.asarray(np.ascontiguousarray(a)), pw, mode, **kwargs)
            assert got_c.flags.c_contiguous, (dtype, mode)
    brick = ck.pad(cupy.asfortranarray(cupy.arange(12.0).reshape(3, 4)), 2, mode="brick", stagger=1)
    assert brick.flags.c_contiguous


@gpu
def test_complex128_every_mode():
    """complex128 (16-byte elements): the copying kernels move it as two words; constants with an imaginary part
    are written by a pass per axis (the copying kernels take 8-byte constants), corners as numpy."""
    import cupy

    import cupy_kernels as ck

    g = rng()
    a = staged_values(g, (4, 33, 5), "complex128", exact_sums=False)
    pw = ((1, 2), (40, 3), (2, 1))
    for mode, kwargs in [("constant", {"constant_values": 1.5}),
                         ("constant", {"constant_values": ((1 + 2j, 3), (4j, 5), (6, -7j))}),
                         ("edge", {}), ("reflect", {}), ("symmetric", {}), ("wrap", {})]:
        for step in (1, -2):  # contiguous, and a reversed strided view
            want = np.pad(a[:, ::step], pw, mode, **kwargs)
            got = ck.pad(cupy.asarray(a)[:, ::step], pw, mode, **kwargs)
            assert same_bits(cupy.asnumpy(got), want), (mode, kwargs, step)
    got = ck.pad(cupy.asarray(a), 1, "brick", stagger=2)
    assert same_bits(cupy.asnumpy(got), numpy_pad(a, 1, "brick", 0, 2))


@gpu
def test_function_as_mode():
    """numpy's protocol for a function as mode (called on each 1-D vector of a zero-padded array, axis by axis),
    on a host copy: the same result and memory order as numpy.pad, keywords passed along."""
    import cupy

    import cupy_kernels as ck

    def pad_with(vector, pad_width, iaxis, kwargs):
        vector[:pad_width[0]] = kwargs.get("padder", 10) + iaxis
        if pad_width[1]:
            vector[-pad_width[1]:] = vector[pad_width[0]:-pad_width[1]].sum() if vector.size > sum(pad_width) else 0

    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for x_host in (a, np.asfortranarray(a)):
        for kwargs in ({}, {"padder": 100}):
            want = np.pad(x_host, ((1, 2), (0, 1), (3, 0)), pad_with, **kwargs)
            got = ck.pad(cupy.asarray(x_host, order="F" if x_host.flags.fnc else "C"), ((1, 2), (0, 1), (3, 0)),
                         pad_with, **kwargs)
            assert isinstance(got, cupy.ndarray)
            assert_like_numpy(cupy.asnumpy(got, order="A"), want, "function", kwargs)
    with pytest.raises(ValueError, match="stagger"):
        ck.pad(cupy.asarray(a), 1, pad_with, stagger=2)


@gpu
def test_keyword_rules_on_the_device():
    """ck.pad itself refuses what numpy.pad refuses, with numpy's exception types, before any kernel runs."""
    import cupy

    import cupy_kernels as ck

    x = cupy.zeros((3, 4), dtype=cupy.int32)
    for shape, pw, mode, kwargs in BAD_CALLS:
        a = np.zeros(shape, np.int32)
        want = numpy_exception(a, pw, mode, kwargs)
        try:
            ck.pad(cupy.asarray(a) if shape != (3, 4) else x, pw, mode, **kwargs)
            got = None
        except Exception as e:
            got = type(e)
        assert got is want, (shape, pw, mode, kwargs, got, want)


# ---- GPU + torch ------------------------------------------------------------------------------------

def torch_case(g, shape, dtype):
    """Random bits as a CUDA tensor (built from raw bytes: bool and bfloat16 too) and as NumPy."""
    import torch

    x = random_bits(shape, dtype, g)
    raw = torch.from_numpy(np.ascontiguousarray(x).view(np.uint8).reshape(-1)).cuda()
    tdtype = getattr(torch, "bool" if dtype == "bool" else dtype)
    return raw.view(tdtype).reshape(shape).clone(), x


@torch_gpu
def test_torch_in_torch_out_all_dtypes():
    import torch

    import cupy_kernels as ck

    g = rng()
    for dtype in GPU_DTYPES:
        if dtype in ("uint16", "uint32", "uint64"):
            continue  # torch's support of these is partial
        for mode in MODES + ("brick",):
            t, x = torch_case(g, (3, 5, 7), dtype)
            got = ck.pad(t, ((1, 2), (3, 9), (0, 4)), mode=mode, constant_values=1 if mode == "constant" else P.UNSET,
                         stagger=2 if mode == "brick" else 0)
            assert isinstance(got, torch.Tensor) and got.device == t.device and got.dtype == t.dtype
            ref = numpy_pad(x, ((1, 2), (3, 9), (0, 4)), mode, 1, 2)
            assert same_bits(torch_bits(got), ref), (dtype, mode)


def torch_bits(t):
    """A CUDA tensor as a host NumPy array of the same dtype (bool and bfloat16 through raw views)."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bool:
        return t.view(torch.uint8).numpy().view(np.bool_)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@torch_gpu
def test_torch_layouts():
    """Channels-last and non-contiguous tensors are read through their strides."""
    import torch

    import cupy_kernels as ck

    x = torch.randn(2, 3, 37, 29, device="cuda")
    for t in (x.to(memory_format=torch.channels_last), x.transpose(2, 3), x[:, :, ::2, 1:]):
        for mode in MODES:
            got = ck.pad(t, ((0, 0), (0, 0), (5, 6), (7, 8)), mode=mode)
            ref = np.pad(t.cpu().numpy(), ((0, 0), (0, 0), (5, 6), (7, 8)), mode=mode)
            assert same_bits(got.cpu().numpy(), ref)


def adjoint(spec, grad64):
    """float64 gradient of pad: scatter-add of the output gradient through the index maps."""
    shape = spec.shape
    coords = np.meshgrid(*[np.arange(s) for s in spec.out_shape], indexing="ij")
    if spec.mode == "brick":
        maps = [P.index_map("wrap", n, b, a) for n, (b, a) in zip(shape, spec.pads)]
        idx = [maps[d][coords[d]] for d in range(len(shape) - 2)]
        th, tw = shape[-2:]
        r = coords[-2] - spec.pads[-2][0]
        idx += [np.mod(r, th), np.mod(coords[-1] - spec.pads[-1][0] - spec.stagger * np.floor_divide(r, th), tw)]
    else:
        maps = [P.index_map(spec.mode, n, b, a) for n, (b, a) in zip(shape, spec.pads)]
        idx = [maps[d][coords[d]] for d in range(len(shape))]
    out = np.zeros(shape)
    keep = np.all([m >= 0 for m in idx], axis=0)
    np.add.at(out, tuple(m[keep] for m in idx), grad64[keep])
    return out


@torch_gpu
@pytest.mark.parametrize("mode", MODES + ("brick",))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_torch_autograd(mode, dtype):
    import torch

    import cupy_kernels as ck

    tol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    # pads wider than the axes; pads narrow beside an interior (aligned quads, and quads across its ends)
    for shape, pw in [((2, 3, 5, 4), ((0, 1), (0, 0), (7, 12), (3, 9))), ((17, 13), ((40, 3), (2, 50))),
                      ((2, 3, 40, 45), ((0, 0), (0, 0), (5, 6), (7, 4))), ((2, 2, 48, 64), ((0, 0), (0, 0), (8, 8), (8, 8)))]:
        x = torch.randn(*shape, device="cuda", dtype=torch.float64).to(getattr(torch, dtype)).requires_grad_()
        stagger = 3 if mode == "brick" else 0
        cv = 2.0 if mode == "constant" else P.UNSET
        y = ck.pad(x, pw, mode=mode, constant_values=cv, stagger=stagger)
        gy = torch.randn_like(y, dtype=torch.float64).to(y.dtype)
        (gx,) = torch.autograd.grad(y, x, gy)
        (gx2,) = torch.autograd.grad(ck.pad(x, pw, mode=mode, constant_values=cv, stagger=stagger), x, gy)
        assert torch.equal(gx, gx2), "backward is not deterministic"
        spec = P.normalize(shape, np.dtype("float64"), pw, mode, cv, stagger)
        ref = adjoint(spec, gy.double().cpu().numpy())
        err = np.linalg.norm(gx.double().cpu().numpy() - ref) / np.linalg.norm(ref)
        assert err < tol, (mode, dtype, shape, err)


@torch_gpu
def test_torch_compile_and_fake():
    import torch

    import cupy_kernels as ck

    x = torch.randn(2, 3, 8, 9, device="cuda")
    f = torch.compile(lambda t: ck.pad(t, ((0, 0), (0, 0), (2, 3), (4, 5)), mode="reflect") * 2, backend="aot_eager")
    ref = np.pad(x.cpu().numpy(), ((0, 0), (0, 0), (2, 3), (4, 5)), mode="reflect") * 2
    np.testing.assert_array_equal(f(x).cpu().numpy(), ref)
    # the custom ops' autograd (pad_backward traced) gives the eager backward's bits; a pad of zero width
    # returns a fresh tensor (a custom op may not return a view of its input)
    for pw, mode in ((((0, 0), (0, 0), (2, 3), (4, 5)), "reflect"), (0, "edge"), (((0, 0), (1, 1), (0, 0), (3, 0)), "constant")):
        xg = x.clone().requires_grad_()
        g = torch.compile(lambda t: (ck.pad(t, pw, mode=mode) ** 2).sum(), backend="aot_eager")
        (gc,) = torch.autograd.grad(g(xg), xg)
        (ge,) = torch.autograd.grad((ck.pad(xg, pw, mode=mode) ** 2).sum(), xg)
        assert torch.equal(gc, ge), (pw, mode)


@torch_gpu
def test_torch_staged_modes():
    """numpy's computing modes and a function as mode on torch tensors (bfloat16 included: numpy's float16 rules,
    against float32 within bfloat16's rounding); no backward: NotImplementedError when a gradient is required,
    results under torch.no_grad; empty has the constant mode's backward (the interior)."""
    import torch

    import cupy_kernels as ck

    g = rng()
    modes = [("linear_ramp", {"end_values": (2, -3)}), ("maximum", {}), ("minimum", {"stat_length": 2}),
             ("mean", {"stat_length": (1, 3)}), ("median", {}), ("reflect", {"reflect_type": "odd"}),
             ("symmetric", {"reflect_type": "odd"})]
    for dtype in ("float32", "int32", "complex64", "float64", "bool"):
        a = staged_values(g, (3, 70, 5), dtype, exact_sums=True)
        for mode, kwargs in modes:
            pw = ((1, 2), (3, 40), (0, 2))
            want = np.pad(a, pw, mode, **kwargs)
            got = ck.pad(torch.from_numpy(a).cuda(), pw, mode, **kwargs)
            assert isinstance(got, torch.Tensor) and got.is_contiguous()
            assert_like_numpy(got.cpu().numpy(), want, mode, (dtype, mode))
    if ml_dtypes is not None:
        a = staged_values(g, (6, 70), "float32", exact_sums=True)
        t = torch.from_numpy(a).cuda().to(torch.bfloat16)
        ref = t.float().cpu().numpy()
        for mode, kwargs in modes:
            got = ck.pad(t, ((2, 1), (3, 40)), mode, **kwargs).float().cpu().numpy()
            want = np.pad(ref, ((2, 1), (3, 40)), mode, **kwargs)
            # computed in bfloat16 (ramps, means): a few of its ulps at the largest magnitude, 2**-8 relative
            np.testing.assert_allclose(got, want, rtol=1e-2, atol=4 * 2.0 ** -8 * np.abs(want).max(), err_msg=mode)
    x = torch.randn(4, 9, device="cuda", requires_grad=True)
    for mode, kwargs in modes:
        with pytest.raises(NotImplementedError, match="has no backward"):
            ck.pad(x, 2, mode, **kwargs)
        with torch.no_grad():
            got = ck.pad(x, 2, mode, **kwargs)
        assert np.allclose(got.cpu().numpy(), np.pad(x.detach().cpu().numpy(), 2, mode, **kwargs), rtol=1e-6, atol=1e-6)
    y = ck.pad(x, ((1, 2), (3, 4)), "empty")
    gy = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, gy)
    assert torch.equal(gx, gy[1:5, 3:12])

    def tens(vector, pad_width, iaxis, kwargs):
        vector[:pad_width[0]] = 10
        vector[vector.size - pad_width[1]:] = 10

    got = ck.pad(torch.arange(6.0, device="cuda").reshape(2, 3), 2, tens)
    assert np.array_equal(got.cpu().numpy(), np.pad(np.arange(6.0).reshape(2, 3), 2, tens))
    with pytest.raises(NotImplementedError, match="has no backward"):
        ck.pad(x, 2, tens)


@torch_gpu
def test_torch_compile_staged_modes():
    """Under torch.compile numpy's computing modes validate outside the graph and run through the custom op
    (their spec encoded as int64 words); the same values as eager calls."""
    import torch

    import cupy_kernels as ck

    x = torch.randn(2, 3, 8, 9, device="cuda")
    pw = ((0, 0), (0, 0), (2, 3), (4, 5))
    for mode, kwargs in [("mean", {"stat_length": 2}), ("linear_ramp", {"end_values": ((0, 0), (0, 0), (1, 2), (3, 4))}),
                         ("reflect", {"reflect_type": "odd"}), ("median", {})]:
        f = torch.compile(lambda t, mode=mode, kwargs=kwargs: ck.pad(t, pw, mode, **kwargs), backend="aot_eager")
        assert torch.equal(f(x), ck.pad(x, pw, mode, **kwargs)), mode
