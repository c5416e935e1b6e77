"""One brick pad (issue 6's case) and one torch fill_ of the same output, for ncu:
ncu --kernel-name regex:"pad_periodic|fill" --section SpeedOfLight --section MemoryWorkloadAnalysis python3 scripts/ncu_pad_brick.py"""
import cupy
import torch

import cupy_kernels as ck

tile = cupy.random.random((48, 32), dtype=cupy.float32)
for _ in range(2):
    out = ck.pad(tile, ((2048, 2048), (4096, 4096)), mode="brick", stagger=10)
filled = torch.empty(tuple(out.shape), device="cuda")
for _ in range(2):
    filled.fill_(1.0)
torch.cuda.synchronize()
