"""Device probe (issue 4): each kernel's own time inside the norm ops on the issue's shapes, as the bench
runs them (a read flush before each call, the partial rows warm from the kernel that wrote them), from
torch.profiler's CUDA activity (CUPTI sees CuPy's launches too). Prints the mean µs of every kernel a call
launches, in launch order, and the call's span from the first kernel's start to the last one's end.
Usage: python3 scripts/profile_norm_kernels.py [--shapes 0,1,...] [--ops "layer bwd,rms bwd"] [--reps 10]"""
import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.softmax import SHAPES, tensors
from cupy_kernels.ops import norm as N

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="all")
ap.add_argument("--ops", default="layer fwd,rms fwd,layer bwd,rms bwd,layer bwd dx")
ap.add_argument("--reps", type=int, default=10)
args = ap.parse_args()

flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
shapes = SHAPES if args.shapes == "all" else [SHAPES[int(i)] for i in args.shapes.split(",")]
for shape, dtype in shapes:
    (x, xc), (dy, dyc) = tensors(shape, dtype, 2)
    n = shape[-1]
    wc = to_cupy((torch.rand(n, device="cuda") + 0.5).to(x.dtype))
    bc = to_cupy(torch.randn(n, device="cuda").to(x.dtype))
    _, mean, rstd = N.norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm")
    _, _, rstd_r = N.norm_forward_impl(xc, wc, None, 1e-6, "rms_norm")
    ops = {"layer fwd": lambda: N.norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm"),
           "rms fwd": lambda: N.norm_forward_impl(xc, wc, None, 1e-6, "rms_norm"),
           "layer bwd": lambda: N.norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm"),
           "rms bwd": lambda: N.norm_backward_impl(dyc, xc, wc, None, None, rstd_r, "rms_norm"),
           "layer bwd dx": lambda: N.norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm", need_dw=False,
                                                        need_db=False)}
    label = f"{'x'.join(map(str, shape))} {dtype}"
    for op in args.ops.split(","):
        fn = ops[op]
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.reps):
                flush.sum(dtype=torch.int64)  # a read flush (its kernels are left out below)
                torch.cuda.synchronize()
                fn()
                torch.cuda.synchronize()
        # ours only (torch's flush kernels and memsets left out); a call's kernels start within 50 us of the
        # previous one's end, the calls are a flush (~0.6 ms) apart
        kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                          and not e.name.startswith(("void at::", "Memset"))), key=lambda e: e.time_range.start)
        calls = []
        for e in kernels:
            if not calls or e.time_range.start - calls[-1][-1].time_range.end > 50:
                calls.append([])
            calls[-1].append(e)
        per = defaultdict(list)
        spans = []
        for c in calls:
            spans.append(c[-1].time_range.end - c[0].time_range.start)
            for i, e in enumerate(c):
                per[(i, e.name.split("(")[0][:70])].append(e.time_range.end - e.time_range.start)
        parts = "  ".join(f"{name} {sum(v) / len(v):.1f}" for (i, name), v in sorted(per.items()))
        print(f"{label:20s} {op:12s} span {sum(spans) / len(spans):7.1f} us | {parts}", flush=True)
    del x, xc, dy, dyc
