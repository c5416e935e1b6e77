"""Host time of torch calls: microseconds per eager call and where they go (cProfile, by own time).

Small shapes, so the GPU never holds the host back.
Usage (on a GPU machine, from the repository root): PYTHONPATH=. python scripts/profile_host.py [top]"""
import cProfile
import pstats
import sys
import time

import torch

import cupy_kernels as ck

TOP = int(sys.argv[1]) if len(sys.argv) > 1 else 18
dev = "cuda"
w = torch.randn(8, 64, device=dev, requires_grad=True)
k = torch.randn(2, 8, 64, device=dev, requires_grad=True)
x = torch.randn(64, 256, device=dev)
a, m = torch.randn(256, 256, device=dev, dtype=torch.bfloat16), torch.randn(256, 256, device=dev, dtype=torch.bfloat16)


def timex_fwd_bwd():
    out = ck.timex(w, k)
    gw, gk = torch.autograd.grad(out, (w, k), out)
    return gw


def timex_no_grad():
    with torch.no_grad():
        return ck.timex(w, k)


def softmax():
    return ck.softmax(x)


def square_matmul():
    with torch.no_grad():
        return ck.square_matmul_(a, m)


def torch_conv_fwd_bwd():  # the peer: same shapes through torch ops
    out = torch.nn.functional.conv1d(torch.nn.functional.pad(k, (63, 0)), w.unsqueeze(1), groups=8)
    return torch.autograd.grad(out, (w, k), out)


for name, fn in (("timex fwd+bwd (autograd)", timex_fwd_bwd), ("timex no_grad", timex_no_grad),
                 ("softmax", softmax), ("square_matmul_ (no_grad)", square_matmul),
                 ("torch conv1d fwd+bwd (peer)", torch_conv_fwd_bwd)):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    print(f"\n== {name}: {host:.1f} us of host time per call")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:TOP]
    for (file, line, func), (cc, nc, tt, ct, _) in rows:
        print(f"  {tt / n * 1e6:7.1f} us own {ct / n * 1e6:7.1f} us cum  {nc // n:3d}x  {func}  "
              f"{file.split('site-packages/')[-1].split('/work/')[-1]}:{line}")
