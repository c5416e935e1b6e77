"""A transformer block's attention projections in place (issue 5): q, k, v and the output projection
with cupy_kernels.linear_ versus torch's F.linear, the same weights and input; prints peak device memory
of each forward (beyond the inputs), the memory saved, times and the difference of the outputs.

In place, v = x @ Wv.T + bv consumes x itself and the output projection overwrites the attention output;
q and k still need their own copy of x (x feeds three products), so two activations are saved."""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

import cupy_kernels as ck


def heads(t, b, s, h):
    return t.view(b, s, h, -1).transpose(1, 2)


def torch_block(x, p, b, s, h):
    q = F.linear(x, p["wq"], p["bq"])
    k = F.linear(x, p["wk"], p["bk"])
    v = F.linear(x, p["wv"], p["bv"])
    o = F.scaled_dot_product_attention(heads(q, b, s, h), heads(k, b, s, h), heads(v, b, s, h), is_causal=True)
    del q, k, v
    o = o.transpose(1, 2).reshape(b * s, -1)
    return F.linear(o, p["wo"], p["bo"])


def inplace_block(x, p, b, s, h):
    q = ck.linear_(x.clone(), p["wq"], p["bq"])
    k = ck.linear_(x.clone(), p["wk"], p["bk"])
    v = ck.linear_(x, p["wv"], p["bv"])  # x is consumed
    o = F.scaled_dot_product_attention(heads(q, b, s, h), heads(k, b, s, h), heads(v, b, s, h), is_causal=True)
    del q, k, v
    o = o.transpose(1, 2).reshape(b * s, -1)
    return ck.linear_(o, p["wo"], p["bo"])


def measure(fn, x0, p, b, s, h, reps=5):
    torch.cuda.synchronize()
    x = x0.clone()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(x, p, b, s, h)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    times = []
    for _ in range(reps):
        x = x0.clone()
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(x, p, b, s, h)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return out, peak, sorted(times)[len(times) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    dt = getattr(torch, args.dtype)
    b, s, d, h = args.batch, args.seq, args.dim, args.heads
    p = {}
    for name in "qkvo":
        p[f"w{name}"] = (torch.randn(d, d, device="cuda") / d ** 0.5).to(dt)
        p[f"b{name}"] = (torch.randn(d, device="cuda") * 0.1).to(dt)
    x0 = torch.randn(b * s, d, device="cuda").to(dt)
    with torch.no_grad():
        ref, peak_t, ms_t = measure(torch_block, x0, p, b, s, h)
        out, peak_i, ms_i = measure(inplace_block, x0, p, b, s, h)
    act = x0.nbytes / 2 ** 20
    err = float(torch.linalg.norm(out.double() - ref.double()) / torch.linalg.norm(ref.double()))
    print(f"attention projections, {b}x{s} tokens, d={d}, {h} heads, {args.dtype} (one activation = {act:.0f} MB)")
    print(f"  torch F.linear      : peak beyond inputs {peak_t / 2 ** 20:8.0f} MB, {ms_t:7.2f} ms")
    print(f"  cupy_kernels linear_: peak beyond inputs {peak_i / 2 ** 20:8.0f} MB, {ms_i:7.2f} ms")
    print(f"  memory saved: {(peak_t - peak_i) / 2 ** 20:.0f} MB ({(peak_t - peak_i) / x0.nbytes:.2f} activations); "
          f"relative difference of outputs {err:.2e}")


if __name__ == "__main__":
    main()
