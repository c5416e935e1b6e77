"""ncu target (issue 4): the half-type norm backward forms at 8192x8192 bfloat16, one launch each:
layer and rms through norm_bwd_pipelined (depth 1 and 2), and the two-pack / unpipelined forms."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import norm as N

n = 8192
x = to_cupy(torch.randn(8192, n, device="cuda").bfloat16())
dy = to_cupy(torch.randn(8192, n, device="cuda").bfloat16())
w = to_cupy(torch.rand(n, device="cuda").bfloat16() + 0.5)
b = to_cupy(torch.randn(n, device="cuda").bfloat16())
_, m, r = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
_, _, rr = N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
N.TWO_PACK_FROM.update({k: 1 << 40 for k in N.TWO_PACK_FROM})
for depth in (1, 2):
    N.PIPELINE_BWD.update(on=True, depth=depth)
    N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm")
    N.norm_backward_impl(dy, x, w, None, None, rr, "rms_norm")
N.PIPELINE_BWD.update(on=False)
N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm")
N.norm_backward_impl(dy, x, w, None, None, rr, "rms_norm")
torch.cuda.synchronize()
