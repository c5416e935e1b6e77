"""Device experiment (issue 4, staged backward): softmax / log_softmax backward with the next row staged
in shared memory (cp.async; half-type 512-thread rows) vs not staged; torch on the same tensors. One process, delayed timer,
each variant timed twice (A B A B) so the spread is visible. Prints one line per case."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.softmax import tensors
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import softmax as S

t = Timer()
SHAPES = [((65536, 128), "float32"), ((32768, 1024), "float16"), ((4096, 4096), "float32"),
          ((8192, 8192), "bfloat16"), ((1024, 32768), "bfloat16"), ((256, 262144), "float32")]
STAGES = {"off": (), "on": ("block", "multiblock")}

for shape, dtype in SHAPES:
    (x, xc), (y, yc), (dy, dyc) = tensors(shape, dtype, 3)
    ys = torch.softmax(x, -1)
    yl = torch.log_softmax(x, -1)
    tag = f"{'x'.join(map(str, shape)):>10s} {dtype:8s}"
    for mode, yt in (("softmax", ys), ("log_softmax", yl)):
        yk = to_cupy(yt)
        fn = lambda: S.softmax_backward_impl(yk, dyc, -1, mode)  # noqa: E731
        res = []
        for rep in range(2):
            for name, paths in STAGES.items():
                S.STAGE_BWD = paths
                res.append(f"{name}{rep} {t(fn) * 1e3:6.1f}")
        S.STAGE_BWD = STAGES["on"]
        tf = (torch._softmax_backward_data if mode == "softmax" else torch._log_softmax_backward_data)
        tt = t(lambda: tf(dy, yt, -1, yt.dtype)) * 1e3
        print(f"BWD {mode:11s} {tag} us: {'  '.join(res)}  torch {tt:6.1f}", flush=True)
