"""compute-sanitizer target (issue 4): one small launch of each row-kernel form session 8 added or changed, so that
memcheck / racecheck see them: the forward and backward instances compiled for their group (sub-warp G 8 and 32,
ROW_BLOCK unstaged and staged), norm_bwd's float32 GT forms, and norm_bwd_shared's unstaged small CTAs and its clusters of 2 and 4;
norm_bwd_shared's warp rows (half 1024 FULL and 768, float32 384) with column_sum launched after them,
clusters of 8 (bfloat16 32768) (session 10).
Run: compute-sanitizer --tool racecheck python3 scripts/sanitize_rows.py"""
import cupy
import numpy as np

from cupy_kernels._runtime import cupy_dtype
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S

rng = np.random.default_rng(0)


def dev(a, dtype):
    return cupy.asarray(a.astype(cupy_dtype(dtype)))  # bfloat16 through ml_dtypes, as the tests do


for dtype, n in (("float32", 128), ("float16", 1024), ("float32", 4096), ("bfloat16", 32768), ("float32", 2048),
                 ("bfloat16", 16384), ("bfloat16", 768), ("float32", 384)):
    x, dy = (dev(rng.standard_normal((67, n)), dtype) for _ in range(2))
    w, b = dev(rng.random(n) + 0.5, dtype), dev(rng.standard_normal(n), dtype)
    for mode in ("softmax", "log_softmax"):
        y = S.softmax_impl(x, -1, mode)
        S.softmax_backward_impl(y, dy, -1, mode)
    for mode, bias in (("layer_norm", b), ("rms_norm", None)):
        y, mean, rstd = N.norm_forward_impl(x, w, bias, 1e-5, mode)
        N.norm_backward_impl(dy, x, w, bias, mean, rstd, mode)
        N.norm_backward_impl(dy, y, w, bias, None, rstd, mode, from_output=True)
cupy.cuda.Device().synchronize()
print("ok")
