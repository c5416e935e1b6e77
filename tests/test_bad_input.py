"""Bad input, one table row per (op, bad input): the exception type and a message that names the argument and
what was expected; an in-place target that is rejected is left untouched. Each row runs on torch tensors and on
CuPy arrays where both apply.

Then NaN and inf, which are data, not errors: softmax rows with -inf / +inf / NaN, norms with inf, reductions
with NaN, against torch on the same values."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import gpu, torch, torch_gpu
from oracle import assert_close, host, softmax_ref

DEV = "cuda"


class Lib:
    """Array factories of one kind: 'torch' (CUDA tensors; host = a CPU tensor) or 'cupy' (host = a NumPy array)."""

    def __init__(self, kind):
        self.kind = kind

    def host(self, *shape, dtype="float32"):
        a = np.random.default_rng().standard_normal(shape).astype(dtype)
        return torch.from_numpy(a) if self.kind == "torch" else a

    def randn(self, *shape, dtype="float32"):
        a = np.asarray(np.random.default_rng().standard_normal(shape))
        if self.kind == "torch":
            return torch.from_numpy(a).to(DEV, getattr(torch, dtype))
        import cupy

        return cupy.asarray(a.astype(dtype))

    def ints(self, *shape, dtype="int32"):
        a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        if self.kind == "torch":
            return torch.from_numpy(a).to(DEV)
        import cupy

        return cupy.asarray(a)

    def weight(self, n, dtype="float32"):
        w = self.randn(n, dtype=dtype)
        return w * 0 + 1.25 if self.kind == "cupy" else torch.full_like(w, 1.25)

    def empty(self, *shape, dtype="float32"):
        if self.kind == "torch":
            return torch.empty(shape, device=DEV, dtype=getattr(torch, dtype))
        import cupy

        return cupy.empty(shape, dtype=dtype)


HOST = r"(must be a (CUDA tensor|cupy\.ndarray|torch\.Tensor)|is on cpu; expected cuda)"


def _norm_ops(mode):
    return (mode, mode + "_")


def _rows():
    rows = []

    def add(op, what, make, exc, match, libs=("torch", "cupy")):
        rows.append((op, what, make, exc, match, libs))

    # ---- reductions
    for op in ("sum", "mean", "max", "min"):
        f = getattr(ck, op)
        add(op, "host array", lambda L, f=f: lambda: f(L.host(4, 5)), TypeError, r"\bx " + HOST)
        add(op, "int8 dtype", lambda L, f=f: lambda: f(L.ints(4, 5, dtype="int8")), TypeError,
            r"\bx has dtype int8; expected one of")
        add(op, "axis out of bounds", lambda L, f=f: lambda: f(L.randn(4, 5), axis=2), ValueError,
            r"axis 2 is out of bounds")
        add(op, "repeated axis", lambda L, f=f: lambda: f(L.randn(4, 5), axis=(1, -1)), ValueError, r"repeated axis")
        add(op, "float axis", lambda L, f=f: lambda: f(L.randn(4, 5), axis=1.5), TypeError, r"\baxis must be")
        add(op, "out of the wrong shape", lambda L, f=f: lambda: f(L.randn(4, 5), axis=0, out=L.empty(4)), ValueError,
            r"\bout must be a C-contiguous array of shape \(5,\)")
        add(op, "out of the wrong dtype", lambda L, f=f: lambda: f(L.randn(4, 5), axis=0, out=L.empty(5, dtype="float64")),
            TypeError, r"\bout has dtype float64; expected")
    add("mean", "int32 dtype", lambda L: lambda: ck.mean(L.ints(4, 5)), TypeError, r"\bx has dtype int32; expected")
    for op in ("max", "min"):
        add(op, "empty reduced axis", lambda L, op=op: lambda: getattr(ck, op)(L.randn(3, 0), axis=1), ValueError,
            r"zero-size array")
    add("sum_ladder", "bad rung", lambda L: lambda: ck.sum_ladder(L.randn(100), rung="fastest"), ValueError,
        r"\brung must be one of")
    add("sum_ladder", "float64 dtype", lambda L: lambda: ck.sum_ladder(L.randn(100, dtype="float64"), rung="sequential"),
        TypeError, r"\bx has dtype float64")

    # ---- softmax family
    for op in ("softmax", "log_softmax"):
        f = getattr(ck, op)
        add(op, "host array", lambda L, f=f: lambda: f(L.host(4, 5)), TypeError, r"\bx " + HOST)
        add(op, "int32 dtype", lambda L, f=f: lambda: f(L.ints(4, 5)), TypeError, r"\bx has dtype int32; expected one of")
        add(op, "axis out of bounds", lambda L, f=f: lambda: f(L.randn(4, 5), axis=2), ValueError,
            r"axis 2 is out of bounds")
        add(op, "tuple axis", lambda L, f=f: lambda: f(L.randn(4, 5), axis=(0, 1)), TypeError, r"\baxis must be an int")
        add(op, "None axis", lambda L, f=f: lambda: f(L.randn(4, 5), axis=None), TypeError, r"\baxis must be an int")

    def inplace(fn, target_of):
        def make(L):
            target, call = target_of(L)
            return (lambda: fn(call)), target
        return make

    def transposed(L, dtype="float32"):
        base = L.randn(6, 8, dtype=dtype)
        return base, base.T

    add("softmax_", "non-contiguous target", inplace(ck.softmax_, transposed), ValueError, r"\bx must be C-contiguous")
    add("softmax_", "axis not last", lambda L: (lambda x=L.randn(6, 8): ((lambda: ck.softmax_(x, axis=0)), x))(),
        ValueError, r"in place works over the last axis")
    add("softmax_", "int32 dtype", lambda L: (lambda x=L.ints(6, 8): ((lambda: ck.softmax_(x)), x))(), TypeError,
        r"\bx has dtype int32")
    add("softmax_", "leaf that requires grad",
        lambda L: (lambda x=L.randn(6, 8).requires_grad_(): ((lambda: ck.softmax_(x)), x))(), RuntimeError,
        r"\bleaf\b", libs=("torch",))
    for op in ("softmax_backward", "log_softmax_backward"):
        f = getattr(ck, op)
        add(op, "dy of another shape", lambda L, f=f: lambda: f(L.randn(4, 5), L.randn(4, 6)), ValueError,
            r"\bdy has shape \(4, 6\); expected the shape of y \(4, 5\)")
        add(op, "dy of another dtype", lambda L, f=f: lambda: f(L.randn(4, 5), L.randn(4, 5, dtype="float64")),
            TypeError, r"\bdy has dtype float64; expected")
        add(op, "dy on the host", lambda L, f=f: lambda: f(L.randn(4, 5), L.host(4, 5)), (TypeError, ValueError),
            r"\bdy " + HOST.replace("must be a (", "must be a (cupy\\.ndarray like|"))

    # ---- norms
    for mode in ("layer_norm", "rms_norm"):
        for op in _norm_ops(mode):
            f = getattr(ck, op)
            add(op, "host array", lambda L, f=f: lambda: f(L.host(4, 8)), TypeError, r"\bx " + HOST)
            add(op, "int32 dtype", lambda L, f=f: lambda: f(L.ints(4, 8)), TypeError, r"\bx has dtype int32")
            add(op, "0-d x", lambda L, f=f: lambda: f(L.randn()), ValueError, r"\bx must have at least one dimension")

            def target_call(build, f=f):
                def make(L):
                    x = L.randn(4, 8)
                    return (lambda: build(f, L, x)), x
                return make

            add(op, "weight of the wrong shape", target_call(lambda f, L, x: f(x, L.weight(7))), ValueError,
                r"\bweight must have shape \(8,\)")
            add(op, "weight of another dtype", target_call(lambda f, L, x: f(x, L.weight(8, "float64"))), TypeError,
                r"\bweight has dtype float64; expected")
            add(op, "weight on the host", target_call(lambda f, L, x: f(x, L.host(8))), (TypeError, ValueError),
                r"\bweight " + HOST.replace("must be a (", "must be a (cupy\\.ndarray like|"))
            add(op, "strided weight", target_call(lambda f, L, x: f(x, L.weight(16)[::2])), ValueError,
                r"\bweight must be contiguous", libs=("cupy",))  # torch callers' weight is made contiguous
            if mode == "layer_norm":
                add(op, "bias of the wrong shape", target_call(lambda f, L, x: f(x, L.weight(8), L.weight(9))),
                    ValueError, r"\bbias must have shape \(8,\)")
                add(op, "bias of another dtype",
                    target_call(lambda f, L, x: f(x, L.weight(8), L.weight(8, "float16"))), TypeError,
                    r"\bbias has dtype float16; expected")
        op = mode + "_"
        f = getattr(ck, op)
        add(op, "non-contiguous target", inplace(f, transposed), ValueError, r"\bx must be C-contiguous")
        add(op, "leaf that requires grad",
            lambda L, f=f: (lambda x=L.randn(6, 8).requires_grad_(): ((lambda: f(x)), x))(), RuntimeError, r"\bleaf\b",
            libs=("torch",))


    add("layer_norm_backward", "no rstd",
        lambda L: (lambda x=L.randn(4, 8): lambda: ck.layer_norm_backward(x, x, None, None, None, None))(), TypeError,
        r"\brstd \(saved by the forward\) is required")
    add("rms_norm_backward", "rstd of the wrong size",
        lambda L: (lambda x=L.randn(4, 8): lambda: ck.rms_norm_backward(x, x, None, L.randn(5)))(), ValueError,
        r"\brstd must be a contiguous array of 4 row statistics")
    add("layer_norm_backward", "dy of another shape",
        lambda L: (lambda x=L.randn(4, 8): lambda: ck.layer_norm_backward(L.randn(4, 9), x, None, None, L.randn(4),
                                                                          L.randn(4)))(), ValueError, r"\bdy has shape \(4, 9\)")

    # ---- timex
    def tx_args(L, B=2, C=3, T=16, wdtype="float32", kdtype="float32"):
        return L.randn(C, T, dtype=wdtype), L.randn(B, C, T, dtype=kdtype)

    add("timex", "host k", lambda L: lambda: ck.timex(L.randn(3, 16), L.host(2, 3, 16)), TypeError, r"\bk " + HOST)
    add("timex", "host w", lambda L: lambda: ck.timex(L.host(3, 16), L.randn(2, 3, 16)), (TypeError, ValueError),
        r"\bw " + HOST.replace("must be a (", "must be a (cupy\\.ndarray like|"))
    add("timex", "mixed dtypes", lambda L: lambda: ck.timex(*tx_args(L, wdtype="float64")), TypeError,
        r"\bw has dtype float64 but k has float32")
    add("timex", "int32 k", lambda L: lambda: ck.timex(L.randn(3, 16), L.ints(2, 3, 16)), TypeError,
        r"\bk has dtype int32; expected one of")
    add("timex", "w not (C, T)", lambda L: lambda: ck.timex(L.randn(3, 15), L.randn(2, 3, 16)), ValueError,
        r"\bw must have shape \(C, T\) = \(3, 16\)")
    add("timex", "k not 3-d", lambda L: lambda: ck.timex(L.randn(3, 16), L.randn(3, 16)), ValueError,
        r"\bk must have 3 dimensions")
    add("timex", "unknown variant", lambda L: lambda: ck.timex(*tx_args(L), variant="fastest"), ValueError,
        r"\bvariant must be one of")
    add("timex", "rung outside its preconditions", lambda L: lambda: ck.timex(*tx_args(L, T=7), variant="float4"),
        ValueError, r"float4.*needs T % 4 == 0")
    add("timex_backward", "grad_out of another shape",
        lambda L: lambda: ck.timex_backward(*tx_args(L), L.randn(2, 3, 15)), ValueError,
        r"\bgrad_out must have the shape of k \(2, 3, 16\)")
    add("timex_backward", "unknown variant", lambda L: lambda: ck.timex_backward(*tx_args(L), L.randn(2, 3, 16),
                                                                                variant="balanced"),
        ValueError, r"\bvariant must be one of")

    # ---- pad
    add("pad", "host array", lambda L: lambda: ck.pad(L.host(3, 4), 1), TypeError, r"\bx " + HOST)
    add("pad", "unknown mode", lambda L: lambda: ck.pad(L.randn(3, 4), 1, mode="average"), ValueError,
        r"mode 'average' is not supported; expected one of")
    add("pad", "a keyword the mode does not take", lambda L: lambda: ck.pad(L.randn(3, 4), 1, mode="edge",
                                                                              constant_values=3), ValueError,
        r"unsupported keyword arguments for mode 'edge': constant_values")
    add("pad", "negative width", lambda L: lambda: ck.pad(L.randn(3, 4), ((0, 0), (-1, 2))), ValueError,
        r"pad_width can't contain negative values")
    add("pad", "float width", lambda L: lambda: ck.pad(L.randn(3, 4), 1.5), TypeError,
        r"pad_width must be of integral type")
    add("pad", "pad_width of the wrong shape", lambda L: lambda: ck.pad(L.randn(3, 4), ((1, 1),) * 3), ValueError,
        r"pad_width must be")
    add("pad", "stagger without brick", lambda L: lambda: ck.pad(L.randn(3, 4), 1, mode="wrap", stagger=2), ValueError,
        r"stagger applies to mode 'brick' only")
    add("pad", "brick of a 1-d array", lambda L: lambda: ck.pad(L.randn(4), 1, mode="brick"), ValueError,
        r"mode 'brick' tiles the last two axes")
    add("pad", "extending an empty axis", lambda L: lambda: ck.pad(L.randn(0, 4), 1, mode="edge"), ValueError,
        r"can't extend empty axis 0")

    # ---- square_matmul_ / linear_
    def mm(build, libs=("torch", "cupy")):
        def make(L):
            a = L.randn(64, 32)
            return (lambda: build(L, a)), a
        return make

    add("square_matmul_", "non-contiguous a", lambda L: (lambda base=L.randn(32, 64): (
        (lambda: ck.square_matmul_(base.T, L.randn(32, 32))), base))(), ValueError, r"\ba must be C-contiguous")
    add("square_matmul_", "w not square", mm(lambda L, a: ck.square_matmul_(a, L.randn(32, 31))), ValueError,
        r"\bw must be square with the size of a's last dimension, \(32, 32\)")
    add("square_matmul_", "w of another dtype", mm(lambda L, a: ck.square_matmul_(a, L.randn(32, 32, dtype="float16"))),
        TypeError, r"\bw has dtype float16; expected float32")
    add("square_matmul_", "float64 a", lambda L: (lambda a=L.randn(8, 8, dtype="float64"): (
        (lambda: ck.square_matmul_(a, L.randn(8, 8, dtype="float64"))), a))(), TypeError,
        r"\ba has dtype float64; expected one of")
    add("square_matmul_", "w overlapping a", lambda L: (lambda a=L.randn(32, 32): (
        (lambda: ck.square_matmul_(a, a[:, :])), a))(), ValueError, r"\bw overlaps a in memory")
    add("square_matmul_", "host w", mm(lambda L, a: ck.square_matmul_(a, L.host(32, 32))), (TypeError, ValueError),
        r"\bw " + HOST.replace("must be a (", "must be a (cupy\\.ndarray like|"))
    add("square_matmul_", "a that requires grad", lambda L: (lambda a=L.randn(64, 32).requires_grad_() * 1.0: (
        (lambda: ck.square_matmul_(a, L.randn(32, 32))), a))(), RuntimeError, r"\ba requires grad", libs=("torch",))
    add("linear_", "bias of the wrong shape", mm(lambda L, a: ck.linear_(a, L.randn(32, 32), L.randn(31))), ValueError,
        r"\bbias must have shape \(32,\)")
    add("linear_", "bias of another dtype", mm(lambda L, a: ck.linear_(a, L.randn(32, 32), L.randn(32, dtype="float64"))),
        TypeError, r"\bbias has dtype float64")
    add("linear_", "weight not square", mm(lambda L, a: ck.linear_(a, L.randn(31, 32))), ValueError,
        r"\bweight must be square")
    add("linear_", "weight that requires grad", lambda L: (lambda a=L.randn(64, 32): (
        (lambda: ck.linear_(a, L.randn(32, 32).requires_grad_())), a))(), RuntimeError, r"\bweight requires grad",
        libs=("torch",))
    return rows


def _params():
    out = []
    for op, what, make, exc, match, libs in _rows():
        for lib in libs:
            mark = torch_gpu if lib == "torch" else gpu
            out.append(pytest.param(lib, op, make, exc, match, id=f"{op}-{what.replace(' ', '_')}-{lib}", marks=mark))
    return out


def _snapshot(a):
    if a is None:
        return None
    if hasattr(a, "detach"):
        return a.detach().clone()
    return a.copy()


def _same(a, b) -> bool:
    if hasattr(a, "detach"):
        return bool(torch.equal(a.detach(), b))
    import cupy

    return bool(cupy.array_equal(a, b))


@pytest.mark.parametrize("lib, op, make, exc, match", _params())
def test_bad_input(lib, op, make, exc, match):
    made = make(Lib(lib))
    call, target = made if isinstance(made, tuple) else (made, None)
    before = _snapshot(target)
    with pytest.raises(exc, match=match):
        call()
    if target is not None:
        assert _same(target, before), f"{op}: the rejected in-place target was written"


# ---- NaN and inf are data ---------------------------------------------------------------------------

SPECIAL_ROWS = [
    [0.0, -math.inf, 1.0, 2.0],           # some -inf: 0 there (log: -inf)
    [-math.inf, -math.inf, -math.inf, -math.inf],  # all -inf: NaN
    [1.0, math.inf, 2.0, 0.0],            # +inf: NaN row
    [math.inf, math.inf, 0.0, 1.0],
    [math.nan, 1.0, 2.0, 3.0],            # NaN anywhere: NaN row
    [-math.inf, 0.0, 0.0, math.nan],
    [3.0, -1.0, 0.5, 2.0],                # an ordinary row beside them
]


def special_rows_host(n):
    """The special rows above, each spread over a row of n elements (the rest random), float64 on the host."""
    x = np.random.default_rng().standard_normal((len(SPECIAL_ROWS), n))
    for i, r in enumerate(SPECIAL_ROWS):
        for j, v in enumerate(r):
            x[i, (j * 7919) % n] = v
    return x


def special_rows(n, dtype):
    return torch.from_numpy(special_rows_host(n)).to(DEV, getattr(torch, dtype))


@torch_gpu
@pytest.mark.parametrize("n", [4, 33, 1000, 20000, 70000])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_"])
def test_softmax_special_values_match_torch(op, dtype, n):
    x = special_rows(n, dtype)
    y = ck.softmax_(x.clone()) if op == "softmax_" else getattr(ck, op)(x)
    want = (torch.log_softmax if op == "log_softmax" else torch.softmax)(x.double(), -1)
    assert_close(y, want, dtype, what=f"{op} {dtype} n={n}")
    # the same against torch in the input's dtype (NaN / inf placement)
    same = (torch.log_softmax if op == "log_softmax" else torch.softmax)(x, -1)
    np.testing.assert_array_equal(np.isnan(host(y)), np.isnan(host(same)))
    np.testing.assert_array_equal(np.isinf(host(y)), np.isinf(host(same)))


@gpu
@pytest.mark.parametrize("n", [4, 1000, 70000])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_special_values_cupy(op, n):
    import cupy

    x = cupy.asarray(special_rows_host(n), dtype=cupy.float32)
    y = getattr(ck, op)(x)
    assert_close(y, softmax_ref(cupy.asnumpy(x).astype(np.float64), -1, op == "log_softmax"), "float32",
                 what=f"cupy {op} n={n}")


@torch_gpu
@pytest.mark.parametrize("n", [4, 33, 1000, 20000])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "layer_norm_", "rms_norm_"])
def test_norm_with_inf_and_nan_matches_torch(op, dtype, n):
    if op.startswith("rms_norm"):
        pytest.xfail("rms_norm of a row holding inf: ours gives 0 for its finite elements (x * rsqrt(inf) = 0), "
                     "torch NaN; not reconciled yet")
    x = special_rows(n, dtype)
    F = torch.nn.functional
    mode = op.rstrip("_")
    w = torch.full((n,), 1.5, device=DEV, dtype=x.dtype)
    y = (getattr(ck, op)(x.clone(), w) if mode == "rms_norm" else getattr(ck, op)(x.clone(), w, w * 0.5))
    xd = x.double()
    want = (F.rms_norm(xd, (n,), w.double(), 1e-6) if mode == "rms_norm"
            else F.layer_norm(xd, (n,), w.double(), w.double() * 0.5, 1e-5))
    assert_close(y, want, dtype, k=2, what=f"{op} {dtype} n={n}")


@torch_gpu
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reductions_with_nan_and_inf_match_torch(op, dtype, axis):
    x = special_rows(1000, dtype)
    y = getattr(ck, op)(x, axis=axis)
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
    want = fn(x.double(), dim=tuple(range(2)) if axis is None else axis)
    got_h, want_h = host(y), host(want)
    np.testing.assert_array_equal(np.isnan(got_h), np.isnan(want_h), err_msg=f"{op} axis={axis}")
    inf = np.isinf(want_h)
    np.testing.assert_array_equal(np.isinf(got_h), inf)
    np.testing.assert_array_equal(got_h[inf], want_h[inf])  # and their signs
    fin = np.isfinite(want_h)
    if fin.any():
        got, ref = host(y)[fin], host(want)[fin]
        scale = float(np.abs(host(x)[np.isfinite(host(x))]).sum())
        assert np.allclose(got, ref, rtol=4e-2 if dtype == "bfloat16" else 1e-5, atol=1e-6 * scale), (op, axis)


@gpu
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reductions_with_nan_cupy(op):
    import cupy

    a = np.random.default_rng().standard_normal((5, 300))
    a[1, 7], a[3, 299] = np.nan, np.inf
    a[4, 0], a[4, 1] = np.inf, -np.inf
    x = cupy.asarray(a)
    for axis in (None, 0, 1):
        got = cupy.asnumpy(getattr(ck, op)(x, axis=axis))
        want = getattr(np, op)(a, axis=axis)
        np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True, err_msg=f"{op} axis={axis}")


@torch_gpu
def test_pad_keeps_nan_payloads():
    """pad copies bits: NaN payloads and signed zeros come through unchanged."""
    bits = torch.tensor([0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000], dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32).reshape(2, 2).to(DEV)
    for mode in ("edge", "reflect", "wrap", "symmetric"):
        y = ck.pad(x, 1, mode=mode)
        want = torch.from_numpy(np.pad(x.cpu().numpy(), 1, mode=mode)).to(DEV)
        assert torch.equal(y.view(torch.int32), want.view(torch.int32)), mode
