"""ncu target (issue 4): one launch each of layer_norm and rms_norm forward at 65536x128 float32 and
32768x1024 float16 (the sub-warp path). Run under `ncu --kernel-name regex:norm_fwd` (scripts/gpu_explore.sh)."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import norm as N

for rows, n, dt in ((65536, 128, torch.float32), (32768, 1024, torch.float16)):
    x = to_cupy(torch.randn(rows, n, device="cuda", dtype=dt))
    w = to_cupy(torch.rand(n, device="cuda", dtype=dt) + 0.5)
    b = to_cupy(torch.randn(n, device="cuda", dtype=dt))
    N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
    N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
torch.cuda.synchronize()
