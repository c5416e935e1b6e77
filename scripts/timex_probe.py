"""timex on this GPU: the fp32 FMA ceiling, every variant against it, the auto rule's edges and tf32x3's error by T.

1. The fp32 FFMA ceiling (a kernel of nothing but FMAs), so the timex figures read as a fraction of it.
2. Every forward and backward variant at B=32 C=768 T=768 float32: ms, useful TFLOP/s, fraction of the ceiling.
3. Forward and backward, tiled (SIMT) against tf32x3 (tensor cores), at shapes on both sides of the auto rule.
4. The tf32x3 and tiled kernels' relative error against the float64 reference as T grows (it grows with T).
Usage: PYTHONPATH=. python scripts/timex_probe.py [ceiling|variants|sweep|error ...]   (default: all four)"""
from __future__ import annotations

import sys

import cupy
import numpy as np

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


def useful_flop(B, C, T):
    """Multiply-adds of the causal product (t + 1 taps for output t), counted as 2 FLOP each."""
    return 2 * B * C * T * (T + 1) // 2


def inputs(B, C, T, key=0):
    r = cupy.random.RandomState(key)
    w = (r.standard_normal((C, T), dtype=cupy.float32) / np.float32(np.sqrt(T))).astype(cupy.float32)
    return w, r.standard_normal((B, C, T), dtype=cupy.float32), r.standard_normal((B, C, T), dtype=cupy.float32)


def ceiling(timer) -> float:
    """fp32 FFMA TFLOP/s of this GPU."""
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    kern = cupy.RawKernel(FMA_SRC, "ffma_peak")
    out = cupy.zeros(1, cupy.float32)
    blocks, threads, iters = sms * 8, 256, 4096
    ms = timer(lambda: kern((blocks,), (threads,), (out, np.int32(iters))))
    peak = blocks * threads * iters * 16 * 8 * 2 / (ms * 1e-3) / 1e12
    print(f"fp32 FFMA ceiling: {peak:.1f} TFLOP/s ({sms} SMs, {ms:.3f} ms)")
    return peak


def variants(timer, peak):
    B, C, T = 32, 768, 768
    w, k, g = inputs(B, C, T)
    flop = useful_flop(B, C, T)
    print(f"B={B} C={C} T={T} float32 (useful FLOP only)")
    print(f"{'variant':<28} {'ms':>9} {'TFLOP/s':>8} {'of FFMA':>8}")
    rows = [(f"forward {v}", lambda v=v: ck.timex(w, k, variant=v), flop) for v in tx.VARIANTS]
    rows += [(f"backward {v}", lambda v=v: ck.timex_backward(w, k, g, variant=v), 2 * flop)
             for v in tx.BACKWARD_VARIANTS]
    for name, fn, fl in rows:
        try:
            ms = timer(fn)
        except ValueError as e:  # a teaching rung outside its preconditions
            print(f"{name:<28} {'':>9} {str(e)[:60]}")
            continue
        tf = fl / (ms * 1e-3) / 1e12
        print(f"{name:<28} {ms:9.4f} {tf:8.1f} {tf / peak if peak else float('nan'):8.1%}")


def sweep(timer):
    """tiled against tf32x3, forward and backward (ms), near the edges of the auto rule; 'auto' names what auto ran."""
    C = 768
    print(f"{'B':>4} {'T':>5} {'fwd tiled':>10} {'fwd tf32x3':>10} {'fwd auto':>9} {'bwd tiled':>10} {'bwd tf32x3':>10} "
          f"{'bwd auto':>9}")
    for B, T in [(384, 64), (384, 128), (192, 128), (64, 128), (16, 128), (128, 192), (96, 256), (12, 256), (32, 768),
                 (16, 768), (12, 768), (8, 768), (1, 768), (32, 1024), (16, 1024), (12, 1024), (12, 2048), (6, 4096)]:
        w, k, g = inputs(B, C, T)
        f = [timer(lambda v=v: ck.timex(w, k, variant=v)) for v in ("tiled", "tf32x3", "auto")]
        b = [timer(lambda v=v: ck.timex_backward(w, k, g, variant=v)) for v in ("tiled", "tf32x3", "auto")]
        print(f"{B:4d} {T:5d} {f[0]:10.4f} {f[1]:10.4f} {f[2]:9.4f} {b[0]:10.4f} {b[1]:10.4f} {b[2]:9.4f}")
        del w, k, g


def error():
    """Relative norm error of out, grad_w and grad_k against the float64 reference (B = 32, C = 16)."""
    B, C = 32, 16
    for T in (64, 256, 768, 1024, 1536, 2048, 4096):
        w, k, g = (cupy.asnumpy(a) for a in inputs(B, C, T, key=T))
        ref = tx.reference(w, k)
        rgw, rgk = tx.reference_backward(w, k, g)
        wd, kd, gd = cupy.asarray(w), cupy.asarray(k), cupy.asarray(g)
        e = lambda a, b: np.linalg.norm(cupy.asnumpy(a) - b) / np.linalg.norm(b)  # noqa: E731
        res = []
        for v in ("tf32x3", "tiled"):
            gw, gk = ck.timex_backward(wd, kd, gd, variant=v)
            res.append(f"{v}: out {e(ck.timex(wd, kd, variant=v), ref):.2e} grad_w {e(gw, rgw):.2e} "
                       f"grad_k {e(gk, rgk):.2e}")
        print(f"error T={T:5d} " + " | ".join(res))


def main(parts):
    timer = Timer()
    peak = ceiling(timer) if {"ceiling", "variants"} & parts else 0.0
    if "variants" in parts:
        variants(timer, peak)
    if "sweep" in parts:
        sweep(timer)
    if "error" in parts:
        error()


if __name__ == "__main__":
    main(set(sys.argv[1:]) or {"ceiling", "variants", "sweep", "error"})
