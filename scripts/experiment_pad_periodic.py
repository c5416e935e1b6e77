"""Device experiment (issue 6): the periodic path on a 1-D wrap (one long row, consecutive blocks on
consecutive segments) and on bricks, against torch fill_ of the same bytes."""
import cupy, torch
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import pad as P
timer = Timer()
n = 4144 * 8224
filled = torch.empty(n, device="cuda")
fill = timer(lambda: filled.fill_(1.0))
print(f"fill_ {n} floats: {fill*1e3:.1f} us")
x = cupy.random.random(32, dtype=cupy.float32)
spec = P.spec_for(x, (0, n - 32), "wrap")
for stores in (16, 8, 4, 2):
    for waves in (1, 4):
        P.PERIODIC_UNIT_STORES, P.GRID_WAVES["periodic"] = stores, waves
        P._PLANS.clear()
        t = timer(lambda: P.pad_impl(x, spec))
        p, _ = P._cached_plan(x.shape, [1], 4, spec, "default")
        print(f"  1-D wrap, {p.path}, unit {stores} stores ({p.chunks * 16 // 1024} KB), {waves} waves: {t*1e3:.1f} us = {t/fill*100:.1f}%")
tile = cupy.random.random((48, 32), dtype=cupy.float32)
P.PERIODIC_UNIT_STORES, P.GRID_WAVES["periodic"] = 16, 4
P._PLANS.clear()
for th in (48, 1):
    t2 = cupy.random.random((th, 32), dtype=cupy.float32)
    pads = ((2048, 4144 - 2048 - th), (4096, 4096))
    for st in (10, 0):
        spec = P.spec_for(t2, pads, "brick", 0, st)
        t = timer(lambda: P.pad_impl(t2, spec))
        print(f"  brick tile {th}x32 stagger {st}: {t*1e3:.1f} us = {t/fill*100:.1f}%")
