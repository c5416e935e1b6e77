"""Device probe (issue 4): what the weight and bias cost the norm forward, by row length: layer_norm with
(w, b), (w, None), (None, None) and rms_norm with and without w, on the issue's half-type shapes (% of copy).
Every row of a one-block-a-row forward rereads its weight / bias columns from L2."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.softmax import SHAPES
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops.norm import norm_forward_impl

timer = Timer()
copy = copy_bandwidth(timer)
print(f"copy {copy / 1e12:.2f} TB/s")
for (rows, n), dtype in SHAPES:
    x = to_cupy(torch.randn(rows, n, device="cuda").to(getattr(torch, dtype)))
    w = to_cupy((torch.rand(n, device="cuda") + 0.5).to(getattr(torch, dtype)))
    b = to_cupy(torch.randn(n, device="cuda").to(getattr(torch, dtype)))
    cases = {"layer w b": lambda: norm_forward_impl(x, w, b, 1e-5, "layer_norm"),
             "layer w": lambda: norm_forward_impl(x, w, None, 1e-5, "layer_norm"),
             "layer none": lambda: norm_forward_impl(x, None, None, 1e-5, "layer_norm"),
             "rms w": lambda: norm_forward_impl(x, w, None, 1e-6, "rms_norm"),
             "rms none": lambda: norm_forward_impl(x, None, None, 1e-6, "rms_norm")}
    line = []
    for name, fn in cases.items():
        us = timer(fn) * 1e3
        line.append(f"{name} {us:6.1f} us {2 * x.nbytes / (us * 1e-6) / copy * 100:5.1f}%")
    print(f"{rows}x{n} {dtype:9s} " + " | ".join(line), flush=True)
