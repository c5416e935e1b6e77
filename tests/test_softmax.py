"""softmax / log_softmax / softmax_ and their backward against float64 references (GPU), every
dispatch path at its boundaries; validation and the references themselves on the CPU."""
import itertools

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import (FLOATS, TOL, close_everywhere, cupy_array, gpu, group_lengths, kernels_of, many_rows, rel_err,
                      rng, rounded, to_f64, torch, torch_gpu)
from cupy_kernels._runtime.tuning import tuned
from planning import Recorder, check_launch, fake_device
from cupy_kernels.ops import _rowwise as rw
from cupy_kernels.ops import softmax as S
from cupy_kernels.ops.softmax import softmax_backward_impl, softmax_impl, threads_of

ALL = FLOATS + ("float64",)
SMS = 132  # plan() boundaries below do not depend on the SM count except for the multi-block cap


# ---- float64 references ------------------------------------------------------------------------


def ref_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - m)
        return e / e.sum(axis=axis, keepdims=True)


def ref_log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def ref_softmax_grad(y, dy, axis=-1):
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def ref_log_softmax_grad(y, dy, axis=-1):
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


def maxp(dtype, kind):
    return rw.fwd_maxp(dtype) if kind == "fwd" else rw.maxp(dtype)


def threads(dtype, kind):
    return threads_of(kind, dtype)


def boundary_lengths(dtype, kind):
    """Row lengths on both sides of each dispatch boundary of plan() for this dtype and kernel."""
    V, P = rw.vec(dtype), maxp(dtype, kind)
    sub = 32 * min(rw.TUNING.target_packs, P) * V    # longest sub-warp row
    block = threads(dtype, kind) * P * V       # longest single-block row
    out = {1, 2, 3, V - 1, V + 1, 127, 1000, 4097, sub - 1, sub, sub + 1, sub + V, block - 1, block, block + 1,
           block + V, 3 * block + 5}
    return sorted(n for n in out if n >= 1)


def paths_of(dtype, kind, lengths):
    return {rw.plan(4, n, dtype, maxp(dtype, kind), threads(dtype, kind), SMS).path for n in lengths}


# ---- CPU ---------------------------------------------------------------------------------------


def test_boundaries_cover_every_path():
    for dtype in ALL:
        for kind in ("fwd", "bwd"):
            assert paths_of(dtype, kind, boundary_lengths(dtype, kind)) == {"subwarp", "block", "multiblock"}, dtype


def short_lengths(dtype, kind="fwd"):
    """conftest.group_lengths for this kernel; the block row the longest one block holds."""
    V, P = rw.vec(dtype), min(rw.TUNING.target_packs, maxp(dtype, kind))
    return group_lengths(V, P, threads(dtype, kind) * maxp(dtype, kind) * V)


def test_short_group_only_where_it_applies():
    for dtype in ALL:
        for kind in ("fwd", "bwd"):
            for G, n in short_lengths("float32" if dtype == "float64" else dtype, kind):
                p = rw.plan(301, n, dtype, maxp(dtype, kind), threads(dtype, kind), SMS)
                want = G if dtype in rw.SHORT_DTYPES else 0  # float64 keeps the run-time form
                assert rw.short_group(p, dtype, 1) == want, (dtype, kind, n, p)
                assert rw.short_group(p, dtype, 0) == 0 and rw.short_group(p, dtype, 1, "scalar") == 0
    p = rw.plan(4, 4096, "float32", 4, 1024, SMS)  # a block a row: ROW_BLOCK
    assert p.path == "block" and rw.short_group(p, "float32", 1) == rw.ROW_BLOCK
    assert rw.short_group(p, "float64", 1) == 0 and rw.short_group(p, "float32", 0) == 0
    p = rw.plan(4, 65536, "float32", 4, 512, SMS)
    assert p.path == "multiblock" and rw.short_group(p, "float32", 1) == 0


def test_plan_geometry_holds_the_row():
    for dtype, kind in ((d, k) for d in ALL for k in ("fwd", "bwd")):
        for n in boundary_lengths(dtype, kind) + [262144, 262147]:
            p = rw.plan(7, n, dtype, maxp(dtype, kind), threads(dtype, kind), SMS)
            V = rw.vec(dtype)
            assert p.packs <= maxp(dtype, kind)
            assert p.group * p.packs * V >= min(n, p.chunk)          # a segment fits the group's registers
            assert p.parts * p.chunk >= n and (p.parts - 1) * p.chunk < n  # no empty segment
            assert p.parts == 1 or (p.chunk % V == 0 and p.group == p.threads)
            assert p.grid % p.parts == 0
            per_sm = min(rw.min_blocks_per_sm(dtype), 2048 // p.threads)
            assert p.parts == 1 or p.split or p.grid <= per_sm * SMS  # co-resident


def test_plan_subwarp_blocks():
    """Sub-warp rows: one-pass launches use subwarp_block-thread blocks, persistent grids (norm backward)
    persistent_subwarp_block (at most the kernel's largest block); a block holds whole groups at both ends of the
    sub-warp range (G = 1, 32)."""
    t = rw.TUNING
    for persistent, block in ((False, t.subwarp_block), (True, t.persistent_subwarp_block)):
        for n in (1, 4, 32 * t.target_packs * 4):  # float32: G = 1 .. 32
            p = rw.plan(65536, n, "float32", 4, 1024, SMS, persistent=persistent)
            assert p.path == "subwarp" and p.threads == block and block % p.group == 0
            assert persistent or p.grid == -(-65536 // (block // p.group))  # persistent: one wave, rows looped
    p = rw.plan(65536, 64, "float64", 4, 256, SMS, persistent=True)  # float64's backward: blocks of <= 256
    assert p.path == "subwarp" and p.threads == min(t.persistent_subwarp_block, 256)


def test_staged_backward_choice():
    """softmax_bwd stages half rows that fill a 512-thread block, except full 8192-element rows with
    stage_bwd_full_steps row steps of the staged grid (two blocks an SM) or more; unaligned rows never."""
    many = S.TUNING.stage_bwd_full_steps * 2 * SMS
    for dtype in ("float16", "bfloat16"):
        for n, rows, staged in ((8192, many - 1, True), (8192, many, False), (8192, 10 ** 6, False),
                                (8184, 10 ** 6, True), (6144, 10 ** 6, True), (4608, many, True)):
            p = rw.plan(rows, n, dtype, rw.maxp(dtype), S.BWD_THREADS, SMS)
            assert p.path == "block" and S.staged_bwd(p, dtype, 1, rows, n, SMS) == staged, (dtype, n, rows)
            assert not S.staged_bwd(p, dtype, 0, rows, n, SMS)
    p = rw.plan(many, 8192, "float32", rw.maxp("float32"), S.BWD_THREADS, SMS)
    assert not S.staged_bwd(p, "float32", 1, many, 8192, SMS)


def test_plan_long_rows():
    for n in (262144, 10 ** 7):
        ex = rw.plan(256, n, "float32", 4, 512, SMS, long_rows="exchange")
        sp = rw.plan(256, n, "float32", 4, 512, SMS, long_rows="split")
        assert sp.split and sp.grid == sp.parts * 256 and rw.phases(sp) == (1, 2)
        if ex.parts <= 2 * SMS:  # fits co-resident: one launch, a grid of whole rows that all fit at once
            assert not ex.split and ex.grid <= 2 * SMS and ex.grid % ex.parts == 0 and rw.phases(ex) == (0,)
        else:  # too long to be co-resident: split whatever was asked
            assert ex.split


def test_reference_gradients_match_finite_differences():
    g = rng()
    x, dy = g.standard_normal((3, 7)), g.standard_normal((3, 7))
    h = 1e-6
    for f, grad in ((ref_softmax, ref_softmax_grad), (ref_log_softmax, ref_log_softmax_grad)):
        num = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[i] = h
            num[i] = ((f(x + e) - f(x - e)) * dy).sum() / (2 * h)
        np.testing.assert_allclose(grad(f(x), dy), num, rtol=1e-6, atol=1e-8)


def test_numpy_input_is_rejected():
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        ck.softmax(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        ck.softmax_(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="variant"):
        softmax_impl(np.ones(3), variant="nope")


def test_every_launch_matches_its_kernel_signature(monkeypatch):
    """Every softmax.cu instance is planned by some call (every dtype, direction, mode, length class, alignment,
    variant, and the tuning switches that reach the other forms), every form of choose_rows is taken, and each
    planned launch passes as many arguments as its kernel has parameters, each of the parameter's type: `mode`
    MODES[mode] (per-mode instances: their own), `rows` the call's. A mismatch would otherwise show only on a GPU, as
    garbage or a fault."""
    tunings = [({}, {}), ({"pipelined_fwd": False, "pipelined_bwd": False}, {"wide_bwd": False}),
               ({}, {"stage_fwd_two_ahead": False, "small_rows_max_n": 1, "tiled_lanes": 2}),
               ({}, {"tiled_max_n": 0, "stage_short_fwd_groups": (), "stage_short_bwd_groups": (), "tiled_lanes": 4})]
    calls = [(3000, 0, "auto"), (10 ** 5, 0, "auto"), (3000, 1, "auto")] + [(300, 0, v) for v in S.VARIANTS[1:]]
    planned, launched, forms = set(), [], set()
    monkeypatch.setattr(Recorder, "calls", launched)
    for (rw_tuning, tuning), dtype, kind, mode in itertools.product(tunings, ALL, ("fwd", "bwd"), S.MODES):
        V = rw.vec(dtype)
        lengths = {1, 2, 3, 4, 5, 7, 9, 33, 99, 100, 127, 1000, 1001, 4097, 8200, 20000, 32769, 40000, 65544, 262147}
        lengths |= {G * P * V + d for G in rw.SHORT_GROUPS + (64, 256, 1024) for P in (1, 2, 4, 8)
                    for d in (-V, -1, 0, 1)}
        with tuned(rw, **rw_tuning), tuned(S, **tuning), fake_device(monkeypatch, 90, S):
            for n, (rows, skew, variant) in itertools.product(sorted(lengths), calls):
                if n < 1 or (rows > 3000 and n > 50000):
                    continue
                aligns = [rw.ITEMSIZE[dtype] if skew else 256] + [256] * (1 if kind == "fwd" else 2)
                launched.clear()
                b = Recorder(0, aligns)
                *srcs, out = b.buffers
                forms.add(S.choose_rows(kind, mode, dtype, tuple(srcs), out, rows, n, variant).form)
                S.plan_rows(b, kind, mode, dtype, tuple(srcs), out, rows, n, variant)
                for kernel, args, _ in launched:
                    name = kernel.name
                    case = (name, kind, mode, dtype, n, rows, skew, variant)
                    for pname, arg in check_launch("softmax.cu", name, args):
                        assert pname != "mode" or arg == S.MODES[mode], (case, arg)
                        assert pname != "rows" or arg == rows, (case, arg)
                    fixed = [m for m, token in S.MODE_NAMES.items() if name.endswith(f", {token}>")]
                    assert fixed in ([], [mode]), case
                    planned.add(name)
    assert planned == set(S.SOURCE.names), (set(S.SOURCE.names) - planned, planned - set(S.SOURCE.names))
    assert forms == {"small", "tiled", "pipelined", "rows", "group", "staged_fwd", "staged_short_bwd", "staged_bwd",
                     "wide_bwd"}, forms


# ---- GPU ---------------------------------------------------------------------------------------


def make(shape, dtype, scale=3.0):
    host = rng().standard_normal(shape) * scale
    return cupy_array(host, dtype), rounded(host, dtype)


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_forward_every_path(mode, dtype):
    ref = ref_softmax if mode == "softmax" else ref_log_softmax
    for n in boundary_lengths(dtype, "fwd"):
        rows = 5 if n > 4096 else 67
        x, xv = make((rows, n), dtype)
        got = getattr(ck, mode)(x)
        assert got.dtype == x.dtype and got.shape == x.shape
        p = rw.plan(rows, n, dtype, maxp(dtype, "fwd"), threads(dtype, "fwd"), SMS)
        assert rel_err(got, ref(xv)) <= TOL[dtype], (n, p)
        if p.parts > 1:
            for variant in ("split", "exchange", "counter"):  # every way of splitting a long row
                assert rel_err(softmax_impl(x, -1, mode, variant), ref(xv)) <= TOL[dtype], (n, variant)


@gpu
@pytest.mark.parametrize("dtype", rw.SHORT_DTYPES)
def test_forward_short_groups(dtype):
    """The forward instances compiled for their group size, each G full and part-filled, out of place and in
    place, 301 rows (the last warp's last groups have no row: they reload the last one and store nothing)."""
    for G, n in short_lengths(dtype):
        x, xv = make((301, n), dtype)
        for mode, ref in (("softmax", ref_softmax), ("log_softmax", ref_log_softmax)):
            assert rel_err(getattr(ck, mode)(x), ref(xv)) <= TOL[dtype], (G, n, mode)
        x2 = x.copy()
        assert ck.softmax_(x2) is x2 and rel_err(x2, ref_softmax(xv)) <= TOL[dtype], (G, n, "in place")


@gpu
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_staged_short_rows(mode):
    """Sub-warp rows that stage the group's next row (TUNING.stage_short_*), whole and part-filled, over
    conftest.many_rows: every group of the resident grid takes several, the last step only some groups of a warp."""
    ref, grad = (ref_softmax, ref_softmax_grad) if mode == "softmax" else (ref_log_softmax, ref_log_softmax_grad)
    t = S.TUNING
    for kind, groups in (("fwd", t.stage_short_fwd_groups), ("bwd", t.stage_short_bwd_groups)):
        for dtype in t.stage_short_dtypes:
            V, P = rw.vec(dtype), maxp(dtype, kind)
            for G in groups:
                for n in (G * P * V, (G // 2) * P * V + V):
                    rows = many_rows(G, SMS)
                    if kind == "fwd":
                        x, xv = make((rows, n), dtype)
                        assert rel_err(softmax_impl(x, -1, mode), ref(xv)) <= TOL[dtype], (kind, G, n)
                    else:
                        y = ref(rng().standard_normal((rows, n)) * 3)
                        yc, yv = cupy_array(y, dtype), rounded(y, dtype)
                        dy, dyv = make((rows, n), dtype)
                        got = softmax_backward_impl(yc, dy, -1, mode)
                        assert rel_err(got, grad(yv, dyv)) <= 2 * TOL[dtype], (kind, G, n)


@gpu
@pytest.mark.parametrize("dtype", rw.SHORT_DTYPES)
def test_backward_short_groups(dtype):
    """The backward instances compiled for their group size (sub-warp groups and ROW_BLOCK), 301 rows."""
    for G, n in short_lengths(dtype, "bwd"):
        for mode, fwd, grad in (("softmax", ref_softmax, ref_softmax_grad),
                                ("log_softmax", ref_log_softmax, ref_log_softmax_grad)):
            y = fwd(rng().standard_normal((301, n)) * 3)
            yc, yv = cupy_array(y, dtype), rounded(y, dtype)
            dy, dyv = make((301, n), dtype)
            got = softmax_backward_impl(yc, dy, -1, mode)
            assert rel_err(got, grad(yv, dyv)) <= 2 * TOL[dtype], (G, n, mode)


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_shifted_rows(dtype):
    """Rows that are not whole packs of aligned arrays (shifted rows, rows.cuh shift_row): every head offset, a
    sub-warp, a block and a multi-block length, forward and backward, out of place and in place; and the same
    rows from a base one element past a 16-byte boundary, which keep the element path."""
    import cupy

    V = rw.vec(dtype)
    block = threads(dtype, "fwd") * maxp(dtype, "fwd") * V
    for n in (1, V - 1, V + 1, 3 * V + 1, 100, 1001, block - 1, block + V - 1, 2 * block + 3):
        if n < 1 or n % V == 0:
            continue
        rows = 4 * V + 3 if n > 4096 else 1000
        for mode, ref, grad in (("softmax", ref_softmax, ref_softmax_grad),
                                ("log_softmax", ref_log_softmax, ref_log_softmax_grad)):
            x, xv = make((rows, n), dtype)
            flat = cupy.empty(rows * n + 1, dtype=x.dtype)
            skewed = flat[1:].reshape(rows, n)  # contiguous, base 2-8 bytes past a boundary
            skewed[...] = x
            want = ref(xv)
            got, used = kernels_of(S.SOURCE, lambda: softmax_impl(x, -1, mode))
            assert close_everywhere(got, want, dtype), (n, mode)
            tiled = 1 < n and rw.tiled_rows(S.TUNING.tiled_max_n, n, 0, "auto", x)
            assert bool(used & SHIFTED) == (n >= V and not tiled), (n, mode, used)  # shorter rows: the element path
            got, used = kernels_of(S.SOURCE, lambda: softmax_impl(skewed, -1, mode))
            assert close_everywhere(got, want, dtype) and not used & SHIFTED, (n, mode, "skewed", used)
            yc, yv = cupy_array(want, dtype), rounded(want, dtype)
            dy, dyv = make((rows, n), dtype)
            got, used = kernels_of(S.SOURCE, lambda: softmax_backward_impl(yc, dy, -1, mode))
            assert close_everywhere(got, grad(yv, dyv), dtype, 2), (n, mode)
            assert bool(used & SHIFTED) == (n >= V and not tiled), (n, mode, used)
        x2 = x.copy()
        assert ck.softmax_(x2) is x2 and close_everywhere(x2, ref_softmax(xv), dtype), (n, "in place")


SHIFTED = {S._name(k, t, group=g, shift=True, mode=m) for k in ("fwd", "bwd") for t in ALL for m in S.MODES
           for g in (0,) + rw.SHORT_GROUPS} | {S._parts_name(t, k, S.SHIFTED_PARTS_PACKS, shift=True)
                                                for k in ("fwd", "bwd") for t in ALL}
SHIFTED &= set(S.SOURCE.names)  # the shifted instances softmax.py declares


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_small_rows(dtype):
    """Rows of one element and rows shorter than a pack that divide it take the elementwise kernel: rows of one give
    exactly 1 / 0 where x is finite and NaN where it is not (as torch); rows of 2 and 4 with +-inf, all -inf and NaN;
    the backward's formulas with a sum of 1..4 terms; odd counts (a partial last pack), a base off a 16-byte
    boundary, in place."""
    import cupy

    def same(got, want, n):  # NaN and +-inf where the reference has them, the rest close
        got = to_f64(got)
        if n == 1:
            return np.array_equal(got, want, equal_nan=True)  # exactly 1 / 0 / NaN
        fin = np.isfinite(want)
        return ((np.isnan(got) == np.isnan(want)).all() and (got[np.isinf(want)] == want[np.isinf(want)]).all()
                and (not fin.any() or close_everywhere(got[fin], want[fin], dtype)))

    for n in S.small_lengths(dtype):
        small = {S._small_name(k, dtype, n) for k in ("fwd", "bwd")}
        for rows in (1, 7, 4096 * rw.vec(dtype) + 3):
            host = rng().standard_normal((rows, n)) * 3
            host[::5, 0] = np.inf
            host[1::7, -1] = -np.inf
            host[2::11, 0] = np.nan
            host[3::13] = -np.inf
            for skew in (0, 1):
                flat = cupy.empty(rows * n + skew, dtype=cupy_array(host[:1], dtype).dtype)
                x = flat[skew:].reshape(rows, n)
                x[...] = cupy_array(host, dtype)
                xv = rounded(host, dtype)
                for mode, ref, grad in (("softmax", ref_softmax, ref_softmax_grad),
                                        ("log_softmax", ref_log_softmax, ref_log_softmax_grad)):
                    want = ref(xv)
                    got, used = kernels_of(S.SOURCE, lambda: softmax_impl(x, -1, mode))
                    assert same(got, want, n), (n, rows, skew, mode)
                    assert used <= small and used, used
                    y = rounded(want, dtype)
                    dy, dyv = make((rows, n), dtype)
                    got, used = kernels_of(S.SOURCE, lambda: softmax_backward_impl(cupy_array(y, dtype), dy, -1, mode))
                    assert close_everywhere(np.nan_to_num(to_f64(got), nan=7.0),
                                            np.nan_to_num(grad(y, dyv), nan=7.0), dtype, 2), (n, rows, skew, mode)
                    assert used <= small and used, used
                x2 = x.copy()
                assert ck.softmax_(x2) is x2
                assert same(x2, ref_softmax(xv), n), (n, rows, skew, "in place")


@pytest.fixture
def no_small_rows():
    """Rows of two (and four) take the tiles, not softmax_small_rows."""
    with tuned(S, small_rows_max_n=1):
        yield


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_tiled_rows(dtype, no_small_rows):
    """Short rows that are not whole packs take softmax_tiled (a block's rows as one tile in shared memory): lengths
    from 2 (rows of two: the small rows off) to past tiled_max_n, fewer rows than a tile, several tiles and a last
    one in part; forward, backward, in place, each element against float64; -inf, all -inf and NaN rows."""
    V = rw.vec(dtype)
    tiled = {S._tiled_name(k, dtype, g, m) for k in ("fwd", "bwd") for m in S.MODES
             for g in S.TILED_LANES[rw.ITEMSIZE[dtype]]}
    top = S.TUNING.tiled_max_n
    for n in (2, 3, V - 1, V + 1, 33, 65, 99, 100, top - 1, top + 1):  # (float32 from 48, half bwd 96: lanes)
        if n < 2 or n % V == 0:
            continue
        for rows in (5, 1000, 20011):
            host = rng().standard_normal((rows, n)) * 3
            host[0, : n // 2 + 1] = -np.inf
            host[1] = -np.inf
            host[2, n // 3] = np.nan
            x, xv = cupy_array(host, dtype), rounded(host, dtype)
            for mode, ref, grad in (("softmax", ref_softmax, ref_softmax_grad),
                                    ("log_softmax", ref_log_softmax, ref_log_softmax_grad)):
                want = ref(xv)
                got, used = kernels_of(S.SOURCE, lambda: softmax_impl(x, -1, mode))
                assert (used <= tiled) == (n <= top), (n, rows, mode, used)
                got, fin = to_f64(got), np.isfinite(want)
                assert (np.isnan(got) == np.isnan(want)).all() and (got[np.isinf(want)] == want[np.isinf(want)]).all()
                assert close_everywhere(got[fin], want[fin], dtype), (n, rows, mode)
                ok = slice(3, None)  # the backward from rows of finite y
                yc, yv = cupy_array(want[ok], dtype), rounded(want[ok], dtype)
                dy, dyv = make(yv.shape, dtype)
                got, used = kernels_of(S.SOURCE, lambda: softmax_backward_impl(yc, dy, -1, mode))
                assert close_everywhere(got, grad(yv, dyv), dtype, 2), (n, rows, mode)
                assert (used <= tiled) == (n <= top), (n, rows, mode, used)
            x2 = x.copy()
            assert ck.softmax_(x2) is x2
            got = to_f64(x2)
            assert (np.isnan(got) == np.isnan(ref_softmax(xv))).all(), (n, rows, "in place")


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiled_rows_every_lane_count(dtype):
    """Every compiled lane count (tiled_lanes forced) on short and long tiled rows: spans of lanes that start at odd
    elements, spans of one element, empty spans (a row shorter than the lanes' starts); forward and backward."""
    for lanes in S.TILED_LANES[rw.ITEMSIZE[dtype]]:
        with tuned(S, small_rows_max_n=1, tiled_lanes=lanes):  # rows of two tiled too
            for n in (2, 3, 33, 65, 127):
                x, xv = make((1000, n), dtype)
                for mode, ref, grad in (("softmax", ref_softmax, ref_softmax_grad),
                                        ("log_softmax", ref_log_softmax, ref_log_softmax_grad)):
                    want = ref(xv)
                    got, used = kernels_of(S.SOURCE, lambda: softmax_impl(x, -1, mode))
                    assert used == {S._tiled_name("fwd", dtype, lanes, mode)}, (lanes, n, mode, used)
                    assert close_everywhere(got, want, dtype), (lanes, n, mode)
                    yc, yv = cupy_array(want, dtype), rounded(want, dtype)
                    dy, dyv = make(yv.shape, dtype)
                    got = softmax_backward_impl(yc, dy, -1, mode)
                    assert close_everywhere(got, grad(yv, dyv), dtype, 2), (lanes, n, mode, "backward")


@gpu
@pytest.mark.parametrize("variant", ["block", "scalar", "split", "exchange", "counter"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_ladder_variants(variant, dtype):
    for n in (1, 33, 1000, 4096, 20000, 70001):
        x, xv = make((9, n), dtype)
        assert rel_err(softmax_impl(x, -1, "softmax", variant), ref_softmax(xv)) <= TOL[dtype], n
        assert rel_err(softmax_impl(x, -1, "log_softmax", variant), ref_log_softmax(xv)) <= TOL[dtype], n


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_backward_every_path(mode, dtype):
    fwd, grad = (ref_softmax, ref_softmax_grad) if mode == "softmax" else (ref_log_softmax, ref_log_softmax_grad)
    fn = ck.softmax_backward if mode == "softmax" else ck.log_softmax_backward
    for n in boundary_lengths(dtype, "bwd"):
        rows = 5 if n > 4096 else 67
        _, xv = make((rows, n), dtype)
        yv = rounded(fwd(xv), dtype)
        y = cupy_array(yv, dtype)
        dy, dyv = make((rows, n), dtype, 1.0)
        assert rel_err(fn(y, dy), grad(yv, dyv)) <= 2 * TOL[dtype], n
        for variant in ("split", "exchange", "counter"):  # every way of splitting a long row (the same otherwise)
            got = softmax_backward_impl(y, dy, -1, mode, variant)
            assert rel_err(got, grad(yv, dyv)) <= 2 * TOL[dtype], (n, variant)


@gpu
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_backward_staged_rows(mode):
    """The staged backward (next row's y, dy in shared memory; half-type rows filling a 512-thread block;
    the wide form, one 1024-thread block per row up to 32768 elements, on and off):
    resident grids looping over several rows per block, block and multi-block paths and their edges
    (a partial last pack, a short last part), staged and not, and dx written over dy."""
    import cupy

    fwd, grad = (ref_softmax, ref_softmax_grad) if mode == "softmax" else (ref_log_softmax, ref_log_softmax_grad)
    for dtype, n, rows in (("bfloat16", 8192, 700), ("bfloat16", 8200, 301), ("float16", 32768, 400),
                           ("bfloat16", 20000, 333), ("float16", 8184, 500)):
        _, xv = make((rows, n), dtype)
        yv = rounded(fwd(xv), dtype)
        y = cupy_array(yv, dtype)
        dy, dyv = make((rows, n), dtype, 1.0)
        want = grad(yv, dyv)
        with tuned(rw, pipelined_bwd=False):  # the staged kernels (test_backward_pipelined_parts: the pipelined one)
            for paths, wide in ((("block", "multiblock"), True), (("block", "multiblock"), False), ((), False)):
                with tuned(S, stage_bwd_paths=paths, wide_bwd=wide):  # wide: one 1024-thread block a row <= 32768
                    got = softmax_backward_impl(y, dy, -1, mode)
                assert rel_err(got, want) <= 2 * TOL[dtype], (dtype, n, paths, wide)
            d2 = dy.copy()
            run_rows("bwd", mode, dtype, (y, d2), d2, rows, n)  # dx over dy: the next rows staged before this is written
            cupy.cuda.Device().synchronize()
            assert rel_err(d2, want) <= 2 * TOL[dtype], (dtype, n, "in place")


def run_rows(kind, mode, dtype, srcs, out, rows, n, variant="auto"):
    """plan_rows over CuPy arrays (out may be one of srcs) and run it now; returns the row plan."""
    import cupy
    from cupy_kernels._runtime import CUPY, PlanBuilder
    from cupy_kernels._runtime.launch import alignment

    arrays = list(srcs) + [out]
    b = PlanBuilder(cupy.cuda.runtime.getDevice(), [alignment(a.data.ptr) for a in arrays])
    *ins, res = b.buffers
    p = S.plan_rows(b, kind, mode, dtype, tuple(ins), res, rows, n, variant)
    b.plan().run([a.data.ptr for a in arrays], cupy.cuda.get_current_stream().ptr, CUPY.alloc(0))
    return p


@gpu
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_backward_full_rows_unstaged(mode):
    """Full 8192-element half rows with stage_bwd_full_steps row steps or more take one block a row (unstaged),
    one row fewer the staged resident grid; both against the float64 gradient."""
    from cupy_kernels._runtime import current

    fwd, grad = (ref_softmax, ref_softmax_grad) if mode == "softmax" else (ref_log_softmax, ref_log_softmax_grad)
    many = S.TUNING.stage_bwd_full_steps * 2 * current().sm_count
    for dtype, rows in (("bfloat16", many), ("float16", many - 1)):
        _, xv = make((rows, 8192), dtype)
        yv = rounded(fwd(xv), dtype)
        dy, dyv = make((rows, 8192), dtype, 1.0)
        out = cupy_array(np.zeros_like(yv), dtype)
        p = run_rows("bwd", mode, dtype, (cupy_array(yv, dtype), dy), out, rows, 8192)
        assert (p.grid == rows) == (rows == many), (dtype, rows, p.grid)  # one block a row / a resident grid
        assert rel_err(out, grad(yv, dyv)) <= 2 * TOL[dtype], (dtype, rows)


@gpu
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_forward_staged_rows(mode):
    """The staged forward (next row in shared memory; rows filling >= 512-thread blocks): resident grids
    looping over several rows per block, the one-block (1024 threads, 64 KB staged; or two rows ahead,
    128 KB) and multi-block paths and their edges, staged and not, and in place (the next row is staged
    before this one is written)."""
    ref = ref_softmax if mode == "softmax" else ref_log_softmax
    for dtype, n, rows in (("bfloat16", 32768, 300), ("float16", 20000, 301), ("float32", 16384, 290),
                           ("float32", 70004, 140), ("bfloat16", 32760, 133), ("float32", 8192, 700),
                           ("float16", 32768, 3), ("bfloat16", 17000, 133)):
        x, xv = make((rows, n), dtype)
        want = ref(xv)
        for on, two_ahead in ((True, False), (True, True), (False, False)):
            # the staged kernels (test_forward_pipelined_parts: the pipelined one)
            with tuned(S, stage_fwd=on, stage_fwd_two_ahead=two_ahead), tuned(rw, pipelined_fwd=False):
                assert rel_err(softmax_impl(x, -1, mode), want) <= TOL[dtype], (dtype, n, on, two_ahead)
                if mode == "softmax" and on:
                    x2 = x.copy()
                    ck.softmax_(x2)
                    assert rel_err(x2, want) <= TOL[dtype], (dtype, n, "in place", two_ahead)


@gpu
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_forward_pipelined_parts(mode):
    """Long rows over several blocks, pipelined (softmax_fwd_parts): blocks with one, two and many rows (the
    pipeline's fill and drain), a short last part, -inf in a whole segment, a row all -inf and a NaN row,
    in place; against the reference and the one-launch exchange it replaces (the same within rounding: the
    parts combine in another order)."""
    ref = ref_softmax if mode == "softmax" else ref_log_softmax
    for dtype, n, rows in (("float32", 262144, 40), ("float32", 70004, 300), ("bfloat16", 100000, 2),
                           ("float16", 65544, 257), ("bfloat16", 40000, 1), ("float32", 16388, 3)):
        host = rng().standard_normal((rows, n)) * 3
        if rows > 3:
            host[0, : n // 2 + 1] = -np.inf
            host[1] = -np.inf
            host[2, n // 3] = np.nan
        x, xv = cupy_array(host, dtype), rounded(host, dtype)
        want = ref(xv)
        p = rw.plan(rows, n, dtype, rw.fwd_maxp(dtype), threads_of("fwd", dtype, n), SMS)
        assert p.parts > 1 and rw.pipelined_plan(S.SOURCE, S._parts_name(dtype), rows, n, dtype, 1,
                                                  rw.TUNING.parts_packs_softmax, p.threads), (dtype, n)
        got = to_f64(softmax_impl(x, -1, mode))
        ok = np.isfinite(want)
        assert (np.isnan(got) == np.isnan(want)).all() and (np.isinf(got) == np.isinf(want)).all(), (dtype, n)
        np.testing.assert_allclose(got[ok], want[ok], rtol=10 * TOL[dtype], atol=TOL[dtype])
        assert rel_err(got[3:], want[3:]) <= TOL[dtype], (dtype, n)
        ex = to_f64(softmax_impl(x, -1, mode, "exchange"))
        assert (np.isnan(ex) == np.isnan(got)).all() and rel_err(got[3:], ex[3:]) <= TOL[dtype], (dtype, n)
        if mode == "softmax":
            x2 = x.copy()
            ck.softmax_(x2)
            np.testing.assert_array_equal(to_f64(x2), got)


@gpu
@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_backward_pipelined_parts(mode):
    """Long rows over several blocks, pipelined (softmax_bwd_parts, y and dy staged): blocks with one, two and
    many rows, a short last part, dx written over dy; the one-launch exchange it replaces gives the same within
    rounding (the compiler may fuse exp(y) * c into dy differently)."""
    import cupy

    fwd, grad = (ref_softmax, ref_softmax_grad) if mode == "softmax" else (ref_log_softmax, ref_log_softmax_grad)
    for dtype, n, rows in (("float32", 262144, 20), ("float32", 70004, 300), ("bfloat16", 100000, 2),
                           ("float16", 65544, 257), ("bfloat16", 40000, 1), ("float32", 16388, 3)):
        _, xv = make((rows, n), dtype)
        yv = rounded(fwd(xv), dtype)
        y = cupy_array(yv, dtype)
        dy, dyv = make((rows, n), dtype, 1.0)
        p = rw.plan(rows, n, dtype, rw.maxp(dtype), threads_of("bwd", dtype, n), SMS)
        assert p.parts > 1 and rw.pipelined_plan(S.SOURCE, S._parts_name(dtype, "bwd"), rows, n, dtype, 1,
                                                  rw.maxp(dtype), p.threads, 2), (dtype, n)
        got = softmax_backward_impl(y, dy, -1, mode)
        assert rel_err(got, grad(yv, dyv)) <= 2 * TOL[dtype], (dtype, n)
        assert rel_err(got, to_f64(softmax_backward_impl(y, dy, -1, mode, "exchange"))) <= TOL[dtype], (dtype, n)
        d2 = dy.copy()
        run_rows("bwd", mode, dtype, (y, d2), d2, rows, n)  # dx over dy
        cupy.cuda.Device().synchronize()
        np.testing.assert_array_equal(to_f64(d2), to_f64(got))


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_inplace_matches_out_of_place(dtype):
    for n in (1, 100, 3000, 20001):
        x, xv = make((6, n), dtype)
        want = to_f64(ck.softmax(x))
        res = ck.softmax_(x)
        assert res is x
        np.testing.assert_array_equal(to_f64(x), want)


@gpu
def test_other_axes_and_shapes():
    x, xv = make((4, 5, 6), "float32")
    for axis in (0, 1, 2, -1, -2):
        assert rel_err(ck.softmax(x, axis=axis), ref_softmax(xv, axis)) < 1e-6
        assert rel_err(ck.log_softmax(x, axis=axis), ref_log_softmax(xv, axis)) < 1e-6
    xt = x.transpose(2, 0, 1)  # non-contiguous input
    assert rel_err(ck.softmax(xt), ref_softmax(xv.transpose(2, 0, 1))) < 1e-6
    one, _ = make((), "float32")
    assert float(ck.softmax(one)) == 1.0
    import cupy

    assert ck.softmax(cupy.empty((0, 5), cupy.float32)).shape == (0, 5)
    assert ck.softmax(cupy.empty((5, 0), cupy.float32)).shape == (5, 0)


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_special_values(dtype):
    """Rows with -inf entries, a row all -inf (NaN like torch), NaN propagation, and for float16 logits of
    1e4 that must stay finite; on every path (short, medium and multi-block rows)."""
    ninf = -np.inf
    for n in (7, 3000, 3 * threads(dtype, "fwd") * rw.fwd_maxp(dtype) * rw.vec(dtype) + 5):
        host = rng().standard_normal((5, n))
        host[0, : n // 2 + 1] = ninf               # -inf in the first half (a whole segment when split)
        host[1] = ninf                              # all -inf -> NaN
        host[2, n // 3] = np.nan                    # NaN propagates to the whole row
        big = 1e4 if dtype == "float16" else 1e6   # huge logits (1e4 is near float16's limit)
        host[3] = rng().uniform(-big, big, n)
        host[3, 0] = big
        x = cupy_array(host, dtype)
        xv = rounded(host, dtype)
        calls = [(lambda a, m=m, v=v: softmax_impl(a, -1, m, v), ref_softmax if m == "softmax" else ref_log_softmax)
                 for m in ("softmax", "log_softmax") for v in ("auto", "exchange")]
        for fn, ref in calls:
            got = to_f64(fn(x))
            want = ref(xv)
            assert np.isnan(got[1]).all() and np.isnan(got[2]).all(), n
            assert np.isfinite(got[3]).all(), n
            assert not np.isnan(got[[0, 3, 4]]).any(), n
            ok = np.isfinite(want[[0, 3, 4]])
            np.testing.assert_allclose(got[[0, 3, 4]][ok], want[[0, 3, 4]][ok], rtol=10 * TOL[dtype], atol=TOL[dtype])
            assert (np.isinf(got[[0, 3, 4]]) == np.isinf(want[[0, 3, 4]])).all()


@gpu
def test_errors_leave_x_untouched():
    import cupy

    x = cupy.asarray(rng().standard_normal((8, 6)), dtype=cupy.float32)
    before = x.copy()
    with pytest.raises(ValueError, match="C-contiguous"):
        ck.softmax_(x[:, ::2])
    with pytest.raises(ValueError, match="last axis"):
        ck.softmax_(x, axis=0)
    with pytest.raises(TypeError, match="dtype int32"):
        ck.softmax_(cupy.ones((3, 3), cupy.int32))
    with pytest.raises(ValueError, match="out of bounds"):
        ck.softmax(x, axis=2)
    with pytest.raises(ValueError, match="dy has shape"):
        ck.softmax_backward(x, x[:4])
    with pytest.raises(TypeError, match="dy has dtype float64"):
        ck.softmax_backward(x, x.astype(cupy.float64))
    assert (x == before).all()


# ---- torch -------------------------------------------------------------------------------------


def tensor(shape, dtype, requires_grad=False, scale=3.0):
    t = (torch.randn(*shape, device="cuda", dtype=torch.float64) * scale).to(getattr(torch, dtype))
    return t.requires_grad_(requires_grad)


@torch_gpu
@pytest.mark.parametrize("dtype", ALL)
def test_torch_forward_backward_match_torch(dtype):
    for shape in ((3, 1), (65, 130), (4, 5000), (2, 3 * 512 * rw.maxp(dtype) * rw.vec(dtype) + 3)):
        for log in (False, True):
            x = tensor(shape, dtype, True)
            x64 = x.detach().double().requires_grad_(True)
            y = (ck.log_softmax if log else ck.softmax)(x)
            want = (torch.log_softmax if log else torch.softmax)(x64, -1)
            assert rel_err(y, want.detach().cpu().numpy()) <= TOL[dtype]
            dy = tensor(shape, dtype, scale=1.0)
            y.backward(dy)
            want.backward(dy.double())
            assert rel_err(x.grad, x64.grad.cpu().numpy()) <= 3 * TOL[dtype], (shape, log)


@torch_gpu
def test_torch_gradcheck_and_dim():
    x = torch.randn(3, 7, 5, device="cuda", dtype=torch.float64, requires_grad=True)
    for dim in (0, 1, -1):
        assert torch.autograd.gradcheck(lambda t: ck.softmax(t, axis=dim), (x,))
        assert torch.autograd.gradcheck(lambda t: ck.log_softmax(t, axis=dim), (x,))


@torch_gpu
def test_torch_eager_calls_and_version_counters():
    """Eager no-grad calls run the kernels directly (no custom op): same results as the op path, and
    in-place writes still bump the version counter autograd checks saved tensors with."""
    x = tensor((37, 3000), "float32")
    ref = torch.softmax(x.double(), -1)
    assert rel_err(ck.softmax(x), ref.cpu().numpy()) < 1e-6
    with torch.no_grad():
        assert rel_err(ck.log_softmax(x), torch.log_softmax(x.double(), -1).cpu().numpy()) < 1e-6
    for inplace in (ck.softmax_, ck.layer_norm_, ck.rms_norm_):
        leaf = torch.randn(8, 64, device="cuda", requires_grad=True)
        y = torch.sigmoid(leaf)  # saves y for its backward
        before = y._version
        with torch.no_grad():
            inplace(y)
        assert y._version > before
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


@torch_gpu
def test_torch_inplace_autograd():
    a = tensor((37, 3000), "float32", True)
    b = a.detach().clone().requires_grad_(True)
    dy = tensor((37, 3000), "float32")
    y1 = ck.softmax_(a * 2)  # in place on a non-leaf
    y1.backward(dy)
    y2 = torch.softmax(b * 2, -1)
    y2.backward(dy)
    assert rel_err(y1, y2.detach().cpu().numpy()) < 1e-6
    assert rel_err(a.grad, b.grad.cpu().numpy().astype(np.float64)) < 1e-5


@torch_gpu
def test_torch_inplace_rejects_and_leaves_x():
    leaf = tensor((4, 8), "float32", True)
    before = leaf.detach().clone()
    with pytest.raises(RuntimeError, match="leaf"):
        ck.softmax_(leaf)
    assert torch.equal(leaf.detach(), before)
    x = tensor((4, 8), "float32")
    before = x.clone()
    with pytest.raises(ValueError, match="C-contiguous"):
        ck.softmax_(x.t())
    with pytest.raises(TypeError):
        ck.softmax_(x.cpu())
    assert torch.equal(x, before)


@torch_gpu
def test_torch_compile():
    def f(t):
        return (ck.softmax(t) * ck.log_softmax(t * 0.5)).sum()

    x = tensor((33, 1000), "float32", True)
    x2 = x.detach().clone().requires_grad_(True)
    compiled = torch.compile(f, fullgraph=True)
    out = compiled(x)
    out.backward()
    ref = f(x2)
    ref.backward()
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert torch.allclose(x.grad, x2.grad, rtol=1e-5, atol=1e-6)


@torch_gpu
def test_inplace_peak_memory():
    """softmax_ on 16384 x 16384 float16 (512 MiB) allocates within 1% of the input beyond it."""
    x = tensor((16384, 16384), "float16", scale=1.0)
    row0 = torch.softmax(x[:2].float(), -1)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ck.softmax_(x)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra <= 0.01 * x.nbytes, extra
    assert torch.allclose(x[:2].float(), row0, rtol=1e-2, atol=1e-4)


@gpu
def test_pipelined_words_start_dirty():
    """The pipelined launch's exchange words come from the pool holding the tags of an earlier launch (or any
    garbage): zero_words clears them before the first publish, with the programmatic launch or the memset."""
    import cupy

    dtype, n, rows = "float32", 262144, 24
    p = rw.plan(rows, n, dtype, rw.fwd_maxp(dtype), threads_of("fwd", dtype, n), SMS)
    pp = rw.pipelined_plan(S.SOURCE, S._parts_name(dtype), rows, n, dtype, 1, rw.TUNING.parts_packs_softmax,
                           p.threads)
    assert pp, n
    words = pp[1].rows * pp[1].parts * 2
    x, xv = make((rows, n), dtype)
    want = ref_softmax(xv)
    for after in (True, False):
        with tuned(rw, zero_words_kernel=after):
            for _ in range(2):
                cupy.full((words,), -1, dtype=cupy.int64)  # tagged garbage, freed into the pool
                got = softmax_impl(x, -1, "softmax")
                assert rel_err(got, want) <= TOL[dtype], after
