"""ncu target (issue 4): one launch each of layer_norm / rms_norm forward at 8192x8192 bfloat16, softmax
forward and layer_norm backward (norm_bwd_shared, a cluster of two) at 1024x32768 bfloat16. Run under
`ncu --kernel-name regex:"norm_fwd|norm_bwd_shared|softmax_fwd"` (scripts/gpu_norm_probe.sh shows how)."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S


def case(rows, n):
    x = to_cupy(torch.randn(rows, n, device="cuda").bfloat16())
    w = to_cupy(torch.rand(n, device="cuda").bfloat16() + 0.5)
    b = to_cupy(torch.randn(n, device="cuda").bfloat16())
    return x, w, b


x, w, b = case(8192, 8192)
N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
x, w, b = case(1024, 32768)
S.softmax_impl(x, -1, "softmax")
_, m, r = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
N.norm_backward_impl(x, x, w, b, m, r, "layer_norm")
torch.cuda.synchronize()
