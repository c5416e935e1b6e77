"""Host side of cu_src/timex.cu: RWKV "timex", a causal depthwise long convolution, and its gradients.

    out[b, c, t] = eps + sum_{u <= t} w[c, T-1-t+u] * k[b, c, u]
               (= eps + F.conv1d(F.pad(k, (T-1, 0)), w.unsqueeze(1), groups=C))

`w` is (C, T), `k` is (B, C, T). Rows of `w` may be strided (the view `w[:, -T:]` of a longer filter is
used without a copy); `k` and `grad_out` may have any batch and channel strides. An input whose last
axis is not contiguous is copied once (documented in docs/timex.md).
"""
from __future__ import annotations

import numpy as np

from .._runtime import CTYPES, FLOAT_DTYPES, Call, KernelSource, ceil_div, current, dtype_name, is_torch

SOURCE = KernelSource("timex.cu")
THREADS = 128                       # TX_THREADS in timex.cu
TILED = {                           # tiled forward / grad_k shapes: name -> (RB, RT, WB)
    "b32": (8, 8, 4),               # 32 rows b x 256 t per block, 8 x 8 outputs per thread
    "b8": (4, 8, 2),                # 8 rows b x 512 t per block, 4 x 8 per thread (small batches)
    "b2": (2, 8, 1),                # 2 rows b x 1024 t per block, 2 x 8 per thread (B = 1, 2, 3, ...)
}
TILED_F64 = ("f64", (4, 4, 4))      # float64 (gradcheck): 16 rows b x 128 t, 4 x 4 per thread
# Relative time per computed FMA, from the H200 run (benchmarks/runs/timex-NVIDIA_H200.md): b32 37.2
# TFLOP/s and b8 21.5 at B=32 T=768; b2 26.7-32.5 at B=3..12, T=2048..8192. b8 stays a named variant.
TILED_COST = {"b32": 1.0, "b8": 1.75, "b2": 1.2}
GRAD_W = {"float": (16, 16, 4), "f64": (8, 8, 4)}  # grad_w (RD, RU, LD): 64 lags / block (32 for float64)
# Other float32 tile shapes compiled for scripts/timex_probe.py to compare on the device (not dispatched).
PROBE_TILED = [(4, 16, 4), (8, 8, 2), (4, 16, 4, 64)]
PROBE_GRAD_W = [(16, 8, 4), (8, 16, 8), (8, 8, 4)]
VARIANTS = ("auto", "tiled", "tiled_b32", "tiled_b8", "tiled_b2", "tf32x3", "tf32x3_full", "tf32x3_scalar", "naive",
            "shared", "float4", "batch8", "balanced")
LADDER = ("naive", "shared", "float4", "batch8", "balanced")  # the seed's rungs, in order
BACKWARD_VARIANTS = ("auto", "tiled", "tf32x3", "naive")
TF32X3_TILE = (32, 256)  # rows b, times t per block of timex_tf32x3f / timex_tf32x3
# Toeplitz tf32x3 kernels (format with REV): variant tf32x3 = TOEPLITZ_DEFAULT, tf32x3_full = frag_norot (the
# default of run 6 to issue 3's helper run: every MMA of the diagonal chunks), tf32x3_scalar = run 5's kernel;
# frag_tri = frag_norot skipping the MMA tiles wholly above the diagonal; frag (warp roles rotated with the
# channel) for the probe: run 6 measured it 1.3-4.5% slower than fixed roles (forward 0.2615 vs 0.2582 ms,
# 0.2681 vs 0.2566; benchmarks/runs/timex-run6-call*/probe.log)
TOEPLITZ_TF32X3 = {"frag": "timex_tf32x3f<{}, true, false, false>", "scalar": "timex_tf32x3<{}>",
                   "frag_norot": "timex_tf32x3f<{}, false, false, false>",
                   "frag_tri": "timex_tf32x3f<{}, false, true, false>"}
# grad_k by the default Toeplitz kernel that also finishes grad_w (the band combine) after timex_grad_w_frag:
# for the probe and the tests (measured slower than the separate combine kernel: each block's serial prologue)
TOEPLITZ_GRAD_K_COMBINE = "timex_tf32x3f<true, false, true, true>"
TOEPLITZ_DEFAULT = "frag_tri"
TOEPLITZ_VARIANTS = {"tf32x3": TOEPLITZ_DEFAULT, "tf32x3_full": "frag_norot", "tf32x3_scalar": "scalar"}
GRAD_W_TF32X3 = "frag2"   # tf32x3 grad_w kernel: timex_grad_w_frag<2> (frag1, and the first band kernel
                         # timex_grad_w_tf32x3 with 16 / 32 K rows per chunk, are compiled for the probe)
GRAD_W_TF32X3_ALL = ("frag2", "frag1", 16, 32)
BAND = 64                # band tile of timex_grad_w_tf32x3 (TXB)
# 'auto' takes a tf32x3 kernel for float32 where the H200 runs (benchmarks/runs/timex-run4-probe.log) measured
# it faster and its error stays within float32's 1e-5. The error grows with the MMA accumulation length: the
# Toeplitz kernel (forward, grad_k) sums over T (5.1e-6 at T = 1024, 1.0e-5 at 2048), grad_w over B*T/64 rows
# (5.1e-6 at B*T = 32*2048). The Toeplitz tile is 32 b x 256 t: B < 16 or T < 256 tie or lose (measured);
# the band grad_w has no batch tile and won at every measured B (1..384). Run 6 (fragment-order Toeplitz kernel,
# benchmarks/runs/timex-run6-call1): it also wins at B = 12 (T = 768) and T = 128, 192 (B = 192, 128).
TF32X3_TOEPLITZ = (12, 128, 1024)  # min B, min T, max T
TF32X3_GRAD_W = (2048, 32 * 2048)  # max T, max B*T
SEED_RUNGS = {  # kernel, float32 only; preconditions checked by _seed_check
    "shared": "timex_shared", "float4": "timex_float4", "batch8": "timex_batch8", "balanced": "timex_balanced",
}


def _b(v):
    return "true" if v else "false"


def _tiled_name(dtype, cfg, rev, vec):
    rb, rt, wb, *ku = cfg
    return f"timex_tiled<{CTYPES[dtype]}, {rb}, {rt}, {wb}, {_b(rev)}, {ku[0] if ku else 32}, {_b(vec)}>"


def _grad_w_name(dtype, cfg=None, vec=False):
    rd, ru, ld = cfg or GRAD_W["f64" if dtype == "float64" else "float"]
    return f"timex_grad_w<{CTYPES[dtype]}, {rd}, {ru}, {ld}, {_b(vec)}>"


def _grad_w_tf32x3_name(chunk=None, vec=False):
    """chunk: None (the default kernel), 'frag1' / 'frag2' (fragment-order staging, 1 or 2 bands per block),
    or 16 / 32 (the first band kernel's K rows per chunk)."""
    chunk = chunk or GRAD_W_TF32X3
    if isinstance(chunk, str):
        return f"timex_grad_w_frag<{chunk[len('frag'):]}, {_b(vec)}>"
    return f"timex_grad_w_tf32x3<{chunk}, {_b(vec)}>"


def _declare():
    names = []
    for dt in FLOAT_DTYPES:
        names += [f"timex_naive<{CTYPES[dt]}>", f"timex_naive_grad_k<{CTYPES[dt]}>",
                  f"timex_naive_grad_w<{CTYPES[dt]}>"]
    names += list(SEED_RUNGS.values())
    names += [n.format(_b(rev)) for n in TOEPLITZ_TF32X3.values() for rev in (False, True)]
    names += [TOEPLITZ_GRAD_K_COMBINE]
    names += ["timex_grad_w_bands"]
    names += [_grad_w_tf32x3_name(kc, vec) for kc in GRAD_W_TF32X3_ALL for vec in (False, True)]
    for dt in FLOAT_DTYPES:
        cfgs = [TILED_F64[1]] if dt == "float64" else list(TILED.values())
        for cfg in cfgs:
            names += [_tiled_name(dt, cfg, rev, vec) for rev in (False, True) for vec in (False, True)]
        names += [_grad_w_name(dt, None, False), _grad_w_name(dt, None, True)]
    names += [_tiled_name("float32", cfg, rev, vec) for cfg in PROBE_TILED for rev in (False, True)
              for vec in (False, True)]
    names += [_grad_w_name("float32", cfg, vec) for cfg in PROBE_GRAD_W for vec in (False, True)]
    SOURCE.declare(names)


_declare()


def tiled_shape(cfg):
    """(rows b per block, times t per block) of a tiled configuration."""
    rb, rt, wb = cfg[:3]
    return wb * rb, (32 // wb) * rt * (THREADS // 32)


def choose_tiled(dtype: str, B: int) -> str:
    """The tiled shape with the least estimated work for batch B (padding rows b costs FMAs)."""
    if dtype == "float64":
        return TILED_F64[0]
    return min(TILED, key=lambda n: ceil_div(B, tiled_shape(TILED[n])[0]) * tiled_shape(TILED[n])[0] * TILED_COST[n])


def tf32x3_auto(dtype: str, B: int, T: int, kernel: str = "toeplitz") -> bool:
    """Whether 'auto' takes the tf32x3 tensor-core kernel ('toeplitz': forward and grad_k; 'grad_w')."""
    if dtype != "float32":
        return False
    if kernel == "grad_w":
        return T <= TF32X3_GRAD_W[0] and B * T <= TF32X3_GRAD_W[1]
    b_min, t_min, t_max = TF32X3_TOEPLITZ
    return B >= b_min and t_min <= T <= t_max


def _cfg(name):
    if isinstance(name, tuple):
        return name
    return TILED_F64[1] if name == TILED_F64[0] else TILED[name]


# ---- validation ---------------------------------------------------------------------------------


def _elem_strides(arr, name, op):
    """Element strides of a CuPy array, or None when they are not whole elements."""
    item = arr.dtype.itemsize
    if any(s % item for s in arr.strides):
        return None
    return tuple(s // item for s in arr.strides)


def _rows(arr, name, op):
    """`arr` with unit stride along its last axis (copied once if not) and its element strides."""
    import cupy

    st = _elem_strides(arr, name, op)
    if st is None or (arr.shape[-1] > 1 and st[-1] != 1):
        arr = cupy.ascontiguousarray(arr)
        st = _elem_strides(arr, name, op)
    return arr, st


def _inputs(call, op, w, k, g=None):
    wc = call.arg(w, "w", dtypes=FLOAT_DTYPES, ndim=2)
    kc = call.arg(k, "k", dtypes=FLOAT_DTYPES, ndim=3)
    if wc.dtype != kc.dtype:
        raise TypeError(f"{op}: w has dtype {dtype_name(wc)} but k has {dtype_name(kc)}; "
                        f"w and k must have the same dtype")
    B, C, T = kc.shape
    if tuple(wc.shape) != (C, T):
        raise ValueError(f"{op}: w must have shape (C, T) = ({C}, {T}) to match k of shape (B, C, T) = "
                         f"{tuple(kc.shape)}; got w of shape {tuple(wc.shape)}")
    gc = None
    if g is not None:
        gc = call.arg(g, "grad_out", dtypes=FLOAT_DTYPES, ndim=3)
        if gc.dtype != kc.dtype:
            raise TypeError(f"{op}: grad_out has dtype {dtype_name(gc)} but k has {dtype_name(kc)}; they must match")
        if tuple(gc.shape) != tuple(kc.shape):
            raise ValueError(f"{op}: grad_out must have the shape of k {tuple(kc.shape)}; got {tuple(gc.shape)}")
    if max(B, C, T) >= 2**31:
        raise ValueError(f"{op}: B, C and T must each be < 2**31; got k of shape {tuple(kc.shape)}")
    return wc, kc, gc


# ---- forward ------------------------------------------------------------------------------------


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"timex: variant must be one of {', '.join(VARIANTS)}; got {variant!r}")


def timex_impl(w, k, eps: float = 0.0, variant: str = "auto"):
    """The kernels' path for either kind of input (no autograd)."""
    op = "timex"
    with Call(op, k, "k") as call:
        wc, kc, _ = _inputs(call, op, w, k)
        dtype = dtype_name(kc)
        B, C, T = kc.shape
        out = call.empty((B, C, T), dtype)
        if out.size == 0:
            return call.result(out)
        wc, ws = _rows(wc, "w", op)
        kc, ks = _rows(kc, "k", op)
        eps = np.float64(eps)
        if variant == "auto" and tf32x3_auto(dtype, B, T):
            variant = "tf32x3"
        if variant in ("auto", "tiled") or variant.startswith("tiled_"):
            name = choose_tiled(dtype, B) if variant in ("auto", "tiled") else variant[len("tiled_"):]
            if dtype == "float64" and name != TILED_F64[0]:
                raise ValueError(f"timex: variant {variant!r} has no float64 kernel; use 'tiled' or 'naive'")
            if dtype != "float64" and name not in TILED:
                raise ValueError(f"timex: variant {variant!r} is for float64 only")
            _launch_tiled(dtype, name, False, wc, ws[0], kc, ks[0], ks[1], out, eps, B, C, T)
        elif variant in TOEPLITZ_VARIANTS:
            _launch_tf32x3(dtype, False, wc, ws[0], kc, ks[0], ks[1], out, eps, B, C, T, TOEPLITZ_VARIANTS[variant])
        elif variant == "naive":
            _launch_naive(f"timex_naive<{CTYPES[dtype]}>", B * C * T,
                          (wc, np.int64(ws[0]), kc, np.int64(ks[0]), np.int64(ks[1]), out, eps,
                           np.int32(B), np.int32(C), np.int32(T)))
        else:
            _seed_rung(variant, dtype, wc, ws[0], kc, out, eps, B, C, T)
        return call.result(out)


def _launch_naive(name, n, args):
    blocks = max(1, min(ceil_div(n, 256), current().resident_blocks(256) * 8))
    SOURCE.kernel(name)((blocks,), (256,), args)


def _launch_tiled(dtype, name, rev, w, ldw, x, sb, sc, out, eps, B, C, T, vec=None):
    cfg = _cfg(name)
    bm, tn = tiled_shape(cfg)
    grid = (C, ceil_div(T, tn), ceil_div(B, bm))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"timex: T = {T} or B = {B} is beyond this kernel's grid ({tn * 65535} / {bm * 65535})")
    if vec is None:
        vec = T % 4 == 0 and _aligned4(x, (sb, sc, 1))
    SOURCE.kernel(_tiled_name(dtype, cfg, rev, vec))(
        grid, (THREADS,), (w, np.int64(ldw), x, np.int64(sb), np.int64(sc), out, np.float64(eps),
                           np.int32(B), np.int32(C), np.int32(T)))


def _launch_tf32x3(dtype, rev, w, ldw, x, sb, sc, out, eps, B, C, T, kernel=TOEPLITZ_DEFAULT, combine=None):
    """The Toeplitz product on the tensor cores; kernel: a key of TOEPLITZ_TF32X3. combine: (ws, gw) for grad_k
    (rev) by the default kernel: its blocks also combine timex_grad_w_frag's bands in ws into gw."""
    if dtype != "float32":
        raise ValueError(f"timex: variant 'tf32x3' (split-precision TF32 tensor cores) is float32 only; got {dtype}")
    bm, tn = TF32X3_TILE
    grid = (C, ceil_div(T, tn), ceil_div(B, bm))
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"timex: T = {T} or B = {B} is beyond this kernel's grid ({tn * 65535} / {bm * 65535})")
    args = (w, np.int64(ldw), x, np.int64(sb), np.int64(sc), out, np.float64(eps), np.int32(B), np.int32(C),
            np.int32(T))
    if combine is not None:
        if not (rev and kernel == "frag_tri"):
            raise ValueError("timex: the band combine runs only in grad_k's default Toeplitz kernel")
        SOURCE.kernel(TOEPLITZ_GRAD_K_COMBINE)(grid, (THREADS,), args + tuple(combine))
        return
    if kernel != "scalar":  # the fragment-order kernels' (unused) ws, gw
        args += (out, out)
    SOURCE.kernel(TOEPLITZ_TF32X3[kernel].format(_b(rev)))(grid, (THREADS,), args)


def seed_preconditions(variant: str, dtype: str, B: int, T: int) -> str | None:
    """Why a seed rung cannot run this problem (None when it can)."""
    if dtype != "float32":
        return f"the seed rung {variant!r} is float32 only; got {dtype}"
    if variant == "shared" and T > 1024:
        return f"the seed rung 'shared' needs T <= 1024 (one thread per t); got T = {T}"
    if variant == "float4" and (T % 4 or T > 4096):
        return f"the seed rung 'float4' needs T % 4 == 0 and T <= 4096; got T = {T}"
    if variant in ("batch8", "balanced"):
        step = 8 if variant == "balanced" else 4
        if B % 8 or T % step or T > 1024:
            return (f"the seed rung {variant!r} needs B % 8 == 0, T % {step} == 0 and T <= 1024; "
                    f"got B = {B}, T = {T}")
    return None


def _seed_rung(variant, dtype, w, ldw, k, out, eps, B, C, T):
    import cupy

    why = seed_preconditions(variant, dtype, B, T)
    if why:
        raise ValueError(f"timex: {why}; use variant='auto'")
    k = cupy.ascontiguousarray(k)
    smem = (2 if variant in ("shared", "float4") else 9) * T * 4
    kern = SOURCE.kernel(SEED_RUNGS[variant], smem)
    args = (w, np.int64(ldw), k, out, eps, np.int32(B), np.int32(C), np.int32(T))
    if variant == "shared":
        kern((B * C,), (T,), args, shared_mem=smem)
    elif variant == "float4":
        kern((B * C,), (T // 4,), args, shared_mem=smem)
    else:
        kern((C, B // 8), (T // (8 if variant == "balanced" else 4),), args, shared_mem=smem)


# ---- backward -----------------------------------------------------------------------------------


def check_backward_variant(variant: str) -> None:
    if variant not in BACKWARD_VARIANTS:
        raise ValueError(f"timex_backward: variant must be one of {', '.join(BACKWARD_VARIANTS)}; got {variant!r}")


def backward_variant(variant: str) -> str:
    """The backward a forward variant's autograd uses: auto, naive and tf32x3 their own, tf32x3_scalar the
    tf32x3 one, the other (SIMT) rungs the SIMT tiled kernels."""
    if variant in ("tf32x3_scalar", "tf32x3_full"):
        return "tf32x3"
    return variant if variant in ("auto", "naive", "tf32x3") else "tiled"


def timex_backward_impl(w, k, grad_out, variant: str = "auto"):
    op = "timex_backward"
    with Call(op, k, "k") as call:
        wc, kc, gc = _inputs(call, op, w, k, grad_out)
        dtype = dtype_name(kc)
        B, C, T = kc.shape
        gw = call.empty((C, T), dtype)
        gk = call.empty((B, C, T), dtype)
        if gw.size == 0:
            return call.result(gw), call.result(gk)
        if B == 0:
            gw.fill(0)
            return call.result(gw), call.result(gk)
        wc, ws = _rows(wc, "w", op)
        kc, ks = _rows(kc, "k", op)
        gc, gs = _rows(gc, "grad_out", op)
        if variant == "naive":
            _launch_naive(f"timex_naive_grad_k<{CTYPES[dtype]}>", B * C * T,
                          (wc, np.int64(ws[0]), gc, np.int64(gs[0]), np.int64(gs[1]), gk,
                           np.int32(B), np.int32(C), np.int32(T)))
            _launch_naive(f"timex_naive_grad_w<{CTYPES[dtype]}>", C * T,
                          (kc, np.int64(ks[0]), np.int64(ks[1]), gc, np.int64(gs[0]), np.int64(gs[1]), gw,
                           np.int32(B), np.int32(C), np.int32(T)))
        else:
            # (grad_k's kernel can also do grad_w's band combine, the third launch: measured 1.7-2.1 us slower at
            # B=32 C=768 T=768, benchmarks/notes.md, so the separate combine kernel stays)
            tf = variant == "tf32x3"
            if tf or (variant == "auto" and tf32x3_auto(dtype, B, T)):
                _launch_tf32x3(dtype, True, wc, ws[0], gc, gs[0], gs[1], gk, 0.0, B, C, T)
            else:
                _launch_tiled(dtype, choose_tiled(dtype, B), True, wc, ws[0], gc, gs[0], gs[1], gk, 0.0, B, C, T)
            if tf or (variant == "auto" and tf32x3_auto(dtype, B, T, "grad_w")):
                _launch_grad_w_tf32x3(dtype, kc, ks, gc, gs, gw, B, C, T,
                                      call.empty((C, ceil_div(T, BAND), 2 * BAND), "float32"))
            else:
                _launch_grad_w(dtype, None, kc, ks, gc, gs, gw, B, C, T)
        return call.result(gw), call.result(gk)


def _aligned(arr, strides, n):
    """Whether rows of `arr` start on n-element boundaries (n-element vector loads are safe)."""
    return arr.data.ptr % (n * arr.dtype.itemsize) == 0 and all(s % n == 0 for s in strides[:-1])


def _aligned4(arr, strides):
    return _aligned(arr, strides, 4)


def _launch_grad_w(dtype, cfg, k, ks, g, gs, gw, B, C, T, vec=None):
    rd, ru, ld = cfg or GRAD_W["f64" if dtype == "float64" else "float"]
    if vec is None:
        vec = T % 4 == 0 and _aligned4(k, ks) and _aligned4(g, gs)
    blocks = C * ceil_div(T, ld * rd)
    if blocks >= 2**31:
        raise ValueError(f"timex_backward: C * ceil(T / {ld * rd}) = {blocks} blocks is beyond the grid limit")
    SOURCE.kernel(_grad_w_name(dtype, cfg, vec))(
        (blocks,), (THREADS,), (k, np.int64(ks[0]), np.int64(ks[1]), g, np.int64(gs[0]), np.int64(gs[1]), gw,
                           np.int32(B), np.int32(C), np.int32(T)))


def _launch_grad_w_tf32x3(dtype, k, ks, g, gs, gw, B, C, T, ws=None, chunk=None, vec=None, combine=True):
    """Band GEMMs into the workspace ws (C, ceil(T/64), 128) float32, then (combine) the two-band combine into gw;
    without it, the grad_k launch that follows does the combine (_launch_tf32x3's combine)."""
    import cupy

    if dtype != "float32":
        raise ValueError(f"timex_backward: variant 'tf32x3' (split-precision TF32 tensor cores) is float32 only; "
                         f"got {dtype}")
    nt = ceil_div(T, BAND)
    if C * nt >= 2**31 or B * nt >= 2**31:
        raise ValueError(f"timex_backward: C * ceil(T / {BAND}) and B * ceil(T / {BAND}) must be < 2**31 for "
                         f"'tf32x3'; got B = {B}, C = {C}, T = {T}")
    if ws is None:
        ws = cupy.empty((C, nt, 2 * BAND), cupy.float32)
    chunk = chunk or GRAD_W_TF32X3
    nb = int(chunk[len("frag"):]) if isinstance(chunk, str) else 1  # bands per block
    if vec is None:  # the frag kernels load 2 elements at a time, the first band kernel 4
        step = 2 if isinstance(chunk, str) else 4
        vec = T % step == 0 and _aligned(k, ks, step) and _aligned(g, gs, step)
    SOURCE.kernel(_grad_w_tf32x3_name(chunk, vec))(
        (C * ceil_div(nt, nb),), (THREADS,), (k, np.int64(ks[0]), np.int64(ks[1]), g, np.int64(gs[0]), np.int64(gs[1]), ws,
                                np.int32(B), np.int32(C), np.int32(T)))
    if combine:
        _launch_naive("timex_grad_w_bands", C * T, (ws, gw, np.int32(C), np.int32(T)))


# ---- float64 references (host, NumPy) -------------------------------------------------------------


def reference(w, k, eps=0.0):
    """float64 forward on the host through FFTs (exact to ~1e-15): w (C, T), k (B, C, T) NumPy arrays."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    T = k.shape[-1]
    n = 2 * T
    f = w[:, ::-1]  # f[c, d] = w[c, T-1-d]
    out = np.fft.irfft(np.fft.rfft(k, n) * np.fft.rfft(f, n), n)[..., :T]
    return out + eps


def reference_backward(w, k, g):
    """float64 (grad_w, grad_k) on the host through FFTs."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    T = k.shape[-1]
    n = 2 * T
    f = w[:, ::-1]
    G = np.fft.rfft(g, n)
    # grad_k[u] = sum_d f[d] g[u+d]: a correlation
    gk = np.fft.irfft(G * np.conj(np.fft.rfft(f, n)), n)[..., :T]
    # grad_f[d] = sum_b sum_u k[u] g[u+d]
    gf = np.fft.irfft((G * np.conj(np.fft.rfft(k, n))).sum(axis=0), n)[..., :T]
    return gf[:, ::-1].copy(), gk


def reference_loops(w, k, eps=0.0):
    """The definition as plain loops (small sizes; checks the FFT reference)."""
    w = np.asarray(w, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    B, C, T = k.shape
    out = np.full((B, C, T), float(eps))
    for t in range(T):
        for u in range(t + 1):
            out[:, :, t] += w[None, :, T - 1 - t + u] * k[:, :, u]
    return out
