"""timex (RWKV causal depthwise long convolution): forward, backward, ladder, torch op, errors.

References are float64 on the host (FFT, checked against the loop definition), on fresh random inputs
rounded to the tested dtype; every kernel output is NaN-poisoned first (see the `poison` fixture)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import TOL, cupy_array, gpu, rel_err, rng, rounded, to_f64, torch_gpu
from cupy_kernels.ops import timex as tx

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

DTYPES = ("float32", "float16", "bfloat16", "float64")
TF32X3_TOL = 5e-5  # the opt-in split-precision TF32 variant (float32 default: 1e-5)
SHAPES = [(1, 1, 1), (2, 3, 5), (3, 2, 127), (4, 3, 1000), (1, 2, 4097), (33, 5, 257), (9, 4, 300), (5, 1, 2)]


# ---- host references (CPU) ----------------------------------------------------------------------


def loops_backward(w, k, g):
    B, C, T = k.shape
    gk = np.zeros((B, C, T))
    gw = np.zeros((C, T))
    for t in range(T):
        for u in range(t + 1):
            gk[:, :, u] += g[:, :, t] * w[None, :, T - 1 - t + u]
            gw[:, T - 1 - t + u] += (g[:, :, t] * k[:, :, u]).sum(0)
    return gw, gk


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 17), (1, 1, 64)])
def test_fft_reference_matches_the_definition(shape):
    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    eps = float(r.standard_normal())
    assert rel_err(tx.reference(w, k, eps), tx.reference_loops(w, k, eps)) < 1e-13
    gw, gk = tx.reference_backward(w, k, g)
    lw, lk = loops_backward(w, k, g)
    assert rel_err(gw, lw) < 1e-13 and rel_err(gk, lk) < 1e-13
    # the torch formulation the op replaces
    if torch is not None:
        tw, tk = torch.tensor(w), torch.tensor(k)
        ref = eps + torch.nn.functional.conv1d(torch.nn.functional.pad(tk, (T - 1, 0)), tw.unsqueeze(1), groups=C)
        assert rel_err(ref.numpy(), tx.reference(w, k, eps)) < 1e-13


def test_backward_reference_is_the_gradient():
    """<g, out(w, k)> differentiated numerically in a random direction matches the reference grads."""
    r = rng()
    B, C, T = 3, 2, 9
    w, k, g = r.standard_normal((C, T)), r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
    dw, dk = r.standard_normal((C, T)), r.standard_normal((B, C, T))
    h = 1e-6
    f = lambda w_, k_: float((g * tx.reference(w_, k_)).sum())
    num = (f(w + h * dw, k + h * dk) - f(w - h * dw, k - h * dk)) / (2 * h)
    gw, gk = tx.reference_backward(w, k, g)
    assert abs(num - ((gw * dw).sum() + (gk * dk).sum())) < 1e-6 * max(1.0, abs(num))


@pytest.mark.parametrize("cfg,shape", [((8, 8, 4), (9, 1, 300)), ((8, 8, 4), (4, 1, 64)), ((4, 8, 2), (5, 2, 41)),
                                       ((2, 8, 1), (3, 2, 37)), ((4, 4, 4), (17, 1, 130)), ((4, 16, 4, 64), (3, 1, 70))])
def test_tiled_index_math_emulated(cfg, shape):
    """The forward / grad_k tiling (tap windows, zero fill, warp skips, reversal) emulated on the host."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k = r.standard_normal((C, T)), r.standard_normal(shape)
    assert rel_err(emu.tiled(w, k, 0.5, *cfg[:3], False, *cfg[3:]), tx.reference(w, k, 0.5)) < 1e-13
    _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
    assert rel_err(emu.tiled(w, k, 0.0, *cfg[:3], True, *cfg[3:]), rgk) < 1e-13


@pytest.mark.parametrize("cfg,shape", [((16, 16, 4), (3, 2, 37)), ((16, 16, 4), (11, 1, 150)), ((8, 8, 4), (9, 1, 70)),
                                       ((8, 16, 8), (2, 17, 20))])
def test_grad_w_index_math_emulated(cfg, shape):
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    assert rel_err(emu.grad_w(k, g, *cfg), tx.reference_backward(w, k, g)[0]) < 1e-13


@pytest.mark.parametrize("shape", [(3, 1, 37), (33, 1, 300), (2, 1, 64), (1, 3, 1), (2, 2, 513)])
def test_tf32x3_fragment_maps_emulated(shape):
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k = r.standard_normal((C, T)), r.standard_normal(shape)
    _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
    for kern in (emu.tf32x3, emu.tf32x3f, lambda *a: emu.tf32x3f(*a, ROT=False, TRI=True)):
        assert rel_err(kern(w, k, 0.25, False), tx.reference(w, k, 0.25)) < 1e-13
        assert rel_err(kern(w, k, 0.0, True), rgk) < 1e-13


@pytest.mark.parametrize("nb", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 37), (5, 2, 130), (2, 1, 64), (3, 17, 65), (1, 1, 200),
                                   (4, 1, 257)])
def test_grad_w_frag_emulated(shape, nb):
    """The fragment-order grad_w (timex_grad_w_frag<NB>): row-pair staging, (b, p) counters (np < 16 and
    B*np not a multiple of 16), both bands' fragment maps and diagonal sums, an odd number of bands."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    assert rel_err(emu.grad_w_frag(k, g, nb), tx.reference_backward(w, k, g)[0]) < 1e-13


@pytest.mark.parametrize("chunk", [16, 32])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 37), (5, 2, 130), (2, 1, 64), (3, 17, 65)])
def test_grad_w_tf32x3_bands_emulated(shape, chunk):
    """The band GEMMs' loads, permuted fragment maps, diagonal sums and two-band combine (grad_w tf32x3)."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    assert rel_err(emu.grad_w_tf32x3(k, g, chunk), tx.reference_backward(w, k, g)[0]) < 1e-13


def test_auto_takes_tf32x3_only_for_float32_where_measured_faster_and_t_up_to_1024():
    assert tx.tf32x3_auto("float32", 32, 768) and tx.tf32x3_auto("float32", 16, 256)
    assert tx.tf32x3_auto("float32", 33, 1024) and tx.tf32x3_auto("float32", 384, 64, "grad_w")
    assert tx.tf32x3_auto("float32", 1, 1, "grad_w") and not tx.tf32x3_auto("float32", 384, 64)
    assert tx.tf32x3_auto("float32", 15, 768, "grad_w") and tx.tf32x3_auto("float32", 32, 2048, "grad_w")
    assert tx.tf32x3_auto("float32", 12, 768) and tx.tf32x3_auto("float32", 192, 128)
    assert not tx.tf32x3_auto("float32", 11, 768) and not tx.tf32x3_auto("float32", 32, 1025)
    assert not tx.tf32x3_auto("float32", 192, 127)
    assert not tx.tf32x3_auto("float32", 33, 2048, "grad_w") and not tx.tf32x3_auto("float32", 2, 2049, "grad_w")
    assert not any(tx.tf32x3_auto(dt, 64, 768, kern) for dt in ("float16", "bfloat16", "float64")
                   for kern in ("toeplitz", "grad_w"))
    assert tx.backward_variant("auto") == "auto" and tx.backward_variant("tf32x3") == "tf32x3"
    assert tx.backward_variant("balanced") == "tiled" and tx.backward_variant("tiled_b8") == "tiled"


def test_seed_preconditions_and_tiled_choice():
    assert tx.seed_preconditions("batch8", "float32", 32, 768) is None
    assert tx.seed_preconditions("balanced", "float32", 32, 768) is None
    assert "B % 8" in tx.seed_preconditions("batch8", "float32", 12, 768)
    assert "T % 8" in tx.seed_preconditions("balanced", "float32", 8, 772)
    assert "T <= 1024" in tx.seed_preconditions("shared", "float32", 1, 1025)
    assert "T % 4" in tx.seed_preconditions("float4", "float32", 1, 5)
    assert "float32 only" in tx.seed_preconditions("float4", "float16", 1, 8)
    assert tx.choose_tiled("float32", 32) == "b32"
    assert tx.choose_tiled("float32", 1) == "b2"
    assert tx.choose_tiled("float64", 32) == "f64"
    for name, cfg in tx.TILED.items():
        bm, tn = tx.tiled_shape(cfg)
        assert bm == cfg[2] * cfg[0] and tn == (32 // cfg[2]) * cfg[1] * 4


def test_rejects_host_arrays_and_bad_variants():
    w, k = np.ones((2, 3), np.float32), np.ones((1, 2, 3), np.float32)
    with pytest.raises(TypeError, match="k must be a cupy.ndarray or a CUDA torch.Tensor"):
        tx.timex(w, k)
    with pytest.raises(TypeError, match="k must be"):
        tx.timex_backward(w, k, k)
    with pytest.raises(ValueError, match="variant must be one of"):
        tx.timex(w, k, variant="fastest")
    with pytest.raises(ValueError, match="variant must be one of"):
        tx.timex_backward(w, k, k, variant="float4")


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_eager_calls_skip_the_custom_op_only_when_nothing_traces():
    """torch_ops.untraced / plain_eager (CPU: the dispatch decision only): eager plain tensors may skip
    the custom op; autograd needs it or the autograd.Function; torch.compile always sees the op."""
    from cupy_kernels import torch_ops as tops

    x = torch.ones(3)
    assert tops.plain_eager(x) and tops.untraced(x)
    x.requires_grad_()
    assert not tops.plain_eager(x) and tops.untraced(x)
    with torch.no_grad():
        assert tops.plain_eager(x)
    traced = torch.compile(lambda t: t * 2 if tops.untraced(t) else t * 3, fullgraph=True, backend="eager")
    assert traced(torch.ones(2)).tolist() == [3.0, 3.0]


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_rejects_cpu_tensors():
    w, k = torch.ones(2, 3), torch.ones(1, 2, 3)
    with pytest.raises(TypeError, match="CUDA tensor"):
        tx.timex(w, k)


# ---- GPU ----------------------------------------------------------------------------------------


@pytest.fixture
def poison(monkeypatch):
    """Every buffer the op allocates starts as NaN, so an element a kernel forgets fails the test."""
    from cupy_kernels._runtime import bridge

    real = bridge.Call.empty

    def empty(self, shape, dtype):
        arr = real(self, shape, dtype)
        arr.fill(np.nan)
        return arr

    monkeypatch.setattr(bridge.Call, "empty", empty)


def make(shape, dtype, r, tmax=None):
    """w (C, T) (a view w_full[:, -T:] when tmax is given), k and g (B, C, T); host float64 copies."""
    B, C, T = shape
    wf = r.standard_normal((C, tmax or T)) / np.sqrt(T)
    k, g = r.standard_normal(shape), r.standard_normal(shape)
    wd_full = cupy_array(wf, dtype)
    wd = wd_full[:, -T:] if tmax else wd_full
    return (wd, cupy_array(k, dtype), cupy_array(g, dtype),
            rounded(wf, dtype)[:, -T:], rounded(k, dtype), rounded(g, dtype))


def check_forward(shape, dtype, variant="auto", tmax=None, tol=None):
    r = rng()
    wd, kd, _, w, k, _ = make(shape, dtype, r, tmax)
    eps = float(r.standard_normal())
    out = tx.timex(wd, kd, eps, variant=variant)
    assert out.shape == shape and str(out.dtype) == dtype and out.flags.c_contiguous
    err = rel_err(out, tx.reference(w, k, eps))
    assert err <= (tol or TOL[dtype]), f"{variant} {shape} {dtype}: rel err {err:.3g}"


def check_backward(shape, dtype, variant="auto", tmax=None, tol=None):
    r = rng()
    wd, kd, gd, w, k, g = make(shape, dtype, r, tmax)
    gw, gk = tx.timex_backward(wd, kd, gd, variant=variant)
    assert gw.shape == shape[1:] and gk.shape == shape and str(gw.dtype) == dtype and str(gk.dtype) == dtype
    rgw, rgk = tx.reference_backward(w, k, g)
    tol = tol or TOL[dtype]
    e_w, e_k = grad_err(gw, rgw, w, k, g, 0), grad_err(gk, rgk, w, k, g, 1)
    assert e_w <= tol and e_k <= tol, f"{variant} {shape} {dtype}: grad_w {e_w:.3g}, grad_k {e_k:.3g}"


def grad_err(got, want, w, k, g, i):
    """||got - want|| relative to the larger of ||want|| and the size of its terms: every gradient entry is
    a sum of products, sqrt(sum of their squares) = reference_backward of the squared inputs. A sum of few
    terms (grad_w of T = 1 over 64 rows) can cancel to far below its terms, where a plain relative error
    measures only the float rounding of those terms (a float32 test failed that way at 2.2e-5)."""
    scale = np.sqrt(np.maximum(tx.reference_backward(w * w, k * k, g * g)[i], 0.0))
    diff = np.linalg.norm(to_f64(got) - want)
    return diff / max(np.linalg.norm(want), np.linalg.norm(scale))


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, dtype, poison):
    check_forward(shape, dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_backward(shape, dtype, poison):
    check_backward(shape, dtype)


@gpu
@pytest.mark.parametrize("variant", ["tiled_b32", "tiled_b8", "tiled_b2"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 2, 127), (33, 3, 1000), (7, 2, 1031), (40, 2, 64)])
def test_each_tiled_shape(shape, dtype, variant, poison):
    check_forward(shape, dtype, variant)


@gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 127), (2, 3, 1000), (1, 1, 4097)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_naive(shape, dtype, poison):
    check_forward(shape, dtype, "naive")
    check_backward(shape, dtype, "naive")


@gpu
@pytest.mark.parametrize("variant,shapes", [
    ("shared", [(1, 1, 1), (3, 2, 127), (2, 3, 1000), (2, 1, 1024)]),
    ("float4", [(1, 1, 4), (3, 2, 128), (2, 3, 1000), (1, 2, 4096)]),
    ("batch8", [(8, 1, 4), (16, 3, 1000), (8, 2, 1024), (32, 2, 768)]),
    ("balanced", [(8, 1, 8), (16, 3, 1000), (8, 2, 1024), (32, 2, 768)]),
])
def test_seed_ladder(variant, shapes, poison):
    for shape in shapes:
        check_forward(shape, "float32", variant)


@gpu
@pytest.mark.parametrize("variant,shape,dtype", [
    ("shared", (1, 1, 1025), "float32"), ("float4", (1, 1, 6), "float32"), ("batch8", (12, 1, 64), "float32"),
    ("balanced", (8, 1, 36), "float32"), ("batch8", (8, 1, 64), "float16"), ("tiled_b32", (1, 1, 8), "float64"),
    ("tf32x3", (2, 1, 8), "bfloat16"),
])
def test_ladder_preconditions_raise(variant, shape, dtype):
    r = rng()
    wd, kd, *_ = make(shape, dtype, r)
    with pytest.raises(ValueError, match="variant"):
        tx.timex(wd, kd, variant=variant)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_row_strided_w_is_used_without_a_copy(dtype, poison):
    r = rng()
    wd, kd, gd, w, k, g = make((3, 4, 300), dtype, r, tmax=1000)
    arr, strides = tx._rows(wd, "w", "timex")
    assert arr is wd and strides == (1000, 1)
    check_forward((3, 4, 300), dtype, tmax=1000)
    check_backward((3, 4, 300), dtype, tmax=1000)


@gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 127), (33, 3, 1000), (2, 1, 4097), (32, 2, 768),
                                   (65, 1, 300), (32, 19, 129), (2, 1, 5000)])
def test_tf32x3_split_precision_accuracy(shape, poison):
    # The opt-in tensor-core path's stated error (docs/timex.md): measured on an H200 at 4e-6 (T = 768) and
    # 2.0e-5 (grad_k, T = 4097) relative norm, growing with T; TF32 alone would give ~1e-3.
    check_forward(shape, "float32", "tf32x3", tol=TF32X3_TOL)
    check_backward(shape, "float32", "tf32x3", tol=TF32X3_TOL)


@gpu
@pytest.mark.parametrize("kernel", list(tx.TOEPLITZ_TF32X3))
def test_toeplitz_tf32x3_kernels_both_directions(kernel):
    """Each compiled Toeplitz tf32x3 kernel (fragment-order default, run-5 scalar), forward and grad_k, on fresh
    inputs against float64; outputs NaN-poisoned; bit-identical on a second run."""
    import cupy

    r = rng()
    for B, C, T in [(1, 1, 1), (2, 3, 5), (33, 5, 127), (32, 19, 768), (17, 2, 1000), (64, 1, 257), (3, 2, 2047),
                    (35, 4, 513)]:
        w, k = r.standard_normal((C, T)) / np.sqrt(T), r.standard_normal((B, C, T))
        wd, kd = cupy_array(w, "float32"), cupy_array(k, "float32")
        w, k = rounded(w, "float32"), rounded(k, "float32")
        refs = (tx.reference(w, k, 0.5), tx.reference_backward(w, np.zeros_like(k), k)[1])
        for rev, ref in zip((False, True), refs):
            runs = []
            for _ in range(2):
                out = cupy.full((B, C, T), np.nan, np.float32)
                tx._launch_tf32x3("float32", rev, wd, T, kd, C * T, T, out, 0.0 if rev else 0.5, B, C, T, kernel)
                runs.append(cupy.asnumpy(out))
            err = rel_err(runs[0], ref)
            assert err <= (1e-5 if T <= 1024 else TF32X3_TOL), (kernel, rev, B, C, T, err)
            assert np.array_equal(runs[0], runs[1]), (kernel, rev, B, C, T, "not deterministic")
    variant = next((v for v, kern in tx.TOEPLITZ_VARIANTS.items() if kern == kernel), "tf32x3_scalar")
    check_forward((33, 3, 300), "float32", variant)


@gpu
@pytest.mark.parametrize("shape", [(32, 2, 768), (33, 3, 1000), (40, 17, 1024), (16, 3, 257), (32, 2, 1023),
                                   (64, 1, 1), (35, 3, 65), (16, 2, 7), (1, 1, 1), (3, 2, 2047), (31, 2, 2048),
                                   (12, 3, 768), (13, 2, 129), (70, 2, 192)])
def test_auto_tf32x3_keeps_float32_accuracy(shape, poison):
    """Where 'auto' takes a tensor-core kernel it must hold float32's 1e-5 (not the opt-in's 5e-5)."""
    assert tx.tf32x3_auto("float32", shape[0], shape[2], "grad_w")
    check_forward(shape, "float32")
    check_backward(shape, "float32")


@gpu
@pytest.mark.parametrize("chunk", tx.GRAD_W_TF32X3_ALL)
@pytest.mark.parametrize("vec", [False, True])
def test_grad_w_tf32x3_chunks_and_loads(chunk, vec):
    """Every compiled tf32x3 grad_w (frag2, frag1, the band kernel with 16 / 32-row chunks), scalar and
    vector loads; workspace and output NaN-poisoned; the result bit-identical on a second run (no atomics)."""
    import cupy

    r = rng()
    shapes = [(1, 1, 4), (9, 2, 132), (17, 3, 1000), (32, 2, 768), (3, 1, 5000), (2, 18, 64), (64, 2, 256)]
    if not vec:  # odd T, T = 1, fewer K rows than a chunk
        shapes += [(5, 2, 131), (1, 3, 1), (40, 1, 3), (2, 17, 701)]
    for B, C, T in shapes:
        w, k, g = r.standard_normal((C, T)), r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
        kd, gd = cupy_array(k, "float32"), cupy_array(g, "float32")
        runs = []
        for _ in range(2):
            gw = cupy_array(np.full((C, T), np.nan), "float32")
            ws = cupy.full((C, -(-T // tx.BAND), 2 * tx.BAND), np.nan, np.float32)
            st = (C * T, T, 1)
            tx._launch_grad_w_tf32x3("float32", kd, st, gd, st, gw, B, C, T, ws, chunk=chunk, vec=vec)
            runs.append(cupy.asnumpy(gw))
        err = rel_err(runs[0], tx.reference_backward(w, k, g)[0])
        assert err <= TF32X3_TOL, (chunk, vec, B, C, T, err)
        assert np.array_equal(runs[0], runs[1]), (chunk, vec, B, C, T, "not deterministic")


@gpu
@pytest.mark.parametrize("shape", [(32, 3, 768), (70, 2, 1000), (1, 2, 1), (3, 2, 5000), (33, 1, 129), (12, 5, 64)])
def test_grad_k_kernel_combines_grad_w_bands(shape):
    """grad_k's kernel with the band combine (TOEPLITZ_GRAD_K_COMBINE, a probe variant; its blocks split each
    channel's lags): gw (NaN-poisoned) equals, bit for bit, the bands combined by timex_grad_w_bands, and grad_k
    is the default kernel's."""
    import cupy

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)) / np.sqrt(T), r.standard_normal(shape), r.standard_normal(shape)
    wd, kd, gd = (cupy_array(x, "float32") for x in (w, k, g))
    st = (C * T, T, 1)
    ws = cupy.full((C, -(-T // tx.BAND), 2 * tx.BAND), np.nan, np.float32)
    gw, sep = cupy.full((C, T), np.nan, np.float32), cupy.full((C, T), np.nan, np.float32)
    gk, gk_ref = cupy.full(shape, np.nan, np.float32), cupy.full(shape, np.nan, np.float32)
    tx._launch_grad_w_tf32x3("float32", kd, st, gd, st, gw, B, C, T, ws, combine=False)
    tx._launch_tf32x3("float32", True, wd, T, gd, C * T, T, gk, 0.0, B, C, T, combine=(ws, gw))
    tx._launch_grad_w_tf32x3("float32", kd, st, gd, st, sep, B, C, T, ws)
    tx._launch_tf32x3("float32", True, wd, T, gd, C * T, T, gk_ref, 0.0, B, C, T)
    assert np.array_equal(cupy.asnumpy(gw), cupy.asnumpy(sep)), shape
    assert np.array_equal(cupy.asnumpy(gk), cupy.asnumpy(gk_ref)), shape
    rgw, rgk = tx.reference_backward(rounded(w, "float32"), rounded(k, "float32"), rounded(g, "float32"))
    assert rel_err(gw, rgw) <= TF32X3_TOL and rel_err(gk, rgk) <= TF32X3_TOL, shape


@gpu
@pytest.mark.parametrize("cfg", [tx.TILED["b32"], tx.TILED["b8"]] + tx.PROBE_TILED)
@pytest.mark.parametrize("vec", [False, True])
def test_tile_shapes_both_directions(cfg, vec, poison):
    """Every compiled tile shape (default and probe candidates), scalar and 4-wide loads, forward and
    the time-reversed product that gives grad_k."""
    r = rng()
    for B, C, T in [(1, 1, 4), (5, 2, 132), (33, 3, 1000), (32, 2, 768)]:
        w, k = r.standard_normal((C, T)) / np.sqrt(T), r.standard_normal((B, C, T))
        wd, kd = cupy_array(w, "float32"), cupy_array(k, "float32")
        out = cupy_array(np.full((B, C, T), np.nan), "float32")
        tx._launch_tiled("float32", cfg, False, wd, T, kd, C * T, T, out, 0.5, B, C, T, vec=vec)
        assert rel_err(out, tx.reference(w, k, 0.5)) <= 1e-5, (cfg, vec, B, C, T)
        out.fill(np.nan)
        tx._launch_tiled("float32", cfg, True, wd, T, kd, C * T, T, out, 0.0, B, C, T, vec=vec)
        _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
        assert rel_err(out, rgk) <= 1e-5, (cfg, vec, B, C, T, "reversed")


@gpu
@pytest.mark.parametrize("cfg", [None] + tx.PROBE_GRAD_W)
@pytest.mark.parametrize("vec", [False, True])
def test_grad_w_tile_shapes(cfg, vec):
    r = rng()
    for B, C, T in [(1, 1, 4), (9, 2, 132), (17, 3, 1000), (32, 2, 768)]:
        w, k, g = r.standard_normal((C, T)), r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
        kd, gd = cupy_array(k, "float32"), cupy_array(g, "float32")
        gw = cupy_array(np.full((C, T), np.nan), "float32")
        st = (C * T, T, 1)
        tx._launch_grad_w("float32", cfg, kd, st, gd, st, gw, B, C, T, vec=vec)
        assert rel_err(gw, tx.reference_backward(w, k, g)[0]) <= 1e-5, (cfg, vec, B, C, T)


@gpu
def test_strided_k_and_grad_out(poison):
    import cupy

    r = rng()
    B, C, T = 5, 3, 130
    w = r.standard_normal((C, T)) / np.sqrt(T)
    k, g = r.standard_normal((C, B, T)), r.standard_normal((B, C, 2 * T))
    wd, kd = cupy.asarray(w, np.float32), cupy.asarray(k, np.float32).transpose(1, 0, 2)  # batch/channel strides
    gd = cupy.asarray(g, np.float32)[:, :, ::2]  # t stride 2: copied once
    kh, gh = rounded(k, "float32").transpose(1, 0, 2), rounded(g, "float32")[:, :, ::2]
    assert tx._rows(kd, "k", "timex")[0] is kd
    assert rel_err(tx.timex(wd, kd), tx.reference(rounded(w, "float32"), kh)) <= 1e-5
    gw, gk = tx.timex_backward(wd, kd, gd)
    rgw, rgk = tx.reference_backward(rounded(w, "float32"), kh, gh)
    assert rel_err(gw, rgw) <= 1e-5 and rel_err(gk, rgk) <= 1e-5


@gpu
@pytest.mark.parametrize("shape", [(2, 2, 5000), (2, 1, 16384)])
def test_long_t_float32(shape, poison):
    check_forward(shape, "float32")
    check_backward(shape, "float32")


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_grad_w_at_t4096(dtype, poison):
    check_backward((8, 3, 4096), dtype)


@gpu
def test_empty_shapes():
    import cupy

    for shape in [(0, 3, 5), (2, 0, 5), (2, 3, 0)]:
        k = cupy.ones(shape, np.float32)
        w = cupy.ones(shape[1:], np.float32)
        assert tx.timex(w, k).shape == shape
        gw, gk = tx.timex_backward(w, k, k)
        assert gw.shape == shape[1:] and gk.shape == shape
        if shape[0] == 0:
            assert float(abs(gw).sum()) == 0.0


@gpu
def test_errors_name_the_argument():
    import cupy

    k = cupy.ones((2, 3, 5), np.float32)
    with pytest.raises(ValueError, match=r"w must have shape \(C, T\) = \(3, 5\)"):
        tx.timex(cupy.ones((3, 6), np.float32), k)
    with pytest.raises(TypeError, match="w has dtype float16 but k has float32"):
        tx.timex(cupy.ones((3, 5), np.float16), k)
    with pytest.raises(TypeError, match="w has dtype int32; expected one of"):
        tx.timex(cupy.ones((3, 5), np.int32), cupy.ones((2, 3, 5), np.int32))
    with pytest.raises(ValueError, match="k must have 3 dimensions"):
        tx.timex(cupy.ones((3, 5), np.float32), cupy.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="grad_out must have the shape of k"):
        tx.timex_backward(cupy.ones((3, 5), np.float32), k, cupy.ones((2, 3, 4), np.float32))
    with pytest.raises(TypeError, match="w must be a cupy.ndarray"):
        tx.timex(np.ones((3, 5), np.float32), k)


# ---- torch --------------------------------------------------------------------------------------


def torch_inputs(shape, dtype, tmax=None, requires_grad=True):
    B, C, T = shape
    full = torch.randn(C, tmax or T, device="cuda", dtype=torch.float64) / T ** 0.5
    full = full.to(getattr(torch, dtype)).requires_grad_(requires_grad)
    w = full[:, -T:]
    k = torch.randn(shape, device="cuda", dtype=torch.float64).to(getattr(torch, dtype)).requires_grad_(requires_grad)
    return full, w, k


@torch_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_autograd(dtype):
    import cupy_kernels as ck

    B, C, T = 3, 4, 200
    full, w, k = torch_inputs((B, C, T), dtype, tmax=256)
    out = ck.timex(w, k, 0.25)
    assert isinstance(out, torch.Tensor) and out.dtype == k.dtype and out.shape == (B, C, T)
    g = torch.randn_like(out)
    out.backward(g)
    wh, kh, gh = (to_f64(x) for x in (w, k, g))
    assert rel_err(out, tx.reference(wh, kh, 0.25)) <= TOL[dtype]
    rgw, rgk = tx.reference_backward(wh, kh, gh)
    assert full.grad.shape == (C, 256) and float(full.grad[:, :-T].abs().sum()) == 0.0
    assert rel_err(full.grad[:, -T:], rgw) <= TOL[dtype] and rel_err(k.grad, rgk) <= TOL[dtype]


@torch_gpu
@pytest.mark.parametrize("variant", ["tf32x3", "balanced", "naive"])
def test_torch_autograd_other_variants(variant):
    import cupy_kernels as ck

    B, C, T = 8, 3, 256
    _, w, k = torch_inputs((B, C, T), "float32")
    out = ck.timex(w, k, 0.0, variant=variant)
    g = torch.randn_like(out)
    gw, gk = torch.autograd.grad(out, (w, k), g)
    wh, kh, gh = (to_f64(x) for x in (w, k, g))
    rgw, rgk = tx.reference_backward(wh, kh, gh)
    tol = TF32X3_TOL if variant == "tf32x3" else 1e-5
    assert rel_err(out, tx.reference(wh, kh)) <= tol
    assert rel_err(gw, rgw) <= tol and rel_err(gk, rgk) <= tol


@torch_gpu
def test_torch_gradcheck_float64():
    import cupy_kernels as ck

    full, _, k = torch_inputs((2, 3, 7), "float64", tmax=9, requires_grad=False)
    w = full[:, -7:].detach().requires_grad_()  # a leaf that is a row-strided view
    k.requires_grad_()
    assert w.stride() == (9, 1)
    assert torch.autograd.gradcheck(lambda w_, k_: ck.timex(w_, k_, 0.5), (w, k), eps=1e-6, atol=1e-7)
    torch.library.opcheck(torch.ops.cupy_kernels.timex.default, (w.detach(), k.detach(), 0.5, "auto"))


@torch_gpu
def test_torch_matches_conv1d_formulation():
    import torch.nn.functional as F

    import cupy_kernels as ck

    B, C, T = 4, 8, 96
    _, w, k = torch_inputs((B, C, T), "float32")
    ref = 0.1 + F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=C)
    g = torch.randn_like(ref)
    rw, rk = torch.autograd.grad(ref, (w, k), g)
    ow, ok = torch.autograd.grad(ck.timex(w, k, 0.1), (w, k), g)
    assert rel_err(ck.timex(w, k, 0.1), to_f64(ref)) < 1e-5
    assert rel_err(ow, to_f64(rw)) < 1e-5 and rel_err(ok, to_f64(rk)) < 1e-5


@torch_gpu
def test_torch_compile_and_training_step():
    import cupy_kernels as ck

    class Mix(torch.nn.Module):
        def __init__(self, C, Tmax):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(C, Tmax) / Tmax ** 0.5)
            self.proj = torch.nn.Linear(C, C)

        def forward(self, x):  # x (B, T, C)
            T = x.shape[1]
            k = self.proj(x).transpose(1, 2)  # (B, C, T), channel stride 1 -> t stride C: copied by the op
            return ck.timex(self.w[:, -T:], k.contiguous(), 0.0).transpose(1, 2)

    torch.manual_seed(0)
    model = Mix(16, 64).cuda()
    x = torch.randn(2, 48, 16, device="cuda")
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    assert rel_err(out, to_f64(eager)) < 1e-6
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = compiled(x).square().mean()
    loss.backward()
    gw = model.w.grad.clone()
    assert torch.isfinite(gw).all() and float(gw[:, -48:].abs().sum()) > 0 and float(gw[:, :-48].abs().sum()) == 0
    w_before = model.w.detach().clone()
    opt.step()
    assert not torch.equal(w_before, model.w.detach())
