"""layer_norm / rms_norm, their in-place forms and backward (dx, dweight, dbias) against float64
references (GPU), every dispatch path at its boundaries; on the CPU: validation, the references, which kernel
instance each row length takes (exactly the declared ones), and the torch wrappers' autograd over reference
impls."""
import re

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import (FLOATS, HAS_TORCH_CUDA, TOL, close_everywhere, cupy_array, gpu, group_lengths, kernels_of,
                      many_rows, rel_err, rng, rounded, to_f64, torch, torch_gpu)
from oracle import norm_backward_ref as ref_backward  # float64 (dx, dweight, dbias)
from oracle import norm_ref as ref_forward  # float64 (y, xhat, rstd)
from cupy_kernels._runtime.tuning import tuned
from cupy_kernels.ops import _rowwise as rw
from cupy_kernels.ops import norm as N
from cupy_kernels.ops.norm import bwd_maxp, bwd_threads, fwd_threads, norm_backward_impl, norm_forward_impl
from planning import SMS, Recorder, check_launch, fake_device

ALL = FLOATS + ("float64",)
MODES = ("layer_norm", "rms_norm")


# ---- float64 references ------------------------------------------------------------------------


def close_rows(got, want, x, rstd, w, dtype, mode):
    """close_everywhere per element, and for layer_norm each row's rounding of x - mean as rstd magnifies it: a short
    row whose values nearly agree (n = 2, x0 ~ x1 among 20011 rows) has a variance far below eps, rstd near
    1 / sqrt(eps), and float32's exact two-pass result then misses float64's by ~ulp(|x|) * rstd, past a tolerance
    relative to y (in 12% of 20011-row float32 draws: 7.6e-5 against 4e-5)."""
    scale = np.abs(x).max(-1, keepdims=True) * rstd * (1.0 if w is None else np.abs(w).max())
    return close_everywhere(got, want, dtype, scale=scale if mode == "layer_norm" else 0.0)


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
    sub, block = 32 * min(rw.TUNING.target_packs, P) * V, threads * P * V
    return sorted({1, 2, 3, V + 1, 127, 1000, 4097, sub, sub + 1, block, block + 1, block + V, 3 * block + 5})


def used_kernels(call):
    """(call's result, the kernel instances its plan launches, of every norm source)."""
    return kernels_of(N.SOURCES, call)


# ---- CPU: dispatch -------------------------------------------------------------------------------


def test_boundaries_cover_every_path():
    for dtype in ALL:
        for kind, persistent in (("fwd", False), ("bwd", True)):
            paths = {rw.plan(4, n, dtype, maxp_of(kind, dtype), threads_of(kind, dtype), SMS, persistent).path
                     for n in boundary_lengths(dtype, kind)}
            assert paths == {"subwarp", "block", "multiblock"}, (dtype, kind)


def test_names_read_as_forms():
    """Instance names spell their form (common/norm.cuh), not runs of positional flags."""
    assert N.fwd_name("float16", "layer_norm", 8, full=True) == "norm_fwd<half, ANY_MODE, 8, FULL_PACKS>"
    assert N.fwd_name("float32", "rms_norm", rw.ROW_BLOCK, staged=True, full=True) == \
        "norm_fwd<float, ANY_MODE, ROW_BLOCK, STAGED | FULL_PACKS>"
    assert N.fwd_name("float64", "layer_norm") == "norm_fwd<double, ANY_MODE, ANY_GROUP, PLAIN>"
    assert N.fwd_name("float16", "layer_norm", shifted=True) == "norm_fwd<half, LAYER, ANY_GROUP, SHIFTED>"
    assert N.fwd_parts_name("float32", "rms_norm") == f"norm_fwd_parts<float, RMS, {rw.TUNING.parts_packs_norm}, PLAIN>"
    assert N.bwd_name("float16", "layer_norm", True, 1, staged=True, shifted=True) == \
        "norm_bwd<half, LAYER, FROM_Y, 1, ANY_GROUP, STAGED | SHIFTED>"
    assert N.bwd_name("bfloat16", "layer_norm", False, 2, no_dbias=True) == \
        "norm_bwd<bfloat16, LAYER, FROM_X, 2, ANY_GROUP, NO_DBIAS>"
    assert N.bwd_name("float32", "rms_norm", True, 2, 4) == "norm_bwd<float, ANY_MODE, ANY_SOURCE, 2, 4, PLAIN>"
    assert N.shared_name("float16", "rms_norm", False, 1, True, True, True) == \
        "norm_bwd_shared<half, RMS, FROM_X, 1, STAGED | FULL_PACKS | WARP_ROWS>"
    assert N.ring_name("bfloat16", "layer_norm", True, 4, 2) == "norm_bwd_ring<bfloat16, ANY_MODE, ANY_SOURCE, 4, 2>"
    assert N.ring_name("float16", "layer_norm", False, 4, 1) == "norm_bwd_ring<half, ANY_MODE, FROM_X, 4, 1>"
    assert N.ring_name("float16", "rms_norm", True, 4, 1) == "norm_bwd_ring<half, RMS, FROM_Y, 4, 1>"
    for src in N.SOURCES:
        assert len(src.names) == len(set(src.names)) and not any("true" in n or "false" in n for n in src.names)


def test_instance_count():
    """The instances the dispatch takes (test_dispatch_takes_exactly_the_declared_instances), and no more: 795 before
    the forms nothing took were retired, 609 before most took the op (mode, source) as a run-time argument."""
    counts = {s.filename: len(s.names) for s in N.SOURCES}
    assert sum(counts.values()) <= 303, counts
    assert rw.ZERO_WORDS in N.FWD.names and rw.ZERO_WORDS in N.BWD.names  # both launch pipelined kernels


def _sweep_lengths():
    """Row lengths that reach every form: all up to 1100, then around multiples of 128 (the cluster and ring
    lengths, full or not, shifted or not), the long rows and rows too long for one launch's blocks."""
    ns = set(range(1, 1101))
    for k in range(9, 550):
        ns |= {128 * k, 128 * k + 1, 128 * k + 2, 128 * k + 4, 128 * k + 8}
    return sorted(ns | {131072, 131076, 262144, 3_000_000, 5_000_000})


def _forward_kernels(dtype, mode, n, rows=3000, aligns=(256,) * 6, affine=(True, True)):
    b = Recorder(0, aligns)
    xb, yb, wb, bb, mb, rb = b.buffers
    N.plan_forward(b, N.FwdArgs(xb, yb, wb if affine[0] else None, bb if affine[1] and mode == "layer_norm" else None,
                                mb if mode == "layer_norm" else None, rb, rows, n, dtype, mode, 1e-5))
    return b.launches


def _backward_kernels(dtype, mode, from_output, n, rows=3000, aligns=(256,) * 9, affine=(True, True),
                      need=(True, True)):
    b = Recorder(0, aligns)
    sb, dyb, dxb, wb, bb, mb, rb, dwb, dbb = b.buffers
    w = wb if affine[0] else None
    bias = bb if affine[1] and mode == "layer_norm" else None
    dw = dwb if w is not None and need[0] else None
    db = dbb if bias is not None and need[1] else None
    N.plan_backward(b, N.BwdArgs(sb, dyb, dxb, w, bias, mb if mode == "layer_norm" and not from_output else None, rb,
                                 dw, db, rows, n, dtype, mode, from_output))
    return b.launches


def _sweep(dtypes=ALL, lengths=None):
    """Every kernel the forward and backward plans take over the lengths (every dtype, mode, source, device kind;
    aligned arrays, then skewed ones and absent affine / gradients on a sample): name -> a case taking it."""
    taken = {}
    lengths = lengths or _sweep_lengths()
    sample = [1, 3, 7, 33, 100, 1000, 1024, 4096, 8192, 10000, 40000]
    for dtype in dtypes:
        skew = rw.ITEMSIZE[dtype]
        for mode in MODES:
            for n in lengths:
                rows = 2 if n > 100000 else 3000
                for k in _forward_kernels(dtype, mode, n, rows):
                    taken.setdefault(k, (dtype, mode, n))
            for n in sample:
                for aligns in ((skew,) + (256,) * 5, (256, 256, skew, 256, 256, 256)):
                    for k in _forward_kernels(dtype, mode, n, 3000, aligns):
                        taken.setdefault(k, (dtype, mode, n, aligns))
                for k in _forward_kernels(dtype, mode, n, 3000, affine=(False, False)):
                    taken.setdefault(k, (dtype, mode, n, "no affine"))
    return taken


def _sweep_backward(cc, dtypes=ALL, lengths=None):
    taken = {}
    lengths = lengths or _sweep_lengths()
    sample = [1, 3, 7, 33, 100, 1000, 1024, 4096, 8192, 10000, 40000]
    for dtype in dtypes:
        skew = rw.ITEMSIZE[dtype]
        for mode in MODES:
            for f in (False, True):
                for n in lengths:
                    rows = 2 if n > 100000 else 3000
                    for k in _backward_kernels(dtype, mode, f, n, rows):
                        taken.setdefault(k, (dtype, mode, f, n))
                for n in sample:
                    for k in _backward_kernels(dtype, mode, f, n, 3000, (skew,) + (256,) * 8):
                        taken.setdefault(k, (dtype, mode, f, n, "skewed"))
                    for affine, need in (((True, False), (True, True)), ((True, True), (True, False)),
                                         ((True, True), (False, True)), ((False, False), (True, True))):
                        for k in _backward_kernels(dtype, mode, f, n, 3000, (skew,) + (256,) * 8, affine, need):
                            taken.setdefault(k, (dtype, mode, f, n, affine, need))
    return taken


def test_dispatch_takes_exactly_the_declared_instances(monkeypatch):
    """Over every dtype, mode, source (x or y), device kind (sm_80, sm_90), alignment and row length class, each
    kernel the planners launch is declared, and each declared instance is launched by some row: nothing compiled
    that production cannot take (the forms that only ladder variants and probes took were retired). Each launch
    passes its kernel's parameters (check_launch)."""
    taken, calls = {}, []
    monkeypatch.setattr(Recorder, "calls", calls)  # and each launch's arguments, checked below
    for cc in (80, 90):
        with fake_device(monkeypatch, cc, N, N._reduce):
            if cc == 80:
                taken.update(_sweep())
            taken.update(_sweep_backward(cc))
    taken = {k: v for k, v in taken.items() if k not in N._reduce.SOURCE.names}  # (dbias by a column sum of dy)
    declared = {name for s in N.SOURCES for name in s.names}
    assert set(taken) <= declared, sorted(set(taken) - declared)
    # column_sum's (Y, CW, TW) follow the partial rows' count and the SM count (occupancy, device): all declared
    untaken = {k for k in declared - set(taken) if not k.startswith("column_sum<")}
    assert not untaken, sorted(untaken)
    assert _check_calls(calls) == {k for k in taken if k in declared}  # one argument a parameter, of its type


def _assert_sweep_declared(monkeypatch):
    """A sample of the sweep's lengths (every one to 300, then the group, block and cluster boundaries) plans to
    declared instances only, on both device kinds."""
    lengths = [n for n in _sweep_lengths() if n <= 300 or n % 64 in (0, 1, 8) and n <= 1100 or n % 1024 in (0, 1, 8)]
    declared = {name for s in N.SOURCES for name in s.names} | set(N._reduce.SOURCE.names)
    for cc in (80, 90):
        with fake_device(monkeypatch, cc, N, N._reduce):
            got = set(_sweep_backward(cc, lengths=lengths)) | (set(_sweep(lengths=lengths)) if cc == 80 else set())
            assert got <= declared, sorted(got - declared)


def _check_calls(calls):
    """check_launch on the first launch of each norm instance among `calls` (kernel, args, block); the names checked.
    The unstaged forward rows of a compile-time sub-warp group come in blocks of 128 threads, their launch bound
    (NormFwdBounds)."""
    seen = {}
    for kernel, args, block in calls:
        if kernel.source in N.SOURCES and seen.setdefault(kernel.name, args) is args:
            check_launch(kernel.source.filename, kernel.name, args)
        form = re.fullmatch(r"norm_fwd<\w+, \w+, (\d+), ([A-Z_ |]+)>", kernel.name)
        if form and int(form.group(1)) <= 32 and "STAGED" not in form.group(2):
            assert block == 128, (kernel.name, block)
    return set(seen)


def test_long_rows_over_two_launches_pass_the_kernel_signatures(monkeypatch):
    """The launches of rows over several blocks that are not pipelined (one launch exchanging, or two: the phases)
    pass their kernels' parameters as test_dispatch_takes_exactly_the_declared_instances checks the rest."""
    lengths = [n for n in _sweep_lengths() if n % 1024 in (0, 1, 8) and n > 4096]
    calls = []
    monkeypatch.setattr(Recorder, "calls", calls)
    for long_rows in ("exchange", "split"):
        with tuned(rw, pipelined_fwd=False, pipelined_bwd=False, long_rows=long_rows):
            with fake_device(monkeypatch, 80, N, N._reduce):
                _sweep_backward(80, lengths=lengths)
                _sweep(lengths=lengths)
    assert {"norm_fwd", "norm_bwd"} <= {name.split("<")[0] for name in _check_calls(calls)}


@pytest.mark.parametrize("changes", [dict(stage_fwd=False), dict(full_parts=False), dict(tiled_max_n=0),
                                     dict(db_by_reduce=False), dict(column_sum_after=False),
                                     dict(two_pack_from=0), dict(two_pack_from=1 << 40),
                                     dict(warps_from=0, warps_from_float32=0, warps_threads=512)])
def test_tuning_the_tests_use_stays_declared(monkeypatch, changes):
    """The TUNING overrides the GPU tests (and the bench's ladder rows) run under take declared instances only."""
    with tuned(N, **changes):
        _assert_sweep_declared(monkeypatch)


@pytest.mark.parametrize("changes", [dict(pipelined_fwd=False, pipelined_bwd=False),
                                     dict(pipelined_fwd=False, pipelined_bwd=False, long_rows="split"),
                                     dict(compiled_groups=False), dict(full_rows=False)])
def test_row_tuning_stays_declared(monkeypatch, changes):
    """_rowwise's overrides (the long rows' one-launch and two-launch forms, the run-time group, no FULL rows)
    take declared norm instances only."""
    with tuned(rw, **changes):
        _assert_sweep_declared(monkeypatch)


def test_ring_plans():
    """norm_bwd_ring takes rows of whole packs that split over a cluster of 2, 4 or 8 CTAs into 512-1024 packs a CTA
    (the fewest CTAs), a thread the most packs that leave 256 threads, and leaves one-CTA rows, float64 and compute
    capability 8.0 alone."""
    for n, dtype, want in ((32768, "bfloat16", (4, 256, 4)), (16384, "float16", (2, 256, 4)),
                           (24576, "bfloat16", (4, 384, 2)), (16384, "float32", (4, 256, 4)),
                           (65536, "bfloat16", (8, 256, 4)), (8704, "float16", (2, 544, 1))):
        cl, threads, pk, _ = N.ring_plan(n, dtype, 90)
        assert (cl, threads, pk) == want, (n, dtype)
    for n, dtype, cc in ((32768, "bfloat16", 80), (16384, "float64", 90), (16392, "float16", 90), (8192, "float16", 90),
                         (4096, "float32", 90), (65536, "float32", 90), (131072, "bfloat16", 90)):
        assert N.ring_plan(n, dtype, cc) is None, (n, dtype, cc)
    for dtype in N.SHARED_DTYPES:
        for n in range(rw.vec(dtype), 65537, rw.vec(dtype)):
            if plan := N.ring_plan(n, dtype, 90):
                cl, threads, pk, smem = plan
                assert cl > 1 and cl * pk * threads * rw.vec(dtype) == n
                assert smem == 2 * N.RING_STAGES * pk * threads * 16
                assert threads >= 256 and threads % 32 == 0 and pk * threads <= 1024
                for mode in MODES:
                    for f in (0, 1):
                        assert N.ring_name(dtype, mode, f, cl, pk) in N.CLUSTER.names, (dtype, n, mode)


def test_shared_plans_name_declared_kernels():
    """Every aligned row length norm_bwd_shared takes where the ring does not (up to 65536 elements, compute
    capability 8.0 and 9.0) names a declared kernel (an undeclared one fails only on the GPU); clusters of 8 load
    their rows straight into registers."""
    for dtype in N.SHARED_DTYPES:
        for n in range(rw.vec(dtype), 65537, rw.vec(dtype)):
            for mode in MODES:
                for cc in (80, 90):
                    if N.ring_plan(n, dtype, cc) or not (plan := N.shared_plan(n, dtype, mode, cc)):
                        continue
                    cl, _, _, _, _, stage, full, warps = plan
                    assert cl != 8 or not stage, (dtype, n)
                    for f in (0, 1):
                        assert N.shared_name(dtype, mode, f, cl, stage, full, warps) in N.CLUSTER.names, \
                            (dtype, n, mode, cc)


def test_group_lengths_take_their_group():
    """The rows the GPU tests give the compile-time groups plan to those groups (forward and backward)."""
    for dtype in rw.SHORT_DTYPES:
        V = rw.vec(dtype)
        for G, n in group_lengths(V, rw.TUNING.target_packs, 64 * rw.TUNING.target_packs * V):
            assert rw.short_group(rw.plan(301, n, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype), SMS), dtype, 1) == G
    for dtype, packs in N.BWD_GROUP_PACKS.items():
        V, P = rw.vec(dtype), bwd_maxp(dtype, packs)
        for G, n in group_lengths(V, P, 1000):
            p = rw.plan(301, n, dtype, P, bwd_threads(dtype, packs), SMS, persistent=True)
            assert rw.short_group(p, dtype, 1) == G, (dtype, G, n)


def test_full_rows_only_where_every_pack_is_whole():
    """The forward's FULL_PACKS instances (no pack count or bounds test) are planned exactly for rows where every
    thread of the compile-time group holds MAXP whole packs, the benchmark's power-of-two shapes among them, and are
    declared."""
    T = N.TUNING
    taken = set()
    for dtype in rw.SHORT_DTYPES:
        V, P = rw.vec(dtype), rw.fwd_maxp(dtype)
        for n in sorted({k * V for k in range(1, 4097, 37)} | {1 << k for k in range(13)} | {V << k for k in range(13)}
                        | {n - V for n in (V << k for k in range(3, 13))} | {33, 1000, 4097}):
            p = rw.plan(301, n, dtype, P, fwd_threads(dtype, n), SMS)
            stage = rw.stage_fwd(p, dtype, 1, T.stage_fwd_min_threads) or int(
                rw.stage_short(T.stage_short_fwd_groups, T.stage_short_fwd_dtypes, p, dtype, 1))
            g = rw.short_group(p, dtype, 1, staged=bool(stage))
            full = rw.full_rows(p, dtype, P, g, stage)
            whole = bool(g) and p.parts == 1 and p.group * P * V == n  # every thread: P packs, all inside the row
            assert full == (whole and rw.has_full(dtype, g, stage)), (dtype, n, stage, p)
            if g:
                assert N.fwd_name(dtype, "layer_norm", g, bool(stage), full) in N.FWD.names, (dtype, n, stage)
            if full:
                taken.add((dtype, n, stage))
            assert not rw.full_rows(p, dtype, P, 0, stage)  # the run-time group has none
    # the benchmark's forward shapes: 65536x128 f32 (staged groups of 8), 32768x1024 f16, 4096² f32 (unstaged), 1024x32768
    # bf16 (staged)
    assert {("float32", 128, 1), ("float16", 1024, 0), ("float32", 4096, 0), ("bfloat16", 32768, 1)} <= taken
    assert ("bfloat16", 8192, 0) not in taken  # unstaged half block rows: the FULL form spilled at 48 registers
    # the backward's compile-time groups (norm_bwd) have FULL_PACKS instances for every group a whole row fills
    for dtype, packs in N.BWD_GROUP_PACKS.items():
        V, P = rw.vec(dtype), bwd_maxp(dtype, packs)
        for G, n in group_lengths(V, P, 1000):
            p = rw.plan(301, n, dtype, P, bwd_threads(dtype, packs), SMS, persistent=True)
            whole = rw.whole_rows(p, dtype, P)
            assert whole == (n == G * P * V), (dtype, G, n)
            for mode in MODES:
                staged = N.stage_short_bwd(dtype, mode, G, whole)
                assert N.bwd_name(dtype, mode, 0, packs, G, staged, whole) in N.BWD.names, (dtype, G, n, mode)


@pytest.mark.parametrize("mode", MODES)
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


# ---- CPU: the torch wrappers over reference impls -----------------------------------------------
# torch_ops' autograd, custom ops and in-place rules run here on CPU tensors, with the kernels' impls replaced by
# float64 references of the same contract (fresh outputs, statistics in float32 / float64).


def _ref_forward_impl(x, weight=None, bias=None, eps=1e-5, mode="layer_norm", inplace=False, save_stats=True):
    xf = x.detach().double()
    if mode == "layer_norm":
        mean = xf.mean(-1)
        rstd = ((xf - mean[..., None]) ** 2).mean(-1).add(eps).rsqrt()
        xhat = (xf - mean[..., None]) * rstd[..., None]
    else:
        mean, rstd = None, (xf * xf).mean(-1).add(eps).rsqrt()
        xhat = xf * rstd[..., None]
    y = xhat * (1 if weight is None else weight.detach().double()) + (0 if bias is None else bias.detach().double())
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    if inplace:
        with torch.no_grad():
            x.copy_(y.to(x.dtype))
        y = x
    else:
        y = y.to(x.dtype)
    stats = (None if mean is None else mean.to(acc), rstd.to(acc)) if save_stats else (None, None)
    return y, stats[0] if mode == "layer_norm" else None, stats[1]


def _ref_backward_impl(dy, src, weight=None, bias=None, mean=None, rstd=None, mode="layer_norm", from_output=False,
                       need_dw=True, need_db=True):
    s, g, r = src.detach().double(), dy.detach().double(), rstd.double()[..., None]
    w = None if weight is None else weight.detach().double()
    if from_output:
        xhat = (s - (0 if bias is None else bias.detach().double())) / (1 if w is None else w)
    else:
        xhat = (s - (mean.double()[..., None] if mode == "layer_norm" else 0)) * r
    gw = g * (1 if w is None else w)
    # from the output, as the kernels: g * xhat = dy * (y - b), no division (a zero weight: NaN in its column only)
    b = 0 if bias is None else bias.detach().double()
    c2 = (g * (s - b) if from_output else gw * xhat).mean(-1, keepdim=True)
    c1 = gw.mean(-1, keepdim=True) if mode == "layer_norm" else 0
    dx = (r * (gw - c1 - xhat * c2)).to(src.dtype)
    lead = tuple(range(s.dim() - 1))
    dw = (g * xhat).sum(lead).to(src.dtype) if need_dw and weight is not None else None
    db = g.sum(lead).to(src.dtype) if need_db and bias is not None else None
    return dx, dw, db


@pytest.fixture
def reference_impls(monkeypatch):
    from cupy_kernels import torch_ops

    monkeypatch.setattr(torch_ops._norm, "norm_forward_impl", _ref_forward_impl)
    monkeypatch.setattr(torch_ops._norm, "norm_backward_impl", _ref_backward_impl)
    def check_inplace(op, x):
        if not x.is_contiguous():
            raise ValueError(f"{op}: x must be C-contiguous to be written in place")

    monkeypatch.setattr(torch_ops._norm, "check_inplace", check_inplace)
    return torch_ops


def _torch_reference(x, w, b, rms, eps):
    F = torch.nn.functional
    return F.rms_norm(x, x.shape[-1:], w, eps) if rms else F.layer_norm(x, x.shape[-1:], w, b, eps)


def _grads_of(fn, leaves, dy):
    out = fn()
    need = [t for t in leaves if t is not None and t.requires_grad]
    return out.detach(), torch.autograd.grad(out, need, dy, allow_unused=True) if need else ()


def _leaves(shape, dtype, which, rms, device="cpu"):
    """x, weight, bias (bias None for rms), requiring grad as `which` (a subset of "xwb") says."""
    n = shape[-1]
    # a spread across each row: rows of near-equal values make float32 statistics ill-conditioned (n = 2 with
    # |x0 - x1| ~ 1e-3 moves dx by 0.1%), and this test is about which gradients flow, not conditioning
    spread = torch.linspace(-2, 2, n, dtype=torch.float64, device=device)
    x = (spread + 0.5 * torch.randn(*shape, dtype=torch.float64, device=device)).to(dtype)
    w = (torch.rand(n, dtype=torch.float64, device=device) + 0.5).to(dtype)
    b = None if rms else torch.randn(n, dtype=torch.float64, device=device).to(dtype)
    return [t if t is None else t.requires_grad_(k in which) for t, k in zip((x, w, b), "xwb")]


def _gradients(shape, dtype, dy_form, device="cpu"):
    if dy_form == "expanded":  # (a sum's gradient: stride 0)
        return torch.ones((), dtype=dtype, device=device).expand(*shape)
    dy = torch.randn(*shape, dtype=torch.float64, device=device).to(dtype)
    return dy.t().contiguous().t() if dy_form == "transposed" and len(shape) == 2 else dy


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("which", ["x", "w", "b", "xw", "xb", "wb", "xwb"])
@pytest.mark.parametrize("dy_form", ["dense", "expanded", "transposed"])
def test_torch_autograd_every_input_subset(reference_impls, rms, which, dy_form):
    """Out of place and in place, eager (autograd.Function) and through the custom ops directly: the gradients of each
    subset of (x, weight, bias) requiring grad, for dense, expanded and non-contiguous output gradients, match torch's
    own ops; every custom op's outputs are fresh (torch checks none aliases an input or another output)."""
    ops = reference_impls
    if rms and "b" in which:
        pytest.skip("rms_norm takes no bias")
    for shape in ((64, 24), (1, 2), (3, 1)):
        eps = 1e-5
        x, w, b = _leaves(shape, torch.float32, which, rms)
        dy = _gradients(shape, torch.float32, dy_form)
        ref_leaves = [t if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in (x, w, b)]
        want, want_grads = _grads_of(lambda: _torch_reference(*ref_leaves, rms, eps), ref_leaves, dy.double())
        call = ops.rms_norm if rms else ops.layer_norm
        args = (x, w) if rms else (x, w, b)
        got, grads = _grads_of(lambda: call(*args, eps=eps), (x, w, b), dy)
        assert torch.allclose(got.double(), want, atol=1e-5), (shape, which)
        for g, r in zip(grads, want_grads):
            assert torch.allclose(g.double(), r, rtol=1e-4, atol=1e-4), (shape, which, dy_form)
        # in place, on a non-leaf x (x * 2: its gradient flows to x)
        inplace = ops.rms_norm_ if rms else ops.layer_norm_
        ref2 = [t if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in (x, w, b)]
        want2, want_grads2 = _grads_of(lambda: _torch_reference(ref2[0] * 2, *ref2[1:], rms, eps), ref2, dy.double())
        got2, grads2 = _grads_of(lambda: inplace(x * 2, *args[1:], eps=eps), (x, w, b), dy)
        assert torch.allclose(got2.double(), want2, atol=1e-5), (shape, which, "in place")
        for g, r in zip(grads2, want_grads2):
            assert torch.allclose(g.double(), r, rtol=1e-4, atol=1e-4), (shape, which, dy_form, "in place")
        # the custom ops as torch.compile calls them: fresh outputs whatever gradients are wanted
        xd, wd, bd = (t if t is None else t.detach() for t in (x, w, b))
        y, mean, rstd = ops._norm_op(xd, wd, bd, eps, rms)
        for need_dw in (False, True):
            for need_db in (False, True):
                for from_output in (False, True):
                    outs = ops._norm_bwd_op(dy, y if from_output else xd, wd, bd, None if from_output else mean,
                                            rstd, rms, from_output, need_dw, need_db)
                    assert len({o.untyped_storage()._cdata for o in outs}) == 3
        rstd2 = ops._norm_inplace_op(xd.clone(), wd, bd, eps, rms)
        assert rstd2.shape == x.shape[:-1]


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_torch_inplace_under_autograd_makes_no_check_of_the_weight(reference_impls):
    """layer_norm_ / rms_norm_ under autograd with a zero weight entry run (no host-device sync to look for one): the
    backward's x-hat in that column is 0 / 0, NaN, as a division by zero gives."""
    ops = reference_impls
    x = torch.randn(8, 6, requires_grad=True)
    w = torch.rand(6) + 0.5
    w[3] = 0
    w.requires_grad_(True)
    for rms in (False, True):
        y = (ops.rms_norm_(x * 1.0, w) if rms else ops.layer_norm_(x * 1.0, w, torch.randn(6)))
        gx, gw = torch.autograd.grad(y, (x, w), torch.randn(8, 6))
        assert torch.isnan(gw[3]) and torch.isfinite(gw[:3]).all() and torch.isfinite(gw[4:]).all()
        assert torch.isnan(gx[:, 3]).all() and torch.isfinite(gx[:, :3]).all() and torch.isfinite(gx[:, 4:]).all()


# ---- GPU ---------------------------------------------------------------------------------------


def make(shape, dtype, scale=1.0, shift=0.0):
    host = rng().standard_normal(shape) * scale + shift
    return cupy_array(host, dtype), rounded(host, dtype)


def skewed(a):
    """A C-contiguous copy of the CuPy array `a` one element past a 16-byte boundary (the element path)."""
    import cupy

    flat = cupy.empty(a.size + 1, dtype=a.dtype)
    out = flat[1:].reshape(a.shape)
    out[...] = a
    return out


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


def check_backward_from_x_and_y(c, dtype, mode, what, skew=False):
    """dx, dweight, dbias of a backward_case, from x with the saved mean / rstd and from the output y
    (whose rounding the looser dx / dweight bounds allow for), against the reference; `skew`: x / y and dy one
    element past a 16-byte boundary (the element path)."""
    rdx, rdw, rdb = c["ref"]
    tol = 3 * TOL[dtype]
    dy = skewed(c["dy"]) if skew else c["dy"]
    for src, from_output in ((c["x"], False), (c["y"], True)):
        src = skewed(src) if skew else src
        dx, dw, db = norm_backward_impl(dy, src, c["w"], c["b"], None if from_output else c["mean"], c["rstd"],
                                        mode, from_output=from_output)
        assert dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, mode) <= 2 * tol, what + (from_output,)
        assert rel_err(dw, rdw) <= 2 * tol, what + (from_output,)
        if mode == "layer_norm":
            assert rel_err(db, rdb) <= tol, what + (from_output,)


LONG_ROWS = {"pipelined": {}, "one launch": dict(pipelined_fwd=False, pipelined_bwd=False),
             "two launches": dict(pipelined_fwd=False, pipelined_bwd=False, long_rows="split")}


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", MODES)
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
                for form, changes in LONG_ROWS.items():  # every way of splitting a long row
                    with tuned(rw, **changes):
                        got = norm_forward_impl(x, w, b, eps, mode)
                    assert rel_err(got[0], want) <= TOL[dtype] and rel_err(got[2], want_rstd[:, 0]) <= 1e-5, form
            assert str(rstd.dtype) == rw.ACC[dtype]
            assert rel_err(rstd, want_rstd[:, 0]) <= 1e-5, n
            if mode == "layer_norm":
                assert rel_err(mean, xv.mean(-1)) <= 1e-5, n


SHIFTED_FWD = {k for k in N.FWD.names if "SHIFTED" in k}
TILED_FWD = {k for k in N.FWD.names if k.startswith("norm_fwd_tiled")}
SHIFTED_BWD = {k for k in N.BWD.names if "SHIFTED" in k}


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", MODES)
def test_shifted_rows(mode, dtype):
    """Rows that are not whole packs of aligned arrays (shifted rows, rows.cuh shift_row): every head offset, sub-warp
    and block lengths, forward with and without the affine, in place, the statistics, and the backward from x and from
    y, each element checked; and the kernels taken: shifted instances for rows of a pack or more that one block holds
    (the backward's: half types), tiles for short rows, the element path for longer rows, a skewed base or a skewed
    weight. Shorter rows also through the shifted instances with the tiles off (their sub-warp groups: the run-time
    group's instance)."""
    import cupy

    V = rw.vec(dtype)
    block = fwd_threads(dtype) * rw.fwd_maxp(dtype) * V
    for n in (V - 1, V + 1, 3 * V + 1, 100, 1001, 5001, block - V + 1, block - 1, block + 3):
        if n % V == 0:
            continue
        rows = 4 * V + 3 if n > 4096 else 1000
        one_block = rw.plan(rows, n + V - 1, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype, n + V - 1), SMS).parts == 1
        bwd_shifted = dtype in N.TUNING.shifted_bwd_dtypes and n >= V and rw.plan(
            1, n + V - 1, dtype, bwd_maxp(dtype, 1), bwd_threads(dtype, 1), SMS).parts == 1
        x, xv = make((rows, n), dtype, 2.0, 0.5)
        xs = skewed(x)  # contiguous, base 2-8 bytes past a boundary
        for with_affine in (True, False):
            w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
            want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
            what = (n, with_affine)
            for tiles in (N.TUNING.tiled_max_n, 0):
                with tuned(N, tiled_max_n=tiles):
                    (y, mean, rstd), used = used_kernels(lambda: norm_forward_impl(x, w, b, 1e-5, mode))
                assert close_everywhere(y, want, dtype) and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
                if mode == "layer_norm":
                    assert rel_err(mean, xv.mean(-1)) <= 1e-5, what
                tiled = rw.tiled_rows(tiles, n, 0, "auto", x)
                assert bool(used & SHIFTED_FWD) == (n >= V and one_block and not tiled), what + (tiles, used)
                assert bool(used & TILED_FWD) == tiled, what + (used,)
            (y, _, _), used = used_kernels(lambda: norm_forward_impl(xs, w, b, 1e-5, mode))
            assert close_everywhere(y, want, dtype) and not used & SHIFTED_FWD, what + ("skewed", used)
            x2 = x.copy()
            assert norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)[0] is x2
            assert close_everywhere(x2, want, dtype), what + ("in place",)
            if with_affine:  # a weight one element past a boundary: the element path
                ws = cupy.empty(n + 1, dtype=x.dtype)[1:]
                ws[...] = w
                (y, _, _), used = used_kernels(lambda: norm_forward_impl(x, ws, None, 1e-5, mode))
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
            (dx, dw, db), used = used_kernels(lambda: norm_backward_impl(
                c["dy"], src, c["w"], c["b"], None if from_output else c["mean"], c["rstd"], mode, from_output))
            what, k = (n, "backward", from_output), 3 if from_output else 2  # (y's rounding, as check_backward_...)
            assert close_everywhere(dx, rdx, dtype, k) and close_everywhere(dw, rdw, dtype, k), what
            assert mode == "rms_norm" or close_everywhere(db, rdb, dtype, 2), what
            assert bool(used & SHIFTED_BWD) == bwd_shifted, what + (used,)


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", MODES)
def test_tiled_forward(mode, dtype):
    """Short rows that are not whole packs take norm_fwd_tiled (a block's rows as one tile in shared memory): lengths
    from 1 past TUNING.tiled_max_n, fewer rows than a tile and several, with and without the affine, a weight off a
    16-byte boundary (read by element: still tiled), in place, the statistics; a NaN row stays NaN."""
    import cupy

    V, top = rw.vec(dtype), N.TUNING.tiled_max_n
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
                (y, mean, rstd), used = used_kernels(lambda: norm_forward_impl(x, w, b, 1e-5, mode))
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
@pytest.mark.parametrize("dtype", ALL)
def test_rows_of_one_element_give_exactly_the_bias(dtype):
    """layer_norm over a last dimension of 1: x - mean is exactly 0, so the output is exactly bias (0 without the
    affine) and mean exactly x, on every path such rows take (tiles; the element path for a skewed base, whose half
    types' output used x * rstd - mean * rstd and missed bias by the rounding of x * rstd; in place; CuPy and
    torch); NaN and inf rows give NaN."""
    for rows in (3, 1000):
        x, xv = make((rows, 1), dtype, 30.0, 5.0)
        x[1, 0] = np.nan
        x[2, 0] = np.inf
        w, b, _, _ = affine(1, dtype, "layer_norm")
        want = to_f64(b)
        for src in (x, skewed(x)):
            for weight, bias in ((w, b), (None, None)):
                y, mean, rstd = norm_forward_impl(src, weight, bias, 1e-5, "layer_norm")
                got = to_f64(y)
                finite = np.isfinite(to_f64(x)[:, 0])
                expect = want[0] if bias is not None else 0.0
                assert (got[finite, 0] == expect).all(), (rows, weight is None, got[finite, 0][:4], expect)
                assert np.isnan(got[~finite]).all()
                np.testing.assert_array_equal(to_f64(mean)[finite], to_f64(x)[finite, 0])
            x2 = src.copy() if src is x else skewed(src)
            norm_forward_impl(x2, w, b, 1e-5, "layer_norm", inplace=True)
            assert (to_f64(x2)[np.isfinite(to_f64(x)[:, 0]), 0] == want[0]).all()
    if HAS_TORCH_CUDA:  # through torch_ops: under autograd and plainly
        t = torch.randn(3, 1, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
        wt = (torch.rand(1, device="cuda") + 0.5).to(t.dtype).requires_grad_(True)
        bt = torch.randn(1, device="cuda").to(t.dtype).requires_grad_(True)
        assert torch.equal(ck.layer_norm(t, wt, bt), bt.detach().expand(3, 1))
        assert torch.equal(ck.layer_norm(t.detach(), wt.detach(), bt.detach()), bt.detach().expand(3, 1))


@gpu
@pytest.mark.parametrize("dtype", rw.SHORT_DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_forward_short_groups(mode, dtype):
    """The forward instances compiled for their group (conftest.group_lengths' rows), with and without the
    affine, out of place and in place, and the statistics."""
    V = rw.vec(dtype)
    for G, n in group_lengths(V, rw.TUNING.target_packs, 64 * rw.TUNING.target_packs * V):
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
@pytest.mark.parametrize("mode", MODES)
def test_forward_staged_rows(mode):
    """The staged forward (next row in shared memory; rows filling >= 512-thread blocks): resident grids
    looping over several rows per block, one-block (64 KB staged) and multi-block paths and their edges,
    staged and not, in place (the next row is staged before this one is written), and the statistics."""
    for dtype, n, rows in (("bfloat16", 32768, 300), ("float16", 20000, 301), ("float32", 16384, 290),
                           ("float32", 70004, 140), ("bfloat16", 32760, 133), ("float32", 8192, 700),
                           ("float16", 32768, 3), ("bfloat16", 17000, 133)):
        x, xv = make((rows, n), dtype, 2.0, 0.5)
        w, b, wv, bv = affine(n, dtype, mode)
        want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
        for on in (True, False):
            what = (dtype, n, on)
            # the staged kernels (test_forward_pipelined_parts: the pipelined one)
            with tuned(N, stage_fwd=on), tuned(rw, pipelined_fwd=False):
                y, _, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
                assert rel_err(y, want) <= TOL[dtype] and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
                if on:
                    x2 = x.copy()
                    norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)
                    assert rel_err(x2, want) <= TOL[dtype], what + ("in place",)


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_forward_pipelined_parts(mode):
    """Long rows over several blocks, pipelined (norm_fwd_parts): blocks with one, two and many rows (the
    pipeline's fill and drain), a short last part, rows far from zero mean (the segments' exact two-pass
    statistics), with and without the affine, in place, and the saved statistics; the one-launch exchange
    it replaces gives the same within rounding."""
    for dtype, n, rows in (("float32", 262144, 40), ("float32", 70004, 300), ("bfloat16", 100000, 2),
                           ("float16", 65544, 257), ("bfloat16", 40000, 1), ("float32", 16388, 3)):
        host = rng().standard_normal((rows, n)) * 2 + 0.5
        host[::2] += 60.0  # mean / std 30: one-pass sums around zero would lose ~10 bits (rstd off by ~5e-5)
        x, xv = cupy_array(host, dtype), rounded(host, dtype)
        p = rw.plan(rows, n, dtype, rw.fwd_maxp(dtype), fwd_threads(dtype, n), SMS)
        packs = rw.TUNING.parts_packs_norm
        pp = rw.pipelined_plan(N.FWD, N.fwd_parts_name(dtype, mode), rows, n, dtype, 1, packs, p.threads)
        assert p.parts > 1 and pp, (dtype, n)
        assert rw.full_parts(pp[1], dtype, packs) == (n == 262144), (dtype, n)  # the FULL_PACKS instance
        for with_affine in (True, False):
            w, b, wv, bv = affine(n, dtype, mode, with_affine, with_affine)
            want, _, want_rstd = ref_forward(xv, wv, bv, 1e-5, mode)
            what = (dtype, n, with_affine)
            (y, mean, rstd), used = used_kernels(lambda: norm_forward_impl(x, w, b, 1e-5, mode))
            assert any(k.startswith("norm_fwd_parts") for k in used), what + (used,)
            assert rel_err(y, want) <= TOL[dtype] and rel_err(rstd, want_rstd[:, 0]) <= 1e-5, what
            if mode == "layer_norm":
                assert rel_err(mean, xv.mean(-1)) <= 1e-6, what
            with tuned(rw, **LONG_ROWS["one launch"]):
                ex = norm_forward_impl(x, w, b, 1e-5, mode)[0]
            assert rel_err(y, to_f64(ex)) <= 2 * TOL[dtype], what  # each within TOL of the reference
            x2 = x.copy()
            norm_forward_impl(x2, w, b, 1e-5, mode, inplace=True)
            np.testing.assert_array_equal(to_f64(x2), to_f64(y))
            with tuned(N, full_parts=False):  # the general instance: the same arithmetic
                np.testing.assert_array_equal(to_f64(norm_forward_impl(x, w, b, 1e-5, mode)[0]), to_f64(y))


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_backward_pipelined_parts(mode):
    """Long rows over several blocks, pipelined (norm_bwd_parts, x or y and dy staged): blocks with one, two
    and many rows (the pipeline's fill and drain, and blocks' column sums over several rows), a short last
    part; dx, dweight, dbias from x and from the output, and without the affine."""
    for dtype, n, rows in (("float32", 262144, 20), ("float32", 70004, 140), ("bfloat16", 100000, 2),
                           ("float16", 65544, 257), ("bfloat16", 40000, 1), ("float32", 16388, 3)):
        p = rw.plan(rows, n, dtype, rw.maxp(dtype), N.TUNING.parts_bwd_threads, SMS)
        for f in (0, 1):
            assert p.parts > 1 and rw.pipelined_plan(N.BWD, N.bwd_parts_name(dtype, mode, f), rows, n, dtype, 1,
                                                      rw.maxp(dtype), p.threads, 2), (dtype, n)
        c = backward_case(rows, n, dtype, mode)
        check_backward_from_x_and_y(c, dtype, mode, (dtype, n))
        dx = norm_backward_impl(c["dy"], c["x"], None, None, c["mean"], c["rstd"], mode)[0]
        rdx = ref_backward(c["xv"], None, None, c["dyv"], 1e-5, mode)[0]
        assert dx_err(dx, rdx, c["xv"], None, c["dyv"], 1e-5, mode) <= 3 * TOL[dtype], (dtype, n, "no affine")


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_backward_half_forms(mode):
    """The half-type backward forms on the rows they take: norm_bwd_shared (one CTA unstaged or staged, full or not,
    warp rows; on sm_90 clusters of 2 and 8, the ring), the pipelined long rows; and on skewed copies of the same rows
    the register forms: one pack a thread (1024-thread blocks), two packs (512-thread blocks, long rows over several;
    layer_norm's dbias from the kernel or from a column sum of dy), either form on every length. Resident grids
    looping over several rows a block (and blocks with no row), a block's threads past the row end, a cluster's last
    CTA with a shorter segment; from x and from the output."""
    for dtype, n, rows in (("bfloat16", 8192, 300), ("float16", 8184, 280), ("bfloat16", 32768, 140),
                           ("float16", 20000, 150), ("float16", 4104, 290), ("bfloat16", 6000, 3),
                           ("bfloat16", 16392, 70), ("float16", 16384, 40), ("float16", 40000, 30),
                           ("float16", 1024, 301), ("bfloat16", 2048, 97), ("float16", 4096, 33),
                           ("bfloat16", 776, 19)):
        c = backward_case(rows, n, dtype, mode)
        check_backward_from_x_and_y(c, dtype, mode, (dtype, n))
        for two_pack_from, db_by_reduce in ((N.TUNING.two_pack_from, True), (0, True), (0, False), (1 << 40, True)):
            with tuned(N, two_pack_from=two_pack_from, db_by_reduce=db_by_reduce):
                check_backward_from_x_and_y(c, dtype, mode, (dtype, n, two_pack_from, db_by_reduce), skew=True)


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_backward_ring(mode):
    """norm_bwd_ring on clusters of 2, 4 and 8 CTAs a row, 768 and 1024 packs a CTA, every dtype, one, two and four
    packs a thread: rows that wrap the ring and its slots many times, fewer rows than row groups or than the lag, one
    row; from x and from the output."""
    from cupy_kernels._runtime import current

    if current().cc < 90:
        pytest.skip("bulk copies and clusters need compute capability 9.0")
    for dtype, n, rows in (("bfloat16", 16384, 1500), ("float16", 12288, 7), ("float32", 8192, 901),
                           ("float16", 16384, 300), ("bfloat16", 32768, 140), ("float32", 16384, 1),
                           ("bfloat16", 24576, 65), ("float16", 65536, 40), ("float32", 32768, 9),
                           ("float16", 8704, 33)):
        c = backward_case(rows, n, dtype, mode)
        for pk in N.RING_PACKS:
            with tuned(N, ring_packs=pk):
                if N.ring_plan(n, dtype, current().cc) is not None:
                    check_backward_from_x_and_y(c, dtype, mode, (dtype, n, rows, pk))
                else:
                    assert pk > 1, (dtype, n)  # every case takes the ring with one pack a thread


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_backward_shared_clusters(mode):
    """norm_bwd_shared over clusters (sm_90) on the rows the ring does not take (not whole 16-byte packs a CTA):
    clusters of 2 CTAs, and of 8 (half rows of 16385-32768 elements) loading their rows straight into registers;
    float32 clusters of 2 and 4, its one-CTA rows and warp rows: several rows a cluster and clusters with none, a
    short last CTA, from x and from the output."""
    from cupy_kernels._runtime import current

    cc = current().cc
    for dtype, n, rows, cl in (("bfloat16", 32760, 140, 8), ("float16", 20000, 75, 8), ("bfloat16", 24584, 3, 8),
                               ("float16", 8200, 90, 2), ("float32", 6000, 77, 2), ("float32", 8200, 40, 4),
                               ("float32", 16380, 9, 4), ("float32", 4096, 200, 1), ("float32", 300, 301, 1),
                               ("float32", 512, 77, 1)):
        if cl > 1 and cc >= 90:
            assert N.ring_plan(n, dtype, cc) is None
            plan = N.shared_plan(n, dtype, mode, cc)
            assert plan[0] == cl and (cl != 8 or not plan[5]), (dtype, n, plan)
        check_backward_from_x_and_y(backward_case(rows, n, dtype, mode), dtype, mode, (dtype, n, rows))


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_backward_shared_warp_rows(mode):
    """norm_bwd_shared's WARP_ROWS form (each warp its own rows, the warps' column sums folded at the end) on every
    half-type and float32 length it takes when allowed from 0: 4 packs a lane (1024, FULL) and fewer or partial ones,
    rows not a multiple of the warps (warps with no row), CTAs of 512 and 256 threads, from x and from the output;
    column_sum launched after the partial rows' kernel (programmatic dependent launch) and plainly."""
    for dtype, n, rows in (("float16", 1024, 301), ("bfloat16", 1024, 4000), ("bfloat16", 1016, 77),
                           ("float16", 776, 19), ("bfloat16", 264, 1), ("float16", 8, 50), ("float32", 512, 301),
                           ("float32", 388, 77), ("float32", 4, 9)):
        c = backward_case(rows, n, dtype, mode)
        for threads, after in ((512, True), (256, True), (256, False)):
            with tuned(N, warps_from=0, warps_from_float32=0, warps_threads=threads, column_sum_after=after):
                check_backward_from_x_and_y(c, dtype, mode, (dtype, n, rows, threads, after))


@gpu
def test_backward_in_a_cuda_graph():
    """A norm backward captured in a CUDA graph and replayed (on sm_90 column_sum is a programmatic dependent
    launch: a programmatic edge in the graph) gives the eager call's bits: warp rows, a one-CTA row, a cluster; and a
    two-pack row whose dbias is a column sum of dy (skewed: the register form)."""
    import torch

    def skewed_tensor(t):  # one element past a 16-byte boundary
        return torch.empty(t.numel() + 1, device="cuda", dtype=t.dtype)[1:].view(t.shape).copy_(t)

    for rows, n, skew in ((300, 1024, False), (70, 8192, False), (20, 32768, False), (20, 12000, True)):
        x = torch.randn(rows, n, device="cuda", dtype=torch.float16)
        dy = torch.randn_like(x)
        if skew:
            x, dy = skewed_tensor(x), skewed_tensor(dy)
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
@pytest.mark.parametrize("mode", MODES)
def test_backward_short_groups(mode):
    """The backward instances compiled for their group (norm.BWD_GROUP_PACKS), each sub-warp G full and part-filled,
    and a block a row (ROW_BLOCK, below norm_bwd_shared's lengths), from x and from the output, over 301 and 4001 rows
    (persistent grids: groups with one row more than others, and several rows a group), the groups' next rows staged
    where norm.stage_short_bwd says."""
    staged_cases = 0
    for dtype, packs in N.BWD_GROUP_PACKS.items():
        V = rw.vec(dtype)
        P = bwd_maxp(dtype, packs)
        for G, n in group_lengths(V, P, 1000):
            p = rw.plan(301, n, dtype, P, bwd_threads(dtype, packs), SMS, persistent=True)
            assert rw.short_group(p, dtype, 1) == G and (p.group == G or p.path == "block"), (G, n, p)
            staged_cases += N.stage_short_bwd(dtype, mode, G, rw.whole_rows(p, dtype, P))
            for rows in (301, 4001):
                check_backward_from_x_and_y(backward_case(rows, n, dtype, mode), dtype, mode, (G, n, rows))
    assert staged_cases > 0


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_staged_short_rows(mode):
    """Sub-warp rows that stage the group's next row (norm.stage_short_bwd backward, TUNING.stage_short_fwd_*
    forward), whole and part-filled, over enough rows that every group takes several."""
    cases = 0
    for dtype, packs in N.BWD_GROUP_PACKS.items():
        V, P = rw.vec(dtype), bwd_maxp(dtype, packs)
        for G in rw.SHORT_GROUPS:
            for n, full in ((G * P * V, True), ((G // 2) * P * V + V, False)):
                if G > 1 and N.stage_short_bwd(dtype, mode, G, full):
                    cases += 1
                    check_backward_from_x_and_y(backward_case(many_rows(G, SMS), n, dtype, mode), dtype, mode, (G, n))
    for dtype in N.TUNING.stage_short_fwd_dtypes:
        V = rw.vec(dtype)
        for G in N.TUNING.stage_short_fwd_groups:
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
@pytest.mark.parametrize("mode", MODES)
def test_backward_every_path(mode, dtype):
    for n in boundary_lengths(dtype, "bwd"):
        c = backward_case(5 if n > 4096 else 67, n, dtype, mode)
        rdx, rdw, rdb = c["ref"]
        tol = 3 * TOL[dtype]
        for form, changes in LONG_ROWS.items():  # long rows: pipelined, one launch or two
            with tuned(rw, **changes):
                dx, dw, db = norm_backward_impl(c["dy"], c["x"], c["w"], c["b"], c["mean"], c["rstd"], mode)
            assert dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, mode) <= tol, (n, form)
            assert rel_err(dw, rdw) <= tol, (n, form)
            if mode == "layer_norm":
                assert rel_err(db, rdb) <= tol, (n, form)
            else:
                assert db is None
        # the gradients one asks for, and dy / x as views (copied first)
        dx, dw, db = norm_backward_impl(c["dy"], c["x"], c["w"], c["b"], c["mean"], c["rstd"], mode, need_dw=False)
        assert dw is None and dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, mode) <= tol
        assert mode == "rms_norm" or rel_err(db, rdb) <= tol
        if n > 1:
            import cupy

            wide = cupy.zeros((c["x"].shape[0], n + 3), c["x"].dtype)
            wide[:, :n] = c["dy"]
            dx = norm_backward_impl(wide[:, :n], c["x"], c["w"], c["b"], c["mean"], c["rstd"], mode)[0]
            assert dx_err(dx, rdx, c["xv"], c["wv"], c["dyv"], 1e-5, mode) <= tol, (n, "strided dy")


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", MODES)
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
def test_rows_of_nothing():
    """n = 0: empty outputs, NaN statistics (the mean of nothing, like torch), zero dweight / dbias of shape (0,); no
    rows: empty everything; replayed from the plan cache the same."""
    import cupy

    for _ in range(2):
        x = cupy.empty((3, 0), cupy.float32)
        w = cupy.empty(0, cupy.float32)
        y, mean, rstd = norm_forward_impl(x, w, w, 1e-5, "layer_norm")
        assert y.shape == (3, 0) and np.isnan(to_f64(mean)).all() and np.isnan(to_f64(rstd)).all()
        dx, dw, db = norm_backward_impl(x, x, w, w, mean, rstd)
        assert dx.shape == (3, 0) and dw.shape == (0,) and db.shape == (0,)
        x = cupy.empty((0, 5), cupy.float32)
        w = cupy.ones(5, cupy.float32)
        y, mean, rstd = norm_forward_impl(x, w, w, 1e-5, "layer_norm")
        assert y.shape == (0, 5) and mean.shape == (0,)
        dx, dw, db = norm_backward_impl(x, x, w, w, mean, rstd)
        assert dx.shape == (0, 5) and (to_f64(dw) == 0).all() and (to_f64(db) == 0).all()


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
    with pytest.raises(TypeError, match="weight must be a cupy.ndarray"):
        ck.layer_norm_(x, np.ones(6, np.float32))
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
    long_row = 3 * fwd_threads(dtype) * rw.fwd_maxp(dtype) * rw.vec(dtype) + 3
    for shape in ((3, 1), (1, 2), (65, 130), (4, 5000), (2, long_row)):
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
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("which", ["x", "w", "xw", "xb", "wb", "xwb"])
def test_torch_inplace_and_custom_ops_under_autograd(rms, which):
    """The in-place forms under autograd on a real gradient (x * 2 in place; it once raised "norm_backward ... may not
    alias any inputs" when weight and bias needed no gradient), autograd.grad through the out-of-place forms on a
    (1, 2) input, and the custom ops themselves (torch.compile's path): each subset of (x, weight, bias) requiring
    grad, dense, expanded and non-contiguous output gradients, against torch's ops in float64."""
    from cupy_kernels import torch_ops

    if rms and "b" in which:
        pytest.skip("rms_norm takes no bias")
    F = torch.nn.functional
    for shape in ((64, 512), (1, 2), (33, 100)):
        n = shape[-1]
        for dy_form in ("dense", "expanded", "transposed"):
            x, w, b = _leaves(shape, torch.float32, which, rms, "cuda")
            dy = _gradients(shape, torch.float32, dy_form, "cuda")
            ref = [t if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in (x, w, b)]

            def torch_ref(scale):
                return (F.rms_norm(ref[0] * scale, (n,), ref[1], 1e-6) if rms else
                        F.layer_norm(ref[0] * scale, (n,), ref[1], ref[2], 1e-5))

            for scale, call in ((1.0, lambda: ck.rms_norm(x, w, 1e-6) if rms else ck.layer_norm(x, w, b, 1e-5)),
                                (2.0, lambda: ck.rms_norm_(x * 2, w, 1e-6) if rms else ck.layer_norm_(x * 2, w, b))):
                want, want_grads = _grads_of(lambda: torch_ref(scale), ref, dy.double())
                got, grads = _grads_of(call, (x, w, b), dy)
                what = (shape, dy_form, scale)
                assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4), what
                for g, r in zip(grads, want_grads):
                    assert torch.allclose(g.double(), r, rtol=1e-3, atol=1e-3), what
            xd, wd, bd = (t if t is None else t.detach() for t in (x, w, b))
            y, mean, rstd = torch_ops._norm_op(xd, wd, bd, 1e-6 if rms else 1e-5, rms)
            for need_dw in (False, True):
                for need_db in (False, True):
                    for from_output in (False, True):
                        outs = torch_ops._norm_bwd_op(dy, y if from_output else xd, wd, bd,
                                                      None if from_output else mean, rstd, rms, from_output, need_dw,
                                                      need_db)
                        assert len({o.untyped_storage()._cdata for o in outs}) == 3


@torch_gpu
def test_torch_inplace_zero_weight_gives_nan_gradients_without_a_sync():
    """layer_norm_ / rms_norm_ under autograd make no host-device sync to look for a zero weight entry: with one, the
    backward's x-hat in that column is 0 / 0, so dx and dweight are NaN there and finite elsewhere."""
    for rms in (False, True):
        x = torch.randn(64, 512, device="cuda", requires_grad=True)
        w = torch.rand(512, device="cuda") + 0.5
        w[7] = 0
        w.requires_grad_(True)
        b = torch.randn(512, device="cuda")
        y = ck.rms_norm_(x * 2, w) if rms else ck.layer_norm_(x * 2, w, b)
        gx, gw = torch.autograd.grad(y, (x, w), torch.randn_like(y))
        assert torch.isnan(gw[7]) and torch.isfinite(torch.cat([gw[:7], gw[8:]])).all()
        assert torch.isnan(gx[:, 7]).all() and torch.isfinite(torch.cat([gx[:, :7], gx[:, 8:]], 1)).all()


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
    from cupy_kernels import torch_ops

    x = tensor((4, 8), "float32", False, 1.0).requires_grad_(True)
    h = x * 1.0  # a non-leaf that requires grad
    w = weight(8, "float32")
    before = h.detach().clone()
    with pytest.raises(RuntimeError, match="leaf"):
        ck.layer_norm_(x, w)
    with pytest.raises(ValueError, match="C-contiguous"):
        ck.layer_norm_(h.t(), None)
    with pytest.raises(TypeError, match="weight has dtype"):
        ck.layer_norm_(h, w.double())
    with pytest.raises(ValueError, match="weight must have shape"):
        ck.rms_norm_(h, weight(7, "float32"))
    with pytest.raises(TypeError, match="rms_norm takes no bias"):  # raised in the autograd.Function's forward
        torch_ops._norm_inplace("rms_norm_", h, w, w, 1e-6, True)
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
    with pytest.raises(ValueError, match="C-contiguous"):
        cknn.LayerNorm((4, 8), inplace=True).cuda()(x.transpose(0, 1))
