"""Device check of the hypothesis that our float16 square_matmul_ runs slower than bfloat16 because the
SM clock drops under load (power): each product runs back to back for ~1.5 s while nvidia-smi samples
the SM clock and board power; prints median clock, power and TFLOP/s per (impl, dtype).
Usage: python3 scripts/square_matmul_clocks.py [n]"""
import statistics
import subprocess
import sys
import threading
import time

import torch

from cupy_kernels.ops.square_matmul import square_matmul_impl

M, N = 65536, int(sys.argv[1]) if len(sys.argv) > 1 else 4096


def sample(samples, stop):
    while not stop.is_set():
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout.split(",")
        if len(out) == 2:
            samples.append((float(out[0]), float(out[1])))
        time.sleep(0.05)


for dtype in (torch.float16, torch.bfloat16):
    a = torch.randn(M, N, device="cuda").to(dtype)
    w = (torch.randn(N, N, device="cuda") / N ** 0.5).to(dtype)
    for name, fn in (("ours tma_cluster", lambda: square_matmul_impl(a, w, variant="tma_cluster")),
                     ("ours tma", lambda: square_matmul_impl(a, w, variant="tma")),
                     ("cuBLAS", lambda: torch.matmul(a, w))):
        fn()
        torch.cuda.synchronize()
        samples, stop = [], threading.Event()
        t = threading.Thread(target=sample, args=(samples, stop))
        t.start()
        time.sleep(0.2)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = max(5, int(1500 / (2 * M * N * N / 6e11)))
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        stop.set()
        t.join()
        ms = start.elapsed_time(end) / reps
        clocks = [c for c, _ in samples[2:]] or [0.0]
        power = [p for _, p in samples[2:]] or [0.0]
        print(f"{name:16s} {str(dtype)[6:]:9s} n={N}: {ms:.3f} ms, {2 * M * N * N / ms / 1e9:.0f} TFLOP/s, "
              f"SM clock median {statistics.median(clocks):.0f} MHz (min {min(clocks):.0f}), "
              f"power median {statistics.median(power):.0f} W")
