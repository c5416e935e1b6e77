"""Reductions against float64 NumPy references (GPU), and their validation (CPU)."""
import itertools
import math

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import TOL, cupy_array, gpu, rel_err, rng, rounded, to_f64, torch, torch_gpu
from cupy_kernels._runtime import ACC, ACC_SCALAR, ITEMSIZE
from cupy_kernels.ops import reduce as R
from cupy_kernels.ops.reduce import LADDER, result_dtype
from planning import HOST, Array, Recorder, check_launch, fake_device

ALL = ("float32", "float16", "bfloat16", "float64", "int32", "int64")
SHAPES_AXES = [((1,), None), ((3,), 0), ((127,), None), ((1000, 3), -1), ((3, 1000), 0), ((4097,), None),
               ((7, 129, 5), 1), ((7, 129, 5), (0, 2)), ((2, 3, 4, 5), (1, 2)), ((33, 1025), -1),
               ((65, 4), (0, 1)), ((5, 300001), -1), (((1 << 20) + 3,), None)]


def make(shape, dtype):
    """Fresh random data (ints in a range where int32 sums stay exact) on the GPU + its exact values."""
    g = rng()
    if dtype.startswith("int"):
        host = g.integers(-1000, 1000, size=shape).astype(dtype)
        return cupy_array(host, dtype), host
    host = g.standard_normal(shape) + 0.01  # float16 sums of 300001 values stay finite
    return cupy_array(host, dtype), rounded(host, dtype)


def reference(op, values, axis, keepdims=False):
    f = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op]
    return f(values, axis=axis, keepdims=keepdims)


def assert_sum_close(got, values, axis, dtype, op="sum"):
    """Error of a sum or mean relative to the same reduction of |x|: the bound that rounding obeys
    whatever the cancellation (a plain relative error of a sum near zero says nothing)."""
    ref = reference(op, values.astype(np.float64), axis)
    scale = reference(op, np.abs(values.astype(np.float64)), axis)
    err = np.abs(to_f64(got) - ref) / np.maximum(scale, np.finfo(np.float64).tiny)
    assert not np.isnan(to_f64(got)).any() and err.max() <= TOL[dtype], (axis, dtype, float(err.max()))


@gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_matches_float64_reference(op, dtype):
    if op == "mean" and dtype.startswith("int"):
        pytest.skip("mean of integers is rejected")
    for item in SHAPES_AXES:
        shape, axis = item
        x, values = make(shape, dtype)
        got = getattr(ck, op)(x, axis=axis)
        assert str(got.dtype) == result_dtype(op, dtype)
        if op in ("max", "min") or dtype.startswith("int"):
            ref = reference(op, values, axis)
            np.testing.assert_array_equal(to_f64(got), np.asarray(ref, dtype=np.float64), err_msg=f"{shape} {axis}")
        else:
            assert_sum_close(got, values, axis, dtype, op)


@gpu
def test_keepdims_and_out():
    import cupy

    x, values = make((6, 7, 8), "float32")
    got = ck.sum(x, axis=(0, 2), keepdims=True)
    assert got.shape == (1, 7, 1)
    assert_sum_close(got.reshape(7), values, (0, 2), "float32")
    out = cupy.full((6, 8), cupy.nan, dtype=cupy.float32)
    res = ck.max(x, axis=1, out=out)
    assert res is out
    np.testing.assert_array_equal(to_f64(out), values.max(axis=1))
    with pytest.raises(ValueError, match="out must be"):
        ck.sum(x, axis=1, out=cupy.empty((6, 7), dtype=cupy.float32))
    with pytest.raises(TypeError, match="out has dtype"):
        ck.sum(x, axis=1, out=cupy.empty((6, 8), dtype=cupy.float64))


@gpu
def test_empty_and_nan_like_numpy():
    import cupy

    e = cupy.empty((0,), dtype=cupy.float32)
    assert float(ck.sum(e)) == 0.0
    assert math.isnan(float(ck.mean(e)))
    with pytest.raises(ValueError, match="zero-size array"):
        ck.max(e)
    assert ck.max(cupy.empty((0, 3), dtype=cupy.float32), axis=1).shape == (0,)
    np.testing.assert_array_equal(to_f64(ck.sum(cupy.empty((4, 0), dtype=cupy.float32), axis=1)), np.zeros(4))
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        x, _ = make((3, 1001), dtype)
        x[1, 777] = float("nan")
        x[2, 0] = float("nan")
        for op in ("max", "min", "sum"):
            row = to_f64(getattr(ck, op)(x, axis=1))
            assert not math.isnan(row[0]) and math.isnan(row[1]) and math.isnan(row[2]), (op, dtype)
            assert math.isnan(float(to_f64(getattr(ck, op)(x)))), (op, dtype)
            col = to_f64(getattr(ck, op)(x, axis=0))
            assert math.isnan(col[777]) and math.isnan(col[0]) and not math.isnan(col[5])


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_misaligned_and_non_contiguous(dtype):
    x, values = make((5, 4099), dtype)
    for view, ref in ((x.ravel()[3:], values.ravel()[3:]), (x[:, 1:], values[:, 1:]), (x[:, ::3], values[:, ::3]),
                      (x.T, values.T)):
        for axis in (None, -1, 0):
            got = ck.max(view, axis=axis)
            np.testing.assert_array_equal(to_f64(got), np.max(ref, axis=axis).astype(np.float64))
            assert_sum_close(ck.sum(view, axis=axis), ref, axis, dtype if dtype != "int64" else "float64")


@gpu
@pytest.mark.parametrize("group", [1, 2, 4, 8, 16, 32, 64, 128, 256])
def test_every_row_group_size(group):
    from cupy_kernels._runtime.tuning import tuned
    from cupy_kernels.ops import reduce as R

    for rows, n, dtype in ((3, 1, "float32"), (37, 1001, "float16"), (5, 4099, "bfloat16"), (2, 77777, "float64"),
                           (300, 129, "int32")):
        x, values = make((rows, n), dtype)
        for op in ("sum", "max"):
            with tuned(R, row_group=group):
                y = getattr(ck, op)(x, axis=1)
            if op == "max" or dtype == "int32":
                np.testing.assert_array_equal(to_f64(y), getattr(np, op)(values.astype(np.float64), axis=1))
            else:
                assert_sum_close(y, values, 1, dtype)


@gpu
def test_deterministic_bits():
    x, _ = make((1 << 24) + 11, "float32")
    for axis in (None,):
        a, b = ck.sum(x, axis=axis), ck.sum(x, axis=axis)
        assert to_f64(a).tobytes() == to_f64(b).tobytes()
    y, _ = make((3000, 3001), "float32")
    assert to_f64(ck.sum(y, axis=0)).tobytes() == to_f64(ck.sum(y, axis=0)).tobytes()


@gpu
@pytest.mark.parametrize("rung", list(LADDER))
@pytest.mark.parametrize("n", [1, 3, 1000, 4097, (1 << 20) + 3])
def test_ladder(rung, n):
    x, values = make((n,), "float32")
    got = ck.sum_ladder(x, rung)
    assert got.shape == ()
    assert_sum_close(got, values, None, "float32")


@gpu
def test_beyond_2_31_elements():
    import cupy

    n = (1 << 31) + 37
    if cupy.cuda.runtime.memGetInfo()[0] < 6 * 4 * n:
        pytest.skip(f"needs {6 * 4 * n >> 30} GiB free on the GPU")
    x = cupy.random.standard_normal(n, dtype=cupy.float32)
    ref = sum(float(cupy.sum(x[i:i + (1 << 28)].astype(cupy.float64))) for i in range(0, n, 1 << 28))
    assert abs(float(ck.sum(x)) - ref) <= 1e-5 * float(cupy.sqrt(cupy.sum(x * x)))
    x[n - 5] = 1e6  # only the elements past 2^31 can reveal a truncated index
    assert float(ck.max(x)) == 1e6
    rows = x[: 2 * ((1 << 30) + 3)].reshape(2, -1)
    rows[1, -2] = -1e6
    np.testing.assert_array_equal(to_f64(ck.min(rows, axis=1)), to_f64(cupy.min(rows, axis=1)))
    cols = x[: 3 * ((1 << 30) + 1)].reshape(-1, 3)
    assert rel_err(ck.sum(cols, axis=0), to_f64(cols.astype(cupy.float64).sum(axis=0))) < 1e-5
    del x, rows, cols


@torch_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_in_torch_out(dtype):
    x = torch.randn(37, 1003, device="cuda", dtype=getattr(torch, dtype))
    for op, tref in (("sum", torch.sum), ("mean", torch.mean), ("max", torch.amax), ("min", torch.amin)):
        got = getattr(ck, op)(x, axis=-1)
        assert isinstance(got, torch.Tensor) and got.dtype == x.dtype and got.device == x.device
        ref = tref(x.double(), dim=-1)
        assert rel_err(got, ref.cpu().numpy()) <= TOL[dtype]


@torch_gpu
def test_torch_autograd_and_gradcheck():
    x = torch.randn(5, 7, 3, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ck.sum(t, axis=(0, 2)), (x,))
    assert torch.autograd.gradcheck(lambda t: ck.mean(t, axis=1, keepdims=True), (x,))
    assert torch.autograd.gradcheck(lambda t: ck.mean(t), (x,))
    y = torch.randn(64, 33, device="cuda", requires_grad=True)
    (ck.mean(y, axis=0) * torch.arange(33, device="cuda")).sum().backward()
    assert torch.allclose(y.grad, torch.arange(33, device="cuda").float().expand(64, 33) / 64)


@torch_gpu
def test_torch_stream_compile_and_graph():
    x = torch.randn(4096, 513, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = ck.sum(x, axis=-1)
    s.synchronize()
    assert rel_err(got, x.double().sum(-1).cpu().numpy()) < 1e-5
    compiled = torch.compile(lambda t: ck.sum(t, axis=0) * 2, fullgraph=True)
    assert rel_err(compiled(x), (x.double().sum(0) * 2).cpu().numpy()) < 1e-5
    static = torch.randn(1000, 1000, device="cuda")
    with torch.cuda.stream(s):
        ck.sum(static, axis=1)  # warm-up on the capture stream
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = ck.sum(static, axis=1)
    static.copy_(torch.randn(1000, 1000, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert rel_err(out, static.double().sum(1).cpu().numpy()) < 1e-5


@torch_gpu
def test_torch_second_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU only")
    x = torch.randn(100, 1000, device="cuda:1")
    got = ck.sum(x, axis=1)
    assert got.device == x.device
    assert rel_err(got, x.double().sum(1).cpu().numpy()) < 1e-5


# ---- CPU: validation --------------------------------------------------------------------------

def test_host_arrays_are_refused_with_a_clear_error():
    with pytest.raises(TypeError, match=r"sum: x must be a cupy.ndarray or a CUDA torch.Tensor; got numpy"):
        ck.sum(np.ones(3))
    with pytest.raises(TypeError, match="got builtins.list"):
        ck.max([1.0, 2.0])
    if torch is not None:
        with pytest.raises(TypeError, match="must be a CUDA tensor; got torch.Tensor"):
            ck.mean(torch.ones(3))


def test_axis_validation():
    from cupy_kernels._runtime import normalize_axes

    assert normalize_axes(None, 3, "sum") == (0, 1, 2)
    assert normalize_axes((-1, 0), 3, "sum") == (0, 2)
    with pytest.raises(ValueError, match="out of bounds"):
        normalize_axes(3, 3, "sum")
    with pytest.raises(ValueError, match="repeated axis"):
        normalize_axes((1, -2), 3, "sum")
    with pytest.raises(TypeError, match="axis must be"):
        normalize_axes(1.0, 3, "sum")


def test_result_dtypes_follow_numpy():
    for dtype in ("float16", "float32", "float64", "int32", "int64"):
        for op in ("sum", "max", "min"):
            assert result_dtype(op, dtype) == str(getattr(np, op)(np.ones(2, dtype=dtype)).dtype)


# (shape, axis, strides or None): rows split or not, a full reduction, columns in one pass or two (k of whole packs
# of the input, of the accumulator, or neither), axes apart (permuted), a strided input (copied), no axis, empty
PLAN_CASES = [((3000, 1000), -1, None), ((2, 1 << 16), 1, None), ((5, 7), None, None), ((1000, 64), 0, None),
              ((64, 3, 1024), 1, None), ((4, 6, 8), (0, 2), None), ((6, 50), 1, (100, 2)), ((3, 4), (), None),
              ((0, 5), 1, None)] + [((2, 1000, k), 1, None) for k in (1, 2, 3, 4, 8, 16)]


def test_every_launch_matches_its_kernel_signature(monkeypatch):
    """_plan over every op, dtype, path (rows split or not, columns in one pass or two, each pack width), aligned and
    misaligned inputs, on sm_80 and sm_90: each launch passes its kernel's parameters (check_launch), `scale` 1 or
    1 / count for mean in the accumulator type, the split rows' workspaces exactly when split; every declared
    instance but the ladder's is planned. The ladder's plans pass theirs too."""
    calls = []
    monkeypatch.setattr(Recorder, "calls", calls)
    monkeypatch.setattr(R, "PlanBuilder", Recorder)
    planned, paths = set(), set()
    for cc in (80, 90):
        with fake_device(monkeypatch, cc, R):
            for op, dtypes in R.DTYPES.items():
                for dtype, (shape, axis, strides), skew in itertools.product(dtypes, PLAN_CASES, (0, 1)):
                    calls.clear()
                    x = Array(shape, dtype, strides, ptr=(1 << 20) + skew * ITEMSIZE[dtype])
                    e = R._plan(op, HOST, x, axis, False, 0)
                    count = math.prod(shape) // max(1, math.prod(e.shape))
                    assert (e.plan is None) == (not calls) == (math.prod(shape) == 0 or axis == ()), (shape, axis)
                    for i, (kernel, args, _) in enumerate(calls):
                        case = (kernel.name, op, dtype, shape, axis, skew)
                        a = dict(check_launch("reduce.cu", kernel.name, args))
                        scale = 1 / count if op == "mean" and i == len(calls) - 1 else 1
                        assert a["scale"] == ACC_SCALAR[ACC[dtype]](scale), (case, a["scale"])
                        if kernel.name.startswith("reduce_rows"):
                            assert (a["partial"] is None) == (a["arrivals"] is None) == (a["splits"] == 1), case
                            paths.add(("rows", a["splits"] > 1))
                        else:
                            paths.add(("cols", len(calls)))
                        planned.add(kernel.name)
    assert paths == {("rows", False), ("rows", True), ("cols", 1), ("cols", 2)}
    ladder = {k for k, _ in LADDER.values() if k}
    assert planned == set(R.SOURCE.names) - ladder, (set(R.SOURCE.names) - ladder - planned, planned)
    calls.clear()
    with fake_device(monkeypatch, 90, R):
        for kernel, per_block in filter(lambda v: v[0], LADDER.values()):
            for size in (1, 1000, 10 ** 6):
                R._plan_ladder(kernel, per_block, size, 0)
    for kernel, args, _ in calls:
        assert dict(check_launch("reduce.cu", kernel.name, args))["n"] > 0
    assert {kernel.name for kernel, *_ in calls} == ladder


@gpu
def test_wrong_dtypes_rejected():
    import cupy

    with pytest.raises(TypeError, match="x has dtype int8; expected one of"):
        ck.sum(cupy.ones(3, dtype=cupy.int8))
    with pytest.raises(TypeError, match="x has dtype int32"):
        ck.mean(cupy.ones(3, dtype=cupy.int32))
