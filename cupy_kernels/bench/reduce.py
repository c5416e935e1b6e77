"""Reductions: full, row (axis=-1) and column (axis=0), with the original articles' ladder, vs torch and CuPy."""
from __future__ import annotations

import math

from . import Group, suite


def random_tensor(shape, dtype):
    """A torch CUDA tensor of normal random values (never zeros) and its zero-copy CuPy view."""
    import torch

    from .._runtime import to_cupy

    x = torch.randn(*shape, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))
    return x, to_cupy(x)


@suite("reduce")
def reduce_suite(quick: bool):
    import cupy

    import cupy_kernels as ck
    from ..ops.reduce import LADDER

    full = [1 << 26] if quick else [1 << 26, 1 << 28]
    for n in full:
        x, xc = random_tensor((n,), "float32")
        impls = {"cupy_kernels": lambda: ck.sum(xc), "torch": lambda: x.sum(), "cupy": lambda: cupy.sum(xc)}
        impls.update({f"ladder {r}": (lambda r=r: ck.sum_ladder(xc, r)) for r in LADDER if r != "vectorized"})
        yield Group("sum", f"{n}", "float32", impls, bytes=x.nbytes)
        yield Group("max", f"{n}", "float32",
                    {"cupy_kernels": lambda: ck.max(xc), "torch": lambda: x.max(), "cupy": lambda: cupy.max(xc)},
                    bytes=x.nbytes)
        del x, xc
    rows = [((4096, 4096), "float32"), ((32768, 1024), "float16"), ((8192, 8192), "bfloat16"),
            ((65536, 128), "float32"), ((256, 262144), "float32"), ((1000, 4097), "float32")]
    for shape, dtype in rows[:2] if quick else rows:
        x, xc = random_tensor(shape, dtype)
        out_bytes = shape[0] * x.element_size()
        yield Group("sum(axis=-1)", "x".join(map(str, shape)), dtype,
                    {"cupy_kernels": lambda: ck.sum(xc, axis=-1), "torch": lambda: x.sum(-1),
                     "cupy": lambda: cupy.sum(xc, axis=-1)}, bytes=x.nbytes + out_bytes)
        if shape == (4096, 4096):
            for op in ("mean", "max"):
                yield Group(f"{op}(axis=-1)", "x".join(map(str, shape)), dtype,
                            {"cupy_kernels": lambda op=op: getattr(ck, op)(xc, axis=-1),
                             "torch": (lambda: x.mean(-1)) if op == "mean" else (lambda: x.amax(-1)),
                             "cupy": lambda op=op: getattr(cupy, op)(xc, axis=-1)}, bytes=x.nbytes + out_bytes)
        del x, xc
    for shape, dtype in [((8192, 8192), "float32"), ((4096, 4096), "bfloat16")][: 1 if quick else 2]:
        x, xc = random_tensor(shape, dtype)
        yield Group("sum(axis=0)", "x".join(map(str, shape)), dtype,
                    {"cupy_kernels": lambda: ck.sum(xc, axis=0), "torch": lambda: x.sum(0),
                     "cupy": lambda: cupy.sum(xc, axis=0)}, bytes=x.nbytes + shape[1] * x.element_size())
        del x, xc
    if not quick:
        x, xc = random_tensor((64, 4096, 256), "float32")
        yield Group("sum(axis=1)", "64x4096x256", "float32",
                    {"cupy_kernels": lambda: ck.sum(xc, axis=1), "torch": lambda: x.sum(1),
                     "cupy": lambda: cupy.sum(xc, axis=1)}, bytes=x.nbytes + 64 * 256 * 4)
