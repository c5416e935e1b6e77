"""Device probe (issue 4): where a norm backward's time goes, kernel by kernel. For each shape and variant
(norm_bwd_shared switches), the kernels' device times (torch.profiler / CUPTI: no locked clocks) of one
backward call, averaged over --reps calls, with norm_bwd_shared's plan and resident row groups.
With --reps 0 each backward runs twice with no profiler (for ncu: --launch-skip 1 takes the second).
Usage: python3 scripts/norm_bwd_kernels.py [--shapes 1024x32768:bfloat16,...] [--variants default,dxonly,...]"""
import argparse
from collections import defaultdict

import torch

from cupy_kernels._runtime import current, to_cupy, use_shared_memory
from cupy_kernels._runtime.tma import max_active_clusters
from cupy_kernels.bench.softmax import tensors
from cupy_kernels.ops import norm as N
from cupy_kernels.ops.norm import norm_backward_impl, norm_forward_impl

VARIANTS = {  # name -> SHARED_BWD switches, and whether dweight / dbias are wanted
    "default": ({}, True),
    "dxonly": ({}, False),
    "cl8staged": ({"stage_cl8": True}, True),
    "plaincolsum": ({}, True),  # column_sum launched after a gap, not as a programmatic dependent
}

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="1024x32768:bfloat16")
ap.add_argument("--variants", default=",".join(VARIANTS))
ap.add_argument("--modes", default="layer_norm,rms_norm")
ap.add_argument("--reps", type=int, default=20)
args = ap.parse_args()


def kernel_times(fn, reps):
    """Kernel name (templates cut) -> mean device us a call, over `reps` calls after a warm-up."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    times = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name] += e.device_time / reps
    return times


saved = dict(N.SHARED_BWD)
print(torch.cuda.get_device_name(), flush=True)
for spec in args.shapes.split(","):
    shape, dtype = spec.split(":")
    rows, n = map(int, shape.split("x"))
    (_, xc), (_, dyc) = tensors((rows, n), dtype, 2)
    (_, bc), = tensors((n,), dtype, 1)
    wc = to_cupy((torch.rand(n, device="cuda") + 0.5).to(getattr(torch, dtype)))
    for mode in args.modes.split(","):
        bias = bc if mode == "layer_norm" else None
        _, mean, rstd = norm_forward_impl(xc, wc, bias, 1e-5, mode)
        for v in args.variants.split(","):
            switches, want = VARIANTS[v]
            N.SHARED_BWD.update(saved)
            N.SHARED_BWD.update(switches)
            plan = N.shared_plan(n, dtype, mode, current().cc)
            resident = ""
            if plan:
                cl, threads, packs, chunk, smem, stage, full, warps = plan
                name = N._shared(dtype, mode, 0, cl, stage, full, warps)
                k = N.SOURCE.kernel(name)
                use_shared_memory(k, smem, name)
                groups = max_active_clusters(k, threads, smem, cl) if cl > 1 else N.resident_blocks(k, threads, smem)
                resident = (f" resident {groups} groups of "
                            f"{cl} x {threads} threads, {smem // 1024} KB")
            N.COLUMN_SUM_AFTER["on"] = v != "plaincolsum"
            call = lambda: norm_backward_impl(dyc, xc, wc, bias, mean if mode == "layer_norm" else None,  # noqa: E731
                                              rstd, mode, need_dw=want, need_db=want)
            if args.reps == 0:
                call(), call()
                torch.cuda.synchronize()
                print(f"{shape} {dtype} {mode} {v}: ran twice{resident}", flush=True)
                continue
            t = kernel_times(call, args.reps)
            total = sum(t.values())
            parts = "  ".join(f"{name.split('<')[0].split('(')[0]} {us:6.1f}" for name, us in
                              sorted(t.items(), key=lambda kv: -kv[1]))
            print(f"{shape} {dtype} {mode:10s} {v:16s} kernels {total:6.1f} us: {parts}{resident}", flush=True)
N.SHARED_BWD.update(saved)
N.COLUMN_SUM_AFTER["on"] = True
