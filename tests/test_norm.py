"""layer_norm / rms_norm, their in-place forms and backward (dx, dweight, dbias) against float64
references (GPU), every dispatch path at its boundaries; validation and references on the CPU."""
import numpy as np
import pytest

import cupy_kernels as ck
from conftest import (FLOATS, TOL, close_everywhere, cupy_array, gpu, group_lengths, kernels_of, many_rows, rel_err,
                      rng, rounded, to_f64, torch, torch_gpu)
from cupy_kernels.ops import _rowwise as rw
from cupy_kernels.ops import norm as N
from cupy_kernels.ops.norm import bwd_maxp, bwd_threads, fwd_threads, norm_backward_impl, norm_forward_impl

ALL = FLOATS + ("float64",)
SMS = 132


# ---- float64 references ------------------------------------------------------------------------


def ref_forward(x, w, b, eps, mode):
    if mode == "layer_norm":
        mean = x.mean(-1, keepdims=True)
        rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
        xhat = (x - mean) * rstd
    else:
        rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        xhat = x * rstd
    y = xhat * (1 if w is None else w) + (0 if b is None else b)
    return y, xhat, rstd


def close_rows(got, want, x, rstd, w, dtype, mode):
    """close_everywhere per element, and for layer_norm each row's rounding of x - mean as rstd magnifies it: a short
    row whose values nearly agree (n = 2, x0 ~ x1 among 20011 rows) has a variance far below eps, rstd near
    1 / sqrt(eps), and float32's exact two-pass result then misses float64's by ~ulp(|x|) * rstd, past a tolerance
    relative to y (in 12% of 20011-row float32 draws: 7.6e-5 against 4e-5)."""
    scale = np.abs(x).max(-1, keepdims=True) * rstd * (1.0 if w is None else np.abs(w).max())
    return close_everywhere(got, want, dtype, scale=scale if mode == "layer_norm" else 0.0)


def ref_backward(x, w, b, dy, eps, mode):
    _, xhat, rstd = ref_forward(x, w, b, eps, mode)
    g = dy * (1 if w is None else w)
    c2 = (g * xhat).mean(-1, keepdims=True)
    c1 = g.mean(-1, keepdims=True) if mode == "layer_norm" else 0
    dx = rstd * (g - c1 - xhat * c2)
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def dx_err(got, want, xv, wv, dyv, eps, mode):
    """||got - want|| relative to the larger of ||want|| and the size of its terms ||rstd * dy * w||: dx
    cancels to nearly nothing for rows of one or two elements, where a plain relative error measures
    only float rounding."""
    rstd = ref_forward(xv, wv, None, eps, mode)[2]
    scale = np.linalg.norm(rstd * dyv * (1 if wv is None else wv))
    diff = np.linalg.norm(to_f64(got) - want) if not isinstance(got, np.ndarray) else np.linalg.norm(got - want)
    return diff / max(np.linalg.norm(want), scale)


def threads_of(kind, dtype):
    return fwd_threads(dtype) if kind == "fwd" else bwd_threads(dtype)


def maxp_of(kind, dtype):
    return rw.fwd_maxp(dtype) if kind == "fwd" else bwd_maxp(dtype)


def boundary_lengths(dtype, kind):
    threads, V, P = threads_of(kind, dtype), rw.vec(dtype), maxp_of(kind, dtype)
    sub, block = 32 * min(rw.TARGET_PACKS, P) * V, threads * P * V
    return sorted({1, 2, 3, V + 1, 127, 1000, 4097, sub, sub + 1, block, block + 1, block + V, 3 * block + 5})


@pytest.fixture
def without_ring(monkeypatch):
    """norm_bwd_ring off: it would take the cluster lengths a test gives the other backward forms."""
    from cupy_kernels.ops import norm as N

    monkeypatch.setitem(N.RING_BWD, "on", False)


# ---- CPU ---------------------------------------------------------------------------------------


def test_boundaries_cover_every_path():
    for dtype in ALL:
        for kind, persistent in (("fwd", False), ("bwd", True)):
            paths = {rw.plan(4, n, dtype, maxp_of(kind, dtype), threads_of(kind, dtype), SMS, persistent).path
                     for n in boundary_lengths(dtype, kind)}
            assert paths == {"subwarp", "block", "multiblock"}, (dtype, kind)


def test_shared_plans_name_declared_kernels():
    """Every aligned row length norm_bwd_shared takes (up to 65536 elements, compute capability 8.0 and 9.0, clusters
    of 8 staged or not) names a kernel its module declares (an undeclared one fails only on the GPU)."""
    from cupy_kernels.ops import norm as N

    saved = dict(N.SHARED_BWD)
    try:
        for staged in (False, True):
            N.SHARED_BWD["stage_cl8"] = staged
            for dtype in N.SHARED_BWD["dtypes"]:
                for n in range(rw.vec(dtype), 65537, rw.vec(dtype)):
                    for mode in N.MODES:
                        for cc in (80, 90):
                            if plan := N.shared_plan(n, dtype, mode, cc):
                                cl, _, _, _, _, stage, full, warps = plan
                                for f in (0, 1):
                                    assert N._shared(dtype, mode, f, cl, stage, full, warps) in N.SOURCE.names, \
                                        (dtype, n, mode, cc, staged)
    finally:
        N.SHARED_BWD.update(saved)


def test_ring_plans():
    """norm_bwd_ring takes rows of whole packs that split over a cluster of 2, 4 or 8 CTAs into 512-1024 packs a CTA
    (the fewest CTAs), a thread the most packs that leave 256 threads, names declared kernels, and leaves one-CTA
    rows, float64 and compute capability 8.0 alone."""
    from cupy_kernels.ops import norm as N

    for n, dtype, want in ((32768, "bfloat16", (4, 256, 4)), (16384, "float16", (2, 256, 4)),
                           (24576, "bfloat16", (4, 384, 2)), (16384, "float32", (4, 256, 4)),
                           (65536, "bfloat16", (8, 256, 4)), (8704, "float16", (2, 544, 1))):
        cl, threads, _, pk, _ = N.ring_plan(n, dtype, 90)
        assert (cl, threads, pk) == want, (n, dtype)
    for n, dtype, cc in ((32768, "bfloat16", 80), (16384, "float64", 90), (16392, "float16", 90), (8192, "float16", 90),
                         (4096, "float32", 90), (65536, "float32", 90), (131072, "bfloat16", 90)):
        assert N.ring_plan(n, dtype, cc) is None, (n, dtype, cc)
    for dtype in N.RING_BWD["dtypes"]:
        for n in range(rw.vec(dtype), 65537, rw.vec(dtype)):
            if plan := N.ring_plan(n, dtype, 90):
                cl, threads, form, pk, smem = plan
                assert cl > 1 and cl * pk * threads * rw.vec(dtype) == n and smem == 2 * form[0] * pk * threads * 16
                assert threads >= 256 and threads % 32 == 0 and pk * threads <= 1024
                for mode in N.MODES:
                    for f in (0, 1):
                        assert N._ring(dtype, mode, f, cl, form, pk) in N.SOURCE.names, (dtype, n, mode)


def test_group_lengths_take_their_group():
    """The rows the GPU tests give the compile-time groups plan to those groups (forward and backward)."""
    from cupy_kernels.ops.norm import SHORT_BWD

    for dtype in rw.SHORT_DTYPES:
        V = rw.vec(dtype)
        for G, n in group_lengths(V, rw.TARGET_PACKS, 64 * rw.TARGET_PACKS * V):
            assert rw.short_group(rw.plan(301, n, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype), SMS), dtype, 1) == G
    for dtype, packs in SHORT_BWD.items():
        V, P = rw.vec(dtype), bwd_maxp(dtype, packs)
        for G, n in group_lengths(V, P, 1000):
            p = rw.plan(301, n, dtype, P, bwd_threads(dtype, packs), SMS, persistent=True)
            assert rw.short_group(p, dtype, 1) == G, (dtype, G, n)


def test_full_rows_only_where_every_pack_is_whole():
    """The forwards' FULL instances (no pack count or bounds test) are planned exactly for rows where every thread of
    the compile-time group holds MAXP whole packs, the issue's power-of-two shapes among them, and are declared."""
    from cupy_kernels.ops import norm as N
    from cupy_kernels.ops import softmax as S

    taken = set()
    for dtype in rw.SHORT_DTYPES:
        V, P = rw.vec(dtype), rw.fwd_maxp(dtype)
        for n in sorted({k * V for k in range(1, 4097, 37)} | {1 << k for k in range(13)} | {V << k for k in range(13)}
                        | {n - V for n in (V << k for k in range(3, 13))} | {33, 1000, 4097}):
            p = rw.plan(301, n, dtype, P, fwd_threads(dtype, n), SMS)
            for stage in (0, rw.stage_fwd(p, dtype, 1)):
                g = rw.short_group(p, dtype, 1, staged=bool(stage))
                full = rw.full_rows(p, dtype, P, g, stage)
                whole = bool(g) and p.parts == 1 and p.group * P * V == n  # every thread: P packs, all inside the row
                assert full == (whole and rw.has_full(dtype, g, stage)), (dtype, n, stage, p)
                if full:
                    taken.add((dtype, n, stage))
                    assert N._fwd(dtype, "layer_norm", stage, g, True) in N.SOURCE.names, (dtype, n, stage)
                    assert S._name("fwd", dtype, "softmax", stage, group=g, full=True) in S.SOURCE.names, (dtype, n)
                    assert not rw.full_rows(p, dtype, P, g, 2)  # softmax's rows staged two ahead: none
                assert not rw.full_rows(p, dtype, P, 0, stage)  # the run-time group has none
    # the forward shapes: 65536x128 f32, 32768x1024 f16, 4096² f32 (unstaged), 1024x32768 bf16 (staged)
    assert {("float32", 128, 0), ("float16", 1024, 0), ("float32", 4096, 0), ("bfloat16", 32768, 1)} <= taken
    assert ("bfloat16", 8192, 0) not in taken  # unstaged half block rows: the FULL form spilled at 48 registers
    # the backward's compile-time groups (norm_bwd) have FULL instances for every group
    for dtype, packs in N.SHORT_BWD.items():
        V, P = rw.vec(dtype), bwd_maxp(dtype, packs)
        for G, n in group_lengths(V, P, 1000):
            p = rw.plan(301, n, dtype, P, bwd_threads(dtype, packs), SMS, persistent=True)
            assert rw.whole_rows(p, dtype, P) == (n == G * P * V), (dtype, G, n)
            assert N._bwd(dtype, "layer_norm", 0, False, packs, group=G, full=True) in N.SOURCE.names


@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_reference_backward_matches_finite_differences(mode):
    g = rng()
    x, dy = g.standard_normal((3, 6)), g.standard_normal((3, 6))
    w, b = g.standard_normal(6), (g.standard_normal(6) if mode == "layer_norm" else None)
    dx, dw, db = ref_backward(x, w, b, dy, 1e-5, mode)
    h = 1e-6

    def loss(x_, w_, b_):
        return (ref_forward(x_, w_, b_, 1e-5, mode)[0] * dy).sum()

    for arr, got in ((x, dx), (w, dw)) + (((b, db),) if b is not None else ()):
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            orig = arr[i]
            arr[i] = orig + h
            up = loss(x, w, b)
            arr[i] = orig - h
            down = loss(x, w, b)
            arr[i] = orig
            num[i] = (up - down) / (2 * h)
        np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-7)


def test_numpy_input_is_rejected():
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        ck.layer_norm(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        ck.rms_norm_(np.ones((2, 3), np.float32))


# ---- GPU ---------------------------------------------------------------------------------------


def make(shape, dtype, scale=1.0, shift=0.0):
    host = rng().standard_normal(shape) * scale + shift
    return cupy_array(host, dtype), rounded(host, dtype)


def affine(n, dtype, mode, weight=True, bias=True):
    """weight entries with |w| in [0.5, 1.5] (random sign; never zero), bias random."""
    g = rng()
    w = b = wv = bv = None
    if weight:
        host = g.uniform(0.5, 1.5, n) * g.choice([-1.0, 1.0], n)
        w, wv = cupy_array(host, dtype), rounded(host, dtype)
    if bias and mode == "layer_norm":
        b, bv = make((n,), dtype)
    return w, b, wv, bv


def backward_case(rows, n, dtype, mode, scale=2.0, shift=0.5):
    """Inputs of a backward test (x, dy, affine), the forward's saved statistics and output, and the
    float64 reference gradients."""
    x, xv = make((rows, n), dtype, scale, shift)
    w, b, wv, bv = affine(n, dtype, mode)
    dy, dyv = make((rows, n), dtype)
    y, mean, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
    return dict(x=x, xv=xv, w=w, b=b, wv=wv, dy=dy, dyv=dyv, y=y, mean=mean, rstd=rstd,
                ref=ref_backward(xv, wv, bv, dyv, 1e-5, mode))


def check_backward_from_x_and_y(c, dtype, mode, what):
    """dx, dweight, dbias of a backward_case, from x with the saved mean / rstd and from the output y
    (whose rounding the looser dx / dweight bounds allow for), against the reference."""
    rdx, rdw, rdb = c["ref"]
    tol = 3 * TOL[dtype]
    for src, from_output in ((c["x"], False), (c["y"], True)):
        dx, dw, db = norm_backward_impl(c["dy"], src, c["w"], c["b"], None if from_output else c["mean"], c["rstd"],
                                        mode, from_output=from_output)
        assert dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, mode) <= 2 * tol, what + (from_output,)
        assert rel_err(dw, rdw) <= 2 * tol, what + (from_output,)
        if mode == "layer_norm":
            assert rel_err(db, rdb) <= tol, what + (from_output,)


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_forward_every_path(mode, dtype):
    for n in boundary_lengths(dtype, "fwd"):
        rows = 5 if n > 4096 else 67
        for with_affine in (True, False):
            x, xv = make((rows, n), dtype, 2.0, 0.5)
            w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
            eps = 1e-5
            y, mean, rstd = norm_forward_impl(x, w, b, eps, mode)
            want, _, want_rstd = ref_forward(xv, wv, bv, eps, mode)
            assert y.dtype == x.dtype and y.shape == x.shape
            assert rel_err(y, want) <= TOL[dtype], (n, with_affine)
            if rw.plan(rows, n, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype), SMS).parts > 1:
                for variant in ("split", "exchange", "counter"):  # every way of splitting a long row
                    got = norm_forward_impl(x, w, b, eps, mode, variant=variant)
                    assert rel_err(got[0], want) <= TOL[dtype] and rel_err(got[2], want_rstd[:, 0]) <= 1e-5, variant
            assert str(rstd.dtype) == rw.ACC[dtype]
            assert rel_err(rstd, want_rstd[:, 0]) <= 1e-5, n
            if mode == "layer_norm":
                assert rel_err(mean, xv.mean(-1)) <= 1e-5, n


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_shifted_rows(mode, dtype):
    """Rows that are not whole packs of aligned arrays (shifted rows, rows.cuh shift_row): every head offset, sub-warp
    and block lengths, forward with and without the affine, in place, the statistics, and the backward from x and from
    y, each element checked; and the kernels taken: shifted instances for rows of a pack or more that one block holds
    (the backward's: half types), the element path for shorter and longer rows, a skewed base or a skewed weight."""
    import cupy

    V = rw.vec(dtype)
    block = fwd_threads(dtype) * rw.fwd_maxp(dtype) * V
    for n in (V - 1, V + 1, 3 * V + 1, 100, 1001, 5001, block - V + 1, block - 1, block + 3):
        if n % V == 0:
            continue
        rows = 4 * V + 3 if n > 4096 else 1000
        one_block = rw.plan(rows, n + V - 1, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype, n + V - 1), SMS).parts == 1
        bwd_shifted = dtype in N.SHIFTED_BWD_DTYPES and n >= V and rw.plan(
            1, n + V - 1, dtype, bwd_maxp(dtype, 1), bwd_threads(dtype, 1), SMS).parts == 1
        x, xv = make((rows, n), dtype, 2.0, 0.5)
        flat = cupy.empty(rows * n + 1, dtype=x.dtype)
        skewed = flat[1:].reshape(rows, n)  # contiguous, base 2-8 bytes past a boundary
        skewed[...] = x
        for with_affine in (True, False):
            w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
            want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
            what = (n, with_affine)
            (y, mean, rstd), used = kernels_of(N.SOURCE, lambda: norm_forward_impl(x, w, b, 1e-5, mode))
            assert close_everywhere(y, want, dtype) and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
            if mode == "layer_norm":
                assert rel_err(mean, xv.mean(-1)) <= 1e-5, what
            tiled = rw.tiled_rows(N.TILED_FWD, n, 0, "auto", x)
            assert bool(used & SHIFTED_FWD) == (n >= V and one_block and not tiled), what + (used,)
            assert bool(used & TILED_FWD) == tiled, what + (used,)
            (y, _, _), used = kernels_of(N.SOURCE, lambda: norm_forward_impl(skewed, w, b, 1e-5, mode))
            assert close_everywhere(y, want, dtype) and not used & SHIFTED_FWD, what + ("skewed", used)
            x2 = x.copy()
            assert norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)[0] is x2
            assert close_everywhere(x2, want, dtype), what + ("in place",)
            if with_affine:  # a weight one element past a boundary: the element path
                ws = cupy.empty(n + 1, dtype=x.dtype)[1:]
                ws[...] = w
                (y, _, _), used = kernels_of(N.SOURCE, lambda: norm_forward_impl(x, ws, None, 1e-5, mode))
                want = ref_forward(xv, wv, None, 1e-5, mode)[0]
                assert close_everywhere(y, want, dtype) and not used & SHIFTED_FWD, what + ("skewed weight", used)
        if n == 1:  # (dx and dweight of layer_norm are rounding noise there: test_backward_every_path's dx_err)
            continue
        # the backward from x and from y, each gradient element checked (dweight / dbias: the column sums by head);
        # rows enough that groups take several (sub-warp rows of 33 and 100) and 1024-thread blocks stage their next
        bwd_rows = 20000 if n <= 100 else 3000 if n <= 1001 else 300 if n <= 8192 else rows
        c = backward_case(bwd_rows, n, dtype, mode)
        rdx, rdw, rdb = c["ref"]
        for src, from_output in ((c["x"], False), (c["y"], True)):
            (dx, dw, db), used = kernels_of(N.SOURCE, lambda: norm_backward_impl(
                c["dy"], src, c["w"], c["b"], None if from_output else c["mean"], c["rstd"], mode, from_output))
            what, k = (n, "backward", from_output), 3 if from_output else 2  # (y's rounding, as check_backward_...)
            assert close_everywhere(dx, rdx, dtype, k) and close_everywhere(dw, rdw, dtype, k), what
            assert mode == "rms_norm" or close_everywhere(db, rdb, dtype, 2), what
            assert bool(used & SHIFTED_BWD) == bwd_shifted, what + (used,)


SHIFTED_FWD = {N._fwd(t, m, group=g, shift=True) for t in ALL for m in N.MODES for g in (0,) + rw.SHORT_GROUPS}
SHIFTED_BWD = {N._bwd(t, m, f, st, packs=1, group=g, shift=True) for t in ALL for m in N.MODES for f in (0, 1)
               for st, g in ((True, 0),) + tuple((False, g) for g in (0,) + rw.SHORT_GROUPS)}
SHIFTED_FWD &= set(N.SOURCE.names)  # the shifted instances norm.py declares
TILED_FWD = {N._fwd_tiled(t, m) for t in ALL for m in N.MODES}
SHIFTED_BWD &= set(N.SOURCE.names)


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_tiled_forward(mode, dtype):
    """Short rows that are not whole packs take norm_fwd_tiled (a block's rows as one tile in shared memory): lengths
    from 1 past TILED_FWD's limit, fewer rows than a tile and several, with and without the affine, a weight off a
    16-byte boundary (read by element: still tiled), in place, the statistics; a NaN row stays NaN."""
    import cupy

    V, top = rw.vec(dtype), N.TILED_FWD["max_n"]
    for n in (1, 2, 3, V - 1, V + 1, 33, 100, top - 1, top + 1):
        if n < 1 or n % V == 0:
            continue
        for rows in (5, 20011):
            x, xv = make((rows, n), dtype, 2.0, 0.5)
            x[3, n // 2] = np.nan
            xv[3, n // 2] = np.nan
            for with_affine in (True, False):
                w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
                if with_affine:  # one element past a boundary
                    ws = cupy.empty(n + 1, dtype=x.dtype)[1:]
                    ws[...] = w
                    w = ws
                with np.errstate(invalid="ignore"):
                    want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
                what = (n, rows, with_affine)
                (y, mean, rstd), used = kernels_of(N.SOURCE, lambda: norm_forward_impl(x, w, b, 1e-5, mode))
                assert bool(used & TILED_FWD) == (n <= top) and (n > top or used <= TILED_FWD), what + (used,)
                y, ok = to_f64(y), ~np.isnan(want)
                assert np.isnan(y[3]).all() and (np.isnan(y) == ~ok).all(), what
                ok_rows = np.arange(rows) != 3
                close = lambda got: close_rows(  # noqa: E731
                    got[ok_rows], want[ok_rows], xv[ok_rows], want_rstd[ok_rows], wv, dtype, mode)
                assert close(y), what
                assert rel_err(to_f64(rstd)[ok_rows], want_rstd[ok_rows, 0]) <= 1e-5, what
                if mode == "layer_norm":
                    assert rel_err(to_f64(mean)[ok_rows], xv[ok_rows].mean(-1)) <= 1e-5, what
                x2 = x.copy()
                assert norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)[0] is x2
                assert close(to_f64(x2)), what + ("in place",)


@gpu
@pytest.mark.parametrize("dtype", rw.SHORT_DTYPES)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_forward_short_groups(mode, dtype):
    """The forward instances compiled for their group (conftest.group_lengths' rows), with and without the
    affine, out of place and in place, and the statistics."""
    V = rw.vec(dtype)
    for G, n in group_lengths(V, rw.TARGET_PACKS, 64 * rw.TARGET_PACKS * V):
        assert rw.short_group(rw.plan(301, n, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype), SMS), dtype, 1) == G
        x, xv = make((301, n), dtype, 2.0, 0.5)
        for with_affine in (True, False):
            w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
            want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
            y, mean, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
            what = (G, n, with_affine)
            assert rel_err(y, want) <= TOL[dtype] and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
            if mode == "layer_norm":
                assert rel_err(mean, xv.mean(-1)) <= 1e-5, what
            x2 = x.copy()
            norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)
            assert rel_err(x2, want) <= TOL[dtype], what + ("in place",)


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_forward_staged_rows(mode):
    """The staged forward (next row in shared memory; rows filling >= 512-thread blocks): resident grids
    looping over several rows per block, one-block (64 KB staged) and multi-block paths and their edges,
    staged and not, in place (the next row is staged before this one is written), and the statistics."""
    from cupy_kernels.ops import norm as N

    for dtype, n, rows in (("bfloat16", 32768, 300), ("float16", 20000, 301), ("float32", 16384, 290),
                           ("float32", 70004, 140), ("bfloat16", 32760, 133), ("float32", 8192, 700),
                           ("float16", 32768, 3), ("bfloat16", 17000, 133)):
        x, xv = make((rows, n), dtype, 2.0, 0.5)
        w, b, wv, bv = affine(n, dtype, mode)
        want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
        for on in (True, False):
            N.STAGE_FWD["on"] = on
            rw.PARTS_PIPELINED["fwd"] = False  # the staged kernels (test_forward_pipelined_parts: the pipelined one)
            what = (dtype, n, on)
            try:
                y, _, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
                assert rel_err(y, want) <= TOL[dtype] and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
                if on:
                    x2 = x.copy()
                    norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)
                    assert rel_err(x2, want) <= TOL[dtype], what + ("in place",)
            finally:
                N.STAGE_FWD["on"] = True
                rw.PARTS_PIPELINED["fwd"] = True


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_forward_pipelined_parts(mode):
    """Long rows over several blocks, pipelined (norm_fwd_parts): blocks with one, two and many rows (the
    pipeline's fill and drain), a short last part, rows far from zero mean (the segments' exact two-pass
    statistics), with and without the affine, in place, and the saved statistics; the one-launch exchange
    it replaces gives the same within rounding."""
    from cupy_kernels.ops import norm as N

    for dtype, n, rows in (("float32", 262144, 40), ("float32", 70004, 300), ("bfloat16", 100000, 2),
                           ("float16", 65544, 257), ("bfloat16", 40000, 1), ("float32", 16388, 3)):
        host = rng().standard_normal((rows, n)) * 2 + 0.5
        host[::2] += 60.0  # mean / std 30: one-pass sums around zero would lose ~10 bits (rstd off by ~5e-5)
        x, xv = cupy_array(host, dtype), rounded(host, dtype)
        p = rw.plan(rows, n, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype, n), SMS)
        pp = rw.pipelined_plan(N.SOURCE, N._parts(dtype, mode), rows, n, dtype, 1, rw.PARTS_PACKS["norm"], p.threads)
        assert p.parts > 1 and pp, (dtype, n)
        assert rw.full_parts(pp[1], dtype, rw.PARTS_PACKS["norm"]) == (n == 262144), (dtype, n)  # the FULL instance
        for with_affine in (True, False):
            w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
            want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
            what = (dtype, n, with_affine)
            y, mean, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
            assert rel_err(y, want) <= TOL[dtype] and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
            if mode == "layer_norm":
                assert rel_err(mean, xv.mean(-1)) <= 1e-6, what
            ex = norm_forward_impl(x, w, b, 1e-5, mode, variant="exchange")[0]
            assert rel_err(y, to_f64(ex)) <= 2 * TOL[dtype], what  # each within TOL of the reference
            x2 = x.copy()
            norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)
            np.testing.assert_array_equal(to_f64(x2), to_f64(y))
            N.FULL_PARTS["on"] = False  # the general instance: the same arithmetic
            try:
                np.testing.assert_array_equal(to_f64(norm_forward_impl(x, w, b, 1e-5, mode)[0]), to_f64(y))
            finally:
                N.FULL_PARTS["on"] = True


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_pipelined_parts(mode):
    """Long rows over several blocks, pipelined (norm_bwd_parts, x or y and dy staged): blocks with one, two
    and many rows (the pipeline's fill and drain, and blocks' column sums over several rows), a short last
    part; dx, dweight, dbias from x and from the output, and without the affine."""
    from cupy_kernels.ops import norm as N

    for dtype, n, rows in (("float32", 262144, 20), ("float32", 70004, 140), ("bfloat16", 100000, 2),
                           ("float16", 65544, 257), ("bfloat16", 40000, 1), ("float32", 16388, 3)):
        p = rw.plan(rows, n, dtype, rw.maxp(dtype), N.PARTS_BWD_THREADS, SMS)
        for f in (0, 1):
            assert p.parts > 1 and rw.pipelined_plan(N.SOURCE, N._bwd_parts(dtype, mode, f), rows, n, dtype, 1,
                                                      rw.maxp(dtype), p.threads, 2), (dtype, n)
        c = backward_case(rows, n, dtype, mode)
        check_backward_from_x_and_y(c, dtype, mode, (dtype, n))
        dx = norm_backward_impl(c["dy"], c["x"], None, None, c["mean"], c["rstd"], mode)[0]
        rdx = ref_backward(c["xv"], None, None, c["dyv"], 1e-5, mode)[0]
        assert dx_err(dx, rdx, c["xv"], None, c["dyv"], 1e-5, mode) <= 3 * TOL[dtype], (dtype, n, "no affine")


@gpu
@pytest.mark.usefixtures("without_ring")
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_staged_rows(mode):
    """The half-type backward forms: one pack per thread (1024-thread blocks), staged (next row's x or y
    and dy in shared memory) and not, pipelined (two rows in flight, one block per row) and not, two
    packs per thread (512-thread blocks; layer_norm's dbias from the kernel or from a column sum of dy),
    and norm_bwd_shared (column sums in shared memory; one CTA, staged or not (small CTAs: 1024,
    2048, 4096), or a cluster per row), each on
    every length: resident grids looping over several rows per block (and blocks with no row), one-block
    and multi-block rows and their edges, a block's threads past the row end, a cluster's second CTA with
    a shorter segment, from x and from the output; dx, dweight, dbias against the reference."""
    from cupy_kernels.ops import norm as N

    for dtype, n, rows in (("bfloat16", 8192, 300), ("float16", 8184, 280), ("bfloat16", 32768, 140),
                           ("float16", 20000, 150), ("float16", 4104, 290), ("bfloat16", 6000, 3),
                           ("bfloat16", 16392, 70), ("float16", 16384, 40), ("float16", 40000, 30),
                           ("float16", 1024, 301), ("bfloat16", 2048, 97), ("float16", 4096, 33)):
        c = backward_case(rows, n, dtype, mode)
        saved, saved_shared = dict(N.TWO_PACK_FROM), dict(N.SHARED_BWD)
        for on, two_pack_from, db_by_reduce, pipelined, shared_from, threads, stage_threads in (
                (True, None, True, True, None, 0, None), (True, None, True, False, None, 0, None),
                (True, 1 << 40, True, True, None, 0, None), (False, None, True, True, None, 0, None),
                (False, 0, True, True, None, 0, None), (False, 0, False, True, None, 0, None),
                (False, 1 << 40, True, True, None, 0, None), (True, None, True, True, 8193, 1024, None),
                (True, None, True, True, 0, 1024, None), (True, None, True, True, 0, 512, None),
                (True, None, True, True, 0, 512, 0), (True, None, True, True, 0, 512, 1 << 20)):
            N.STAGE_BWD["on"], N.DB_BY_REDUCE["on"], N.PIPELINE_BWD["on"] = on, db_by_reduce, pipelined
            N.SHARED_BWD["on"] = shared_from is not None  # on: norm_bwd_shared from that length, CTAs <= threads
            N.SHARED_BWD["from"], N.SHARED_BWD["threads"] = shared_from or 0, threads or saved_shared["threads"]
            if stage_threads is not None:  # its one-CTA rows staged at every CTA size (0) or at none
                N.SHARED_BWD["stage_threads"] = stage_threads
            if two_pack_from is not None:  # either half-type form on every length
                N.TWO_PACK_FROM.update({m: two_pack_from for m in N.TWO_PACK_FROM})
            try:
                what = (dtype, n, on, two_pack_from, db_by_reduce, pipelined, shared_from, threads, stage_threads)
                check_backward_from_x_and_y(c, dtype, mode, what)
            finally:
                N.STAGE_BWD["on"] = N.DB_BY_REDUCE["on"] = N.PIPELINE_BWD["on"] = True
                N.SHARED_BWD.update(saved_shared)
                N.TWO_PACK_FROM.update(saved)


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_ring(mode, monkeypatch):
    """norm_bwd_ring on clusters of 2, 4 and 8 CTAs a row, 768 and 1024 packs a CTA, every dtype, one, two and four
    packs a thread: rows that wrap the ring and its slots many times, fewer rows than row groups or than the lag, one
    row; from x and from the output."""
    from cupy_kernels._runtime import current
    from cupy_kernels.ops import norm as N

    if current().cc < 90:
        pytest.skip("bulk copies and clusters need compute capability 9.0")
    for dtype, n, rows in (("bfloat16", 16384, 1500), ("float16", 12288, 7), ("float32", 8192, 901),
                           ("float16", 16384, 300), ("bfloat16", 32768, 140), ("float32", 16384, 1),
                           ("bfloat16", 24576, 65), ("float16", 65536, 40), ("float32", 32768, 9)):
        c = backward_case(rows, n, dtype, mode)
        for form in N.RING_FORMS:
            for pk in N.RING_PACKS:
                monkeypatch.setitem(N.RING_BWD, "form", form)
                monkeypatch.setitem(N.RING_BWD, "packs", pk)
                if N.ring_plan(n, dtype, current().cc) is not None:
                    check_backward_from_x_and_y(c, dtype, mode, (dtype, n, rows, form, pk))
                else:
                    assert pk > 1, (dtype, n)  # every case takes the ring with one pack a thread


@gpu
@pytest.mark.usefixtures("without_ring")
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_clusters_staged_or_not(mode):
    """norm_bwd_shared's clusters of 8 (half rows of 16385-32768 elements) with rows staged in shared memory and
    straight into registers (the default): several rows a cluster and clusters with none, a short last CTA, from x
    and from the output."""
    from cupy_kernels._runtime import current
    from cupy_kernels.ops import norm as N

    if current().cc < 90:
        pytest.skip("clusters need compute capability 9.0")
    saved = dict(N.SHARED_BWD)
    try:
        for dtype, n, rows in (("bfloat16", 32768, 140), ("float16", 20000, 75), ("bfloat16", 24576, 3)):
            c = backward_case(rows, n, dtype, mode)
            for staged in (True, False):
                N.SHARED_BWD["stage_cl8"] = staged
                plan = N.shared_plan(n, dtype, mode, current().cc)
                assert plan[0] == 8 and plan[5] == staged, (dtype, n, plan)
                check_backward_from_x_and_y(c, dtype, mode, (dtype, n, rows, staged))
    finally:
        N.SHARED_BWD.update(saved)


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_shared_warp_rows(mode):
    """norm_bwd_shared's WARPS form (each warp its own rows, the warps' column sums folded at the end) on every
    half-type and float32 length it takes when allowed from 0: 4 packs a lane (1024, FULL) and fewer or partial ones, rows
    not a multiple of the warps (warps with no row), CTAs of 512 and 256 threads, from x and from the output;
    column_sum launched after the partial rows' kernel (programmatic dependent launch) and plainly."""
    from cupy_kernels.ops import norm as N

    saved = dict(N.SHARED_BWD)
    try:
        for dtype, n, rows in (("float16", 1024, 301), ("bfloat16", 1024, 4000), ("bfloat16", 1016, 77),
                               ("float16", 776, 19), ("bfloat16", 264, 1), ("float16", 8, 50), ("float32", 512, 301),
                               ("float32", 388, 77), ("float32", 4, 9)):
            c = backward_case(rows, n, dtype, mode)
            for threads, after in ((512, True), (256, True), (256, False)):
                N.SHARED_BWD.update(warps_from=0, warps_from_float32=0, warps_threads=threads)
                N.COLUMN_SUM_AFTER["on"] = after
                check_backward_from_x_and_y(c, dtype, mode, (dtype, n, rows, threads, after))
    finally:
        N.SHARED_BWD.update(saved)
        N.COLUMN_SUM_AFTER["on"] = True


@gpu
def test_backward_in_a_cuda_graph():
    """A norm backward captured in a CUDA graph and replayed (on sm_90 column_sum is a programmatic dependent
    launch: a programmatic edge in the graph) gives the eager call's bits: warp rows, a one-CTA row, a cluster."""
    import torch

    from cupy_kernels.ops import norm as N

    for rows, n in ((300, 1024), (70, 8192), (20, 32768)):
        x = torch.randn(rows, n, device="cuda", dtype=torch.float16)
        dy = torch.randn_like(x)
        w = torch.rand(n, device="cuda", dtype=torch.float16) + 0.5
        b = torch.randn(n, device="cuda", dtype=torch.float16)
        _, mean, rstd = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
        eager = N.norm_backward_impl(dy, x, w, b, mean, rstd, "layer_norm")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = N.norm_backward_impl(dy, x, w, b, mean, rstd, "layer_norm")
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(out, eager):
            assert torch.equal(got, want), (rows, n)


@gpu
@pytest.mark.usefixtures("without_ring")
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_shared_float32(mode):
    """norm_bwd_shared's float32 instances, also on rows shorter than it takes by default: one CTA and
    clusters of 2 and 4 per row, threads past the row end, from x and from the output."""
    from cupy_kernels.ops import norm as N

    saved = dict(N.SHARED_BWD)
    N.SHARED_BWD["from_float32"] = 0
    try:
        for n, rows in ((1024, 300), (4096, 200), (6000, 7), (8200, 40), (16384, 30)):
            check_backward_from_x_and_y(backward_case(rows, n, "float32", mode), "float32", mode, (n,))
    finally:
        N.SHARED_BWD.update(saved)


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_large_mean_is_stable(dtype):
    """Two-pass variance (and the Chan combination across blocks): an offset of 1e4 costs nothing (1e3 for the
    half types, whose output takes x * rstd - mean * rstd), with and without the affine."""
    half = dtype in ("float16", "bfloat16")
    tol = TOL[dtype] if half else 5e-3 if dtype == "float32" else 1e-9
    # the last: aligned, a staged 1024-thread row (half types) or pipelined parts (float32)
    for n in (300, 5000, 3 * fwd_threads(dtype) * rw.fwd_maxp(dtype) * rw.vec(dtype) + 5,
              8 * fwd_threads(dtype) * rw.fwd_maxp(dtype)):
        x, xv = make((4, n), dtype, 1.0, 1e3 if half else 1e4)
        y, _, _ = norm_forward_impl(x, None, None, 1e-5, "layer_norm")
        assert rel_err(y, ref_forward(xv, None, None, 1e-5, "layer_norm")[0]) <= tol, (dtype, n)
        w, b, wv, bv = affine(n, dtype, "layer_norm")
        y, _, _ = norm_forward_impl(x, w, b, 1e-5, "layer_norm")
        assert rel_err(y, ref_forward(xv, wv, bv, 1e-5, "layer_norm")[0]) <= tol, (dtype, n, "affine")


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_backward_large_mean_is_stable(dtype):
    """The backward's xhat from x (a half type's as x * rstd - mean * rstd, FMAs) and its centred sums under an offset
    of 1e4 (1e3 for the half types): short, block, staged and long rows, and for half types on compute capability
    9.0 norm_bwd_ring (32768). float32's bound is the forward's: the saved float32 mean itself is ~1e-3 off."""
    half = dtype in ("float16", "bfloat16")
    tol = 3 * TOL[dtype] if half else 5e-3 if dtype == "float32" else 1e-9
    staged = 3 * bwd_threads(dtype) * bwd_maxp(dtype) * rw.vec(dtype) + 5
    for n in (300, 4096, 8192, staged) + ((32768,) if half else ()):
        c = backward_case(64, n, dtype, "layer_norm", 1.0, 1e3 if half else 1e4)
        rdx, rdw, rdb = c["ref"]
        dx, dw, db = norm_backward_impl(c["dy"], c["x"], c["w"], c["b"], c["mean"], c["rstd"], "layer_norm")
        assert dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, "layer_norm") <= tol, (dtype, n)
        assert rel_err(dw, rdw) <= tol and rel_err(db, rdb) <= tol, (dtype, n)


@gpu
@pytest.mark.parametrize("dtype", ALL)
def test_layer_norm_shifted_sums_fall_back_to_two_pass(dtype):
    """The one-reduction variance uses sums shifted by the row's first element; rows whose first element
    is far from the mean (an outlier, a constant offset elsewhere) take the exact second pass; also aligned
    block rows (4096, 8192: the ROW_BLOCK instances), pipelined parts (float32 32768), rows with an outlier every
    128 elements (row 6) and with steps every 128 (row 7)."""
    for n in (5, 300, 4097, 4096, 8192, 3 * fwd_threads(dtype) * rw.fwd_maxp(dtype) * rw.vec(dtype) + 5,
              8 * fwd_threads(dtype) * rw.fwd_maxp(dtype)):
        host = rng().standard_normal((8, n))
        host[0, 0] = 1e3                      # outlier first: all of the variance in one element
        host[1, 1:] += 50.0                   # first element 50 standard deviations below the rest
        host[2, 0] = np.nan                   # NaN first: propagates
        host[3, n // 2] = np.inf              # inf elsewhere: NaN row like torch
        host[6, ::128] = 1e3                  # every warp's first element (a multiple of 128) an outlier
        host[7] += np.arange(n) // 128 * 10.0  # steps between the warps
        x = cupy_array(host, dtype)
        xv = rounded(host, dtype)
        y, mean, rstd = norm_forward_impl(x, None, None, 1e-5, "layer_norm")
        want = ref_forward(xv, None, None, 1e-5, "layer_norm")[0]
        got = to_f64(y)
        for r in (0, 1, 4, 5, 6, 7):
            assert rel_err(got[r], want[r]) <= TOL[dtype], (n, r)
        assert np.isnan(got[2]).all() and np.isnan(got[3]).all(), n


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("staged", [True, False])
def test_backward_short_groups(mode, staged, monkeypatch):
    """The backward instances compiled for their group (norm.SHORT_BWD), each sub-warp G full and part-filled,
    and a block a row (ROW_BLOCK, below norm_bwd_shared's lengths), from x and from the output, over
    301 and 4001 rows (persistent grids: groups with one row more than others, and several rows a group);
    with the groups' next rows staged where norm.stage_short_bwd says, and with none staged."""
    from cupy_kernels.ops import norm as N

    monkeypatch.setitem(N.STAGE_SHORT_BWD, "on", staged)
    staged_cases = 0
    for dtype, packs in N.SHORT_BWD.items():
        V = rw.vec(dtype)
        P = bwd_maxp(dtype, packs)
        for G, n in group_lengths(V, P, 1000):
            p = rw.plan(301, n, dtype, P, bwd_threads(dtype, packs), SMS, persistent=True)
            assert rw.short_group(p, dtype, 1) == G and (p.group == G or p.path == "block"), (G, n, p)
            staged_cases += N.stage_short_bwd(dtype, mode, G, rw.whole_rows(p, dtype, P))
            for rows in (301, 4001):
                check_backward_from_x_and_y(backward_case(rows, n, dtype, mode), dtype, mode, (G, n, rows))
    assert (staged_cases > 0) == staged


@gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_staged_short_rows(mode):
    """Sub-warp rows that stage the group's next row (norm.stage_short_bwd backward, norm.STAGE_SHORT_FWD forward),
    whole and part-filled, over enough rows that every group takes several."""
    from cupy_kernels.ops import norm as N

    cases = 0
    for dtype, packs in N.SHORT_BWD.items():
        V, P = rw.vec(dtype), bwd_maxp(dtype, packs)
        for G in rw.SHORT_GROUPS:
            for n, full in ((G * P * V, True), ((G // 2) * P * V + V, False)):
                if G > 1 and N.stage_short_bwd(dtype, mode, G, full):
                    cases += 1
                    check_backward_from_x_and_y(backward_case(many_rows(G, SMS), n, dtype, mode), dtype, mode, (G, n))
    for dtype in N.STAGE_SHORT_FWD["dtypes"]:
        V = rw.vec(dtype)
        for G in N.STAGE_SHORT_FWD["groups"]:
            for n in (G * rw.fwd_maxp(dtype) * V, (G // 2) * rw.fwd_maxp(dtype) * V + V):
                cases += 1
                x, xv = make((many_rows(G, SMS), n), dtype, 2.0, 0.5)
                w, b, wv, bv = affine(n, dtype, mode)
                want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
                y, _, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
                assert rel_err(y, want) <= TOL[dtype] and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, (G, n)
    assert cases >= 4


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_backward_every_path(mode, dtype):
    for n in boundary_lengths(dtype, "bwd"):
        c = backward_case(5 if n > 4096 else 67, n, dtype, mode)
        rdx, rdw, rdb = c["ref"]
        tol = 3 * TOL[dtype]
        for variant in ("auto", "split", "exchange", "counter"):  # long rows: 2-4
            dx, dw, db = norm_backward_impl(c["dy"], c["x"], c["w"], c["b"], c["mean"], c["rstd"], mode,
                                            variant=variant)
            assert dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, mode) <= tol, (n, variant)
            assert rel_err(dw, rdw) <= tol, (n, variant)
            if mode == "layer_norm":
                assert rel_err(db, rdb) <= tol, (n, variant)
            else:
                assert db is None


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_inplace_forward_and_backward_from_output(mode, dtype):
    for n in (3, 300, 4097, 3 * bwd_threads(dtype) * bwd_maxp(dtype) * rw.vec(dtype) + 5):
        x, xv = make((9, n), dtype, 2.0, 0.5)
        w, b, wv, bv = affine(n, dtype, mode)
        dy, dyv = make((9, n), dtype)
        y, mean, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
        ref_grads = norm_backward_impl(dy, x, w, b, mean, rstd, mode)
        y2, _, rstd2 = norm_forward_impl(x, w, b, 1e-5, mode, inplace=True)
        assert y2 is x
        np.testing.assert_array_equal(to_f64(x), to_f64(y))
        grads = norm_backward_impl(dy, x, w, b, None, rstd2, mode, from_output=True)
        rdx, rdw, rdb = ref_backward(xv, wv, bv, dyv, 1e-5, mode)
        # The recomputed normalised input carries the output's rounding: a looser bound for half types.
        tol = 3 * TOL[dtype] if dtype in ("float32", "float64") else 6e-2
        assert dx_err(grads[0], rdx, xv, wv, dyv, 1e-5, mode) <= tol, n
        for got, want in zip(grads[1:], (rdw, rdb)):
            if want is not None and got is not None:
                assert rel_err(got, want) <= tol, n
        assert dx_err(grads[0], to_f64(ref_grads[0]), xv, wv, dyv, 1e-5, mode) <= tol


@gpu
@pytest.mark.parametrize("dtype, shape", [("float32", (3000, 700)), ("bfloat16", (3000, 2048)),
                                          ("float16", (300, 32768))])
def test_dweight_is_deterministic(dtype, shape):
    """The register forms (column_sum), norm_bwd_shared (its in-kernel column sums, one CTA or a cluster per row)
    and norm_bwd_ring (32768 columns on sm_90: clusters of 4): bit-identical dweight / dbias from run to run."""
    n = shape[1]
    x, _ = make(shape, dtype)
    w, b, _, _ = affine(n, dtype, "layer_norm")
    dy, _ = make(shape, dtype)
    _, mean, rstd = norm_forward_impl(x, w, b, 1e-5, "layer_norm")
    first = [to_f64(a) for a in norm_backward_impl(dy, x, w, b, mean, rstd)]
    for _ in range(3):
        again = [to_f64(a) for a in norm_backward_impl(dy, x, w, b, mean, rstd)]
        for a, c in zip(first, again):
            np.testing.assert_array_equal(a, c)


@gpu
@pytest.mark.parametrize("variant", ["block", "scalar", "split", "exchange", "counter"])
def test_ladder_variants(variant):
    for n in (1, 33, 1000, 4096, 20000):
        x, xv = make((9, n), "float32")
        w, b, wv, bv = affine(n, "float32", "layer_norm")
        y, mean, rstd = norm_forward_impl(x, w, b, 1e-5, "layer_norm", variant=variant)
        assert rel_err(y, ref_forward(xv, wv, bv, 1e-5, "layer_norm")[0]) <= 1e-5
        dy, dyv = make((9, n), "float32")
        dx, dw, db = norm_backward_impl(dy, x, w, b, mean, rstd, variant=variant)
        rdx, rdw, rdb = ref_backward(xv, wv, bv, dyv, 1e-5, "layer_norm")
        assert dx_err(dx, rdx, xv, wv, dyv, 1e-5, "layer_norm") <= 3e-5, n
        assert rel_err(dw, rdw) <= 3e-5 and rel_err(db, rdb) <= 3e-5, n


@gpu
def test_errors_leave_x_untouched():
    import cupy

    x = cupy.asarray(rng().standard_normal((8, 6)), dtype=cupy.float32)
    before = x.copy()
    w = cupy.ones(6, cupy.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        ck.layer_norm_(x[:, ::2])
    with pytest.raises(ValueError, match=r"weight must have shape \(6,\)"):
        ck.layer_norm_(x, cupy.ones(5, cupy.float32))
    with pytest.raises(TypeError, match="weight has dtype float16"):
        ck.layer_norm_(x, w.astype(cupy.float16))
    with pytest.raises(TypeError, match="bias has dtype float64"):
        ck.layer_norm_(x, w, w.astype(cupy.float64))
    with pytest.raises(TypeError, match="dtype int32"):
        ck.rms_norm_(cupy.ones((3, 3), cupy.int32))
    with pytest.raises(TypeError, match="rstd"):
        norm_backward_impl(x, x, w, None, None, None, "rms_norm")
    assert (x == before).all()


# ---- torch -------------------------------------------------------------------------------------


def tensor(shape, dtype, requires_grad=False, scale=1.0, shift=0.0):
    t = (torch.randn(*shape, device="cuda", dtype=torch.float64) * scale + shift).to(getattr(torch, dtype))
    return t.requires_grad_(requires_grad)


def weight(n, dtype):
    w = (torch.rand(n, device="cuda", dtype=torch.float64) + 0.5) * (torch.randint(0, 2, (n,), device="cuda") * 2 - 1)
    return w.to(getattr(torch, dtype)).requires_grad_(True)


@torch_gpu
@pytest.mark.parametrize("dtype", ALL)
def test_torch_matches_torch(dtype):
    F = torch.nn.functional
    for shape in ((3, 1), (65, 130), (4, 5000), (2, 3 * fwd_threads(dtype) * rw.fwd_maxp(dtype) * rw.vec(dtype) + 3)):
        n = shape[-1]
        for rms in (False, True):
            x = tensor(shape, dtype, True, 2.0, 0.5)
            w = weight(n, dtype)
            b = tensor((n,), dtype, True)
            leaves = [x, w] if rms else [x, w, b]
            dbl = [t.detach().double().requires_grad_(True) for t in leaves]
            if rms:
                y = ck.rms_norm(x, w, 1e-6)
                want = F.rms_norm(dbl[0], (n,), dbl[1], 1e-6)
            else:
                y = ck.layer_norm(x, w, b, 1e-5)
                want = F.layer_norm(dbl[0], (n,), dbl[1], dbl[2], 1e-5)
            assert rel_err(y, want.detach().cpu().numpy()) <= TOL[dtype], (shape, rms)
            dy = tensor(shape, dtype)
            y.backward(dy)
            want.backward(dy.double())
            xv, wv, dyv = (t.detach().double().cpu().numpy() for t in (dbl[0], dbl[1], dy))
            mode = "rms_norm" if rms else "layer_norm"
            assert dx_err(x.grad, dbl[0].grad.cpu().numpy(), xv, wv, dyv, 1e-6 if rms else 1e-5, mode) \
                <= 3 * TOL[dtype], (shape, rms)
            for got, ref in zip(leaves[1:], dbl[1:]):
                assert rel_err(got.grad, ref.grad.cpu().numpy()) <= 3 * TOL[dtype], (shape, rms)


@torch_gpu
def test_torch_gradcheck():
    for n in (7, 1100):  # 1100 float64 elements per row take the multi-block backward
        x = torch.randn(2, n, device="cuda", dtype=torch.float64, requires_grad=True)
        w = weight(n, "float64")
        b = torch.randn(n, device="cuda", dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda *t: ck.layer_norm(*t, eps=1e-5), (x, w, b), fast_mode=True)
        assert torch.autograd.gradcheck(lambda *t: ck.rms_norm(*t, eps=1e-6), (x, w), fast_mode=True)
        # in place: gradients through a clone of x (x itself is a leaf)
        assert torch.autograd.gradcheck(lambda a, c, d: ck.layer_norm_(a.clone(), c, d), (x, w, b), fast_mode=True)
        assert torch.autograd.gradcheck(lambda a, c: ck.rms_norm_(a.clone(), c), (x, w), fast_mode=True)


@torch_gpu
@pytest.mark.parametrize("cls", ["LayerNorm", "RMSNorm"])
def test_modules_inplace_match_out_of_place_and_torch(cls):
    from cupy_kernels import nn as cknn

    torch.manual_seed(0)

    def model(norm):
        return torch.nn.Sequential(torch.nn.Linear(64, 300), norm, torch.nn.GELU(), torch.nn.Linear(300, 8)).cuda()

    kw = {"eps": 1e-6} if cls == "RMSNorm" else {}
    ref = model(getattr(torch.nn, cls)(300, **kw))
    ours = [model(getattr(cknn, cls)(300, inplace=ip, **kw)) for ip in (False, True)]
    with torch.no_grad():
        ref[1].weight.uniform_(0.5, 1.5)
        if getattr(ref[1], "bias", None) is not None:
            ref[1].bias.normal_()
    for m in ours:
        m.load_state_dict(ref.state_dict())
    x = torch.randn(97, 64, device="cuda")
    outs, grads = [], []
    for m in [ref] + ours:
        m.zero_grad()
        out = m(x)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in m.parameters()])
    for o, g in zip(outs[1:], grads[1:]):
        assert torch.allclose(o, outs[0], rtol=1e-4, atol=1e-5)
        for a, c in zip(g, grads[0]):
            assert torch.allclose(a, c, rtol=1e-3, atol=1e-4)


@torch_gpu
def test_torch_inplace_rejections_leave_x_untouched():
    x = tensor((4, 8), "float32", False, 1.0).requires_grad_(True)
    h = x * 1.0  # a non-leaf that requires grad
    w = weight(8, "float32")
    before = h.detach().clone()
    with torch.no_grad():
        wz = w.detach().clone()
        wz[3] = 0
    wz.requires_grad_(True)
    with pytest.raises(ValueError, match="exactly zero"):
        ck.layer_norm_(h, wz)
    with pytest.raises(ValueError, match="exactly zero"):
        ck.rms_norm_(h, wz)
    with pytest.raises(RuntimeError, match="leaf"):
        ck.layer_norm_(x, w)
    with pytest.raises(ValueError, match="C-contiguous"):
        ck.layer_norm_(h.t(), None)
    with pytest.raises(TypeError, match="weight has dtype"):
        ck.layer_norm_(h, w.double())
    with pytest.raises(ValueError, match="weight must have shape"):
        ck.rms_norm_(h, weight(7, "float32"))
    assert torch.equal(h.detach(), before)
    assert torch.equal(x.detach(), before)


@torch_gpu
def test_torch_compile():
    def f(t, w, b):
        return (ck.layer_norm(t, w, b) * ck.rms_norm(t * 0.5, w)).sum()

    x = tensor((33, 1000), "float32", True)
    w, b = weight(1000, "float32"), tensor((1000,), "float32", True)
    args2 = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
    out = torch.compile(f, fullgraph=True)(x, w, b)
    out.backward()
    ref = f(*args2)
    ref.backward()
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-4)
    for a, c in zip((x, w, b), args2):
        assert torch.allclose(a.grad, c.grad, rtol=1e-4, atol=1e-4)


@torch_gpu
def test_inplace_peak_memory():
    """layer_norm_ / rms_norm_ on 16384 x 16384 float16 allocate within 1% of the input beyond it."""
    x = tensor((16384, 16384), "float16")
    w, b = torch.ones(16384, device="cuda", dtype=torch.float16), torch.zeros(16384, device="cuda", dtype=torch.float16)
    for fn, args in ((ck.layer_norm_, (w, b)), (ck.rms_norm_, (w,))):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(x, *args)
        torch.cuda.synchronize()
        assert torch.cuda.max_memory_allocated() - base <= 0.01 * x.nbytes
    row = x[0].float()
    assert abs(float(row.square().mean()) - 1.0) < 1e-2  # normalised in place


@torch_gpu
def test_module_multi_dim_shape_and_no_affine():
    from cupy_kernels import nn as cknn

    x = torch.randn(5, 3, 4, 8, device="cuda")
    for affine in (True, False):
        ref = torch.nn.LayerNorm((4, 8), elementwise_affine=affine).cuda()
        for inplace in (False, True):
            ours = cknn.LayerNorm((4, 8), elementwise_affine=affine, inplace=inplace).cuda()
            if affine:
                with torch.no_grad():
                    ref.weight.uniform_(0.5, 1.5)
                    ref.bias.normal_()
                ours.load_state_dict(ref.state_dict())
            xi = x.clone()
            out = ours(xi)
            assert out.shape == x.shape
            assert torch.allclose(out, ref(x), rtol=1e-5, atol=1e-5), (affine, inplace)
            assert (out is xi) == inplace
    with pytest.raises(ValueError, match="trailing shape"):
        cknn.RMSNorm(7).cuda()(x)
