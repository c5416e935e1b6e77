"""square_matmul_'s Hopper kernels (tma_cluster, tma) against cuBLAS, timed side by side with the order rotated.

The benchmark times each implementation in one block of repetitions, so each block catches the device in one
clock / power state (fp16 n = 4096: either library at ~2.7 or ~3.2 ms). Here every (n, dtype) runs ROUNDS
rounds; a round times each implementation for REPS repetitions (the benchmark's Timer), in an order rotated
every round, so each runs first, middle and last equally often. Prints per implementation the median over
rounds [min, max] and the median per-round ratio cuBLAS / ours: the side-by-side figure.
Usage: PYTHONPATH=. python scripts/square_matmul_ab.py [ROUNDS] [REPS]   (an sm_90 GPU)"""
import statistics
import sys

import torch

from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops.square_matmul import square_matmul_impl

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 15
M = 65536
timer = Timer()
print(f"rounds {ROUNDS}, {REPS} repetitions each, order rotated; ms median over rounds [min, max]")
for n in (1024, 2048, 4096):
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.randn(M, n, device="cuda").to(dtype)
        w = (torch.randn(n, n, device="cuda") / n ** 0.5).to(dtype)
        impls = {"tma_cluster": lambda: square_matmul_impl(a, w, variant="tma_cluster"),
                 "tma": lambda: square_matmul_impl(a, w, variant="tma"),
                 "cuBLAS": lambda: torch.matmul(a, w)}
        names = list(impls)
        times = {k: [] for k in names}
        for r in range(ROUNDS):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                times[k].append(timer(impls[k], warmup=2, min_reps=REPS, max_reps=REPS, budget_ms=0))
        flops = 2 * M * n * n
        line = [f"n={n} {str(dtype)[6:]:8s}"]
        for k in names:
            t = times[k]
            line.append(f"{k} {statistics.median(t):.4f} [{min(t):.4f}, {max(t):.4f}] "
                        f"{flops / statistics.median(t) / 1e9:.0f} TF/s")
        for k in ("tma_cluster", "tma"):
            ratios = [c / o for c, o in zip(times["cuBLAS"], times[k])]
            line.append(f"{k} of cuBLAS {100 * statistics.median(ratios):.1f}% "
                        f"[{100 * min(ratios):.1f}, {100 * max(ratios):.1f}]")
        print(" | ".join(line), flush=True)
        del a, w
        torch.cuda.empty_cache()
