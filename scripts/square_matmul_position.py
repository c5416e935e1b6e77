"""Does a block's position in the benchmark decide its time? (issue 5, measurement check)

In the square_matmul suite torch.matmul runs last in each group, right after the slow mma.sync ladder
rungs (~290 TFLOP/s, less power), and measured 2.71-2.77 ms at fp16 n = 4096 in two of three runs, where
the rotated side-by-side script (square_matmul_ab.py) gives it 3.2-3.4 ms. Here each of ours (the default)
and cuBLAS is timed exactly as the benchmark does (Timer defaults) twice: once right after ~0.7 s of the
mma256 rung ("after cool"), once right after ~0.7 s of the other high-power product ("after hot"), three
rounds, order alternated. Usage: square_matmul_position.py [n]"""
import statistics
import sys

import torch

from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops.square_matmul import square_matmul_impl

M, N = 65536, int(sys.argv[1]) if len(sys.argv) > 1 else 4096
timer = Timer()
for dtype in (torch.float16, torch.bfloat16):
    a = torch.randn(M, N, device="cuda").to(dtype)
    w = (torch.randn(N, N, device="cuda") / N ** 0.5).to(dtype)
    impls = {"ours": lambda: square_matmul_impl(a, w), "cuBLAS": lambda: torch.matmul(a, w)}
    cool = lambda: square_matmul_impl(a, w, variant="mma256")  # noqa: E731
    res = {(k, p): [] for k in impls for p in ("after cool", "after hot")}
    for r in range(3):
        for k in (("ours", "cuBLAS") if r % 2 == 0 else ("cuBLAS", "ours")):
            other = impls["cuBLAS" if k == "ours" else "ours"]
            for pos, pre in (("after cool", cool), ("after hot", other)):
                timer(pre, warmup=1, min_reps=100, max_reps=100, budget_ms=0)  # ~0.35-0.75 s of preconditioning
                res[(k, pos)].append(timer(impls[k]))
    for pos in ("after cool", "after hot"):
        o, c = statistics.median(res[("ours", pos)]), statistics.median(res[("cuBLAS", pos)])
        print(f"n={N} {str(dtype)[6:]:8s} {pos:10s}: ours {o:.4f} ms {res[('ours', pos)]}, cuBLAS {c:.4f} ms "
              f"{res[('cuBLAS', pos)]}: ours at {100 * c / o:.1f}% of cuBLAS", flush=True)
    del a, w
    torch.cuda.empty_cache()
