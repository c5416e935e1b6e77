"""ncu target (session 24): softmax kernels on shifted rows (rows that are not whole packs of aligned arrays), one
launch each: log_softmax backward bfloat16 167772x100 and 508400x33, forward bfloat16 2396745x7.
Run under `ncu --kernel-name regex:softmax_`."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import softmax as S

for rows, n in ((167772, 100), (508400, 33)):
    y, dy = (to_cupy(torch.randn(rows, n, device="cuda").bfloat16()) for _ in range(2))
    S.softmax_backward_impl(y, dy, -1, "log_softmax")
x = to_cupy(torch.randn(2396745, 7, device="cuda").bfloat16())
S.softmax_impl(x, -1, "softmax")
torch.cuda.synchronize()
