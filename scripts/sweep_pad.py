"""Device experiment for pad (issue 6): unit size and grid of the periodic (brick) path, the tiled
and rows paths' grids, and where the host time of a call goes (cProfile). Prints tables; run on the GPU:
PYTHONPATH=. python3 scripts/sweep_pad.py"""
import cProfile
import pstats

import cupy
import torch

import cupy_kernels as ck
from cupy_kernels._runtime import to_cupy
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops import pad as P

timer = Timer()
DEFAULTS = dict(P.GRID_WAVES), P.PERIODIC_UNIT_STORES
copy = copy_bandwidth(timer)
print(f"copy bandwidth {copy / 1e12:.3f} TB/s")
tile = cupy.random.random((48, 32), dtype=cupy.float32)
pads = ((2048, 2048), (4096, 4096))
filled = torch.empty((4144, 8224), device="cuda")
fill = timer(lambda: filled.fill_(1.0))
print(f"brick: torch fill_ {fill * 1e3:.1f} us")
spec = P.spec_for(tile, pads, "brick", 0, 10)
ref = P.pad_impl(tile, spec, rung="flat")
for stores in (8, 4):
    for waves in (1, 2, 4):
        P.PERIODIC_UNIT_STORES, P.GRID_WAVES["periodic"] = stores, waves
        P._PLANS.clear()
        assert bool((P.pad_impl(tile, spec) == ref).all())
        t = timer(lambda: P.pad_impl(tile, spec))
        print(f"  periodic unit {stores:2d} stores, {waves} waves: {t * 1e3:6.1f} us = {t / fill * 100:5.1f}% of fill_")
P.GRID_WAVES.update(DEFAULTS[0])
P.PERIODIC_UNIT_STORES = DEFAULTS[1]
P._PLANS.clear()

# 4x the output (541 MB): how much of the gap to fill_ is the L2 absorbing the end of the writes
del filled
big_pads = ((4096, 4096), (8192, 8192))
big = torch.empty((48 + 8192, 32 + 16384), device="cuda")
fill_big = timer(lambda: big.fill_(1.0))
spec_big = P.spec_for(tile, big_pads, "brick", 0, 10)
t = timer(lambda: P.pad_impl(tile, spec_big))
print(f"  brick to {tuple(big.shape)}: fill_ {fill_big * 1e3:.1f} us, ours {t * 1e3:.1f} us = {t / fill_big * 100:5.1f}%")
del big

x = cupy.random.random((32, 3, 1024, 1024), dtype=cupy.float32)
pw = ((0, 0), (0, 0), (64, 64), (64, 64))
nbytes = x.nbytes + 32 * 3 * 1152 * 1152 * 4
for mode in ("constant", "reflect"):
    spec = P.spec_for(x, pw, mode)
    for rung, waves in (("tiled", 1), ("tiled", 2), ("rows", 4), ("rows", 8), ("rows", 16)):
        P.GRID_WAVES[rung] = waves
        P._PLANS.clear()
        t = timer(lambda: P.pad_impl(x, spec, rung=rung))
        print(f"  {mode} {rung} {waves} waves: {t * 1e3:6.1f} us = {nbytes / (t * 1e-3) / copy * 100:5.1f}% of copy")
P.GRID_WAVES.update(DEFAULTS[0])
P._PLANS.clear()
del x

# host time per call: CuPy in and torch in (brick, a small output so the device is not the limit)
small = cupy.random.random((48, 32), dtype=cupy.float32)
ts = torch.randn(48, 32, device="cuda")
tg = ts.clone().requires_grad_()
for name, fn in (("cupy", lambda: ck.pad(small, 8, mode="reflect")), ("torch", lambda: ck.pad(ts, 8, mode="reflect")),
                 ("torch, requires_grad (custom op)", lambda: ck.pad(tg, 8, mode="reflect"))):
    for _ in range(50):
        fn()
    cupy.cuda.Device().synchronize()
    import time
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    cupy.cuda.Device().synchronize()
    print(f"host time per call, {name} in: {(time.perf_counter() - t0) / 2000 * 1e6:.1f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)
