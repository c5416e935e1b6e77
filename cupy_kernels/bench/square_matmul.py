"""In-place square matmul A <- A @ W at m = 65536, n = 1024 / 2048 / 4096 in float32 / float16 /
bfloat16, against torch.matmul (cuBLAS; TF32 off for float32), with TFLOP/s and the peak device memory
each needs beyond its inputs (in the note); plus the original article's kernel (the ladder's bottom rung, a warp
per row) on a smaller problem."""
from __future__ import annotations

from . import Group, suite

M = 65536


def _inputs(m, n, dtype):
    import torch

    from .._runtime import to_cupy

    dt = getattr(torch, dtype)
    a = torch.randn(m, n, device="cuda").to(dt)
    w = (torch.randn(n, n, device="cuda") / n ** 0.5).to(dt)  # keeps |A| steady over repeated products
    return a, w, to_cupy(a), to_cupy(w)


def peak_extra(fn) -> int:
    """Bytes the torch allocator peaks at beyond what was allocated before fn() (its result included)."""
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    r = fn()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    del r
    return extra


def _mb(b):
    return f"{b / 2 ** 20:.2f} MB"


@suite("square_matmul")
def square_matmul_suite(quick: bool):
    import torch

    import cupy_kernels as ck
    from .. import torch_ops
    from ..ops.square_matmul import square_matmul_impl

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    ns = (1024, 4096) if quick else (1024, 2048, 4096)
    for n in ns:
        for dtype in ("float32", "float16", "bfloat16"):
            a, w, ac, wc = _inputs(M, n, dtype)

            def ours_torch():
                with torch.no_grad():
                    return torch_ops.square_matmul_(a, w)

            ours_torch()  # compile + load outside the measurements
            ours_extra = peak_extra(ours_torch)
            torch_extra = peak_extra(lambda: torch.matmul(a, w))
            note = (f"extra memory beyond a + w: ours {_mb(ours_extra)} ({100 * ours_extra / a.nbytes:.3f}% of a), "
                    f"torch.matmul {_mb(torch_extra)} ({100 * torch_extra / a.nbytes:.0f}% of a)")
            print(f"  square_matmul {M}x{n} {dtype}: {note}")
            impls = {"cupy_kernels (in place)": lambda: ck.square_matmul_(ac, wc),
                     "cupy_kernels via torch op": ours_torch,
                     "cupy_kernels transpose=True": lambda: ck.square_matmul_(ac, wc, transpose=True)}
            if dtype != "float32":  # the default is tma_cluster on Hopper (aligned rows), else mma256
                from ..ops.square_matmul import has_wgmma

                for v in (("tma", "wgmma") if has_wgmma() else ()) + ("mma256",):
                    impls[f"ladder {v}"] = lambda v=v: square_matmul_impl(ac, wc, variant=v)
                impls["ladder mma256 transpose=True"] = lambda: square_matmul_impl(ac, wc, True, variant="mma256")
            impls["torch.matmul (cuBLAS)"] = lambda: torch.matmul(a, w)
            yield Group("square_matmul_", f"{M}x{n} @ {n}x{n}", dtype, impls,
                        bytes=2 * a.nbytes + w.nbytes, flops=2 * M * n * n, note=note)
            del a, w, ac, wc, impls
            torch.cuda.empty_cache()
    # The ladder: the original article's warp-per-row kernel (n <= 2048) on a problem it finishes in reasonable time.
    for dtype in ("float32",) if quick else ("float32", "float16"):
        m, n = 4096, 1024
        a, w, ac, wc = _inputs(m, n, dtype)
        yield Group("square_matmul_ ladder", f"{m}x{n} @ {n}x{n}", dtype,
                    {"cupy_kernels (tiled)": lambda: ck.square_matmul_(ac, wc),
                     "ladder warp_per_row (the original article's)": lambda: square_matmul_impl(ac, wc,
                                                                                      variant="warp_per_row"),
                     "torch.matmul (cuBLAS)": lambda: torch.matmul(a, w)},
                    bytes=2 * a.nbytes + w.nbytes, flops=2 * m * n * n)
        del a, w, ac, wc
