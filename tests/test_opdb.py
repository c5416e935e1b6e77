"""torch's OpInfo sample inputs (torch.testing._internal.common_methods_invocations.op_db) for every op with a
torch counterpart, forward and backward, against torch's op in float64 on the same (rounded) inputs.

Each sample is its own test id: <op>[-<variant>]-<dtype>-<index>-<shape and arguments>. A sample's arguments
are mapped to ours (dim -> axis, normalized_shape -> rows over its flattened extent, F.pad's flat pad tuple ->
NumPy pad widths, replicate -> edge, circular -> wrap); where its meaning differs from ours on purpose the case
is skipped with the reason. op_db is generated on the CPU to name the cases and again on the GPU to run them."""
from __future__ import annotations

import math
import re
import sys
import types

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import TOL, torch, torch_gpu
from oracle import TORCH_PAD_MODES, assert_close, host, norm_dx_scale, torch_pad_to_numpy

DEV = "cuda"
DTYPES = ("float32", "float64", "bfloat16")
# (op_db name, variant_test_name): our op
OPS = {
    ("softmax", ""): "softmax", ("softmax", "with_dtype"): "softmax",
    ("log_softmax", ""): "log_softmax", ("log_softmax", "with_dtype"): "log_softmax",
    ("nn.functional.layer_norm", ""): "layer_norm", ("nn.functional.rms_norm", ""): "rms_norm",
    ("sum", ""): "sum", ("mean", ""): "mean", ("amax", ""): "max", ("amin", ""): "min",
    ("nn.functional.pad", "constant"): "pad", ("nn.functional.pad", "reflect"): "pad",
    ("nn.functional.pad", "replicate"): "pad", ("nn.functional.pad", "circular"): "pad",
    ("nn.functional.pad", "replicate_negative"): "pad",
}


def _load_op_db():
    """op_db, or None and why. torch's test utilities import `expecttest` (for TestCase only: a stand-in is
    enough when it is missing) and freeze torch.backends' flags on import (undone here: other test modules set
    them)."""
    if torch is None:
        return None, "torch is not installed"
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:
            import unittest

            stub = types.ModuleType("expecttest")
            stub.TestCase = unittest.TestCase
            stub.ACCEPT = False
            sys.modules["expecttest"] = stub
    flags = torch.backends.__dict__.get("__allow_nonbracketed_mutation_flag")
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except Exception as e:  # noqa: BLE001 (any import failure skips these tests, with its reason)
        return None, f"cannot import torch's op_db: {type(e).__name__}: {e}"
    finally:
        if flags is not None:
            torch.backends.__dict__["__allow_nonbracketed_mutation_flag"] = flags
    return op_db, None


OP_DB, OP_DB_ERROR = _load_op_db()


def _infos():
    found = {}
    for info in OP_DB or ():
        key = (info.name, info.variant_test_name)
        if key in OPS:
            found[key] = info
    return found


INFOS = _infos()


def _short(v) -> str:
    if isinstance(v, torch.Tensor):
        return "T" + "x".join(map(str, v.shape)) if v.dim() else "T()"
    if isinstance(v, torch.dtype):
        return str(v).removeprefix("torch.")
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_short(e) for e in v) + ")"
    return repr(v)


def describe(sample) -> str:
    parts = [_short(sample.input)] + [_short(a) for a in sample.args]
    parts += [f"{k}={_short(v)}" for k, v in sample.kwargs.items()]
    return re.sub(r"[^A-Za-z0-9_().,=+-]", "", ",".join(parts))[:80]


_SAMPLES: dict = {}


def _samples(info, device, dtype):
    """op.sample_inputs(device, dtype, requires_grad=True), once per (op, device, dtype). Its generator function
    itself: sample_inputs' tracking wrapper walks the interpreter stack (~0.5 s a call)."""
    key = (info.name, info.variant_test_name, device, dtype)
    if key not in _SAMPLES:
        fn = getattr(info, "sample_inputs_func", None)
        gen = (fn(info, device, getattr(torch, dtype), True) if fn is not None else
               info.sample_inputs(device, getattr(torch, dtype), requires_grad=True))
        _SAMPLES[key] = list(gen)
    return _SAMPLES[key]


def _cases():
    if OP_DB is None:
        return [pytest.param(None, None, None, None, id="op_db-unavailable",
                             marks=pytest.mark.skip(reason=OP_DB_ERROR))]
    cases = []
    for key in OPS:
        info = INFOS.get(key)
        if info is None:
            continue  # not in this torch's op_db
        name = key[0].removeprefix("nn.functional.") + (f"-{key[1]}" if key[1] else "")
        for dtype in DTYPES:
            if getattr(torch, dtype) not in info.supported_dtypes("cuda"):
                continue
            try:
                samples = _samples(info, "cpu", dtype)
            except Exception as e:  # noqa: BLE001
                cases.append(pytest.param(key, dtype, -1, "", id=f"{name}-{dtype}-samples",
                                          marks=pytest.mark.skip(reason=f"sample_inputs on the CPU: {e}")))
                continue
            for i, s in enumerate(samples):
                desc = describe(s)
                cases.append(pytest.param(key, dtype, i, desc, id=f"{name}-{dtype}-{i}-{desc}"))
    return cases


# ---- mapping a sample to our op ------------------------------------------------------------------


class Case:
    """One sample mapped: `tensors` (the differentiable inputs, in order), `ours(*tensors)`, `ref(*tensors)` (torch's
    op, run on float64 copies and on the originals for the result's dtype), and optionally `grad_scale(i, host
    tensors, host upstream gradient)`: the size of input i's gradient terms, where they cancel."""

    def __init__(self, tensors, ours, ref, grad_scale=None):
        self.tensors, self.ours, self.ref, self.grad_scale = tensors, ours, ref, grad_scale


def _dim_arg(sample):
    if sample.args:
        return sample.args[0]
    return sample.kwargs.get("dim")


def map_softmax(sample, op):
    dim = _dim_arg(sample)
    dtype = sample.kwargs.get("dtype")
    fn = getattr(torch, op)

    def ours(x):
        return getattr(ck, op)(x, axis=dim) if dtype is None else getattr(ck, op)(x, axis=dim, dtype=dtype)

    def ref(x):
        return fn(x, dim, dtype=dtype)

    def grad_scale(i, host_tensors, g):  # dx = y (g - sum(g y)) cancels: its terms are up to max |g|
        return float(np.abs(g).max()) if g.size else 0.0

    return Case([sample.input], ours, ref, grad_scale)


def map_norm(sample, op):
    x = sample.input
    ns = tuple(sample.args[0])
    weight = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("weight")
    bias = sample.args[2] if len(sample.args) > 2 else sample.kwargs.get("bias")
    eps = sample.kwargs.get("eps")
    if eps is None:  # torch's defaults: layer_norm 1e-5, rms_norm the input dtype's epsilon
        eps = 1e-5 if op == "layer_norm" else torch.finfo(x.dtype).eps
    k, n = len(ns), math.prod(ns)
    names = ["x"] + (["weight"] if weight is not None else []) + (["bias"] if bias is not None else [])
    tensors = [x] + [t for t in (weight, bias) if t is not None]

    def split(ts):
        got = dict(zip(names, ts))
        return got["x"], got.get("weight"), got.get("bias")

    def ours(*ts):
        xx, w, b = split(ts)
        rows = xx.reshape(*xx.shape[: xx.dim() - k], n)
        flat = [None if p is None else p.reshape(n) for p in (w, b)]
        y = ck.layer_norm(rows, flat[0], flat[1], eps) if op == "layer_norm" else ck.rms_norm(rows, flat[0], eps)
        return y.reshape(xx.shape)

    def ref(*ts):
        xx, w, b = split(ts)
        if op == "layer_norm":
            return torch.nn.functional.layer_norm(xx, ns, w, b, eps)
        return torch.nn.functional.rms_norm(xx, ns, w, eps)

    def grad_scale(i, host_tensors, g):
        """dx: rstd |dy w|; dweight, dbias: the column sums of |dy| (x-hat is 0 on rows of one element)."""
        xh = host_tensors[0]
        lead = xh.shape[: xh.ndim - k]
        if i > 0:
            return float(np.abs(g).reshape(-1, n).sum(0).max()) if g.size else 0.0
        wh = host_tensors[1] if weight is not None else None
        return norm_dx_scale(xh.reshape(*lead, n), None if wh is None else wh.reshape(n), g.reshape(*lead, n),
                             eps, op)

    return Case(tensors, ours, ref, grad_scale)


def map_reduction(sample, op, torch_name):
    x = sample.input
    kw = dict(sample.kwargs)
    dim = kw.get("dim", None)
    keepdim = kw.get("keepdim", False)
    if sample.args:
        return f"positional arguments {sample.args!r} not mapped"
    if x.dim() == 0 and dim is not None and dim != ():
        return "NumPy's axis rules: axis 0 / -1 of a 0-d array is out of bounds (torch accepts them)"
    if dim == () and x.dim() > 0:
        return "dim=() reduces every dimension in torch and none in NumPy"
    axis = None if dim is None else dim
    fn = getattr(torch, torch_name)

    def ours(xx):
        return getattr(ck, op)(xx, axis=axis, keepdims=keepdim)

    def ref(xx):
        return fn(xx, **kw)

    return Case([x], ours, ref)


def map_pad(sample):
    x = sample.input
    args = list(sample.args)
    pad = tuple(args[0] if args else sample.kwargs["pad"])
    mode = args[1] if len(args) > 1 else sample.kwargs.get("mode", "constant")
    value = args[2] if len(args) > 2 else sample.kwargs.get("value", None)
    if any(p < 0 for p in pad):
        return "negative pad widths crop in F.pad; numpy.pad (and ck.pad) take none"
    if mode not in TORCH_PAD_MODES:
        return f"mode {mode!r} has no counterpart in ck.pad"
    widths = torch_pad_to_numpy(pad, x.dim())
    kw = {"constant_values": 0 if value is None else value} if mode == "constant" else {}

    def ours(xx):
        return ck.pad(xx, widths, mode=TORCH_PAD_MODES[mode], **kw)

    def ref(xx):
        return torch.nn.functional.pad(xx, pad, mode=mode, value=value) if mode == "constant" else \
            torch.nn.functional.pad(xx, pad, mode=mode)

    return Case([x], ours, ref)


def map_sample(key, sample):
    """A Case, or a string: why the sample is skipped."""
    op = OPS[key]
    if op in ("softmax", "log_softmax"):
        return map_softmax(sample, op)
    if op in ("layer_norm", "rms_norm"):
        return map_norm(sample, op)
    if op in ("sum", "mean", "max", "min"):
        return map_reduction(sample, op, key[0])
    return map_pad(sample)


# ---- the test ---------------------------------------------------------------------------------------


@torch_gpu
@pytest.mark.parametrize("key, dtype, index, desc", _cases())
def test_opdb_sample(key, dtype, index, desc):
    info = INFOS[key]
    samples = _samples(info, DEV, dtype)  # cached: the first case of an (op, dtype) makes them all
    if index >= len(samples) or describe(samples[index]) != desc:
        pytest.skip(f"op_db's samples differ between the CPU and {DEV} (sample {index}: {desc})")
    sample = samples[index]
    case = map_sample(key, sample)
    if isinstance(case, str):
        pytest.skip(case)
    what = f"{key[0]}{'/' + key[1] if key[1] else ''} {dtype} sample {index}: {desc}"

    want_type = case.ref(*[t.detach() for t in case.tensors])  # torch's result dtype and shape
    y = case.ours(*case.tensors)
    assert isinstance(y, torch.Tensor), what
    assert y.dtype == want_type.dtype, f"{what}: dtype {y.dtype}, torch gives {want_type.dtype}"
    assert tuple(y.shape) == tuple(want_type.shape), f"{what}: shape {tuple(y.shape)}, torch {tuple(want_type.shape)}"

    dbl = [t.detach().double().requires_grad_(t.requires_grad) for t in case.tensors]
    ref = case.ref(*dbl)
    tol = max((dtype, str(y.dtype).removeprefix("torch.")), key=TOL.get)
    assert_close(y, ref, tol, what=what + " forward")

    diff = [i for i, t in enumerate(case.tensors) if t.requires_grad]
    assert y.requires_grad == ref.requires_grad, f"{what}: requires_grad {y.requires_grad}, torch's {ref.requires_grad}"
    if not y.requires_grad or not diff or y.numel() == 0:
        return
    g = torch.randn(tuple(y.shape), device=DEV, dtype=torch.float64).to(y.dtype)
    grads = torch.autograd.grad(y, [case.tensors[i] for i in diff], g, allow_unused=True)
    want = torch.autograd.grad(ref, [dbl[i] for i in diff], g.double(), allow_unused=True)
    for i, got, w in zip(diff, grads, want):
        name = "dx" if i == 0 else f"d(input {i})"
        if w is None:
            assert got is None or not got.any(), f"{what}: {name} should be None / zero"
            continue
        assert got is not None, f"{what}: {name} is None, torch has a gradient"
        scale = case.grad_scale(i, [host(t) for t in case.tensors], host(g)) if case.grad_scale else 0.0
        assert_close(got, w, dtype, k=3, scale=scale, what=f"{what} {name}")
