"""Device probe (issue 4): forms of the norm backward against each other, same process, each also checked against
a float64 reference (max |error| of dx, dweight, dbias over their max |value|).
--set warps (session 10): norm_bwd_shared's WARPS form (each warp its own half rows, one partial row a CTA) against
the forms before it (one-row CTAs from 1024 elements, norm_bwd's one-pack form below), staged and not, in CTAs
of 512 / 256 threads; and column_sum launched after the partial rows' kernel (programmatic dependent launch) or
plainly. --set ctas: norm_bwd_shared's one-CTA and cluster rows in CTAs of up to 512 / 256 threads (256: rows of
8192 half elements in clusters of 2, 32768 in clusters of 8).
Usage: python3 scripts/probe_norm_bwd_forms.py [--set warps|ctas] [--shapes 0,3]"""
import argparse

import torch

from cupy_kernels._runtime import to_cupy, to_torch
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops import norm as N

SHAPES = [((32768, 1024), torch.float16), ((32768, 1024), torch.bfloat16), ((16384, 1024), torch.float16),
          ((32768, 768), torch.bfloat16), ((65536, 512), torch.float16), ((65536, 128), torch.float32),
          ((4096, 4096), torch.float32), ((8192, 8192), torch.bfloat16), ((1024, 32768), torch.bfloat16),
          ((256, 262144), torch.float32), ((65536, 512), torch.float32), ((65536, 384), torch.float32),
          ((131072, 256), torch.float32)]
ap = argparse.ArgumentParser()
ap.add_argument("--set", default="warps", choices=("warps", "ctas"))
ap.add_argument("--shapes", default="")
args = ap.parse_args()
if args.shapes:
    SHAPES = [SHAPES[int(i)] for i in args.shapes.split(",")]
VARIANTS = ({"before": {"warps_from": 1 << 40, "warps_from_float32": 1 << 40, "after": False},
             "plain colsum": {"after": False},
             "warps512": {"warps_from": 0, "warps_from_float32": 0, "warps_threads": 512},
             "warps256": {"warps_from": 0, "warps_from_float32": 0, "warps_threads": 256}} if args.set == "warps" else
            {"ctas512": {"threads": 512}, "ctas256": {"threads": 256}})
SAVED = dict(N.SHARED_BWD)

timer = Timer()
copy = copy_bandwidth(timer)
print(f"copy {copy / 1e12:.2f} TB/s", flush=True)


def reference(x, dy, w, b, mode):
    x, dy, w = x.double(), dy.double(), w.double()
    xr = x.requires_grad_(True)
    wr = w.requires_grad_(True)
    if mode == "layer_norm":
        br = b.double().requires_grad_(True)
        y = torch.nn.functional.layer_norm(xr, (x.shape[-1],), wr, br, 1e-5)
        return torch.autograd.grad(y, (xr, wr, br), dy)
    y = torch.nn.functional.rms_norm(xr, (x.shape[-1],), wr, 1e-6)
    return torch.autograd.grad(y, (xr, wr), dy)


for shape, dtype in SHAPES:
    rows, n = shape
    x = torch.randn(shape, device="cuda").to(dtype)
    dy = torch.randn(shape, device="cuda").to(dtype)
    w = (torch.rand(n, device="cuda") + 0.5).to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    xc, dyc, wc, bc = map(to_cupy, (x, dy, w, b))
    nbytes = 3 * x.numel() * x.element_size()
    for mode in ("layer_norm", "rms_norm"):
        bias = bc if mode == "layer_norm" else None
        _, mean, rstd = N.norm_forward_impl(xc, wc, bias, 1e-5 if mode == "layer_norm" else 1e-6, mode)
        ref = reference(x, dy, w, b, mode)
        line = []
        vs = (list(VARIANTS.items()) if n <= 128 * (16 // x.element_size()) or args.set == "ctas" else
              [("plain colsum", {"after": False}), ("default", {})])
        for name, sw in vs + vs[::-1]:
            N.SHARED_BWD.update(SAVED, **{k: v for k, v in sw.items() if k != "after"})
            N.COLUMN_SUM_AFTER["on"] = sw.get("after", True)
            fn = lambda: N.norm_backward_impl(dyc, xc, wc, bias, mean, rstd, mode)  # noqa: E731
            out = fn()
            err = max(float((to_torch(o).double() - r).abs().max() / r.abs().max())
                      for o, r in zip(out, ref))
            ms = timer(fn)
            line.append((name, ms, err))
        best = {}
        for name, ms, err in line:
            b0 = best.get(name)
            best[name] = (min(ms, b0[0]) if b0 else ms, max(err, b0[1]) if b0 else err)
        txt = "  ".join(f"{k} {v[0] * 1e3:6.1f} us {100 * nbytes / (v[0] * 1e-3) / copy:5.1f}% err {v[1]:.1e}"
                        for k, v in best.items())
        print(f"{'x'.join(map(str, shape))} {str(dtype)[6:]:8s} {mode:10s} {txt}", flush=True)
N.SHARED_BWD.update(SAVED)
N.COLUMN_SUM_AFTER["on"] = True
