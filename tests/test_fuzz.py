"""A reproducible property-based sweep of every op family against float64 references (NumPy on the values the
device saw; torch float64 where it is the reference): reductions, the softmax family, the norm family, timex, pad
and square_matmul_. Shapes from 0 and 1 up to rows of 300k elements (total elements bounded), views (transposed,
permuted, stepped, sliced, offset by one element), axes, dtypes, in place and out of place, torch and CuPy inputs,
autograd with each subset of the inputs requiring grad.

Hypothesis runs derandomized (the same cases on every run). A failure prints one line to reproduce it: the op,
shape, strides, dtype, axis and the key of the values' generator (`rng=`).

    CK_FUZZ_CASES=2000 pytest tests/test_fuzz.py     # the full sweep (default: 200 cases a family)
    CK_FUZZ_AVOID=0d,no_axes,max_grad,inplace_grad   # leave out draws that hit known bugs, to see past them
                                                     # (also: norm_grad, every norm autograd draw)
    CK_FUZZ_MAX_ELEMS=4194304                        # the bound on a case's elements (default 2^21)
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz sweep needs hypothesis")
from hypothesis import HealthCheck, given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cupy_kernels as ck  # noqa: E402
from conftest import HAS_GPU, HAS_TORCH_CUDA, TOL, gpu, torch  # noqa: E402
from oracle import (assert_close, f64, make_values, norm_backward_ref, norm_dx_scale, norm_ref, np_dtype,  # noqa: E402
                    pad_backward_ref, pad_ref, softmax_backward_ref, softmax_ref, timex_backward_ref, timex_ref,
                    to_host)

DEV = "cuda"
CASES = int(os.environ.get("CK_FUZZ_CASES", "200"))
AVOID = {t.strip() for t in os.environ.get("CK_FUZZ_AVOID", "").split(",") if t.strip()}
MAX_ELEMS = int(os.environ.get("CK_FUZZ_MAX_ELEMS", str(1 << 21)))
FUZZ = settings(max_examples=CASES, derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck))
LIBS = tuple(lib for lib, ok in (("torch", HAS_TORCH_CUDA), ("cupy", HAS_GPU)) if ok) or ("cupy",)
FLOATS = ("float32", "float16", "bfloat16", "float64")
UNIT = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
ACC_UNIT = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -24}


def allowed(options, tags=None):
    """`options` without those whose tag CK_FUZZ_AVOID names (tags: option -> tag)."""
    tags = tags or {}
    kept = [o for o in options if tags.get(o) not in AVOID]
    return kept or list(options)


# ---- values and layouts --------------------------------------------------------------------------------


POISON = {"bool": True}


def _poison(dtype):
    if dtype in POISON:
        return POISON[dtype]
    if dtype.startswith(("int", "uint")):
        return np.iinfo(dtype).max
    return np.nan


LAYOUTS = ("contiguous", "offset", "transposed", "stepped", "sliced", "permuted", "wide")
WIDE = 5  # "wide": rows of a wider array (row stride n + 5, unit stride along them)
C_CONTIGUOUS = ("contiguous", "offset")


class Arg:
    """A device array holding `values` (host, exact) laid out as `layout`; `desc` for the reproduction line."""

    def __init__(self, dev, values, layout, desc):
        self.dev, self.values, self.layout, self.desc = dev, values, layout, desc

    @property
    def f64(self):
        return f64(self.values)


def _view(b, lib, layout, shape, extra):
    if layout == "contiguous":
        return b
    if layout == "offset":
        return b.reshape(-1)[1:].reshape(shape)
    if layout == "transposed":
        return b.swapaxes(-1, -2)
    if layout == "stepped":
        return b[tuple(slice(None, None, 2) if i == extra else slice(None) for i in range(len(shape)))]
    if layout == "sliced":
        return b[1:1 + shape[0]]
    if layout == "permuted":
        inv = tuple(int(i) for i in np.argsort(extra))
        return b.permute(*inv) if lib == "torch" else b.transpose(inv)
    if layout == "wide":
        return b[..., WIDE:]
    raise ValueError(layout)


def _base_shape(layout, shape, extra):
    shape = list(shape)
    if layout == "offset":
        return (math.prod(shape) + 1,)
    if layout == "transposed":
        return tuple(shape[:-2] + [shape[-1], shape[-2]])
    if layout == "stepped":
        shape[extra] *= 2
        return tuple(shape)
    if layout == "sliced":
        shape[0] += 3
        return tuple(shape)
    if layout == "permuted":
        return tuple(shape[p] for p in extra)
    if layout == "wide":
        return tuple(shape[:-1] + [shape[-1] + WIDE])
    return tuple(shape)


def layout_choices(shape, layouts):
    nd = len(shape)
    ok = {"contiguous": True, "offset": True, "transposed": nd >= 2, "stepped": nd >= 1, "sliced": nd >= 1,
          "permuted": nd >= 3, "wide": nd >= 1}
    return [lay for lay in layouts if ok[lay]]


def make_arg(data, lib, values, dtype, layouts=LAYOUTS, name="x") -> Arg:
    """`values` on the device (kind `lib`) in a drawn layout; the elements outside the view are poison (NaN, or
    the largest integer) so that a kernel reading past its view shows it."""
    shape = tuple(values.shape)
    layout = data.draw(st.sampled_from(layout_choices(shape, layouts)), label=f"{name} layout")
    extra = None
    if layout == "stepped":
        extra = data.draw(st.integers(0, len(shape) - 1), label=f"{name} stepped axis")
    elif layout == "permuted":
        extra = tuple(data.draw(st.permutations(range(len(shape))), label=f"{name} axes order"))
    base = np.full(_base_shape(layout, shape, extra), _poison(dtype), dtype=np_dtype(dtype))
    _view(base, "numpy", layout, shape, extra)[...] = values
    if lib == "torch":
        carrier = base.astype(np.float32) if dtype == "bfloat16" else base
        dev_base = torch.from_numpy(np.array(carrier, order="C")).to(DEV, getattr(torch, dtype))  # (0-d stays 0-d)
        dev = _view(dev_base, lib, layout, shape, extra)
        strides, offset = tuple(dev.stride()), dev.storage_offset()
    else:
        import cupy

        dev_base = cupy.asarray(base)
        dev = _view(dev_base, lib, layout, shape, extra)
        item = dev.dtype.itemsize
        strides, offset = tuple(s // item for s in dev.strides), (dev.data.ptr - dev_base.data.ptr) // item
    desc = f"{name}: {lib} {dtype} shape={shape} layout={layout} strides={strides} offset={offset}"
    return Arg(dev, values, layout, desc)


def draw_rng(data):
    key = data.draw(st.integers(0, 2 ** 32 - 1), label="rng")
    return np.random.default_rng(key), key


def last_dim(data, lo=0, hi=300_000):
    """A row length from one of four ranges (so each gets drawn): tiny, short, block-sized, long."""
    ranges = [(lo, 8), (9, 300), (301, 20_000), (20_001, hi)]
    a, b = data.draw(st.sampled_from([r for r in ranges if r[1] >= lo and r[0] <= hi]), label="row range")
    return data.draw(st.integers(max(a, lo), min(b, hi)), label="n")


def draw_shape(data, min_nd=0, max_nd=4, min_last=0, max_last=300_000, max_elems=None, allow_zero=True):
    """Leading dimensions and a last one whose product stays within max_elems."""
    max_elems = max_elems or MAX_ELEMS
    nd = data.draw(st.integers(min_nd, max_nd), label="ndim")
    if nd == 0:
        return ()
    n = last_dim(data, min_last, min(max_last, max_elems))
    shape = [n]
    budget = max_elems // max(n, 1)
    lo = 0 if allow_zero else 1
    for _ in range(nd - 1):
        d = data.draw(st.one_of(st.integers(lo, 4), st.integers(max(lo, 1), max(1, min(budget, 400)))), label="dim")
        d = min(d, max(budget, lo))
        shape.insert(0, d)
        budget = max(budget // max(d, 1), 1)
    return tuple(shape)


# ---- reductions --------------------------------------------------------------------------------------

REDUCE_DTYPES = {"sum": FLOATS + ("int32", "int64"), "max": FLOATS + ("int32", "int64"),
                 "min": FLOATS + ("int32", "int64"), "mean": FLOATS}


def sum_tolerance(vals, axes, dtype, out_dtype, count):
    """|error| bound of a float sum: the accumulator's rounding over the terms' magnitudes, and the output's."""
    mag = np.abs(vals).sum(axis=axes) if axes else np.abs(vals)
    c = 4 * math.log2(count + 2) + 16
    return c * ACC_UNIT[dtype] * mag, 2 * UNIT[out_dtype]


def largest(dtype: str) -> float:
    """The largest finite value of a float dtype (bfloat16 through ml_dtypes)."""
    import ml_dtypes

    return float(ml_dtypes.finfo(np_dtype(dtype)).max)


@gpu
@FUZZ
@given(data=st.data())
def test_fuzz_reductions(data):
    op = data.draw(st.sampled_from(["sum", "mean", "max", "min"]), label="op")
    lib = data.draw(st.sampled_from(LIBS), label="lib")
    dtype = data.draw(st.sampled_from(REDUCE_DTYPES[op]), label="dtype")
    rng, key = draw_rng(data)
    shape = draw_shape(data, min_nd=0 if "0d" not in AVOID else 1)
    scale = data.draw(st.sampled_from([1.0, 100.0]), label="scale")
    x = make_arg(data, lib, make_values(rng, shape, dtype, scale=scale), dtype)
    nd = len(shape)
    kind = data.draw(st.sampled_from(allowed(["none", "int", "tuple", "empty"], {"empty": "no_axes"})), label="axis")
    if kind == "none" or nd == 0:
        axis = None if kind != "empty" else ()
    elif kind == "int":
        axis = data.draw(st.integers(-nd, nd - 1))
    elif kind == "tuple":
        picked = data.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        axis = tuple(a - nd if data.draw(st.booleans()) else a for a in picked)
    else:
        axis = ()
    keepdims = data.draw(st.booleans(), label="keepdims")
    axes = tuple(range(nd)) if axis is None else tuple(sorted(a % nd for a in ((axis,) if isinstance(axis, int) else axis)))
    count = math.prod(shape[a] for a in axes)
    grad = (lib == "torch" and dtype in FLOATS and data.draw(st.booleans(), label="requires grad")
            and not (op in ("max", "min") and "max_grad" in AVOID))
    repro = f"repro: {op}(axis={axis!r}, keepdims={keepdims}) {x.desc} rng={key} grad={grad}"
    note(repro)

    out_shape = tuple(1 if i in axes else s for i, s in enumerate(shape)) if keepdims else \
        tuple(s for i, s in enumerate(shape) if i not in axes)
    src = x.dev.detach().requires_grad_() if grad else x.dev
    if op in ("max", "min") and count == 0:  # NumPy and torch raise even when the result is empty
        with pytest.raises(ValueError, match="zero-size array"):
            getattr(ck, op)(src, axis=axis, keepdims=keepdims)
        return
    y = getattr(ck, op)(src, axis=axis, keepdims=keepdims)
    got = to_host(y)
    assert tuple(got.shape) == out_shape, f"{repro}: shape {got.shape}, expected {out_shape}"
    vals = x.values
    if dtype in FLOATS:
        v = f64(vals)
        if op in ("max", "min"):
            want = (np.max if op == "max" else np.min)(v, axis=axes, keepdims=keepdims) if count else np.zeros(out_shape)
            assert np.array_equal(f64(got), want), f"{repro}: max / min must be exact"
        else:
            want = np.sum(v, axis=axes, keepdims=keepdims)
            bound, rel = sum_tolerance(v, axes, dtype, dtype, count)
            bound = np.reshape(bound, want.shape)
            if op == "mean":
                with np.errstate(invalid="ignore", divide="ignore"):
                    want, bound = want / count, bound / max(count, 1)
            g = f64(got)
            err = np.abs(g - want)
            tol = bound + rel * np.abs(want)
            # a sum past the dtype's largest value (float16: 65504) is inf in the output dtype, as in torch
            overflow = np.isinf(g) & (np.sign(g) == np.sign(want)) & (np.abs(want) + tol >= largest(dtype))
            ok = (err <= tol) | (np.isnan(want) & np.isnan(g)) | overflow
            assert ok.all(), f"{repro}: worst error {np.nanmax(err[~overflow])} (bound {np.max(bound)})"
        assert str(got.dtype) == np_dtype(dtype).name or (dtype == "bfloat16"), f"{repro}: dtype {got.dtype}"
    else:
        v = vals.astype(np.int64)
        want = {"sum": np.sum, "max": np.max, "min": np.min}[op](v, axis=axes, keepdims=keepdims)
        assert np.array_equal(got.astype(np.int64), want), repro
        want_dtype = "int64" if op == "sum" else dtype
        assert str(got.dtype) == want_dtype, f"{repro}: dtype {got.dtype}, NumPy gives {want_dtype}"
    if grad and y.numel():
        g = torch.randn(tuple(y.shape), device=DEV, dtype=torch.float64).to(y.dtype)
        (dx,) = torch.autograd.grad(y, (src,), g)
        xr = src.detach().double().requires_grad_()
        if axes == () and nd > 0:
            ref = xr * 1.0  # NumPy's axis=(): nothing reduced
        else:
            fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
            ref = fn(xr, dim=axes, keepdim=keepdims)
        (want_dx,) = torch.autograd.grad(ref, (xr,), g.double())
        assert_close(dx, want_dx, dtype, k=2, what=repro + " dx")


# ---- softmax family ------------------------------------------------------------------------------

SOFTMAX_OPS = ("softmax", "log_softmax", "softmax_", "softmax_backward", "log_softmax_backward")


@gpu
@FUZZ
@given(data=st.data())
def test_fuzz_softmax(data):
    op = data.draw(st.sampled_from(SOFTMAX_OPS), label="op")
    lib = data.draw(st.sampled_from(LIBS), label="lib")
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    rng, key = draw_rng(data)
    shape = draw_shape(data, min_nd=0 if "0d" not in AVOID else 1)
    nd = len(shape)
    inplace = op == "softmax_"
    axis = -1 if inplace or nd == 0 else data.draw(st.integers(-nd, nd - 1), label="axis")
    ax = axis % max(nd, 1)
    log = op.startswith("log")
    scale = data.draw(st.sampled_from([0.1, 1.0, 8.0, 30.0]), label="scale")
    x = make_arg(data, lib, make_values(rng, shape, dtype, scale=scale), dtype,
                 C_CONTIGUOUS if inplace else LAYOUTS)
    grad = lib == "torch" and not op.endswith("backward") and data.draw(st.booleans(), label="requires grad")
    repro = f"repro: {op}(axis={axis}) {x.desc} scale={scale} rng={key} grad={grad}"
    note(repro)

    if op.endswith("backward"):
        y_host = softmax_ref(x.f64, ax, log).astype(np_dtype(dtype))  # a forward output, rounded
        y = make_arg(data, lib, y_host, dtype, name="y")
        dy = make_arg(data, lib, make_values(rng, shape, dtype), dtype, name="dy")
        note(f"{y.desc}; {dy.desc}")
        got = getattr(ck, op)(y.dev, dy.dev, axis=axis)
        want = softmax_backward_ref(y.f64, dy.f64, ax, log)
        scale_bw = _softmax_bwd_scale(y.f64, dy.f64, ax, log)
        assert_close(got, want, dtype, k=3, scale=scale_bw, what=repro)
        return
    want = softmax_ref(x.f64, ax, log)
    if inplace:
        # with autograd the target is a non-leaf copy of a leaf (a leaf that requires grad may not be written)
        src = x.dev.detach().clone().requires_grad_() if grad else None
        target = src * 1 if grad else x.dev
        y = ck.softmax_(target, axis=-1)
        assert y is target, f"{repro}: softmax_ must return x"
    else:
        src = x.dev.detach().requires_grad_() if grad else x.dev
        y = getattr(ck, op)(src, axis=axis)
    assert tuple(y.shape) == shape, repro
    assert_close(y, want, dtype, what=repro + " forward")
    if grad and y.numel():
        g_vals = make_values(rng, shape, dtype)
        g = torch.from_numpy(f64(g_vals)).to(DEV, y.dtype)
        (dx,) = torch.autograd.grad(y, (src,), g)
        want_dx = softmax_backward_ref(want, f64(g_vals), ax, log)
        assert_close(dx, want_dx, dtype, k=3, scale=_softmax_bwd_scale(want, f64(g_vals), ax, log),
                     what=repro + " dx")


def _softmax_bwd_scale(y, dy, ax, log):
    if y.size == 0:
        return 0.0
    if y.ndim == 0:
        y, dy, ax = y.reshape(1), dy.reshape(1), 0
    if log:
        return float(np.abs(dy).max() + (np.exp(y).max(ax) * np.abs(dy).sum(ax)).max())
    return float(2 * np.abs(y).max() * np.abs(dy).max())


# ---- norm family -----------------------------------------------------------------------------------

NORM_FORMS = ("out", "inplace", "functional", "functional_inplace")


def _nonzero_weight(rng, n, dtype):
    return ((rng.random(n) + 0.5) * np.where(rng.random(n) < 0.5, -1, 1)).astype(np_dtype(dtype))


@gpu
@FUZZ
@given(data=st.data())
def test_fuzz_norm(data):
    mode = data.draw(st.sampled_from(["layer_norm", "rms_norm"]), label="mode")
    lib = data.draw(st.sampled_from(LIBS), label="lib")
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    form = data.draw(st.sampled_from(NORM_FORMS), label="form")
    rng, key = draw_rng(data)
    shape = draw_shape(data, min_nd=1, min_last=1)
    n = shape[-1]
    eps = data.draw(st.sampled_from([1e-5, 1e-6, 1e-3]), label="eps")
    scale = data.draw(st.sampled_from([1.0, 10.0]), label="scale")
    shift = data.draw(st.sampled_from([0.0, 3.0]), label="shift")
    inplace = form in ("inplace", "functional_inplace")
    x = make_arg(data, lib, make_values(rng, shape, dtype, scale, shift), dtype, C_CONTIGUOUS if inplace else LAYOUTS)
    has_w = data.draw(st.booleans(), label="weight")
    has_b = mode == "layer_norm" and data.draw(st.booleans(), label="bias")
    w = make_arg(data, lib, _nonzero_weight(rng, n, dtype), dtype, C_CONTIGUOUS, "weight") if has_w else None
    b = make_arg(data, lib, make_values(rng, (n,), dtype), dtype, C_CONTIGUOUS, "bias") if has_b else None
    names = ["x"] + (["weight"] if has_w else []) + (["bias"] if has_b else [])
    requires = set()
    if lib == "torch" and form in ("out", "inplace") and "norm_grad" not in AVOID and not (
            form == "inplace" and "inplace_grad" in AVOID):
        requires = set(data.draw(st.sets(st.sampled_from(names)), label="requires grad"))
    repro = (f"repro: {mode} form={form} eps={eps} scale={scale} shift={shift} {x.desc} "
             f"weight={has_w} bias={has_b} requires={sorted(requires)} rng={key}")
    note(repro)
    xv, wv, bv = x.f64, None if w is None else w.f64, None if b is None else b.f64
    want, xhat, rstd = norm_ref(xv, wv, bv, eps, mode)
    row_scale = float(np.max(np.abs(xv).max(-1) * rstd[..., 0])) if xv.size else 0.0
    fwd_scale = row_scale * (1.0 if wv is None else float(np.abs(wv).max()))
    k_half = 6 if dtype in ("float16", "bfloat16") else 3  # the in-place backward's recomputed x-hat
    wd, bd = (None if a is None else a.dev for a in (w, b))
    if mode == "rms_norm":
        bd = None

    if form.startswith("functional"):
        if mode == "layer_norm":
            y, mean, rs = ck.layer_norm_forward(x.dev, wd, bd, eps, inplace=inplace)
        else:
            (y, rs), mean = ck.rms_norm_forward(x.dev, wd, eps, inplace=inplace), None
        if inplace:
            assert y is x.dev, f"{repro}: the in-place forward must return x"
        assert_close(y, want, dtype, k=2, scale=fwd_scale, what=repro + " forward")
        stat = "float64" if dtype == "float64" else "float32"
        assert_close(rs, rstd[..., 0], stat, k=4, what=repro + " rstd")
        if mode == "layer_norm":
            assert_close(mean, xv.mean(-1), stat, k=4, scale=float(np.abs(xv).max()) if xv.size else 0.0,
                         what=repro + " mean")
        dy = make_arg(data, lib, make_values(rng, shape, dtype), dtype, name="dy")
        note(dy.desc)
        if mode == "layer_norm":
            grads = ck.layer_norm_backward(dy.dev, y if inplace else x.dev, wd, bd, None if inplace else mean, rs,
                                           from_output=inplace)
        else:
            grads = ck.rms_norm_backward(dy.dev, y if inplace else x.dev, wd, rs, from_output=inplace)
        _check_norm_grads(grads, ("x",) + tuple(names[1:]), xv, wv, bv, dy.f64, eps, mode, dtype,
                          k_half if inplace else 3, repro)
        return

    leaves = {}
    src = x.dev
    if "x" in requires:
        leaves["x"] = x.dev.detach().clone().requires_grad_() if inplace else x.dev.detach().requires_grad_()
        src = leaves["x"] * 1 if inplace else leaves["x"]
    if wd is not None and "weight" in requires:
        wd = leaves["weight"] = wd.detach().requires_grad_()
    if bd is not None and "bias" in requires:
        bd = leaves["bias"] = bd.detach().requires_grad_()
    fn = getattr(ck, mode + ("_" if inplace else ""))
    y = fn(src, wd, bd, eps) if mode == "layer_norm" else fn(src, wd, eps)
    if inplace:
        assert y is src, f"{repro}: the in-place op must return x"
    assert_close(y, want, dtype, k=2, scale=fwd_scale, what=repro + " forward")
    if not leaves or y.numel() == 0:
        return
    dyv = make_values(rng, shape, dtype)
    g = torch.from_numpy(f64(dyv)).to(DEV, y.dtype)
    got = torch.autograd.grad(y, list(leaves.values()), g)
    grads = [dict(zip(leaves, got)).get(nm) for nm in names]
    _check_norm_grads(grads, tuple(names), xv, wv, bv, f64(dyv), eps, mode, dtype, k_half if inplace else 3, repro)


def _check_norm_grads(grads, names, xv, wv, bv, dyv, eps, mode, dtype, k, repro):
    rdx, rdw, rdb = norm_backward_ref(xv, wv, bv, dyv, eps, mode)
    refs = {"x": rdx, "weight": rdw, "bias": rdb}
    n = xv.shape[-1]
    colsum = float(np.abs(dyv).reshape(-1, n).sum(0).max()) if dyv.size else 0.0
    for name, got in zip(names, grads):
        if got is None:
            continue
        if name == "x":
            scale = norm_dx_scale(xv, wv, dyv, eps, mode)
        else:
            scale = colsum * (float(np.abs(norm_ref(xv, None, None, eps, mode)[1]).max()) if name == "weight" and
                              xv.size else 1.0)
        assert_close(got, refs[name], dtype, k=k, scale=scale, what=f"{repro} d{name}")


# ---- timex -------------------------------------------------------------------------------------------

TIMEX_VARIANTS = {"float32": ("auto", "tiled", "tiled_b32", "tiled_b8", "tiled_b2", "tf32x3", "tf32x3_full",
                              "tf32x3_scalar", "naive", "shared", "float4", "batch8", "balanced"),
                  "float16": ("auto", "tiled", "tiled_b32", "tiled_b8", "tiled_b2", "mma16", "naive"),
                  "bfloat16": ("auto", "tiled", "tiled_b32", "tiled_b8", "tiled_b2", "mma16", "naive"),
                  "float64": ("auto", "tiled", "naive")}
TIMEX_BACKWARD = {"float32": ("auto", "tiled", "tf32x3", "naive"), "float16": ("auto", "tiled", "mma16", "naive"),
                  "bfloat16": ("auto", "tiled", "mma16", "naive"), "float64": ("auto", "tiled", "naive")}


def rung_refuses(variant, B, T) -> bool:
    """docs/timex.md: the preconditions of the ladder's teaching rungs (float32 only, drawn only for float32)."""
    if variant == "shared":
        return T > 1024
    if variant == "float4":
        return T % 4 != 0 or T > 4096
    if variant in ("batch8", "balanced"):
        return B % 8 != 0 or T % (8 if variant == "balanced" else 4) != 0 or T > 1024
    return False


@gpu
@FUZZ
@given(data=st.data())
def test_fuzz_timex(data):
    lib = data.draw(st.sampled_from(LIBS), label="lib")
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    rng, key = draw_rng(data)
    T = data.draw(st.one_of(st.integers(1, 40), st.integers(41, 300), st.integers(301, 2048)), label="T")
    C = data.draw(st.one_of(st.integers(0, 3), st.integers(1, 16)), label="C")
    B = data.draw(st.one_of(st.integers(0, 4), st.integers(1, 40)), label="B")
    while B * C * T > (1 << 20) or B * C * T * T > (1 << 31):
        B = max(B // 2, 1) if B > 1 else B
        C = max(C // 2, 1) if B == 1 and C > 1 else C
        if B <= 1 and C <= 1:
            break
    variant = data.draw(st.sampled_from(TIMEX_VARIANTS[dtype]), label="variant")
    form = data.draw(st.sampled_from(["forward", "backward"] + (["autograd"] if lib == "torch" else [])), label="form")
    eps = data.draw(st.sampled_from([0.0, 0.25]), label="eps")
    w = make_arg(data, lib, make_values(rng, (C, T), dtype, scale=1 / math.sqrt(T)), dtype,
                 ("contiguous", "offset", "wide", "transposed", "stepped"), "w")
    k = make_arg(data, lib, make_values(rng, (B, C, T), dtype), dtype, name="k")
    repro = f"repro: timex variant={variant} form={form} eps={eps} {w.desc}; {k.desc} rng={key}"
    note(repro)
    tol_k = 5 if variant.startswith("tf32x3") else 2
    if rung_refuses(variant, B, T) and B * C * T and form != "backward":
        with pytest.raises(ValueError, match="needs"):
            ck.timex(w.dev, k.dev, eps, variant=variant)
        return
    if form == "backward":
        bv = data.draw(st.sampled_from(TIMEX_BACKWARD[dtype]), label="backward variant")
        g = make_arg(data, lib, make_values(rng, (B, C, T), dtype), dtype, name="grad_out")
        note(f"backward variant={bv}; {g.desc}")
        gw, gk = ck.timex_backward(w.dev, k.dev, g.dev, variant=bv)
        rgw, rgk = timex_backward_ref(w.f64, k.f64, g.f64)
        tol_b = 5 if bv == "tf32x3" else 2
        assert_close(gw, rgw, dtype, k=tol_b, what=repro + " grad_w")
        assert_close(gk, rgk, dtype, k=tol_b, what=repro + " grad_k")
        return
    requires = set()
    wd, kd = w.dev, k.dev
    if form == "autograd":
        requires = set(data.draw(st.sets(st.sampled_from(["w", "k"]), min_size=1), label="requires grad"))
        wd = wd.detach().requires_grad_("w" in requires)
        kd = kd.detach().requires_grad_("k" in requires)
        note(f"requires grad: {sorted(requires)}")
    out = ck.timex(wd, kd, eps, variant=variant)
    assert tuple(out.shape) == (B, C, T), repro
    assert_close(out, timex_ref(w.f64, k.f64, eps), dtype, k=tol_k, what=repro + " forward")
    if requires and out.numel():
        gv = make_values(rng, (B, C, T), dtype)
        grads = torch.autograd.grad(out, [t for t, nm in ((wd, "w"), (kd, "k")) if nm in requires],
                                    torch.from_numpy(f64(gv)).to(DEV, out.dtype))
        rgw, rgk = timex_backward_ref(w.f64, k.f64, f64(gv))
        refs = [r for r, nm in ((rgw, "w"), (rgk, "k")) if nm in requires]
        tol_b = 5 if variant in ("tf32x3", "tf32x3_full", "tf32x3_scalar", "auto") else 2
        for got, ref, nm in zip(grads, refs, sorted(requires)):
            assert_close(got, ref, dtype, k=tol_b, what=f"{repro} grad_{nm}")


# ---- pad ---------------------------------------------------------------------------------------------

PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "brick")
PAD_DTYPES = {"torch": ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                        "complex64"),
              "cupy": ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                       "bfloat16", "float32", "float64", "complex64")}


def _constant_for(dtype, rng):
    if dtype == "bool":
        return bool(rng.random() < 0.5)
    if dtype.startswith(("int", "uint")):
        return int(rng.integers(0, 50))
    if dtype == "complex64":
        return complex(1.5, -2.0)
    return float(np.float16(rng.standard_normal()))  # exact in every float dtype but bfloat16's rounding


@gpu
@FUZZ
@given(data=st.data())
def test_fuzz_pad(data):
    lib = data.draw(st.sampled_from(LIBS), label="lib")
    dtype = data.draw(st.sampled_from(PAD_DTYPES[lib]), label="dtype")
    mode = data.draw(st.sampled_from(PAD_MODES), label="mode")
    rng, key = draw_rng(data)
    shape = draw_shape(data, min_nd=2 if mode == "brick" else (0 if "0d" not in AVOID else 1), max_nd=5,
                       max_elems=MAX_ELEMS // 2)
    pads = []
    for n in shape:
        if data.draw(st.integers(0, 9)) < 4:
            pads.append((0, 0))
        else:
            hi = 40 if data.draw(st.booleans()) else 8
            pads.append((data.draw(st.integers(0, hi)), data.draw(st.integers(0, hi))))
    form = data.draw(st.sampled_from(["pairs", "dict", "uniform"] if shape else ["uniform"]), label="pad_width form")
    if form == "uniform" and shape:
        pads = [(pads[0][0], pads[0][0])] * len(shape)
    for i in range(len(shape)):  # keep the output within 2 MAX_ELEMS: drop the leading axes' pads first
        if math.prod(n + a + b for n, (a, b) in zip(shape, pads)) <= 2 * MAX_ELEMS:
            break
        pads[i] = (0, 0)
        form = "pairs" if form == "uniform" else form
    pad_width = pads
    if not shape:  # a 0-d array: numpy.pad takes a width and returns the value
        pad_width = data.draw(st.integers(0, 3), label="width")
    elif form == "dict":
        pad_width = {i: p for i, p in enumerate(pads) if p != (0, 0)}
    elif form == "uniform":
        pad_width = pads[0][0]
    kw = {}
    if mode == "constant":
        kw["constant_values"] = _constant_for(dtype, rng)
    if mode == "brick":
        kw["stagger"] = data.draw(st.integers(-20, 20), label="stagger")
    x = make_arg(data, lib, make_values(rng, shape, dtype), dtype)
    grad = lib == "torch" and dtype in FLOATS and data.draw(st.booleans(), label="requires grad")
    repro = f"repro: pad(pad_width={pad_width!r}, mode={mode!r}, {kw}) {x.desc} rng={key} grad={grad}"
    note(repro)
    if mode != "constant" and any(n == 0 and p != (0, 0) for n, p in zip(shape, pads)):
        with pytest.raises(ValueError, match="empty axis"):
            ck.pad(x.dev, pad_width, mode=mode, **kw)
        return
    src = x.dev.detach().requires_grad_() if grad else x.dev
    y = ck.pad(src, pad_width, mode=mode, **kw)
    want = pad_ref(x.values, pads, mode, kw.get("constant_values", 0), kw.get("stagger", 0))
    got = to_host(y)
    assert got.shape == want.shape, f"{repro}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{repro}: dtype {got.dtype} != {want.dtype}"
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), f"{repro}: values differ"
    if grad and y.numel():
        gv = make_values(rng, tuple(y.shape), dtype)
        (dx,) = torch.autograd.grad(y, (src,), torch.from_numpy(f64(gv)).to(DEV, y.dtype))
        assert_close(dx, pad_backward_ref(shape, pads, mode, f64(gv), kw.get("stagger", 0)), dtype, k=2,
                     what=repro + " dx")


# ---- square_matmul_ / linear_ ------------------------------------------------------------------------


@gpu
@FUZZ
@given(data=st.data())
def test_fuzz_square_matmul(data):
    lib = data.draw(st.sampled_from(LIBS), label="lib")
    dtype = data.draw(st.sampled_from(["float32", "float16", "bfloat16"]), label="dtype")
    op = data.draw(st.sampled_from(["square_matmul_", "linear_"]), label="op")
    rng, key = draw_rng(data)
    n = data.draw(st.one_of(st.integers(1, 16), st.integers(17, 300), st.integers(301, 2048)), label="n")
    budget = max(1, min(MAX_ELEMS // n, (1 << 31) // (n * n)))
    nd = data.draw(st.integers(1, 3), label="ndim")
    lead = []
    for _ in range(nd - 1):
        d = data.draw(st.one_of(st.integers(0, 3), st.integers(1, max(1, min(budget, 5000)))), label="rows")
        d = min(d, budget)
        lead.append(d)
        budget = max(budget // max(d, 1), 1)
    shape = tuple(lead) + (n,)
    transpose = op == "linear_" or data.draw(st.booleans(), label="transpose")
    has_bias = op == "linear_" and data.draw(st.booleans(), label="bias")
    a = make_arg(data, lib, make_values(rng, shape, dtype), dtype, C_CONTIGUOUS, "a")
    w = make_arg(data, lib, make_values(rng, (n, n), dtype, scale=1 / math.sqrt(n)), dtype,
                 ("contiguous", "transposed", "stepped", "offset", "wide"), "w")
    bias = make_arg(data, lib, make_values(rng, (n,), dtype), dtype, C_CONTIGUOUS, "bias") if has_bias else None
    repro = (f"repro: {op}(transpose={transpose}) {a.desc}; {w.desc}"
             f"{'; ' + bias.desc if bias is not None else ''} rng={key}")
    note(repro)
    av, wv = a.f64.reshape(-1, n), w.f64
    if lib == "torch":
        ref = torch.from_numpy(av).to(DEV) @ torch.from_numpy(wv.T.copy() if transpose else wv).to(DEV)
        if bias is not None:
            ref = ref + torch.from_numpy(bias.f64).to(DEV)
        want = ref.cpu().numpy()
    else:
        import cupy

        ref = cupy.asarray(av) @ cupy.asarray(wv.T.copy() if transpose else wv)
        if bias is not None:
            ref = ref + cupy.asarray(bias.f64)
        want = cupy.asnumpy(ref)
    ctx = torch.no_grad() if lib == "torch" else _null()
    with ctx:
        if op == "linear_":
            out = ck.linear_(a.dev, w.dev, None if bias is None else bias.dev)
        else:
            out = ck.square_matmul_(a.dev, w.dev, transpose=transpose)
    assert out is a.dev, f"{repro}: the in-place product must return its input"
    assert_close(to_host(out).astype(np.float64).reshape(-1, n), want, dtype, what=repro)
    assert np.array_equal(to_host(w.dev).astype(np.float64), wv), f"{repro}: w was written"


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
