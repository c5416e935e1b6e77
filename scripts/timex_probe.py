"""Device probe for timex: the fp32 FMA ceiling of this GPU (a pure-FFMA kernel), and each timex kernel
timed alone at B=32 C=768 T=768 (every tiled shape, grad_k, grad_w), so the ladder's figures can be
read as fractions of that ceiling. Prints a small table; run from the repository root."""
from __future__ import annotations

import numpy as np

import cupy
import cupy_kernels as ck
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import timex as tx

FMA_SRC = r"""
extern "C" __global__ void ffma_peak(float* out, int iters) {
  float a[8];
  for (int i = 0; i < 8; ++i) a[i] = threadIdx.x * 1e-3f + i;
  const float m = 0.9999f, c = 1e-4f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int r = 0; r < 16; ++r)
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = fmaf(a[i], m, c);
  }
  float s = 0.f;
  for (int i = 0; i < 8; ++i) s += a[i];
  if (s == 12345.f) out[0] = s;
}
"""


def main():
    timer = Timer()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    kern = cupy.RawKernel(FMA_SRC, "ffma_peak")
    out = cupy.zeros(1, cupy.float32)
    blocks, threads, iters = sms * 8, 256, 4096
    ms = timer(lambda: kern((blocks,), (threads,), (out, np.int32(iters))))
    peak = blocks * threads * iters * 16 * 8 * 2 / (ms * 1e-3) / 1e12
    print(f"fp32 FFMA ceiling: {peak:.1f} TFLOP/s ({sms} SMs, {ms:.3f} ms)")

    B, C, T = 32, 768, 768
    flop = 2 * B * C * T * (T + 1) // 2
    w = (cupy.random.standard_normal((C, T), dtype=cupy.float32) / np.float32(np.sqrt(T))).astype(cupy.float32)
    k = cupy.random.standard_normal((B, C, T), dtype=cupy.float32)
    g = cupy.random.standard_normal((B, C, T), dtype=cupy.float32)
    o = cupy.empty_like(k)
    gw = cupy.empty_like(w)
    rows = []
    for name in tx.TILED:
        rows.append((f"forward tiled {name}", timer(lambda: ck.timex(w, k, variant=f"tiled_{name}")), flop))
    rows.append(("forward tiled b32 scalar loads", timer(
        lambda: tx._launch_tiled("float32", "b32", False, w, T, k, C * T, T, o, 0.0, B, C, T, vec=False)), flop))
    for cfg in tx.PROBE_TILED:
        rows.append((f"forward tiled {cfg}", timer(
            lambda: tx._launch_tiled("float32", cfg, False, w, T, k, C * T, T, o, 0.0, B, C, T)), flop))
    for cfg in ["b32"] + tx.PROBE_TILED:
        rows.append((f"grad_k tiled {cfg}", timer(
            lambda: tx._launch_tiled("float32", cfg, True, w, T, g, C * T, T, o, 0.0, B, C, T)), flop))
    strides = (C * T, T, 1)
    for cfg in [None] + tx.PROBE_GRAD_W:
        for vec in (False, True):
            rows.append((f"grad_w {cfg or tx.GRAD_W['float']} vec={vec}", timer(
                lambda: tx._launch_grad_w("float32", cfg, k, strides, g, strides, gw, B, C, T, vec=vec)), flop))
    ref = tx.reference(cupy.asnumpy(w), cupy.asnumpy(k))
    for cfg in tx.PROBE_TILED:
        tx._launch_tiled("float32", cfg, False, w, T, k, C * T, T, o, 0.0, B, C, T)
        print(f"check forward {cfg}: rel err {np.linalg.norm(cupy.asnumpy(o) - ref) / np.linalg.norm(ref):.2e}")
    rgw, _ = tx.reference_backward(cupy.asnumpy(w), cupy.asnumpy(k), cupy.asnumpy(g))
    for cfg in tx.PROBE_GRAD_W:
        tx._launch_grad_w("float32", cfg, k, strides, g, strides, gw, B, C, T)
        print(f"check grad_w {cfg}: rel err {np.linalg.norm(cupy.asnumpy(gw) - rgw) / np.linalg.norm(rgw):.2e}")
    for chunk in tx.GRAD_W_TF32X3_ALL:
        for vec in (False, True):
            rows.append((f"grad_w tf32x3 KC={chunk} vec={vec}", timer(
                lambda: tx._launch_grad_w_tf32x3("float32", k, strides, g, strides, gw, B, C, T, chunk=chunk,
                                                 vec=vec)), flop))
            print(f"check grad_w tf32x3 KC={chunk} vec={vec}: rel err "
                  f"{np.linalg.norm(cupy.asnumpy(gw) - rgw) / np.linalg.norm(rgw):.2e}")
    rows.append(("backward (both) auto", timer(lambda: ck.timex_backward(w, k, g)), 2 * flop))
    rows.append(("backward (both) tiled", timer(lambda: ck.timex_backward(w, k, g, variant="tiled")), 2 * flop))
    rows.append(("backward (both) tf32x3", timer(lambda: ck.timex_backward(w, k, g, variant="tf32x3")), 2 * flop))
    rows.append(("forward tf32x3", timer(lambda: ck.timex(w, k, variant="tf32x3")), flop))
    rows.append(("grad_k tf32x3", timer(lambda: tx._launch_tf32x3("float32", True, w, T, g, C * T, T, o, 0.0, B, C, T)),
                 flop))
    rows.append(("forward tf32x3_scalar (run 5)", timer(lambda: ck.timex(w, k, variant="tf32x3_scalar")), flop))
    rows.append(("grad_k tf32x3_scalar (run 5)", timer(
        lambda: tx._launch_tf32x3("float32", True, w, T, g, C * T, T, o, 0.0, B, C, T, "scalar")), flop))
    rows.append(("forward tf32x3 frag_norot", timer(
        lambda: tx._launch_tf32x3("float32", False, w, T, k, C * T, T, o, 0.0, B, C, T, "frag_norot")), flop))
    rows.append(("forward tf32x3 again", timer(lambda: ck.timex(w, k, variant="tf32x3")), flop))
    ref = tx.reference(cupy.asnumpy(w), cupy.asnumpy(k))
    o2 = ck.timex(w, k, variant="tf32x3")
    print(f"check forward tf32x3: rel err {np.linalg.norm(cupy.asnumpy(o2) - ref) / np.linalg.norm(ref):.2e}")
    o2 = ck.timex(w, k, variant="tf32x3_scalar")
    print(f"check forward tf32x3_scalar: rel err {np.linalg.norm(cupy.asnumpy(o2) - ref) / np.linalg.norm(ref):.2e}")
    o2 = ck.timex(w, k)
    print(f"check forward default: rel err {np.linalg.norm(cupy.asnumpy(o2) - ref) / np.linalg.norm(ref):.2e}")
    for v in tx.LADDER:
        rows.append((f"forward ladder {v}", timer(lambda: ck.timex(w, k, variant=v)), flop))
    print(f"B={B} C={C} T={T} float32 (useful FLOP only)")
    print(f"{'kernel':<32} {'ms':>9} {'TFLOP/s':>8} {'of FFMA':>8}")
    for name, ms, fl in rows:
        tf = fl / (ms * 1e-3) / 1e12
        print(f"{name:<32} {ms:9.4f} {tf:8.1f} {tf / peak:8.1%}")
    sweep(timer)
    tf32x3_error_vs_t()
    host_overhead(B, C, T)


def ab(timer=None, rounds=3):
    """Issue 3 helper run: the Toeplitz kernel with and without the diagonal-chunk tile skip (frag_tri vs
    frag_norot), the band combine alone, and the whole backward / forward+backward with the run-6 kernels, with
    frag_tri and the separate combine kernel, and with the combine done by grad_k's kernel (the default);
    rounds alternate the versions (A B C A B C ...) so the spread between rounds shows the noise.
    B=32 C=768 T=768 float32."""
    timer = timer or Timer()
    B, C, T = 32, 768, 768
    flop = 2 * B * C * T * (T + 1) // 2
    w = (cupy.random.standard_normal((C, T), dtype=cupy.float32) / np.float32(np.sqrt(T))).astype(cupy.float32)
    k = cupy.random.standard_normal((B, C, T), dtype=cupy.float32)
    g = cupy.random.standard_normal((B, C, T), dtype=cupy.float32)
    o, gk = cupy.empty_like(k), cupy.empty_like(k)
    gw = cupy.empty_like(w)
    st = (C * T, T, 1)
    nt = -(-T // tx.BAND)
    ws = cupy.empty((C, nt, 2 * tx.BAND), cupy.float32)

    def toeplitz(kern, rev, x, out, combine=None):
        return lambda: tx._launch_tf32x3("float32", rev, w, T, x, C * T, T, out, 0.0, B, C, T, kern, combine)

    def grad_w(combine=True):
        return lambda: tx._launch_grad_w_tf32x3("float32", k, st, g, st, gw, B, C, T, ws, vec=True, combine=combine)

    def backward(kern, fused=False):
        if fused:
            return lambda: (grad_w(False)(), toeplitz(kern, True, g, gk, (ws, gw))())
        return lambda: (toeplitz(kern, True, g, gk)(), grad_w()())

    def fwd_bwd(kern, fused=False):
        return lambda: (toeplitz(kern, False, k, o)(), backward(kern, fused)())

    combine = lambda: tx._launch_naive("timex_grad_w_bands", C * T, (ws, gw, np.int32(C), np.int32(T)))
    cases = [("forward frag_norot (run 6)", toeplitz("frag_norot", False, k, o), flop),
             ("forward frag_tri", toeplitz("frag_tri", False, k, o), flop),
             ("grad_k frag_norot (run 6)", toeplitz("frag_norot", True, g, gk), flop),
             ("grad_k frag_tri", toeplitz("frag_tri", True, g, gk), flop),
             ("grad_k frag_tri + combine", toeplitz("frag_tri", True, g, gk, (ws, gw)), flop),
             ("grad_w frag2 + combine kernel", grad_w(), flop),
             ("grad_w frag2 alone", grad_w(False), flop),
             ("grad_w combine alone", combine, 0),
             ("backward run-6 kernels", backward("frag_norot"), 2 * flop),
             ("backward tri, combine kernel", backward("frag_tri"), 2 * flop),
             ("backward tri, combine in grad_k", backward("frag_tri", True), 2 * flop),
             ("backward auto (timex_backward)", lambda: ck.timex_backward(w, k, g), 2 * flop),
             ("fwd+bwd run-6 kernels", fwd_bwd("frag_norot"), 3 * flop),
             ("fwd+bwd tri, combine kernel", fwd_bwd("frag_tri"), 3 * flop),
             ("fwd+bwd tri, combine in grad_k", fwd_bwd("frag_tri", True), 3 * flop)]
    times = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        for name, fn, _ in cases:
            times[name].append(timer(fn))
    print(f"A/B, B={B} C={C} T={T} float32, {rounds} alternating rounds (ms; TFLOP/s of useful work at the median)")
    for name, _, fl in cases:
        t = times[name]
        med = float(np.median(t))
        print(f"ab {name:<32} {' '.join(f'{x:8.4f}' for x in t)}  median {med:8.4f}"
              + (f" {fl / (med * 1e-3) / 1e12:6.1f}" if fl else ""))
    ref = tx.reference(cupy.asnumpy(w), cupy.asnumpy(k))
    rgw, rgk = tx.reference_backward(cupy.asnumpy(w), cupy.asnumpy(k), cupy.asnumpy(g))
    e = lambda a, b: np.linalg.norm(cupy.asnumpy(a) - b) / np.linalg.norm(b)
    for kern in ("frag_norot", "frag_tri"):
        o.fill(np.nan), gk.fill(np.nan)
        toeplitz(kern, False, k, o)(), toeplitz(kern, True, g, gk)()
        print(f"ab check {kern}: out {e(o, ref):.2e} grad_k {e(gk, rgk):.2e}")
    gw.fill(np.nan), gk.fill(np.nan), ws.fill(np.nan)
    backward("frag_tri", True)()
    print(f"ab check combine in grad_k: grad_w {e(gw, rgw):.2e} grad_k {e(gk, rgk):.2e}")
    gw2, gk2 = ck.timex_backward(w, k, g)
    print(f"ab check default: out {e(ck.timex(w, k), ref):.2e} grad_w {e(gw2, rgw):.2e} grad_k {e(gk2, rgk):.2e}")


def sweep(timer):
    """tiled vs tf32x3, forward and backward, at the bench's shapes and a few near the auto rule's edges."""
    C = 768
    print(f"{'B':>4} {'T':>5} {'fwd tiled':>10} {'fwd tf32x3':>10} {'bwd tiled':>10} {'bwd tf32x3':>10} "
          f"{'gw tiled':>9} {'gw tf32x3':>9} {'fwd scalar':>10}  auto toeplitz, grad_w")
    for B, T in [(384, 64), (192, 128), (128, 192), (96, 256), (32, 768), (32, 1024), (16, 1024), (12, 2048),
                 (16, 768), (12, 768), (8, 768), (4, 768), (1, 768), (384, 128), (64, 128), (16, 128), (12, 256),
                 (12, 1024), (16, 256), (384, 256)]:
        w = cupy.random.standard_normal((C, T), dtype=cupy.float32) / np.float32(np.sqrt(T))
        k = cupy.random.standard_normal((B, C, T), dtype=cupy.float32)
        g = cupy.random.standard_normal((B, C, T), dtype=cupy.float32)
        f = [timer(lambda v=v: ck.timex(w, k, variant=v)) for v in ("tiled", "tf32x3")]
        b = [timer(lambda v=v: ck.timex_backward(w, k, g, variant=v)) for v in ("tiled", "tf32x3")]
        st, gw = (C * T, T, 1), cupy.empty((C, T), cupy.float32)
        gws = [timer(lambda: tx._launch_grad_w("float32", None, k, st, g, st, gw, B, C, T)),
               timer(lambda: tx._launch_grad_w_tf32x3("float32", k, st, g, st, gw, B, C, T))]
        fs = timer(lambda: ck.timex(w, k, variant="tf32x3_scalar"))
        print(f"{B:4d} {T:5d} {f[0]:10.4f} {f[1]:10.4f} {b[0]:10.4f} {b[1]:10.4f} {gws[0]:9.4f} {gws[1]:9.4f} {fs:10.4f}  {tx.tf32x3_auto('float32', B, T)} {tx.tf32x3_auto('float32', B, T, 'grad_w')}")
        del w, k, g


def tf32x3_error_vs_t():
    """Relative norm errors of the tf32x3 kernels vs the float64 reference as T grows (B = 32, C = 16)."""
    B, C = 32, 16
    for T in (64, 256, 768, 1024, 1536, 2048, 4096):
        r = np.random.default_rng(T)
        w = (r.standard_normal((C, T)) / np.sqrt(T)).astype(np.float32)
        k, g = (r.standard_normal((B, C, T)).astype(np.float32) for _ in range(2))
        wd, kd, gd = cupy.asarray(w), cupy.asarray(k), cupy.asarray(g)
        ref = tx.reference(w, k)
        rgw, rgk = tx.reference_backward(w, k, g)
        e = lambda a, b: np.linalg.norm(cupy.asnumpy(a) - b) / np.linalg.norm(b)
        res = []
        for v in ("tf32x3", "tiled"):
            gw, gk = ck.timex_backward(wd, kd, gd, variant=v)
            res.append(f"{v}: out {e(ck.timex(wd, kd, variant=v), ref):.2e} grad_w {e(gw, rgw):.2e} "
                       f"grad_k {e(gk, rgk):.2e}")
        print(f"error T={T:5d} " + " | ".join(res))


def host_overhead(B, C, T):
    """Host time per call (back-to-back calls, one sync at the end) of the CuPy and torch paths."""
    import time

    import torch

    import cupy_kernels.torch_ops  # noqa: F401  (registers torch.ops.cupy_kernels.*)

    w = torch.randn(C, T, device="cuda", requires_grad=True)
    k = torch.randn(B, C, T, device="cuda", requires_grad=True)
    g = torch.randn(B, C, T, device="cuda")
    wc, kc, gc = (cupy.from_dlpack(x.detach()) for x in (w, k, g))
    cases = {
        "cupy forward": lambda: ck.timex(wc, kc),
        "cupy backward": lambda: ck.timex_backward(wc, kc, gc),
        "torch op forward (no grad)": lambda: torch.ops.cupy_kernels.timex(w.detach(), k.detach(), 0.0, "auto"),
        "torch op backward op": lambda: torch.ops.cupy_kernels.timex_backward(w.detach(), k.detach(), g, "auto"),
        "torch autograd fwd+bwd": lambda: torch.autograd.grad(ck.timex(w, k), (w, k), g),
    }
    for name, fn in cases.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        n = 20
        t = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t) / n
        torch.cuda.synchronize()
        total = (time.perf_counter() - t) / n
        print(f"host {name:<28} {host * 1e3:8.3f} ms/call enqueue, {total * 1e3:8.3f} ms/call with the GPU")


if __name__ == "__main__":
    import sys

    ab() if sys.argv[1:] == ["ab"] else main()
