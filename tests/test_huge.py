"""Sizes and dtypes at the edges: every dtype each op's docs promise, at an aligned base pointer and at one
element past it (off every vector boundary); zero-size dimensions; and (CK_HUGE=1) every op on a tensor of more
than 2^31 elements where the GPU's free memory allows, in bfloat16 / int8 / int32 to fit an 80 GB H100.

    CK_HUGE=1 pytest tests/test_huge.py -k huge      # the > 2^31-element tests (tens of GB, a few minutes)
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import gpu, torch, torch_gpu
from oracle import (assert_close, f64, make_values, norm_backward_ref, norm_ref, np_dtype, on_device, pad_ref,
                    softmax_backward_ref, softmax_ref, timex_backward_ref, timex_ref, to_host)

DEV = "cuda"
FLOATS = ("float32", "float16", "bfloat16", "float64")
HUGE = os.environ.get("CK_HUGE") == "1"
huge = pytest.mark.skipif(not HUGE, reason="a > 2^31-element test: set CK_HUGE=1 (tens of GB of GPU memory)")
LIBS = [pytest.param("torch", marks=torch_gpu), pytest.param("cupy", marks=gpu)]
PAD_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
              "bfloat16", "float32", "float64", "complex64")
TORCH_PAD_DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                    "complex64")


# ---- every promised dtype, aligned and one element off -------------------------------------------------


def _rng():
    return np.random.default_rng()


def _w(rng, n, dtype):
    return ((rng.random(n) + 0.5) * np.where(rng.random(n) < 0.5, -1, 1)).astype(np_dtype(dtype))


def _ln_bwd(dy, x, w, b):
    _, mean, rstd = ck.layer_norm_forward(x, w, b)
    return ck.layer_norm_backward(dy, x, w, b, mean, rstd)


def _rms_bwd(dy, x, w):
    _, rstd = ck.rms_norm_forward(x, w)
    return ck.rms_norm_backward(dy, x, w, rstd)


def _ln_bwd_ref(dy, x, w, b):
    return norm_backward_ref(x, w, b, dy, 1e-5, "layer_norm")


def _rms_bwd_ref(dy, x, w):
    return norm_backward_ref(x, w, None, dy, 1e-6, "rms_norm")[:2]


def _softmax_inputs(rng, dtype):
    y = softmax_ref(f64(make_values(rng, (37, 1000), dtype, 3.0)), -1).astype(np_dtype(dtype))
    return [y, make_values(rng, (37, 1000), dtype)]


# op -> (dtypes, inputs(rng, dtype) -> host arrays, our call on device arrays, reference on float64 arrays, k)
SPECS = {
    # sums of values with a positive mean: a relative bound on a sum that cancels would measure only rounding
    "sum-rows": (FLOATS + ("int32", "int64"), lambda r, t: [make_values(r, (37, 1000), t, 1.0, 1.0)],
                 lambda x: ck.sum(x, axis=1), lambda x: x.sum(1), 1),
    "sum-full": (FLOATS + ("int32", "int64"), lambda r, t: [make_values(r, (100003,), t, 1.0, 0.25)],
                 lambda x: ck.sum(x), lambda x: x.sum(), 2),
    "mean-columns": (FLOATS, lambda r, t: [make_values(r, (1000, 37), t, 1.0, 1.0)], lambda x: ck.mean(x, axis=0),
                     lambda x: x.mean(0), 1),
    "max": (FLOATS + ("int32", "int64"), lambda r, t: [make_values(r, (37, 1000), t)], lambda x: ck.max(x, axis=-1),
            lambda x: x.max(-1), 0),
    "min": (FLOATS + ("int32", "int64"), lambda r, t: [make_values(r, (5, 70, 9), t)], lambda x: ck.min(x, axis=1),
            lambda x: x.min(1), 0),
    "softmax": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t, 3.0)], lambda x: ck.softmax(x),
                lambda x: softmax_ref(x, -1), 1),
    "log_softmax": (FLOATS, lambda r, t: [make_values(r, (37, 1001), t, 3.0)], lambda x: ck.log_softmax(x, axis=0),
                    lambda x: softmax_ref(x, 0, True), 1),
    "softmax_": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t, 3.0)], lambda x: ck.softmax_(x),
                 lambda x: softmax_ref(x, -1), 1),
    "softmax_backward": (FLOATS, _softmax_inputs, lambda y, dy: ck.softmax_backward(y, dy),
                         lambda y, dy: softmax_backward_ref(y, dy, -1), 3),
    "layer_norm": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t, 2.0, 0.5), _w(r, 1000, t),
                                         make_values(r, (1000,), t)],
                   lambda x, w, b: ck.layer_norm(x, w, b), lambda x, w, b: norm_ref(x, w, b, 1e-5, "layer_norm")[0], 2),
    "rms_norm": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t, 2.0), _w(r, 1000, t)],
                 lambda x, w: ck.rms_norm(x, w), lambda x, w: norm_ref(x, w, None, 1e-6, "rms_norm")[0], 2),
    "layer_norm_": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t, 2.0, 0.5), _w(r, 1000, t),
                                          make_values(r, (1000,), t)],
                    lambda x, w, b: ck.layer_norm_(x, w, b), lambda x, w, b: norm_ref(x, w, b, 1e-5, "layer_norm")[0],
                    2),
    "rms_norm_": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t, 2.0), _w(r, 1000, t)],
                  lambda x, w: ck.rms_norm_(x, w), lambda x, w: norm_ref(x, w, None, 1e-6, "rms_norm")[0], 2),
    "layer_norm_backward": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t), make_values(r, (37, 1000), t, 2.0),
                                                  _w(r, 1000, t), make_values(r, (1000,), t)], _ln_bwd, _ln_bwd_ref, 3),
    "rms_norm_backward": (FLOATS, lambda r, t: [make_values(r, (37, 1000), t), make_values(r, (37, 1000), t, 2.0),
                                                _w(r, 1000, t)], _rms_bwd, _rms_bwd_ref, 3),
    "timex": (FLOATS, lambda r, t: [make_values(r, (8, 300), t, 0.06), make_values(r, (3, 8, 300), t)],
              lambda w, k: ck.timex(w, k, 0.5), lambda w, k: timex_ref(w, k, 0.5), 2),
    "timex_backward": (FLOATS, lambda r, t: [make_values(r, (8, 300), t, 0.06), make_values(r, (3, 8, 300), t),
                                             make_values(r, (3, 8, 300), t)],
                       lambda w, k, g: ck.timex_backward(w, k, g), timex_backward_ref, 2),
    "square_matmul_": (("float32", "float16", "bfloat16"),
                       lambda r, t: [make_values(r, (70, 256), t), make_values(r, (256, 256), t, 1 / 16)],
                       lambda a, w: ck.square_matmul_(a, w), lambda a, w: a @ w, 1),
    "square_matmul_-transpose": (("float32", "float16", "bfloat16"),
                                 lambda r, t: [make_values(r, (3, 30, 264), t), make_values(r, (264, 264), t, 1 / 16)],
                                 lambda a, w: ck.square_matmul_(a, w, transpose=True), lambda a, w: a @ w.T, 1),
    "linear_": (("float32", "float16", "bfloat16"),
                lambda r, t: [make_values(r, (70, 256), t), make_values(r, (256, 256), t, 1 / 16),
                              make_values(r, (256,), t)],
                lambda x, w, b: ck.linear_(x, w, b), lambda x, w, b: x @ w.T + b, 1),
}


def _dtype_cases():
    out = []
    for op, (dtypes, *_rest) in SPECS.items():
        for dtype in dtypes:
            for offset in (0, 1):
                out.append(pytest.param(op, dtype, offset, id=f"{op}-{dtype}-{'aligned' if not offset else 'offset1'}"))
    return out


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("op, dtype, offset", _dtype_cases())
def test_every_dtype_aligned_and_off_by_one_element(lib, op, dtype, offset):
    dtypes, make, call, ref, k = SPECS[op]
    host = make(_rng(), dtype)
    dev = [on_device(lib, h, offset, DEV) for h in host]
    if lib == "torch":
        with torch.no_grad():
            got = call(*dev)
    else:
        got = call(*dev)
    want = ref(*[f64(h) if dtype in FLOATS else h.astype(np.int64) for h in host])
    got_l = list(got) if isinstance(got, (tuple, list)) else [got]
    want_l = list(want) if isinstance(want, (tuple, list)) else [want]
    for i, (g, w) in enumerate(zip(got_l, want_l)):
        what = f"{op} {dtype} {lib} offset={offset} result {i}"
        if dtype in FLOATS:
            gh = to_host(g)
            assert gh.dtype == np_dtype(dtype), f"{what}: dtype {gh.dtype}"
            if k == 0:
                assert np.array_equal(f64(gh), w), what
            else:
                assert_close(f64(gh), w, dtype, k=k, what=what)
        else:
            gh = to_host(g)
            want_dtype = "int64" if op.startswith("sum") else dtype
            assert gh.dtype == np.dtype(want_dtype), f"{what}: dtype {gh.dtype}, NumPy gives {want_dtype}"
            assert np.array_equal(gh.astype(np.int64), np.asarray(w)), what
    if op.endswith("_") or op.startswith(("square_matmul_", "linear_")):
        assert got is dev[0], f"{op}: the in-place op must return its input"


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap", "brick"])
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset1"])
@pytest.mark.parametrize("dtype", PAD_DTYPES)
def test_pad_every_dtype_aligned_and_off_by_one_element(lib, dtype, offset, mode):
    if lib == "torch" and dtype not in TORCH_PAD_DTYPES:
        pytest.skip(f"torch has no full {dtype} support")
    rng = _rng()
    for shape, pads in (((5, 37), ((1, 2), (3, 4))), ((3, 4, 130), ((0, 0), (2, 1), (5, 3)))):
        x = make_values(rng, shape, dtype)
        kw = {"stagger": 3} if mode == "brick" else {}
        if mode == "constant":
            kw["constant_values"] = make_values(rng, (), dtype).item()
        got = ck.pad(on_device(lib, x, offset, DEV), pads, mode=mode, **kw)
        want = pad_ref(x, [tuple(p) for p in pads], mode, kw.get("constant_values", 0), kw.get("stagger", 0))
        gh = to_host(got)
        assert gh.dtype == want.dtype and gh.shape == want.shape, (gh.dtype, gh.shape)
        assert np.ascontiguousarray(gh).tobytes() == np.ascontiguousarray(want).tobytes(), (dtype, mode, shape)


# ---- zero-size dimensions ------------------------------------------------------------------------------


def _zeros_of(lib, shape, dtype="float32"):
    return on_device(lib, np.zeros(shape, dtype=np_dtype(dtype)), 0, DEV)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("axis", [None, 0, -1], ids=str)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3)], ids=str)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reductions_of_zero_size(lib, op, shape, axis):
    x = _zeros_of(lib, shape)
    host = np.zeros(shape)
    try:
        want = getattr(np, op)(host, axis=axis)
    except ValueError:
        with pytest.raises(ValueError, match="zero-size array"):
            getattr(ck, op)(x, axis=axis)
        return
    with np.errstate(invalid="ignore"):
        want = getattr(np, op)(host, axis=axis)
    got = to_host(getattr(ck, op)(x, axis=axis))
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(f64(got), want)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("shape", [(0,), (0, 7), (4, 0), (2, 0, 5)], ids=str)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_", "softmax_backward", "log_softmax_backward"])
def test_softmax_family_of_zero_size(lib, op, shape):
    x = _zeros_of(lib, shape)
    got = getattr(ck, op)(x, x) if op.endswith("backward") else getattr(ck, op)(x)
    assert tuple(got.shape) == shape
    if op == "softmax_":
        assert got is x


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("shape", [(0, 8), (3, 0, 8), (4, 0)], ids=str)
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_norms_of_zero_size(lib, mode, shape):
    n = shape[-1]
    x, dy = _zeros_of(lib, shape), _zeros_of(lib, shape)
    w = on_device(lib, np.ones(n, dtype=np.float32), 0, DEV)
    fwd = ck.layer_norm_forward(x, w, w) if mode == "layer_norm" else ck.rms_norm_forward(x, w)
    assert tuple(fwd[0].shape) == shape
    assert tuple(getattr(ck, mode)(x, w).shape) == shape
    assert tuple(getattr(ck, mode + "_")(x, w).shape) == shape
    if mode == "layer_norm":
        dx, dw, db = ck.layer_norm_backward(dy, x, w, w, fwd[1], fwd[2])
    else:
        (dx, dw), db = ck.rms_norm_backward(dy, x, w, fwd[1]), None
    assert tuple(dx.shape) == shape and tuple(dw.shape) == (n,)
    assert not to_host(dw).any(), "dweight over no rows is 0"
    if db is not None:
        assert not to_host(db).any()


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("B, C, T", [(0, 3, 16), (2, 0, 16), (2, 3, 0)], ids=str)
def test_timex_of_zero_size(lib, B, C, T):
    w, k = _zeros_of(lib, (C, T)), _zeros_of(lib, (B, C, T))
    out = ck.timex(w, k, 0.5)
    assert tuple(out.shape) == (B, C, T)
    gw, gk = ck.timex_backward(w, k, k)
    assert tuple(gw.shape) == (C, T) and tuple(gk.shape) == (B, C, T)
    assert not to_host(gw).any(), "grad_w over no batch is 0"


@pytest.mark.parametrize("lib", LIBS)
def test_pad_of_zero_size(lib):
    x = _zeros_of(lib, (0, 5))
    got = to_host(ck.pad(x, ((1, 2), (3, 0)), constant_values=7))
    np.testing.assert_array_equal(got, np.full((3, 8), 7, dtype=np.float32))
    assert to_host(ck.pad(x, ((0, 0), (2, 3)), mode="reflect")).shape == (0, 10)
    with pytest.raises(ValueError, match="empty axis 0"):
        ck.pad(x, ((1, 0), (0, 0)), mode="edge")


@pytest.mark.parametrize("lib", LIBS)
def test_square_matmul_of_zero_rows(lib):
    a, w = _zeros_of(lib, (0, 64)), on_device(lib, np.eye(64, dtype=np.float32), 0, DEV)
    assert ck.square_matmul_(a, w) is a
    b = _zeros_of(lib, (2, 0, 64))
    assert ck.linear_(b, w, on_device(lib, np.zeros(64, np.float32), 0, DEV)) is b


# ---- more than 2^31 elements (CK_HUGE=1) ----------------------------------------------------------------

BIG = (1 << 31) + (1 << 16) + 7  # elements: past 2^31, odd


def _need(nbytes):
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < nbytes * 1.1:
        pytest.skip(f"needs {nbytes / 2**30:.1f} GiB of free GPU memory; {free / 2**30:.1f} GiB free")


def _rows_to_check(rows):
    return sorted({0, 1, rows // 2, rows - 2, rows - 1})


def _bf16_randn(shape, scale=1.0):
    """A bfloat16 tensor of normal values, made in slices (no float32 copy of the whole)."""
    t = torch.empty(shape, device=DEV, dtype=torch.bfloat16)
    flat = t.view(-1)
    step = 1 << 28
    for i in range(0, flat.numel(), step):
        flat[i:i + step].normal_(0.0, scale)
    return t


@huge
@torch_gpu
def test_huge_reductions_int32_exact():
    """sum / max / min of 2^31 + 65543 int32 (8.6 GB): exact, with the extremes placed past element 2^31."""
    _need(BIG * 4 + (1 << 24))
    x = torch.randint(-1000, 1000, (BIG,), device=DEV, dtype=torch.int32)
    x[-1], x[(1 << 31) + 3] = 5000, -5000
    assert int(ck.sum(x)) == int(torch.sum(x, dtype=torch.int64))
    assert int(ck.max(x)) == 5000 and int(ck.min(x)) == -5000
    x2 = x[: (1 << 31) + (1 << 16)].view(2, -1)  # two rows of 2^30 + 2^15
    assert torch.equal(ck.sum(x2, axis=1), torch.sum(x2, dim=1, dtype=torch.int64))
    assert torch.equal(ck.max(x2, axis=1), x2.amax(1))
    del x, x2


def _bf16_ints(shape):
    """A bfloat16 tensor of -1, 0, 1 (made in slices): its sums are exact integers in a float32 accumulator."""
    t = torch.empty(shape, device=DEV, dtype=torch.bfloat16)
    flat = t.view(-1)
    step = 1 << 28
    for i in range(0, flat.numel(), step):
        flat[i:i + step] = torch.randint(-1, 2, (min(step, flat.numel() - i),), device=DEV, dtype=torch.int8)
    return t


@huge
@torch_gpu
def test_huge_reductions_bf16_rows_and_columns():
    """32769 x 65536 bfloat16 of -1, 0, 1: row means and column sums are exact before their rounding to bfloat16,
    so they must equal torch's float32 results rounded the same way."""
    _need(BIG * 2 + (1 << 30))
    x = _bf16_ints((32769, 65536))
    x[-1, -1] = 3  # past element 2^31: the extremes
    x[-1, -2] = -3
    assert torch.equal(ck.mean(x, axis=1), torch.mean(x, dim=1, dtype=torch.float32).to(torch.bfloat16))
    assert torch.equal(ck.sum(x, axis=0), torch.sum(x, dim=0, dtype=torch.float32).to(torch.bfloat16))
    assert torch.equal(ck.sum(x, axis=1), torch.sum(x, dim=1, dtype=torch.float32).to(torch.bfloat16))
    assert float(ck.max(x)) == 3.0 and float(ck.min(x)) == -3.0
    del x


def _check_rows(got, want_fn, rows, dtype, what, k=1):
    for r in rows:
        assert_close(got[r], want_fn(r), dtype, k=k, what=f"{what} row {r}")


@huge
@torch_gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_"])
def test_huge_softmax(op):
    _need(2 * BIG * 2 + (1 << 30))
    x = _bf16_randn((32769, 65536), 3.0)
    rows = _rows_to_check(x.shape[0])
    keep = {r: x[r].double().cpu().numpy() for r in rows}
    y = ck.softmax_(x) if op == "softmax_" else getattr(ck, op)(x)
    _check_rows(y, lambda r: softmax_ref(keep[r], -1, op == "log_softmax"), rows, "bfloat16", op)
    del x, y


@huge
@torch_gpu
def test_huge_softmax_long_rows():
    """Two rows of 2^30 + 2^15 + 8 elements each (the split long-row path)."""
    n = (1 << 30) + (1 << 15) + 8
    _need(2 * 2 * n * 2 + (1 << 30))
    x = _bf16_randn((2, n), 3.0)
    y = ck.softmax(x)
    for r in range(2):
        m = float(x[r].amax())
        s = sum(float(torch.exp(x[r, i:i + (1 << 26)].double() - m).sum()) for i in range(0, n, 1 << 26))
        for lo in (0, n // 2, n - 4096):
            want = np.exp(x[r, lo:lo + 4096].double().cpu().numpy() - m) / s
            assert_close(y[r, lo:lo + 4096], want, "bfloat16", what=f"long row {r} at {lo}")
    del x, y


@huge
@torch_gpu
def test_huge_softmax_backward():
    _need(3 * BIG * 2 + (1 << 30))
    y = torch.softmax(_bf16_randn((32769, 65536), 3.0), -1)
    dy = _bf16_randn((32769, 65536))
    rows = _rows_to_check(y.shape[0])
    dx = ck.softmax_backward(y, dy)
    for r in rows:
        yr, dr = y[r].double().cpu().numpy(), dy[r].double().cpu().numpy()
        assert_close(dx[r], softmax_backward_ref(yr, dr), "bfloat16", k=3, scale=float(np.abs(dr).max() * yr.max()),
                     what=f"softmax_backward row {r}")
    del y, dy, dx


@huge
@torch_gpu
@pytest.mark.parametrize("mode", ["layer_norm", "rms_norm"])
def test_huge_norm_forward_and_backward(mode):
    """Forward (and in place) on 32769 x 65536 bfloat16, and the backward: dx of sampled rows, dweight / dbias
    against sums over every row (in float32 slices)."""
    _need(4 * BIG * 2 + (2 << 30))
    rows, n = 32769, 65536
    x = _bf16_randn((rows, n), 2.0)
    w = (torch.rand(n, device=DEV) + 0.5).to(torch.bfloat16)
    b = torch.randn(n, device=DEV).to(torch.bfloat16) if mode == "layer_norm" else None
    eps = 1e-5 if mode == "layer_norm" else 1e-6
    check = _rows_to_check(rows)
    xs = {r: x[r].double().cpu().numpy() for r in check}
    wh, bh = w.double().cpu().numpy(), None if b is None else b.double().cpu().numpy()
    if mode == "layer_norm":
        y, mean, rstd = ck.layer_norm_forward(x, w, b)
    else:
        (y, rstd), mean = ck.rms_norm_forward(x, w), None
    _check_rows(y, lambda r: norm_ref(xs[r], wh, bh, eps, mode)[0], check, "bfloat16", f"{mode} forward", k=2)
    dy = _bf16_randn((rows, n))
    if mode == "layer_norm":
        dx, dw, db = ck.layer_norm_backward(dy, x, w, b, mean, rstd)
    else:
        (dx, dw), db = ck.rms_norm_backward(dy, x, w, rstd), None
    for r in check:
        rdx = norm_backward_ref(xs[r][None], wh, bh, dy[r].double().cpu().numpy()[None], eps, mode)[0][0]
        assert_close(dx[r], rdx, "bfloat16", k=3, what=f"{mode} dx row {r}")
    want_dw = torch.zeros(n, device=DEV, dtype=torch.float64)
    want_db = torch.zeros(n, device=DEV, dtype=torch.float64)
    for i in range(0, rows, 1024):
        xc, dc = x[i:i + 1024].float(), dy[i:i + 1024].float()
        if mode == "layer_norm":
            xhat = (xc - xc.mean(-1, keepdim=True)) * torch.rsqrt(xc.var(-1, unbiased=False, keepdim=True) + eps)
        else:
            xhat = xc * torch.rsqrt(xc.square().mean(-1, keepdim=True) + eps)
        want_dw += (dc * xhat).sum(0).double()
        want_db += dc.sum(0).double()
    scale = float(want_db.abs().max())
    assert_close(dw, want_dw, "bfloat16", k=2, scale=scale, what=f"{mode} dweight over {rows} rows")
    if db is not None:
        assert_close(db, want_db, "bfloat16", k=2, scale=scale, what=f"{mode} dbias over {rows} rows")
    del x, y, dy, dx
    x = _bf16_randn((rows, n), 2.0)  # in place, the last rows (past element 2^31) against a float64 reference
    last = {r: x[r].double().cpu().numpy() for r in (rows - 2, rows - 1)}
    if mode == "layer_norm":
        ck.layer_norm_(x, w, b)
    else:
        ck.rms_norm_(x, w)
    _check_rows(x, lambda r: norm_ref(last[r], wh, bh, eps, mode)[0], list(last), "bfloat16", f"{mode}_", k=2)
    del x


@huge
@torch_gpu
def test_huge_timex():
    """B=1, C=2^21 + 1, T=1024 in bfloat16: k, w (C, T) and the output each past 2^31 elements; forward and backward
    on sampled channels (the last ones lie past element 2^31)."""
    C, T = (1 << 21) + 1, 1024
    _need(5 * C * T * 2 + (1 << 30))
    w = _bf16_randn((C, T), 1 / 32)
    k = _bf16_randn((1, C, T))
    out = ck.timex(w, k, 0.25)
    chans = [0, C // 2, C - 2, C - 1]
    for c in chans:
        want = timex_ref(w[c:c + 1].double().cpu().numpy(), k[:, c:c + 1].double().cpu().numpy(), 0.25)
        assert_close(out[:, c:c + 1], want, "bfloat16", k=2, what=f"timex channel {c}")
    del out
    g = _bf16_randn((1, C, T))
    gw, gk = ck.timex_backward(w, k, g)
    for c in chans:
        rgw, rgk = timex_backward_ref(w[c:c + 1].double().cpu().numpy(), k[:, c:c + 1].double().cpu().numpy(),
                                      g[:, c:c + 1].double().cpu().numpy())
        assert_close(gw[c:c + 1], rgw, "bfloat16", k=2, what=f"grad_w channel {c}")
        assert_close(gk[:, c:c + 1], rgk, "bfloat16", k=2, what=f"grad_k channel {c}")
    del w, k, g, gw, gk


@huge
@torch_gpu
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap", "brick"])
def test_huge_pad_int8(mode):
    """(2^16 + 1) x 2^15 int8 (2^31 + 2^15 elements) padded by ((1, 2), (3, 4)): sampled output rows exact."""
    rows, n = (1 << 16) + 1, 1 << 15
    _need(2 * rows * n + (1 << 30))
    x = torch.randint(-128, 128, (rows, n), device=DEV, dtype=torch.int8)
    pads = ((1, 2), (3, 4))
    kw = {"stagger": 5} if mode == "brick" else {"constant_values": 7} if mode == "constant" else {}
    y = ck.pad(x, pads, mode=mode, **kw)
    assert tuple(y.shape) == (rows + 3, n + 7)
    from oracle import pad_index

    # the source of each sampled output row: rows through the row axis' index map, then the row's own pad
    for r in (0, 1, 2, rows // 2, rows, rows + 1, rows + 2):
        src_rows = pad_index((rows, 1), [pads[0], (0, 0)], "wrap" if mode == "brick" else mode).reshape(-1)
        sr = int(src_rows[r])
        if sr < 0:
            want = np.full(n + 7, 7, dtype=np.int8)
        else:
            row = x[sr].cpu().numpy()
            if mode == "brick":
                shift = 5 * ((r - pads[0][0]) // rows)
                want = row[np.mod(np.arange(n + 7) - 3 - shift, n)]
            else:
                want = pad_ref(row, [pads[1]], mode, kw.get("constant_values", 0))
        assert np.array_equal(y[r].cpu().numpy(), want), (mode, r)
    del x, y


@huge
@torch_gpu
def test_huge_pad_backward_bf16():
    rows, n = (1 << 16) + 1, 1 << 15
    _need(3 * rows * (n + 8) * 2 + (1 << 30))
    x = _bf16_randn((rows, n)).requires_grad_()
    y = ck.pad(x, ((0, 0), (3, 4)), mode="reflect")
    g = _bf16_randn(tuple(y.shape))
    (dx,) = torch.autograd.grad(y, (x,), g)
    from oracle import pad_backward_ref

    for r in _rows_to_check(rows):
        want = pad_backward_ref((n,), [(3, 4)], "reflect", g[r].double().cpu().numpy())
        assert_close(dx[r], want, "bfloat16", what=f"pad backward row {r}")
    del x, y, g, dx


@huge
@torch_gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_huge_square_matmul(dtype):
    """(2^21 + 64) x 1024 (past 2^31 elements) in place; the first and last rows against a float64 product."""
    m, n = (1 << 21) + 64, 1024
    item = 2 if dtype == "bfloat16" else 4
    _need(m * n * item + (2 << 30))
    a = torch.empty(m, n, device=DEV, dtype=getattr(torch, dtype))
    flat = a.view(-1)
    for i in range(0, flat.numel(), 1 << 28):
        flat[i:i + (1 << 28)].normal_()
    w = (torch.randn(n, n, device=DEV) / 32).to(a.dtype)
    head, tail = a[:4096].double().clone(), a[-4096:].double().clone()
    with torch.no_grad():
        out = ck.square_matmul_(a, w)
    assert out is a
    assert_close(a[:4096], head @ w.double(), dtype, what=f"{dtype} first rows")
    assert_close(a[-4096:], tail @ w.double(), dtype, what=f"{dtype} last rows (past element 2^31)")
    del a, out
