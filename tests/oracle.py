"""float64 references, element-wise comparisons and small utilities shared by the contract, fuzz, op_db,
bad-input, multi-GPU, co-residency and huge-tensor tests (not a test module itself).

References run on the host in NumPy (or in torch on float64 copies) from the values the device saw;
comparisons are element-wise with conftest.TOL, so a single wrong element fails."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

from conftest import TOL, to_f64

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- comparisons -------------------------------------------------------------------------------


def host(a) -> np.ndarray:
    """Any array (NumPy, CuPy, torch, bfloat16 included) as a host float64 array."""
    if isinstance(a, np.ndarray):
        return a.astype(np.float64)
    return to_f64(a)


def assert_close(got, want, dtype: str, k: float = 1.0, scale: float = 0.0, what: str = "") -> None:
    """Every element of `got` within 4 k TOL[dtype] of `want` (relative, or of max(|want|, scale) absolute);
    NaN where and only where `want` has NaN, infinities equal. `what` is printed on failure (a reproduction)."""
    g, w = host(got), np.asarray(host(want), dtype=np.float64)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != reference {w.shape}"
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    assert (nan_g == nan_w).all(), (f"{what}: NaN mismatch at {np.argwhere(nan_g != nan_w)[:5].tolist()} "
                                    f"(got {g[nan_g != nan_w][:5]}, want {w[nan_g != nan_w][:5]})")
    inf_w = np.isinf(w)
    assert (np.isinf(g) == inf_w).all() and (g[inf_w] == w[inf_w]).all(), f"{what}: infinities differ"
    fin = ~(nan_w | inf_w)
    if not fin.any():
        return
    g, w = g[fin], w[fin]
    tol = 4 * k * TOL[dtype]
    atol = tol * max(float(np.abs(w).max()), float(scale))
    bad = np.abs(g - w) > atol + tol * np.abs(w)
    if bad.any():
        i = int(np.argmax(np.abs(g - w) - tol * np.abs(w)))
        raise AssertionError(f"{what}: {int(bad.sum())} of {g.size} elements off (worst got {g[i]!r}, want {w[i]!r}, "
                             f"atol {atol:.3g}, rtol {tol:.3g})")


def assert_equal(got, want, what: str = "") -> None:
    g, w = host(got), host(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    assert np.array_equal(g, w, equal_nan=True), f"{what}: not bit-equal (max |diff| {np.nanmax(np.abs(g - w))})"


# ---- values ----------------------------------------------------------------------------------------------


def np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def make_values(rng, shape, dtype, scale=1.0, shift=0.0):
    """Host values exactly as `dtype` holds them, in the dtype itself (ml_dtypes for bfloat16)."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "complex64":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype)
    return (rng.standard_normal(shape) * scale + shift).astype(np_dtype(dtype))


def f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def to_host(a) -> np.ndarray:
    """A device result on the host in its own dtype (bfloat16 through float32)."""
    if torch is not None and isinstance(a, torch.Tensor):
        a = a.detach()
        if a.dtype == torch.bfloat16:
            return a.float().cpu().numpy().astype(np_dtype("bfloat16"))
        return a.cpu().numpy()
    import cupy

    return cupy.asnumpy(a)


def on_device(lib: str, values: np.ndarray, offset: int = 0, device: str = "cuda"):
    """Host values (exact, in their dtype) on the device, `offset` elements into a fresh buffer (offset 1: a base
    pointer off every vector boundary), C-contiguous; `lib` 'torch' or 'cupy'."""
    values = np.asarray(values)
    flat = np.zeros(values.size + offset, dtype=values.dtype)
    flat[offset:] = values.reshape(-1)
    if lib == "torch":
        name = values.dtype.name
        carrier = flat.astype(np.float32) if name == "bfloat16" else flat
        buf = torch.from_numpy(carrier).to(device, getattr(torch, "bool" if name == "bool" else name))
        return buf[offset:].view(values.shape)
    import cupy

    with cupy.cuda.Device(int(device.split(":")[1]) if ":" in device else cupy.cuda.Device().id):
        buf = cupy.asarray(flat)
    return buf[offset:].reshape(values.shape)


# ---- float64 references (NumPy) ------------------------------------------------------------------


def softmax_ref(x: np.ndarray, axis: int = -1, log: bool = False) -> np.ndarray:
    """torch's softmax / log_softmax numerics in float64, -inf / +inf / NaN included."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        x1 = x.reshape(1)
        return softmax_ref(x1, 0, log).reshape(())
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isneginf(m), 0.0, m)  # an all -inf row: exp(-inf - 0) = 0, sum 0, 0 / 0 = NaN
        z = x - m
        e = np.exp(z)
        s = e.sum(axis=axis, keepdims=True)
        return z - np.log(s) if log else e / s


def softmax_backward_ref(y: np.ndarray, dy: np.ndarray, axis: int = -1, log: bool = False) -> np.ndarray:
    if y.ndim == 0:
        return softmax_backward_ref(y.reshape(1), dy.reshape(1), 0, log).reshape(())
    if log:
        return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def norm_ref(x, w, b, eps, mode):
    """(y, xhat, rstd) of layer_norm / rms_norm over the last axis, float64."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        if mode == "layer_norm":
            mean = x.mean(-1, keepdims=True)
            rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
            xhat = (x - mean) * rstd
        else:
            rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
            xhat = x * rstd
    y = xhat * (1 if w is None else w) + (0 if b is None else b)
    return y, xhat, rstd


def norm_backward_ref(x, w, b, dy, eps, mode):
    """(dx, dweight, dbias) in float64; dweight / dbias None where w / b are."""
    _, xhat, rstd = norm_ref(x, w, b, eps, mode)
    g = dy * (1 if w is None else w)
    c2 = (g * xhat).mean(-1, keepdims=True)
    c1 = g.mean(-1, keepdims=True) if mode == "layer_norm" else 0
    dx = rstd * (g - c1 - xhat * c2)
    lead = tuple(range(x.ndim - 1))
    return dx, None if w is None else (dy * xhat).sum(lead), None if b is None else dy.sum(lead)


def norm_dx_scale(x, w, dy, eps, mode) -> float:
    """The size of dx's terms (rstd * dy * w): dx cancels to nearly nothing on short or constant rows, where a
    tolerance relative to dx itself measures only rounding."""
    _, _, rstd = norm_ref(x, w, None, eps, mode)
    with np.errstate(invalid="ignore"):
        t = np.abs(rstd * dy * (1 if w is None else w))
    t = t[np.isfinite(t)]
    return float(t.max()) if t.size else 0.0


def timex_ref(w, k, eps=0.0):
    """out[b,c,t] = eps + sum_{u<=t} w[c, T-1-t+u] k[b,c,u] in float64, through FFTs."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    T = k.shape[-1]
    if k.size == 0:
        return np.full(k.shape, float(eps))
    f = w[:, ::-1]
    return np.fft.irfft(np.fft.rfft(k, 2 * T) * np.fft.rfft(f, 2 * T), 2 * T)[..., :T] + eps


def timex_backward_ref(w, k, g):
    """(grad_w, grad_k) in float64 (the ops module's FFT reference; empty gradients give zeros)."""
    from cupy_kernels.ops.timex import reference_backward

    w, k, g = (np.asarray(a, dtype=np.float64) for a in (w, k, g))
    if g.size == 0:
        return np.zeros(w.shape), np.zeros(k.shape)
    return reference_backward(w, k, g)


def pad_index(shape, pad_width, mode, stagger=0) -> np.ndarray:
    """Flat source index of every output element of numpy.pad(x, pad_width, mode) (-1: the constant), or of
    the brick tiling (the last two axes tile a brick lattice, leading axes wrap)."""
    idx = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    if idx.ndim == 0:
        return idx
    if mode == "constant":
        return np.pad(idx, pad_width, mode="constant", constant_values=-1)
    if mode != "brick":
        return np.pad(idx, pad_width, mode=mode)
    lead = np.pad(idx, list(pad_width[:-2]) + [(0, 0), (0, 0)], mode="wrap") if idx.ndim > 2 else idx
    th, tw = shape[-2:]
    (p0, q0), (p1, q1) = pad_width[-2], pad_width[-1]
    rows = np.arange(th + p0 + q0) - p0
    cols = np.arange(tw + p1 + q1) - p1
    band = np.floor_divide(rows, th)
    src_c = np.mod(cols[None, :] - stagger * band[:, None], tw)
    return lead[..., np.mod(rows, th)[:, None], src_c]


def pad_ref(x: np.ndarray, pad_width, mode, constant_values=0, stagger=0) -> np.ndarray:
    """Forward by gathering through pad_index (any dtype; constant_values cast as numpy.pad does)."""
    if x.ndim == 0:
        return x.copy()
    if mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=constant_values)
    if x.size == 0:  # no empty axis may be extended: the output is empty too
        return np.empty(tuple(n + a + b for n, (a, b) in zip(x.shape, pad_width)), dtype=x.dtype)
    return x.reshape(-1)[pad_index(x.shape, pad_width, mode, stagger)]


def pad_backward_ref(shape, pad_width, mode, g: np.ndarray, stagger=0) -> np.ndarray:
    """Gradient of pad: each output gradient added to its source element (float64)."""
    idx = pad_index(shape, pad_width, mode, stagger).reshape(-1)
    g = np.asarray(g, dtype=np.float64).reshape(-1)
    keep = idx >= 0
    return np.bincount(idx[keep], weights=g[keep], minlength=int(np.prod(shape))).reshape(shape)


def torch_pad_to_numpy(pad: tuple, ndim: int) -> list:
    """F.pad's flat (last axis first) pad tuple as numpy.pad's per-axis (before, after) pairs."""
    pairs = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        pairs[ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return pairs


TORCH_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


# ---- torch helpers ---------------------------------------------------------------------------------


def grad_subsets(names):
    """Every non-empty subset of `names` (which inputs require grad)."""
    return [s for r in range(1, len(names) + 1) for s in itertools.combinations(names, r)]


GRAD_KINDS = ("dense", "sum", "broadcast", "transposed", "strided", "other_dtype")


def upstream(kind: str, y):
    """The output gradient of `kind` for output y (None for "sum": the caller does y.sum().backward()):
    dense; broadcast (an expanded view, stride 0 on the leading axes); transposed (a permuted view of the
    reversed shape: non-contiguous); strided (every other column of a wider tensor); other_dtype (float64 for
    a float32 output, float32 otherwise: autograd casts it)."""
    if kind == "sum":
        return None
    shape = tuple(y.shape)
    if kind == "dense":
        return torch.randn(shape, device=y.device, dtype=y.dtype)
    if kind == "broadcast":
        if not shape:
            return torch.randn((), device=y.device, dtype=y.dtype)
        return torch.randn((1,) * (len(shape) - 1) + shape[-1:], device=y.device, dtype=y.dtype).expand(shape)
    if kind == "transposed":
        nd = len(shape)
        base = torch.randn(shape[::-1], device=y.device, dtype=y.dtype)
        return base.permute(*range(nd - 1, -1, -1)) if nd else base
    if kind == "strided":
        if not shape:
            return torch.randn((), device=y.device, dtype=y.dtype)
        return torch.randn(shape[:-1] + (2 * shape[-1],), device=y.device, dtype=y.dtype)[..., ::2]
    if kind == "other_dtype":
        other = torch.float64 if y.dtype == torch.float32 else torch.float32
        return torch.randn(shape, device=y.device, dtype=other)
    raise ValueError(kind)


def backward(y, g) -> None:
    """y.backward(g), or y.sum().backward() for g None."""
    if g is None:
        y.sum().backward()
    else:
        y.backward(g)


def tdtype(name: str):
    return getattr(torch, name)


# ---- subprocesses (hangs fail a test instead of freezing the suite) --------------------------------


def run_python(code: str, timeout: float, env: dict | None = None):
    """Run `code` in a fresh Python from the repository root (cupy_kernels importable). Returns (returncode or
    None on timeout, stdout, stderr, seconds)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    start = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=full_env,
                           capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err, time.monotonic() - start


def gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0
