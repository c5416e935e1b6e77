"""Device probe (issue 4, session 26): softmax / log_softmax forward and backward on short rows, the tiled kernels
(softmax_tiled: a block's rows as one tile in shared memory) against the shifted / sub-warp row kernels (TILED off)
and torch, about 2^24 elements a case; rows of 1, 2, 4 elements (softmax_small_rows) against the row kernels
(n = 1, variant "scalar") and the tiles (n = 2, 4). `--aligned` also tiles whole-pack rows (TILED["aligned"]); `--lanes
L`: L threads a row at every width where compiled (TILED_LANES). `--norm`: layer_norm / rms_norm forward instead
(norm_fwd_tiled against TILED_FWD off). us; ratio = torch / ours."""
import argparse

import torch

from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench import switched
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S
from cupy_kernels.ops.norm import norm_forward_impl
from cupy_kernels.ops.softmax import softmax_backward_impl, softmax_impl

ap = argparse.ArgumentParser()
ap.add_argument("--widths", default="2,3,5,7,9,15,17,33,63,65,100,127,128")
ap.add_argument("--dtypes", default="float32,bfloat16")
ap.add_argument("--aligned", action="store_true")
ap.add_argument("--norm", action="store_true")
ap.add_argument("--lanes", type=int, default=0,
                help="softmax: this many threads a row at every width where compiled (0: automatic; TILED_LANES)")
args = ap.parse_args()

timer = Timer()
time_us = lambda fn: timer(fn, warmup=2, min_reps=8, max_reps=15, budget_ms=60) * 1e3  # noqa: E731
print(f"{torch.cuda.get_device_name()}; us: ours, the other path (row kernels; small rows of 2, 4: tiles), torch, floor", flush=True)
S.TILED["max_n"] = 1 << 20  # every width below tiled when on (no smem limit checked beyond TILE_BYTES' rows)
S.TILED["aligned"] = args.aligned
if args.lanes:
    S.TILED["lanes"] = args.lanes
N.TILED_FWD["max_n"] = 1 << 20
for dtype in args.dtypes.split(","):
    for n in [1] + [int(w) for w in args.widths.split(",")]:
        rows = (1 << 24) // n
        t = getattr(torch, dtype)
        x, dy = (torch.randn(rows, n, device="cuda").to(t) for _ in range(2))
        out = torch.empty_like(x)
        y, ly = torch.softmax(x, -1), torch.log_softmax(x, -1)
        xc, dyc, yc, lyc = map(to_cupy, (x, dy, y, ly))
        cases = [("softmax", lambda v: softmax_impl(xc, -1, "softmax", v), lambda: torch.softmax(x, -1),
                  lambda: out.copy_(x)),
                 ("log_softmax", lambda v: softmax_impl(xc, -1, "log_softmax", v), lambda: torch.log_softmax(x, -1),
                  lambda: out.copy_(x)),
                 ("softmax bwd", lambda v: softmax_backward_impl(yc, dyc, -1, "softmax", v),
                  lambda: torch._softmax_backward_data(dy, y, -1, y.dtype), lambda: torch.add(x, dy, out=out)),
                 ("log_softmax bwd", lambda v: softmax_backward_impl(lyc, dyc, -1, "log_softmax", v),
                  lambda: torch._log_softmax_backward_data(dy, ly, -1, ly.dtype), lambda: torch.add(x, dy, out=out))]
        if args.norm:
            w = (torch.rand(n, device="cuda") + 0.5).to(t)
            bias = torch.randn(n, device="cuda").to(t)
            wc, bc = to_cupy(w), to_cupy(bias)
            cases = [("layer_norm", lambda v: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm", variant=v),
                      lambda: torch.nn.functional.layer_norm(x, (n,), w, bias, 1e-5), lambda: out.copy_(x)),
                     ("rms_norm", lambda v: norm_forward_impl(xc, wc, None, 1e-5, "rms_norm", variant=v),
                      lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-5), lambda: out.copy_(x))]
        switch = N.TILED_FWD if args.norm else S.TILED
        for name, ours, ref, floor in cases:
            a = time_us(lambda: ours("auto"))
            if n == 1 and not args.norm:
                b = time_us(lambda: ours("scalar"))
            elif S.small_rows(n, dtype) and not args.norm:
                b = time_us(switched(S.SMALL_ROWS, {"max_n": 1}, lambda: ours("auto")))
            else:
                b = time_us(switched(switch, {"on": False}, lambda: ours("auto")))
            r, f = time_us(ref), time_us(floor)
            print(f"{name:16s} {dtype:9s} {rows:>8d}x{n:<4d} {a:8.1f} {b:8.1f} {r:8.1f} {f:8.1f}  ratio {r / a:5.2f}"
                  f"  floor {f / a * 100:5.1f}%{'  <- torch faster' if r < a else ''}", flush=True)
        del x, dy, out, y, ly, xc, dyc, yc, lyc
        torch.cuda.empty_cache()
