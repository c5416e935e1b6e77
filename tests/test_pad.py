"""pad: bit-identical to numpy.pad in every mode and dtype (GPU sweep of thousands of cases), brick
tiling, torch interop and autograd; CPU checks of the index maps, the argument rules and (with g++)
the kernel's own device code run on the host."""
from __future__ import annotations

import functools
import itertools
import math
import shutil
import subprocess
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
    return np.array_equal(np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}"),
                          np.ascontiguousarray(b).view(f"u{b.dtype.itemsize}"))


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
    cv = 0
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
    with pytest.raises(ValueError, match="mode 'mean' is not supported"):
        P.normalize((3, 4), f32, 1, "mean")
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
                assert geo.chunks % 32 == 0 and geo.chunks <= P.TUNING.row_unit_chunks and geo.threads == P.THREADS
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
            spec = P.normalize(shape, x.dtype, pw, mode, 7 if mode == "constant" else 0, 10 if mode == "brick" else 0)
            for rung in ("rows", "default"):
                got, p = harness_forward(exe, base, x, spec, xshift=xshift, rung=rung)
                assert p.path != "flat", "expected a wide-row path"
                assert same_bits(got, numpy_pad(x, pw, mode, 7 if mode == "constant" else 0, 10 if mode == "brick" else 0))
                cases += 1
    assert cases > 500


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
            spec = P.normalize(x.shape, x.dtype, pw, mode, cv if mode == "constant" else 0, 5 if mode == "brick" else 0)
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
    for mode in ("edge", "reflect", "symmetric", "wrap", "brick"):
        shape = (2, 3, 4, 5)
        pw = [(int(g.integers(0, 3)), int(g.integers(0, 9))) for _ in shape]
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
                    spec = P.normalize(shape, np_dtype(dtype), pw, mode, 7 if mode == "constant" else 0,
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
    return frozenset(planned)


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

    dbase = cupy.asarray(base.view(f"u{base.dtype.itemsize}")).view(base.dtype)
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
        dtype = DTYPES[i % len(DTYPES)]
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
        got = ck.pad(cupy.asarray(x), pw, mode=mode, constant_values=3 if mode == "constant" else 0, stagger=stagger)
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
            spec = P.normalize(shape, x.dtype, pw, mode, 0, stagger)
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
                     constant_values=cv if mode == "constant" else 0, stagger=5 if mode == "brick" else 0)
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
    with pytest.raises(ValueError, match="not supported"):
        ck.pad(cupy.zeros((2, 3)), 1, mode="linear_ramp")
    with pytest.raises(TypeError, match="x has dtype complex128"):
        ck.pad(cupy.zeros((2, 3), dtype=cupy.complex128), 1)


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
    for dtype in DTYPES:
        if dtype in ("uint16", "uint32", "uint64"):
            continue  # torch's support of these is partial
        for mode in MODES + ("brick",):
            t, x = torch_case(g, (3, 5, 7), dtype)
            got = ck.pad(t, ((1, 2), (3, 9), (0, 4)), mode=mode, constant_values=1,
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
    for shape, pw in [((2, 3, 5, 4), ((0, 1), (0, 0), (7, 12), (3, 9))), ((17, 13), ((40, 3), (2, 50)))]:
        x = torch.randn(*shape, device="cuda", dtype=torch.float64).to(getattr(torch, dtype)).requires_grad_()
        stagger = 3 if mode == "brick" else 0
        y = ck.pad(x, pw, mode=mode, constant_values=2.0, stagger=stagger)
        gy = torch.randn_like(y, dtype=torch.float64).to(y.dtype)
        (gx,) = torch.autograd.grad(y, x, gy)
        (gx2,) = torch.autograd.grad(ck.pad(x, pw, mode=mode, constant_values=2.0, stagger=stagger), x, gy)
        assert torch.equal(gx, gx2), "backward is not deterministic"
        spec = P.normalize(shape, np.dtype("float64"), pw, mode, 2.0, stagger)
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
