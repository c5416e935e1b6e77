"""The autograd contract of every op with a backward and of every in-place op, on torch CUDA tensors.

First the cases a user reported (in-place norms under a real gradient, layer_norm over rows of one element,
out-of-place norm gradients of a (1, 2) input, reductions of 0-d tensors, max / min without a backward,
softmax without dtype=), then their siblings: every op with upstream gradients that are dense, expanded
(y.sum(), a broadcast view), non-contiguous (a permuted or a strided view) or of another dtype, and with each
subset of its inputs requiring grad, against torch's own ops in float64; then torch.compile(fullgraph=True)
and CUDA graph capture of a forward and backward."""
from __future__ import annotations

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import TOL, gpu, torch, torch_gpu
from oracle import (GRAD_KINDS, assert_close, backward, grad_subsets, host, norm_dx_scale, tdtype,
                    torch_pad_to_numpy, upstream)

DEV = "cuda"
DTYPES = ("float32", "float64")
EPS = {"layer_norm": 1e-5, "rms_norm": 1e-6}


def F():
    return torch.nn.functional


def randn(shape, dtype, scale=1.0, shift=0.0):
    return (torch.randn(shape, device=DEV, dtype=torch.float64) * scale + shift).to(tdtype(dtype))


def weight_of(n, dtype):
    """Entries in +-[0.5, 1.5): none exactly zero (the in-place backward divides by them)."""
    w = (torch.rand(n, device=DEV, dtype=torch.float64) + 0.5) * (torch.randint(0, 2, (n,), device=DEV) * 2 - 1)
    return w.to(tdtype(dtype))


def ref_norm(mode, x, w, b, eps):
    n = x.shape[-1]
    if mode == "layer_norm":
        return F().layer_norm(x, (n,), w, b, eps)
    return F().rms_norm(x, (n,), w, eps)


# ---- the reported cases ------------------------------------------------------------------------------


@torch_gpu
@pytest.mark.parametrize("op", ["layer_norm_", "rms_norm_"])
def test_reported_inplace_norm_under_a_real_gradient(op):
    """layer_norm_(x * 2, w, b).backward(randn) raised 'norm_backward ... may not alias any inputs' where w and b
    do not require grad; with w.requires_grad_() or y.sum().backward() it ran."""
    mode = op[:-1]
    x = torch.randn(64, 512, device=DEV, requires_grad=True)
    w = torch.rand(512, device=DEV) + 0.5
    b = torch.randn(512, device=DEV)
    y = getattr(ck, op)(x * 2, w, b) if mode == "layer_norm" else getattr(ck, op)(x * 2, w)
    g = torch.randn_like(y)
    y.backward(g)
    xr = x.detach().double().requires_grad_()
    ref = ref_norm(mode, xr * 2, w.double(), b.double() if mode == "layer_norm" else None, EPS[mode])
    ref.backward(g.double())
    assert_close(y, ref, "float32", what=f"{op} forward")
    scale = norm_dx_scale(host(x) * 2, host(w), host(g), EPS[mode], mode) * 2
    assert_close(x.grad, xr.grad, "float32", k=3, scale=scale, what=f"{op} dx")


@torch_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("inplace", [False, True])
def test_reported_layer_norm_of_one_element_rows_is_the_bias(dtype, inplace):
    """Over a last dimension of 1, x - mean is exactly 0, so layer_norm is exactly `bias` (a 3 x 1 float32 input
    came back with relative error 2.5e-5); its gradient with respect to x is 0 (to rounding: torch's own is not
    exact either)."""
    x = randn((3, 1), dtype, 3.0, 1.0)
    w = weight_of(1, dtype)
    b = randn((1,), dtype)
    y = ck.layer_norm_(x.clone(), w, b) if inplace else ck.layer_norm(x, w, b)
    assert torch.equal(y, b.expand(3, 1)), (y, b)
    if not inplace:
        xg = x.detach().clone().requires_grad_()
        g = torch.randn_like(xg)
        (dx,) = torch.autograd.grad(ck.layer_norm(xg, w, b), (xg,), g)
        scale = norm_dx_scale(host(x), host(w), host(g), EPS["layer_norm"], "layer_norm")
        assert_close(dx, np.zeros((3, 1)), dtype, k=3, scale=scale, what="layer_norm dx over rows of one")


@gpu
def test_reported_layer_norm_of_one_element_rows_is_the_bias_cupy():
    import cupy

    x = cupy.asarray(np.random.default_rng().standard_normal((3, 1)) * 3 + 1, dtype=cupy.float32)
    w = cupy.asarray([0.75], dtype=cupy.float32)
    b = cupy.asarray([0.3], dtype=cupy.float32)
    assert (ck.layer_norm(x, w, b) == b).all()
    y, mean, rstd = ck.layer_norm_forward(x, w, b)
    assert (y == b).all() and (mean.ravel() == x.ravel()).all()


@torch_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_reported_out_of_place_norm_grad_of_a_1x2_input(mode, dtype):
    """torch's OpInfo sample: torch.autograd.grad through ck.layer_norm / ck.rms_norm on a (1, 2) input with weight
    (and bias) raised the same aliasing error out of place."""
    x = randn((1, 2), dtype).requires_grad_()
    w = randn((2,), dtype).requires_grad_()
    b = randn((2,), dtype).requires_grad_()
    leaves = (x, w, b) if mode == "layer_norm" else (x, w)
    y = ck.layer_norm(x, w, b) if mode == "layer_norm" else ck.rms_norm(x, w)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, leaves, g)
    dbl = [t.detach().double().requires_grad_() for t in leaves]
    ref = ref_norm(mode, dbl[0], dbl[1], dbl[2] if mode == "layer_norm" else None, EPS[mode])
    want = torch.autograd.grad(ref, dbl, g.double())
    scale = norm_dx_scale(host(x), host(w), host(g), EPS[mode], mode)
    assert_close(grads[0], want[0], dtype, k=3, scale=scale, what=f"{mode} dx")
    for got, ref_grad, name in zip(grads[1:], want[1:], ("dweight", "dbias")):
        assert_close(got, ref_grad, dtype, k=3, what=f"{mode} {name}")


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("kind", [pytest.param("torch", marks=torch_gpu), pytest.param("cupy", marks=gpu)])
@pytest.mark.parametrize("axis", [None, ()], ids=["axis=None", "axis=()"])
def test_reported_reductions_of_a_0d_tensor(op, kind, axis):
    """ck.sum / mean / max / min of a 0-d tensor raised IndexError; NumPy and torch return the value (axis=() on
    any array reduces nothing: the array itself)."""
    value = 2.5
    if kind == "torch":
        x = torch.tensor(value, device=DEV)
        y = getattr(ck, op)(x, axis=axis)
        assert isinstance(y, torch.Tensor) and y.shape == () and y.dtype == x.dtype
    else:
        import cupy

        x = cupy.asarray(value, dtype=cupy.float32)
        y = getattr(ck, op)(x, axis=axis)
        assert y.shape == () and y.dtype == x.dtype
    assert float(y) == value
    for keepdims in (True, False):
        assert tuple(getattr(ck, op)(x, axis=axis, keepdims=keepdims).shape) == ()


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("kind", [pytest.param("torch", marks=torch_gpu), pytest.param("cupy", marks=gpu)])
def test_reductions_over_no_axes_return_the_input(op, kind):
    """axis=() reduces nothing on any array (NumPy): the result is x (as a new array), of x's shape."""
    data = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    if kind == "torch":
        x = torch.from_numpy(data).to(DEV)
    else:
        import cupy

        x = cupy.asarray(data)
    y = getattr(ck, op)(x, axis=())
    assert tuple(y.shape) == (3, 4)
    np.testing.assert_array_equal(host(y), data)


@torch_gpu
@pytest.mark.parametrize("axis", [None, 1, 0, (0, 1)], ids=str)
@pytest.mark.parametrize("op", ["max", "min"])
def test_reported_max_min_backward_spreads_ties_evenly(op, axis):
    """ck.max / ck.min had no backward; torch's amax / amin give each of k tied extremes 1/k of the gradient."""
    x = torch.tensor([[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 2.0, 2.0], [-5.0, 0.5, -5.0, 0.5]], device=DEV,
                     dtype=torch.float64, requires_grad=True)
    y = getattr(ck, op)(x, axis=axis)
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, (x,), g)
    xr = x.detach().clone().requires_grad_()
    dim = tuple(range(x.dim())) if axis is None else axis
    ref = getattr(torch, "amax" if op == "max" else "amin")(xr, dim=dim)
    (want,) = torch.autograd.grad(ref, (xr,), g)
    assert torch.allclose(dx, want, rtol=1e-12, atol=1e-12), (dx, want)


@torch_gpu
@pytest.mark.parametrize("src, dst", [("bfloat16", "float32"), ("float16", "float32"), ("float32", "float64"),
                                      ("float64", "float32")])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_reported_softmax_dtype_argument(op, src, dst):
    """torch's softmax / log_softmax take dtype= (the input is cast to it and the op computed in it); ours
    should too: ck.softmax(x, dtype=torch.float32) returns float32, and autograd returns x's dtype."""
    x = randn((37, 300), src, 3.0).requires_grad_()
    y = getattr(ck, op)(x, axis=-1, dtype=tdtype(dst))
    assert y.dtype == tdtype(dst)
    ref = getattr(torch, op)(x.detach().to(tdtype(dst)).double(), -1)
    assert_close(y, ref, dst, what=f"{op} {src}->{dst}")
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, (x,), g)
    xr = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(getattr(torch, op)(xr.to(tdtype(dst)).double(), -1), (xr,), g.double())
    assert dx.dtype == x.dtype
    coarse = max((src, dst), key=TOL.get)  # computed in dst, returned in src: the coarser bound
    assert_close(dx, want, coarse, k=3, scale=float(g.abs().max()), what=f"{op} dx {src}->{dst}")


@gpu
@pytest.mark.parametrize("dst", ["float32", np.float64, "float16"], ids=["float32", "np.float64", "float16"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_reported_softmax_dtype_argument_cupy(op, dst):
    """The same for CuPy: dtype a NumPy dtype or its name."""
    import cupy

    x = cupy.asarray(np.random.default_rng().standard_normal((9, 130)), dtype=cupy.float32)
    y = getattr(ck, op)(x, axis=-1, dtype=dst)
    assert y.dtype == np.dtype(dst)
    from oracle import softmax_ref

    assert_close(y, softmax_ref(cupy.asnumpy(x.astype(np.dtype(dst))).astype(np.float64), -1, op == "log_softmax"),
                 np.dtype(dst).name, what=f"{op} cupy -> {np.dtype(dst).name}")


# ---- siblings: norms -------------------------------------------------------------------------------

NORM_OPS = ("layer_norm", "rms_norm", "layer_norm_", "rms_norm_", "nn.LayerNorm", "nn.RMSNorm",
            "nn.LayerNorm(inplace)", "nn.RMSNorm(inplace)")
NORM_SHAPES = ((64, 512), (3, 7, 129), (2, 20000))


def _norm_mode(op):
    return "rms_norm" if "rms" in op.lower() else "layer_norm"


def _norm_cases():
    for op in NORM_OPS:
        names = ("x", "weight") if _norm_mode(op) == "rms_norm" else ("x", "weight", "bias")
        for subset in grad_subsets(names):
            yield op, "+".join(subset)


def _call_norm(op, x, w, b, eps):
    mode = _norm_mode(op)
    if op.startswith("nn."):
        from cupy_kernels import nn as cknn

        n = x.shape[-1]
        cls = cknn.LayerNorm if mode == "layer_norm" else cknn.RMSNorm
        m = cls(n, eps=eps, inplace="inplace" in op, device=DEV, dtype=x.dtype)
        with torch.no_grad():
            m.weight.copy_(w)
            if mode == "layer_norm":
                m.bias.copy_(b)
        m.weight.requires_grad_(w.requires_grad)
        if mode == "layer_norm":
            m.bias.requires_grad_(b.requires_grad)
        return m(x), m.weight, (m.bias if mode == "layer_norm" else None)
    fn = getattr(ck, op)
    y = fn(x, w, b, eps) if mode == "layer_norm" else fn(x, w, eps)
    return y, w, b


@torch_gpu
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", GRAD_KINDS)
@pytest.mark.parametrize("op, requires", list(_norm_cases()))
def test_norm_gradients(op, requires, kind, dtype, shape):
    """Every norm op (functional, in place, modules) with each subset of (x, weight, bias) requiring grad and
    every kind of upstream gradient: forward and gradients against torch's float64 ops. In-place ops write into
    a non-leaf (x * 2), as a leaf that requires grad may not be written."""
    mode = _norm_mode(op)
    eps = EPS[mode]
    req = set(requires.split("+"))
    n = shape[-1]
    x0 = randn(shape, dtype, 2.0, 0.5)
    w0, b0 = weight_of(n, dtype), randn((n,), dtype)
    x = x0.clone().requires_grad_("x" in req)
    w = w0.clone().requires_grad_("weight" in req)
    b = b0.clone().requires_grad_("bias" in req) if mode == "layer_norm" else None
    y, w_used, b_used = _call_norm(op, x * 2, w, b, eps)
    assert y.requires_grad and y.shape == x.shape and y.dtype == x.dtype
    g = upstream(kind, y)
    backward(y, g)

    xr = x0.double().requires_grad_("x" in req)
    wr = w0.double().requires_grad_("weight" in req)
    br = b0.double().requires_grad_("bias" in req) if mode == "layer_norm" else None
    ref = ref_norm(mode, xr * 2, wr, br, eps)
    backward(ref, None if g is None else g.double())
    what = f"{op} {dtype} {shape} requires={requires} upstream={kind}"
    assert_close(y, ref, dtype, scale=float(ref.detach().abs().max()), what=what + " forward")
    gh = np.ones(shape) if g is None else host(g)
    if "x" in req:
        scale = 2 * norm_dx_scale(host(x0) * 2, host(w0), gh, eps, mode)
        assert_close(x.grad, xr.grad, dtype, k=3, scale=scale, what=what + " dx")
    if "weight" in req:
        assert_close(w_used.grad, wr.grad, dtype, k=3, what=what + " dweight")
    if "bias" in req:
        assert_close(b_used.grad, br.grad, dtype, k=3, what=what + " dbias")


@torch_gpu
@pytest.mark.parametrize("kind", GRAD_KINDS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "layer_norm_", "rms_norm_"])
def test_norm_gradients_without_affine(op, kind):
    mode = _norm_mode(op)
    x0 = randn((33, 300), "float64", 2.0)
    x = x0.clone().requires_grad_()
    y = getattr(ck, op)(x * 2, eps=EPS[mode])
    g = upstream(kind, y)
    backward(y, g)
    xr = x0.clone().requires_grad_()
    ref = ref_norm(mode, xr * 2, None, None, EPS[mode])
    backward(ref, None if g is None else g.double())
    gh = np.ones(y.shape) if g is None else host(g)
    scale = 2 * norm_dx_scale(host(x0) * 2, None, gh, EPS[mode], mode)
    assert_close(x.grad, xr.grad, "float64", k=3, scale=scale, what=f"{op} upstream={kind}")


@torch_gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["layer_norm_", "rms_norm_"])
def test_inplace_norm_half_types_real_gradient(op, dtype):
    """The reported in-place case in the half types (the backward recomputes x-hat from the rounded output: a
    looser bound, as tests/test_norm.py's)."""
    mode = op[:-1]
    x0 = randn((64, 512), dtype, 2.0)
    x = x0.clone().requires_grad_()
    w, b = weight_of(512, dtype), randn((512,), dtype)
    y = ck.layer_norm_(x * 2, w, b) if mode == "layer_norm" else ck.rms_norm_(x * 2, w)
    g = randn(tuple(y.shape), dtype)
    y.backward(g)
    xr = x0.double().requires_grad_()
    ref = ref_norm(mode, xr * 2, w.double(), b.double() if mode == "layer_norm" else None, EPS[mode])
    ref.backward(g.double())
    scale = 2 * norm_dx_scale(host(x0) * 2, host(w), host(g), EPS[mode], mode)
    assert_close(x.grad, xr.grad, dtype, k=6, scale=scale, what=f"{op} {dtype}")


# ---- siblings: softmax family ----------------------------------------------------------------------

SOFTMAX_SHAPES = ((64, 512), (3, 7, 129), (2, 40000))


@torch_gpu
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", GRAD_KINDS)
@pytest.mark.parametrize("op, axis", [("softmax", -1), ("softmax", 0), ("log_softmax", -1), ("log_softmax", 0),
                                      ("softmax_", -1)])
def test_softmax_gradients(op, axis, kind, dtype, shape):
    log = op == "log_softmax"
    x0 = randn(shape, dtype, 3.0)
    x = x0.clone().requires_grad_()
    y = getattr(ck, op)(x * 2, axis=axis)
    assert y.requires_grad and y.shape == x.shape and y.dtype == x.dtype
    g = upstream(kind, y)
    backward(y, g)
    xr = x0.double().requires_grad_()
    ref = (torch.log_softmax if log else torch.softmax)(xr * 2, axis)
    backward(ref, None if g is None else g.double())
    what = f"{op} axis={axis} {dtype} {shape} upstream={kind}"
    assert_close(y, ref, dtype, what=what + " forward")
    gmax = 1.0 if g is None else float(g.abs().max())
    assert_close(x.grad, xr.grad, dtype, k=3, scale=2 * gmax, what=what + " dx")


# ---- siblings: reductions --------------------------------------------------------------------------

REDUCE_AXES = (None, -1, 0, (0, 2), (1,))


@torch_gpu
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", REDUCE_AXES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", GRAD_KINDS)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduction_gradients(op, kind, dtype, axis, keepdims):
    """sum / mean broadcast the gradient (mean / count); max / min spread it evenly over ties like torch.amax /
    amin (integer-valued inputs: many ties)."""
    x0 = torch.randint(-3, 4, (5, 6, 7), device=DEV).to(tdtype(dtype))
    if op in ("sum", "mean"):
        x0 = x0 + randn((5, 6, 7), dtype)
    x = x0.clone().requires_grad_()
    y = getattr(ck, op)(x * 2, axis=axis, keepdims=keepdims)
    g = upstream(kind, y)
    backward(y, g)
    xr = x0.double().requires_grad_()
    dim = tuple(range(3)) if axis is None else axis
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
    ref = fn(xr * 2, dim=dim, keepdim=keepdims)
    backward(ref, None if g is None else g.double())
    what = f"{op} axis={axis} keepdims={keepdims} {dtype} upstream={kind}"
    assert tuple(y.shape) == tuple(ref.shape), what
    assert_close(y, ref, dtype, what=what + " forward")
    assert_close(x.grad, xr.grad, dtype, k=2, what=what + " dx")


# ---- siblings: timex -------------------------------------------------------------------------------


def _timex_ref(w, k, eps):
    T = k.shape[-1]
    return eps + F().conv1d(F().pad(k, (T - 1, 0)), w.unsqueeze(1), groups=k.shape[1])


@torch_gpu
@pytest.mark.parametrize("variant, dtype, shape", [("auto", "float64", (3, 4, 100)), ("auto", "float32", (3, 4, 100)),
                                                    ("auto", "float32", (16, 3, 256)), ("naive", "float32", (2, 3, 70)),
                                                    ("tiled", "float32", (5, 2, 300)),
                                                    ("tf32x3", "float32", (4, 3, 200)),
                                                    ("mma16", "bfloat16", (13, 3, 200))])
@pytest.mark.parametrize("kind", GRAD_KINDS)
@pytest.mark.parametrize("requires", ["w", "k", "w+k"])
def test_timex_gradients(requires, kind, variant, dtype, shape):
    B, C, T = shape
    req = set(requires.split("+"))
    w0, k0 = randn((C, T), dtype) / T ** 0.5, randn(shape, dtype)
    w = w0.clone().requires_grad_("w" in req)
    k = k0.clone().requires_grad_("k" in req)
    y = ck.timex(w, k, 0.25, variant=variant)
    g = upstream(kind, y)
    backward(y, g)
    wr, kr = w0.double().requires_grad_("w" in req), k0.double().requires_grad_("k" in req)
    ref = _timex_ref(wr, kr, 0.25)
    backward(ref, None if g is None else g.double())
    what = f"timex variant={variant} {dtype} {shape} requires={requires} upstream={kind}"
    k_tol = 5 if variant == "tf32x3" else 2
    assert_close(y, ref, dtype, k=k_tol, what=what + " forward")
    if "w" in req:
        assert_close(w.grad, wr.grad, dtype, k=k_tol, what=what + " grad_w")
    if "k" in req:
        assert_close(k.grad, kr.grad, dtype, k=k_tol, what=what + " grad_k")


# ---- siblings: pad ---------------------------------------------------------------------------------

PAD_CASES = [("constant", {}), ("constant", {"constant_values": 1.5}), ("edge", {}), ("reflect", {}),
             ("symmetric", {}), ("wrap", {}), ("brick", {"stagger": 3})]


@torch_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", GRAD_KINDS)
@pytest.mark.parametrize("mode, kw", PAD_CASES, ids=lambda v: str(v) if not isinstance(v, dict) else
                         ",".join(f"{a}={b}" for a, b in v.items()) or "-")
def test_pad_gradients(mode, kw, kind, dtype):
    from oracle import pad_backward_ref, pad_ref

    shape, pw = (3, 5, 7), [(1, 2), (0, 3), (2, 1)]
    x0 = randn(shape, dtype)
    x = x0.clone().requires_grad_()
    y = ck.pad(x * 2, pw, mode=mode, **kw)
    g = upstream(kind, y)
    backward(y, g)
    what = f"pad mode={mode} {kw} {dtype} upstream={kind}"
    xh = host(x0) * 2
    want = pad_ref(xh, pw, mode, kw.get("constant_values", 0), kw.get("stagger", 0))
    assert_close(y, want, dtype, what=what + " forward")
    gh = np.ones(tuple(y.shape)) if g is None else host(g)
    assert_close(x.grad, 2 * pad_backward_ref(shape, pw, mode, gh, kw.get("stagger", 0)), dtype, what=what + " dx")


@torch_gpu
@pytest.mark.parametrize("tmode, pad", [("reflect", (2, 1, 1, 3)), ("replicate", (0, 4, 2, 0)),
                                        ("circular", (3, 3, 1, 2)), ("constant", (1, 0, 0, 2))])
def test_pad_gradients_match_torch_pad(tmode, pad):
    """The same backward against F.pad itself (its modes under their NumPy names)."""
    from oracle import TORCH_PAD_MODES

    x0 = randn((2, 3, 6, 5), "float64")
    x, xr = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    y = ck.pad(x, torch_pad_to_numpy(pad, 4), mode=TORCH_PAD_MODES[tmode])
    ref = F().pad(xr, pad, mode=tmode)
    g = torch.randn_like(ref)
    y.backward(g)
    ref.backward(g)
    assert torch.equal(y, ref)
    assert torch.allclose(x.grad, xr.grad, rtol=1e-12, atol=1e-12)


# ---- in-place products refuse autograd -------------------------------------------------------------


@torch_gpu
@pytest.mark.parametrize("op", ["square_matmul_", "linear_"])
def test_inplace_products_refuse_grad_and_leave_input(op):
    a = randn((64, 32), "float32")
    w = randn((32, 32), "float32") / 6
    bias = randn((32,), "float32")
    args = (w, bias) if op == "linear_" else (w,)
    h = a.clone().requires_grad_() * 1  # a non-leaf that requires grad
    before = h.detach().clone()
    with pytest.raises(RuntimeError, match="requires grad"):
        getattr(ck, op)(h, *args)
    assert torch.equal(h.detach(), before)
    with torch.no_grad():
        out = getattr(ck, op)(h, *args)
    assert out is h
    want = before.double() @ (w.double().t() if op == "linear_" else w.double())
    if op == "linear_":
        want = want + bias.double()
    assert_close(out.detach(), want, "float32", what=op)


# ---- torch.compile and CUDA graphs ------------------------------------------------------------------


def _graph_cases():
    """op -> (function of the leaves, leaves maker)."""
    def norm_leaves(with_bias=True):
        x = randn((96, 700), "float32", 2.0).requires_grad_()
        w = weight_of(700, "float32").requires_grad_()
        b = randn((700,), "float32").requires_grad_()
        return (x, w, b) if with_bias else (x, w)

    def rows():
        return (randn((96, 700), "float32", 3.0).requires_grad_(),)

    return {
        "layer_norm": (lambda x, w, b: ck.layer_norm(x, w, b), norm_leaves),
        "rms_norm": (lambda x, w: ck.rms_norm(x, w), lambda: norm_leaves(False)),
        "softmax": (lambda x: ck.softmax(x, axis=-1), rows),
        "log_softmax": (lambda x: ck.log_softmax(x, axis=0), rows),
        "sum": (lambda x: ck.sum(x, axis=1, keepdims=True), rows),
        "mean": (lambda x: ck.mean(x, axis=0), rows),
        "timex": (lambda w, k: ck.timex(w, k, 0.5),
                  lambda: (randn((8, 128), "float32").requires_grad_(), randn((4, 8, 128), "float32").requires_grad_())),
        "pad": (lambda x: ck.pad(x, ((0, 0), (3, 2)), mode="reflect"), rows),
    }


def _inplace_graph_cases():
    def norm_leaves():
        return (randn((96, 700), "float32", 2.0).requires_grad_(), weight_of(700, "float32").requires_grad_(),
                randn((700,), "float32").requires_grad_())

    return {
        "softmax_": (lambda x: ck.softmax_(x * 2), lambda: (randn((96, 700), "float32", 3.0).requires_grad_(),)),
        "layer_norm_": (lambda x, w, b: ck.layer_norm_(x * 2, w, b), norm_leaves),
        "rms_norm_": (lambda x, w: ck.rms_norm_(x * 2, w), lambda: norm_leaves()[:2]),
        "layer_norm_(no affine)": (lambda x: ck.layer_norm_(x * 2),
                                   lambda: (randn((96, 700), "float32", 2.0).requires_grad_(),)),
    }


def _eager_grads(fn, leaves, g):
    clones = [t.detach().clone().requires_grad_() for t in leaves]
    y = fn(*clones)
    return y.detach(), torch.autograd.grad(y, clones, g, allow_unused=True)


def _check_compiled(fn, make):
    leaves = make()
    compiled = torch.compile(fn, fullgraph=True)
    for _ in range(2):  # a second call with new values: no recompilation surprises
        with torch.no_grad():
            for t in leaves:
                t.copy_(torch.randn_like(t) * 0.5 + (0.75 if t.dim() == 1 else 0.0))
        y = compiled(*leaves)
        g = torch.randn_like(y)
        grads = torch.autograd.grad(y, leaves, g, allow_unused=True)
        want_y, want = _eager_grads(fn, leaves, g)
        assert torch.allclose(y, want_y, rtol=1e-5, atol=1e-5)
        for got, ref in zip(grads, want):
            assert (got is None) == (ref is None)
            if got is not None:
                assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduction_gradient_rule_matches_torch(op):
    """The reductions' backward (what _reduce_setup keeps, what _reduce_backward computes from it) against torch's
    autograd on CPU float64 tensors: every axis choice, with and without keepdims, ties and a 0-d input included."""
    import types

    from cupy_kernels import torch_ops as T

    x0 = torch.randn(3, 4, 5, dtype=torch.float64)
    x0[1, 2, :3] = x0[1, 2].max() if op == "max" else x0[1, 2].min()  # ties share the gradient
    torch_op = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
    scalar = torch.tensor(2.5, dtype=torch.float64)
    for x, dims in [(x0, None), (x0, 1), (x0, -1), (x0, (0, 2)), (x0, [2, 0, 1]), (scalar, None)]:
        for keepdim in (False, True):
            leaf = x.clone().requires_grad_()
            axes = T._reduce_axes(x.dim(), dims)
            want_y = torch_op(leaf, dim=axes, keepdim=keepdim) if axes else torch_op(leaf)
            g = torch.randn_like(want_y)
            (want,) = torch.autograd.grad(want_y, leaf, g)
            ctx = types.SimpleNamespace(save_for_backward=lambda *t: setattr(ctx, "saved_tensors", t))
            T._reduce_setup(ctx, op, x, want_y.detach(), dims, keepdim)
            got = T._reduce_backward(ctx, g)
            assert got.shape == x.shape and torch.allclose(got, want, rtol=1e-12, atol=1e-12), (op, dims, keepdim)


_TRACED = {  # op -> (call on a CPU tensor x of shape (4, 8), the custom op its graph holds)
    "softmax": (lambda x: ck.softmax(x), "cupy_kernels.softmax"),
    "log_softmax dtype=": (lambda x: ck.log_softmax(x, dtype=torch.float64), "cupy_kernels.softmax"),
    "layer_norm": (lambda x: ck.layer_norm(x, x[0], x[1]), "cupy_kernels.norm"),
    "rms_norm": (lambda x: ck.rms_norm(x, x[0]), "cupy_kernels.norm"),
    "sum": (lambda x: ck.sum(x, axis=-1), "cupy_kernels.sum"),
    "max": (lambda x: ck.max(x, axis=(0, 1)), "cupy_kernels.max"),
}


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("op", list(_TRACED))
def test_dynamo_traces_the_call_path_as_one_graph(op):
    """The eager call path's tests (tensor types, dispatch modes, compiling) stay traceable: Dynamo takes each op as
    one graph holding its custom op. No GPU needed: the backend runs nothing, so no kernel is launched."""
    call, custom_op = _TRACED[op]
    graphs = []

    def backend(gm, inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        outputs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        return lambda *args: [torch.empty(0) for _ in outputs]

    torch._dynamo.reset()
    torch.compile(call, fullgraph=True, backend=backend)(torch.randn(4, 8))
    assert len(graphs) == 1 and any(t.startswith(custom_op) for t in graphs[0]), graphs


@torch_gpu
@pytest.mark.parametrize("op", list(_graph_cases()))
def test_compile_fullgraph_forward_backward(op):
    fn, make = _graph_cases()[op]
    _check_compiled(fn, make)


@torch_gpu
@pytest.mark.parametrize("op", list(_inplace_graph_cases()))
def test_compile_fullgraph_inplace_forward_backward(op):
    fn, make = _inplace_graph_cases()[op]
    _check_compiled(fn, make)


def _check_graphed(fn, make):
    """Warm up on a side stream, capture forward + backward on it, replay with new inputs and a new upstream
    gradient copied into the static tensors: the graph's gradients equal an eager run's."""
    leaves = make()
    with torch.no_grad():
        y0 = fn(*[t.detach() for t in leaves])
    static_g = torch.randn_like(y0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            for t in leaves:
                t.grad = None
            fn(*leaves).backward(static_g)
    torch.cuda.current_stream().wait_stream(s)
    for t in leaves:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        static_y = fn(*leaves)
        static_y.backward(static_g)
    for _ in range(2):
        with torch.no_grad():
            for t in leaves:
                t.copy_(torch.randn_like(t) * 0.5 + (0.75 if t.dim() == 1 else 0.0))
            static_g.copy_(torch.randn_like(static_g))
        graph.replay()
        torch.cuda.synchronize()
        want_y, want = _eager_grads(fn, leaves, static_g)
        assert torch.allclose(static_y, want_y, rtol=1e-6, atol=1e-6)
        for t, ref in zip(leaves, want):
            assert torch.allclose(t.grad, ref, rtol=1e-6, atol=1e-6)


@torch_gpu
@pytest.mark.parametrize("op", list(_graph_cases()))
def test_cuda_graph_forward_backward(op):
    fn, make = _graph_cases()[op]
    _check_graphed(fn, make)


@torch_gpu
@pytest.mark.parametrize("op", list(_inplace_graph_cases()))
def test_cuda_graph_inplace_forward_backward(op):
    """In-place ops in a captured forward + backward (no host synchronisation may happen during capture)."""
    fn, make = _inplace_graph_cases()[op]
    _check_graphed(fn, make)
