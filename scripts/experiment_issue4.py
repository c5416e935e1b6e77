"""Device experiment (issue 4), one process. A: are the suite's slow norm rows host time landing between
the events? Each case right after suite-like churn (pool freed, new torch tensors), timed with the flush
only (plain) and with the flush plus a 0.5 ms device delay, with each call's host enqueue time; then
with the row kernels' shared-memory carveout pinned. B: short rows (65536x128 f32, 32768x1024 f16):
sub-warp block size x packs per thread. C: long-row layer_norm backward (1024x32768 bf16) knobs."""
import cupy
import torch

from cupy_kernels.bench.softmax import tensors
from cupy_kernels.bench.timing import Timer
from cupy_kernels._runtime import to_cupy
from cupy_kernels.ops import _rowwise as rw
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S

plain, delayed = Timer(delay_us=0), Timer()


def make(shape, dtype, what):
    """Suite-like churn, then a zero-argument call of `what` on fresh tensors."""
    cupy.get_default_memory_pool().free_all_blocks()
    (x, xc), (y, yc), (dy, dyc) = tensors(shape, dtype, 3)
    n = shape[-1]
    w = to_cupy((torch.rand(n, device="cuda") + 0.5).to(x.dtype))
    b = to_cupy(torch.randn(n, device="cuda").to(x.dtype))
    _, mean, rstd = N.norm_forward_impl(xc, w, b, 1e-5, "layer_norm")
    _, _, rstd_r = N.norm_forward_impl(xc, w, None, 1e-6, "rms_norm")
    ys = to_cupy(torch.softmax(x, -1))
    calls = {
        "layer fwd": lambda: N.norm_forward_impl(xc, w, b, 1e-5, "layer_norm"),
        "rms fwd": lambda: N.norm_forward_impl(xc, w, None, 1e-6, "rms_norm"),
        "layer bwd": lambda: N.norm_backward_impl(dyc, xc, w, b, mean, rstd, "layer_norm"),
        "rms bwd": lambda: N.norm_backward_impl(dyc, xc, w, None, None, rstd_r, "rms_norm"),
        "softmax fwd": lambda: S.softmax_impl(xc, -1, "softmax"),
        "log_softmax fwd": lambda: S.softmax_impl(xc, -1, "log_softmax"),
        "softmax bwd": lambda: S.softmax_backward_impl(ys, dyc, -1, "softmax"),
        "log_softmax bwd": lambda: S.softmax_backward_impl(ys, dyc, -1, "log_softmax"),
        "torch softmax": lambda: torch.softmax(x, -1),
        "torch log_softmax": lambda: torch.log_softmax(x, -1),
        "torch softmax bwd": lambda: torch._softmax_backward_data(dy, y, -1, y.dtype),
        "torch log_softmax bwd": lambda: torch._log_softmax_backward_data(dy, y, -1, y.dtype),
        "torch layer bwd": lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [n], mean_t, rstd_t, to_t(w), to_t(b), [True, True, True]),
    }
    to_t = torch.from_dlpack
    _, mean_t, rstd_t = torch.ops.aten.native_layer_norm(x, [n], to_t(w), to_t(b), 1e-5)
    return calls[what]


STAB = [((4096, 4096), "float32", "layer fwd"), ((32768, 1024), "float16", "layer fwd"),
        ((4096, 4096), "float32", "rms bwd"), ((32768, 1024), "float16", "layer bwd"),
        ((1024, 32768), "bfloat16", "layer bwd"), ((32768, 1024), "float16", "softmax fwd")]


def part_a(tag):
    for rep in range(3):
        for shape, dtype, what in STAB:
            order = (plain, delayed) if rep % 2 == 0 else (delayed, plain)
            out = {}
            for t in order:
                fn = make(shape, dtype, what)
                out[t is plain] = (t(fn) * 1e3, t.host_ms * 1e3)
            print(f"A{tag} rep {rep} {what:10s} {'x'.join(map(str, shape)):>10s} {dtype:9s} plain {out[True][0]:7.1f} us "
                  f"(host {out[True][1]:6.1f})  delayed {out[False][0]:7.1f} us (host {out[False][1]:6.1f})", flush=True)


def pin_carveout(percent):
    for src in (N.SOURCE, S.SOURCE):
        for name in src.names:
            src.kernel(name).preferred_shared_memory_carveout = percent


part_a("")
for pct in (100, 50):
    try:
        pin_carveout(pct)
    except Exception as e:
        print("carveout", pct, "failed:", type(e).__name__, e)
        break
    part_a(f" carveout={pct}")

# B: short rows, sub-warp block and packs per thread (delayed timer)
for shape, dtype, whats in [((65536, 128), "float32", ["softmax fwd", "log_softmax fwd", "softmax bwd",
                                                       "log_softmax bwd", "layer fwd", "rms fwd"]),
                            ((32768, 1024), "float16", ["layer fwd", "rms fwd", "softmax fwd"])]:
    for what in whats + [w for w in ("torch softmax", "torch log_softmax", "torch softmax bwd", "torch log_softmax bwd")
                         if shape[-1] == 128]:
        fn = make(shape, dtype, what)
        res = []
        for block in (64, 128, 256, 512):
            for tp in (1, 2, 4):
                if what.startswith("torch") and (block, tp) != (256, 4):
                    continue
                rw.SUBWARP_BLOCK, rw.TARGET_PACKS = block, tp
                res.append(f"{block}/{tp}: {delayed(fn) * 1e3:6.1f}")
        rw.SUBWARP_BLOCK, rw.TARGET_PACKS = 256, 4
        print(f"B {what:16s} {'x'.join(map(str, shape)):>10s} {dtype:8s} block/packs:", "  ".join(res), flush=True)

# C: long-row layer_norm backward
shape, dtype = (1024, 32768), "bfloat16"
base = N.bwd_threads
for what in ("layer bwd", "torch layer bwd"):
    fn = make(shape, dtype, what)
    for threads in ((512, 256) if what == "layer bwd" else (512,)):
        N.bwd_threads = lambda d, t=threads: t
        for lr in (("exchange", "split") if what == "layer bwd" else ("exchange",)):
            rw.LONG_ROWS = lr
            print(f"C {what} {shape} {dtype} threads {threads} {lr}: {delayed(fn) * 1e3:.1f} us", flush=True)
    N.bwd_threads, rw.LONG_ROWS = base, "exchange"
