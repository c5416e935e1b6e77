"""Every row op and its backward against torch over row lengths from 1 to 262144.

The benchmark suites time a few shapes; this sweeps dispatch boundaries, model widths and vocabulary sizes at
about 2^24 elements a case. One line a case: our time, torch's, the floor (torch moving the same bytes) and
torch / ours; a ratio below 1 marks a row length where torch is faster.
Usage: PYTHONPATH=. python scripts/width_sweep.py [--widths 1,7,...] [--dtypes float32,bfloat16] [--ops softmax,...] [--json PATH]"""
import argparse
import json

import torch
import torch.nn.functional as F

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops.norm import norm_backward_impl, norm_forward_impl
from cupy_kernels.ops.softmax import softmax_backward_impl, softmax_impl

WIDTHS = [1, 7, 33, 100, 128, 320, 768, 1000, 1024, 2048, 3000, 4096, 5120, 8192, 12288, 16384, 32000, 50257,
          65536, 128256, 262144]
ap = argparse.ArgumentParser()
ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
ap.add_argument("--dtypes", default="float32,bfloat16")
ap.add_argument("--elements", type=int, default=1 << 24)
ap.add_argument("--ops", default="", help="comma-separated op names to keep (e.g. 'softmax,softmax bwd')")
ap.add_argument("--json", default="")
args = ap.parse_args()

timer = Timer()
time_us = lambda fn: timer(fn, warmup=2, min_reps=8, max_reps=15, budget_ms=60) * 1e3  # noqa: E731
copy = copy_bandwidth(timer)
print(f"{torch.cuda.get_device_name()}  copy {copy / 1e12:.2f} TB/s; us, ratio = torch / ours", flush=True)
print(f"{'op':22s} {'dtype':9s} {'shape':>13s} {'ours':>8s} {'torch':>8s} {'floor':>8s} {'ratio':>6s} {'%floor':>6s}")
results = []
for dtype in args.dtypes.split(","):
    for n in map(int, args.widths.split(",")):
        rows = max(1, args.elements // n)
        t = getattr(torch, dtype)
        x, dy = (torch.randn(rows, n, device="cuda").to(t) for _ in range(2))
        w = (torch.rand(n, device="cuda") + 0.5).to(t)
        b = torch.randn(n, device="cuda").to(t)
        out = torch.empty_like(x)
        xc, dyc, wc, bc = map(to_cupy, (x, dy, w, b))
        y, ly = torch.softmax(x, -1), torch.log_softmax(x, -1)
        yc, lyc = to_cupy(y), to_cupy(ly)
        _, mean, rstd = norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm")
        _, _, rrms = norm_forward_impl(xc, wc, None, 1e-6, "rms_norm")
        _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
        xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        rms_out = F.rms_norm(xr, (n,), wr, 1e-6)
        fwd_floor = lambda: out.copy_(x)  # noqa: E731
        bwd_floor = lambda: torch.add(x, dy, out=out)  # noqa: E731
        cases = [
            ("softmax", fwd_floor, lambda: softmax_impl(xc, -1, "softmax"), lambda: torch.softmax(x, -1)),
            ("log_softmax", fwd_floor, lambda: softmax_impl(xc, -1, "log_softmax"), lambda: torch.log_softmax(x, -1)),
            ("layer_norm", fwd_floor, lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm"),
             lambda: F.layer_norm(x, (n,), w, b, 1e-5)),
            ("rms_norm", fwd_floor, lambda: norm_forward_impl(xc, wc, None, 1e-6, "rms_norm"),
             lambda: F.rms_norm(x, (n,), w, 1e-6)),
            ("softmax bwd", bwd_floor, lambda: softmax_backward_impl(yc, dyc, -1, "softmax"),
             lambda: torch._softmax_backward_data(dy, y, -1, y.dtype)),
            ("log_softmax bwd", bwd_floor, lambda: softmax_backward_impl(lyc, dyc, -1, "log_softmax"),
             lambda: torch._log_softmax_backward_data(dy, ly, -1, ly.dtype)),
            ("layer_norm bwd", bwd_floor, lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm"),
             lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], tmean, trstd, w, b, [True, True, True])),
            ("rms_norm bwd", bwd_floor, lambda: norm_backward_impl(dyc, xc, wc, None, None, rrms, "rms_norm"),
             lambda: torch.autograd.grad(rms_out, (xr, wr), dy, retain_graph=True)),
        ]
        keep = set(args.ops.split(",")) if args.ops else None
        for name, floor_fn, ours_fn, torch_fn in cases:
            if keep and name not in keep:
                continue
            try:
                fl, ours, ref = time_us(floor_fn), time_us(ours_fn), time_us(torch_fn)
            except Exception as e:  # a case that fails is reported, the sweep goes on
                print(f"{name:22s} {dtype:9s} {rows:>6d}x{n:<6d} ERROR {type(e).__name__}: {e}", flush=True)
                continue
            flag = "  <- torch faster" if ref < ours else ""
            print(f"{name:22s} {dtype:9s} {rows:>6d}x{n:<6d} {ours:8.1f} {ref:8.1f} {fl:8.1f} {ref / ours:6.2f} "
                  f"{fl / ours * 100:6.1f}{flag}", flush=True)
            results.append(dict(op=name, dtype=dtype, rows=rows, n=n, ours_us=ours, torch_us=ref, floor_us=fl))
        del x, dy, out, xc, dyc, y, ly, yc, lyc, xr, wr, rms_out
        torch.cuda.empty_cache()
if args.json:
    with open(args.json, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), copy_tbs=copy / 1e12, results=results), f, indent=1)
