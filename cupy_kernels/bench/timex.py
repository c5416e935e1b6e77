"""timex (RWKV causal depthwise long convolution): forward and forward+backward, the original article's ladder,
and the torch conv1d formulation, at B=32 C=768 T=768 float32 and at T = 64 ... 8192 with B*C*T near 19M."""
from __future__ import annotations

from . import Group, suite

C = 768
SWEEP = [(384, 64), (96, 256), (12, 2048), (6, 4096), (3, 8192)]  # (B, T): B*C*T = 18.9M


def _inputs(B, T, dtype="float32"):
    import torch

    from .._runtime import to_cupy

    dt = getattr(torch, dtype)
    w = (torch.randn(C, T, device="cuda") / T ** 0.5).to(dt).requires_grad_()
    k = torch.randn(B, C, T, device="cuda").to(dt).requires_grad_()
    g = torch.randn(B, C, T, device="cuda").to(dt)
    return w, k, g, to_cupy(w.detach()), to_cupy(k.detach()), to_cupy(g)


def _torch_forward(w, k, eps=0.0):
    import torch
    import torch.nn.functional as F

    T = k.shape[-1]
    with torch.no_grad():
        return eps + F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=w.shape[0])


def _torch_fwd_bwd(w, k, g):
    import torch
    import torch.nn.functional as F

    T = k.shape[-1]
    out = F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=w.shape[0])
    return torch.autograd.grad(out, (w, k), g)


def _ours_fwd_bwd(w, k, g, variant="auto"):
    import torch

    import cupy_kernels as ck

    return torch.autograd.grad(ck.timex(w, k, variant=variant), (w, k), g)


def _no_grad(fn):
    def run():
        import torch

        with torch.no_grad():
            return fn()
    return run


def _auto_note(B, T):
    from ..ops.timex import choose_tiled, tf32x3_auto

    tiled = f"tiled {choose_tiled('float32', B)}"
    return (f"auto: forward/grad_k {'tf32x3' if tf32x3_auto('float32', B, T) else tiled}, "
            f"grad_w {'tf32x3' if tf32x3_auto('float32', B, T, 'grad_w') else 'tiled'}")


@suite("timex")
def timex_suite(quick: bool):
    import cupy_kernels as ck
    from ..ops.timex import LADDER, _toeplitz_auto, choose_tiled

    B, T = 32, 768
    fmas = B * C * T * (T + 1) // 2
    nbytes = 4 * (2 * B * C * T + C * T)
    w, k, g, wc, kc, gc = _inputs(B, T)
    shape = f"B={B} C={C} T={T}"
    impls = {"cupy_kernels": lambda: ck.timex(wc, kc)}
    impls.update({f"ladder {v}": (lambda v=v: ck.timex(wc, kc, variant=v)) for v in LADDER})
    impls["tiled b8 (small-batch shape)"] = lambda: ck.timex(wc, kc, variant="tiled_b8")
    impls[f"tiled {choose_tiled('float32', B)} (SIMT fp32)"] = lambda: ck.timex(wc, kc, variant="tiled")
    impls["tf32x3 (tensor cores)"] = lambda: ck.timex(wc, kc, variant="tf32x3")
    impls["tf32x3_full (every MMA of the diagonal chunks)"] = lambda: ck.timex(wc, kc, variant="tf32x3_full")
    impls["tf32x3_scalar (fragments gathered word by word)"] = lambda: ck.timex(wc, kc, variant="tf32x3_scalar")
    impls["cupy_kernels via torch op"] = _no_grad(lambda: ck.timex(w, k))
    impls["torch conv1d"] = lambda: _torch_forward(w, k)
    yield Group("timex forward", shape, "float32", impls, bytes=nbytes, flops=2 * fmas,
                note=_auto_note(B, T))
    yield Group("timex backward", shape, "float32",
                {"cupy_kernels": lambda: ck.timex_backward(wc, kc, gc),
                 "tiled (SIMT fp32 grad_k + grad_w)": lambda: ck.timex_backward(wc, kc, gc, variant="tiled"),
                 "tf32x3 (both on tensor cores)": lambda: ck.timex_backward(wc, kc, gc, variant="tf32x3"),
                 "ladder naive": lambda: ck.timex_backward(wc, kc, gc, variant="naive")},
                bytes=4 * (3 * B * C * T + 2 * C * T), flops=4 * fmas, note=_auto_note(B, T))
    yield Group("timex forward+backward", shape, "float32",
                {"cupy_kernels (torch autograd)": lambda: _ours_fwd_bwd(w, k, g),
                 "cupy_kernels (cupy, kernels only)": lambda: (ck.timex(wc, kc), ck.timex_backward(wc, kc, gc)),
                 "tiled SIMT (torch autograd)": lambda: _ours_fwd_bwd(w, k, g, "tiled"),
                 "tiled SIMT (cupy, kernels only)": lambda: (ck.timex(wc, kc, variant="tiled"),
                                                             ck.timex_backward(wc, kc, gc, variant="tiled")),
                 "torch conv1d (autograd)": lambda: _torch_fwd_bwd(w, k, g)},
                bytes=4 * (4 * B * C * T + 2 * C * T), flops=6 * fmas)
    if not quick:
        for dtype in ("bfloat16", "float16"):
            wh, kh, gh, whc, khc, ghc = _inputs(B, T, dtype)
            yield Group("timex forward", shape, dtype,
                        {"cupy_kernels": lambda: ck.timex(whc, khc),
                         "tf32x3 (one TF32 pass)": lambda: ck.timex(whc, khc, variant="tf32x3"),
                         "torch conv1d": lambda: _torch_forward(wh, kh)},
                        bytes=nbytes // 2, flops=2 * fmas, note=f"auto: {_toeplitz_auto(dtype, B, T)}")
            yield Group("timex forward+backward", shape, dtype,
                        {"cupy_kernels (torch autograd)": lambda: _ours_fwd_bwd(wh, kh, gh),
                         "tf32x3 (torch autograd)": lambda: _ours_fwd_bwd(wh, kh, gh, "tf32x3"),
                         "torch conv1d (autograd)": lambda: _torch_fwd_bwd(wh, kh, gh)},
                        bytes=4 * (4 * B * C * T + 2 * C * T) // 2, flops=6 * fmas)
            del wh, kh, gh, whc, khc, ghc
    del w, k, g, wc, kc, gc
    for B, T in ([] if quick else SWEEP):
        w, k, g, wc, kc, gc = _inputs(B, T)
        fmas = B * C * T * (T + 1) // 2
        shape = f"B={B} C={C} T={T}"
        note = _auto_note(B, T)
        yield Group("timex forward", shape, "float32",
                    {"cupy_kernels": lambda: ck.timex(wc, kc), "tiled (SIMT)": lambda: ck.timex(wc, kc, variant="tiled"),
                     "tf32x3": lambda: ck.timex(wc, kc, variant="tf32x3"), "torch conv1d": lambda: _torch_forward(w, k)},
                    bytes=4 * (2 * B * C * T + C * T), flops=2 * fmas, note=note)
        yield Group("timex forward+backward", shape, "float32",
                    {"cupy_kernels (torch autograd)": lambda: _ours_fwd_bwd(w, k, g),
                     "cupy_kernels (cupy, kernels only)": lambda: (ck.timex(wc, kc), ck.timex_backward(wc, kc, gc)),
                     "tiled SIMT (cupy, kernels only)": lambda: (ck.timex(wc, kc, variant="tiled"),
                                                                 ck.timex_backward(wc, kc, gc, variant="tiled")),
                     "torch conv1d (autograd)": lambda: _torch_fwd_bwd(w, k, g)},
                    bytes=4 * (4 * B * C * T + 2 * C * T), flops=6 * fmas, note=note)
        del w, k, g, wc, kc, gc
