"""ncu target (session 25): norm backward on shifted rows (rows that are not whole packs of aligned arrays), one
launch each: layer_norm float32 2396745x7, rms_norm bfloat16 167772x100, and the aligned rms_norm bfloat16
131072x128 beside them. Run under `ncu --kernel-name regex:norm_bwd`."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops.norm import norm_backward_impl, norm_forward_impl

for mode, dtype, rows, n in (("layer_norm", torch.float32, 2396745, 7), ("rms_norm", torch.bfloat16, 167772, 100),
                             ("rms_norm", torch.bfloat16, 131072, 128)):
    x, dy = (to_cupy(torch.randn(rows, n, device="cuda").to(dtype)) for _ in range(2))
    w = to_cupy((torch.rand(n, device="cuda") + 0.5).to(dtype))
    b = to_cupy(torch.randn(n, device="cuda").to(dtype)) if mode == "layer_norm" else None
    _, mean, rstd = norm_forward_impl(x, w, b, 1e-5, mode)
    norm_backward_impl(dy, x, w, b, mean, rstd, mode)
torch.cuda.synchronize()
