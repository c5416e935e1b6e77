"""Device sweep (issue 4): the sub-warp path's geometry on the short-row shapes. Times our forward /
backward ops for each TARGET_PACKS (packs a thread, so G = row packs / it) and SUBWARP_BLOCK (threads a
block), and with --per-sm grids capped at so many blocks an SM (each block looping over rows), against
torch in the same process, to check the rules in ops/_rowwise.py."""
import argparse

import torch

from cupy_kernels.bench.softmax import SHAPES, tensors
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops import _rowwise as RW
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S
from cupy_kernels._runtime import to_cupy

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="0,1")
ap.add_argument("--packs", default="1,2,4")
ap.add_argument("--blocks", default="64,128,256,512")
ap.add_argument("--per-sm", default="", help="comma-separated caps of the sub-warp grid in blocks an SM (looping "
                                             "blocks), timed with the default packs / block")
ap.add_argument("--ops", default="softmax fwd,log_softmax fwd,log_softmax bwd,layer fwd,rms fwd")
args = ap.parse_args()
timer = Timer()
copy = copy_bandwidth(timer)
print(f"copy {copy / 1e12:.2f} TB/s", flush=True)
default = (RW.TARGET_PACKS, RW.SUBWARP_BLOCK)
for i in args.shapes.split(","):
    shape, dtype = SHAPES[int(i)]
    (x, xc), (dy, dyc) = tensors(shape, dtype, 2)
    n = shape[-1]
    nbytes = x.numel() * x.element_size()
    w, b = (torch.rand(n, device="cuda") + 0.5).to(x.dtype), torch.randn(n, device="cuda").to(x.dtype)
    wc, bc = to_cupy(w), to_cupy(b)
    ly = torch.log_softmax(x, -1)
    lyc = to_cupy(ly)
    ops = {"softmax fwd": (lambda: S.softmax_impl(xc, -1, "softmax"), lambda: torch.softmax(x, -1), 2),
           "log_softmax fwd": (lambda: S.softmax_impl(xc, -1, "log_softmax"), lambda: torch.log_softmax(x, -1), 2),
           "log_softmax bwd": (lambda: S.softmax_backward_impl(lyc, dyc, -1, "log_softmax"),
                               lambda: torch._log_softmax_backward_data(dy, ly, -1, ly.dtype), 3),
           "layer fwd": (lambda: N.norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm"),
                         lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), 2),
           "rms fwd": (lambda: N.norm_forward_impl(xc, wc, None, 1e-6, "rms_norm"),
                       lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6), 2)}
    for op in args.ops.split(","):
        ours, theirs, k = ops[op]
        pct = lambda ms: 100 * k * nbytes / (ms * 1e-3) / copy
        cells = []
        for tp in map(int, args.packs.split(",")):
            for blk in map(int, args.blocks.split(",")):
                RW.TARGET_PACKS, RW.SUBWARP_BLOCK = tp, blk
                t = min(timer(ours, budget_ms=100) for _ in range(2))
                cells.append(f"{tp}/{blk}:{t * 1e3:.1f}")
        RW.TARGET_PACKS, RW.SUBWARP_BLOCK = default
        for cap in (int(v) for v in args.per_sm.split(",") if v):
            RW.SUBWARP_GRID["per_sm"] = cap
            t = min(timer(ours, budget_ms=100) for _ in range(2))
            cells.append(f"grid{cap}/SM:{t * 1e3:.1f}")
        RW.SUBWARP_GRID["per_sm"] = None
        t0, tt = timer(ours), timer(theirs)
        print(f"{'x'.join(map(str, shape))} {dtype} {op}: default {t0 * 1e3:.1f} us ({pct(t0):.1f}%) torch "
              f"{tt * 1e3:.1f} us ({pct(tt):.1f}%) | packs/block: {' '.join(cells)}", flush=True)
