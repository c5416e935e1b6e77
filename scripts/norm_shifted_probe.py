"""Device probe (issue 4, session 25): layer_norm / rms_norm forward and backward on rows that are not whole packs,
shifted rows (auto) against the element path (variant "scalar") and torch, over a few row lengths, about 2^24
elements a case."""
import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops.norm import norm_backward_impl, norm_forward_impl

timer = Timer()
time_us = lambda fn: timer(fn, warmup=2, min_reps=8, max_reps=15, budget_ms=60) * 1e3  # noqa: E731
print(f"{torch.cuda.get_device_name()}; us: auto (shifted where it applies), element path, torch", flush=True)
for dtype in ("bfloat16", "float32"):
    for n in (33, 100, 1001, 4097, 12289):
        rows = (1 << 24) // n
        t = getattr(torch, dtype)
        x, dy = (torch.randn(rows, n, device="cuda").to(t) for _ in range(2))
        w = (torch.rand(n, device="cuda") + 0.5).to(t)
        b = torch.randn(n, device="cuda").to(t)
        xc, dyc, wc, bc = map(to_cupy, (x, dy, w, b))
        for mode in ("layer_norm", "rms_norm"):
            bias = bc if mode == "layer_norm" else None
            _, mean, rstd = norm_forward_impl(xc, wc, bias, 1e-5, mode)
            _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
            xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
            rms_out = torch.nn.functional.rms_norm(xr, (n,), wr, 1e-5)
            ref = ((lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], tmean, trstd, w, b, [True] * 3))
                   if mode == "layer_norm" else (lambda: torch.autograd.grad(rms_out, (xr, wr), dy, retain_graph=True)))
            fwd = (lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)) if mode == "layer_norm" else (
                lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-5))
            a, s, r = (time_us(lambda: norm_forward_impl(xc, wc, bias, 1e-5, mode)),
                       time_us(lambda: norm_forward_impl(xc, wc, bias, 1e-5, mode, variant="scalar")), time_us(fwd))
            print(f"{mode:16s} {dtype:9s} {rows:>8d}x{n:<5d} {a:8.1f} {s:8.1f} {r:8.1f}", flush=True)
            a, s, r = (time_us(lambda: norm_backward_impl(dyc, xc, wc, bias, mean, rstd, mode)),
                       time_us(lambda: norm_backward_impl(dyc, xc, wc, bias, mean, rstd, mode, variant="scalar")),
                       time_us(ref))
            print(f"{mode + ' bwd':16s} {dtype:9s} {rows:>8d}x{n:<5d} {a:8.1f} {s:8.1f} {r:8.1f}", flush=True)
