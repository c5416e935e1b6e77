"""Device probe (issue 4): where a row length's lost time goes. Each op is timed at 1/4, 1/2, 1 and 2 times the
issue's row count (same row length and dtype) and fitted as time = fixed + rows * per_row: the per-row slope gives
the steady-state % of copy (the bench's bytes per row over the slope), the fixed part the launch, fill and drain.
torch's clone of the same bytes is the copy's own line."""
import argparse

import numpy as np
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.softmax import SHAPES
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops.norm import norm_backward_impl, norm_forward_impl
from cupy_kernels.ops.softmax import softmax_backward_impl, softmax_impl

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="all", help="comma-separated indices into SHAPES")
ap.add_argument("--scales", default="0.25,0.5,1,2")
args = ap.parse_args()

timer = Timer()
copy = copy_bandwidth(timer)
print(f"copy {copy / 1e12:.2f} TB/s", flush=True)
picked = range(len(SHAPES)) if args.shapes == "all" else map(int, args.shapes.split(","))
for i in picked:
    (rows, n), dtype = SHAPES[i]
    counts = [max(1, int(rows * float(s))) for s in args.scales.split(",")]
    times = {}
    for r in counts:
        x, dy = (torch.randn(r, n, device="cuda").to(getattr(torch, dtype)) for _ in range(2))
        w = (torch.rand(n, device="cuda") + 0.5).to(x.dtype)
        b = torch.randn(n, device="cuda").to(x.dtype)
        xc, dyc, wc, bc = map(to_cupy, (x, dy, w, b))
        _, mean, rstd = norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm")
        _, _, rrms = norm_forward_impl(xc, wc, None, 1e-6, "rms_norm")
        y = softmax_impl(xc, -1, "softmax")
        ops = {"copy (torch clone)": (2, lambda: x.clone()),
               "softmax fwd": (2, lambda: softmax_impl(xc, -1, "softmax")),
               "layer fwd": (2, lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm")),
               "rms fwd": (2, lambda: norm_forward_impl(xc, wc, None, 1e-6, "rms_norm")),
               "softmax bwd": (3, lambda: softmax_backward_impl(y, dyc, -1, "softmax")),
               "layer bwd": (3, lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm")),
               "rms bwd": (3, lambda: norm_backward_impl(dyc, xc, wc, None, None, rrms, "rms_norm"))}
        for name, (k, fn) in ops.items():
            times.setdefault(name, (k, []))[1].append(timer(fn) * 1e3)
        del x, dy, xc, dyc, y
    row_bytes = n * torch.empty((), dtype=getattr(torch, dtype)).element_size()
    print(f"\n{rows}x{n} {dtype}: rows {counts}", flush=True)
    print(f"  {'op':20s} {'us at each row count':36s} {'fixed us':>9s} {'us/row':>8s} {'steady %':>9s} {'% at issue':>10s}")
    for name, (k, ts) in times.items():
        slope, fixed = np.polyfit(counts, ts, 1)
        at = ts[counts.index(rows)] if rows in counts else float("nan")
        steady = k * row_bytes / (slope * 1e-6) / copy * 100
        whole = k * row_bytes * rows / (at * 1e-6) / copy * 100
        print(f"  {name:20s} {' '.join(f'{t:8.1f}' for t in ts):36s} {fixed:9.2f} {slope:8.4f} {steady:9.1f} {whole:10.1f}")
