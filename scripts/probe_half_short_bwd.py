"""Device probe (issue 4, session 8): the half-type one-pack norm backward on short rows, compiled for its group
(norm.SHORT_BWD) against the run-time form, in one process."""
import torch
from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops import norm as N
t = Timer(); copy = copy_bandwidth(t)
for rows, n, dt in ((32768, 768, torch.bfloat16), (65536, 512, torch.float16), (131072, 128, torch.bfloat16)):
    x, dy = (to_cupy(torch.randn(rows, n, device="cuda").to(dt)) for _ in range(2))
    w = to_cupy((torch.rand(n, device="cuda") + 0.5).to(dt)); b = to_cupy(torch.randn(n, device="cuda").to(dt))
    _, m, r = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm"); _, _, rr = N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
    nb = 3 * x.nbytes
    for mode in ("layer_norm", "rms_norm"):
        f = (lambda: N.norm_backward_impl(dy, x, w, b, m, r, mode)) if mode == "layer_norm" else (lambda: N.norm_backward_impl(dy, x, w, None, None, rr, mode))
        res = {}
        for rep in range(2):
            for on in (True, False):
                saved = dict(N.SHORT_BWD)
                if not on:
                    N.SHORT_BWD.pop("float16"); N.SHORT_BWD.pop("bfloat16")
                res.setdefault(on, []).append(t(f))
                N.SHORT_BWD.update(saved)
        print(f"{rows}x{n} {dt} {mode} bwd: GT {min(res[True])*1e3:.1f} us ({100*nb/min(res[True])/1e-3/copy:.1f}%)  run-time {min(res[False])*1e3:.1f} us", flush=True)
