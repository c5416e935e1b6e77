"""Device experiment (issue 4): are the norm rows' run-to-run jumps (benchmarks/notes.md) a launch-config
change or the same launch running slower? Prints each plan rw.plan returns and the times of a few norm
calls, three repetitions in this process; run it in two or three separate processes."""
import cupy
import numpy as np

from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import _rowwise as rw
from cupy_kernels.ops import norm as N

seen = []
_plan = rw.plan


def plan(*a, **k):
    p = _plan(*a, **k)
    seen.append(p)
    return p


rw.plan = plan
timer = Timer()
g = cupy.random.default_rng()
cases = [((4096, 4096), "float32", "rms_norm", "bwd"), ((32768, 1024), "float16", "layer_norm", "fwd"),
         ((4096, 4096), "float32", "layer_norm", "fwd"), ((32768, 1024), "float16", "rms_norm", "bwd")]
for rep in range(3):
    for shape, dtype, mode, kind in cases:
        x = g.standard_normal(shape, dtype=cupy.float32).astype(dtype)
        w = g.standard_normal(shape[-1], dtype=cupy.float32).astype(dtype)
        b = g.standard_normal(shape[-1], dtype=cupy.float32).astype(dtype) if mode == "layer_norm" else None
        y, mean, rstd = N.norm_forward_impl(x, w, b, 1e-5, mode)
        dy = g.standard_normal(shape, dtype=cupy.float32).astype(dtype)
        seen.clear()
        if kind == "fwd":
            fn = lambda: N.norm_forward_impl(x, w, b, 1e-5, mode)
        else:
            fn = lambda: N.norm_backward_impl(dy, x, w, b, mean, rstd, mode)
        fn()
        p = seen[-1] if seen else None
        t = timer(fn)
        print(f"rep {rep} {mode} {kind} {shape} {dtype}: {t * 1e3:.1f} us  plan {p}")
