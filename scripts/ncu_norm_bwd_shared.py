"""ncu target (issue 4): norm_bwd_shared (layer_norm and rms_norm backward from x) on 8192x8192 and 1024x32768
bfloat16 (one CTA a row; clusters of 4) and 32768x1024 float16 (64-thread CTAs), with dy and x distinct tensors.
Run under `ncu --kernel-name regex:"norm_bwd_shared|column_sum"`."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import norm as N

for rows, n, dtype in ((8192, 8192, torch.bfloat16), (1024, 32768, torch.bfloat16), (32768, 1024, torch.float16)):
    x, dy = (to_cupy(torch.randn(rows, n, device="cuda").to(dtype)) for _ in range(2))
    w = to_cupy((torch.rand(n, device="cuda") + 0.5).to(dtype))
    b = to_cupy(torch.randn(n, device="cuda").to(dtype))
    _, m, r = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
    _, _, rr = N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
    N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm")
    N.norm_backward_impl(dy, x, w, None, None, rr, "rms_norm")
torch.cuda.synchronize()
