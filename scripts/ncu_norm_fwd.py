"""ncu target (issue 4): one launch each of layer_norm and rms_norm forward (and with --softmax, softmax's) at
65536x128 float32 and 32768x1024 float16 (the sub-warp path), or at the shapes given as ROWSxN:dtype arguments
(e.g. 1024x32768:bfloat16, a staged block row). Run under `ncu --kernel-name regex:"norm_fwd|softmax_fwd"`
(scripts/gpu_explore.sh)."""
import sys

import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S

args = [a for a in sys.argv[1:] if not a.startswith("--")]
shapes = [(*map(int, a.split(":")[0].split("x")), getattr(torch, a.split(":")[1])) for a in args] or \
    [(65536, 128, torch.float32), (32768, 1024, torch.float16)]
for rows, n, dt in shapes:
    x = to_cupy(torch.randn(rows, n, device="cuda", dtype=dt))
    w = to_cupy(torch.rand(n, device="cuda", dtype=dt) + 0.5)
    b = to_cupy(torch.randn(n, device="cuda", dtype=dt))
    N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
    N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
    if "--softmax" in sys.argv:
        S.softmax_impl(x, -1, "softmax")
torch.cuda.synchronize()
