"""Softmax / log_softmax forward and backward (and softmax_ in place) vs torch (and Liger-Kernel's forward
where it is installed), on the benchmark shapes.
Bytes: forward reads x and writes y once; backward reads y and dy and writes dx once."""
from __future__ import annotations

from . import Group, suite, switched

SHAPES = [((65536, 128), "float32"), ((32768, 1024), "float16"), ((4096, 4096), "float32"),
          ((8192, 8192), "bfloat16"), ((1024, 32768), "bfloat16"), ((256, 262144), "float32")]
# Rows that are not whole 16-byte packs (shifted rows, docs/softmax.md): a short row, a vocabulary-sized one, a
# float32 sub-warp one; and rows of one element (the elementwise kernel; its scalar-loads row is the row kernel).
# The softmax suite only; beside the benchmark shapes.
ODD_SHAPES = [((167772, 100), "bfloat16"), ((1024, 50257), "bfloat16"), ((508400, 33), "float32"),
              ((1 << 24, 1), "bfloat16")]


def tensors(shape, dtype, count):
    """`count` torch CUDA tensors of normal random values and their zero-copy CuPy views."""
    import torch

    from .._runtime import to_cupy

    out = []
    for _ in range(count):
        t = torch.randn(*shape, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))
        out.append((t, to_cupy(t)))
    return out


def floor(out, src, dy=None):
    """The row of a plain torch op that moves the group's bytes and computes nothing: forward, src copied into
    out; backward, src + dy written to out (two read, one written). What this shape's traffic reaches on the
    device, beside the 1 GB copy that `of copy` divides by (small shapes cannot reach that: fill and drain)."""
    import torch

    if dy is None:
        return {"floor: the same bytes copied (torch copy_)": lambda: out.copy_(src)}
    return {"floor: the same bytes, two read one written (torch.add out=)": lambda: torch.add(src, dy, out=out)}


@suite("softmax")
def softmax_suite(quick: bool):
    import torch

    import cupy_kernels as ck
    from ..ops import softmax as S
    from ..ops.softmax import softmax_backward_impl, softmax_impl
    from .liger import functions as liger_functions

    lig = liger_functions()  # None where Liger-Kernel is not installed
    for shape, dtype in SHAPES[:3] if quick else SHAPES + ODD_SHAPES:
        (x, xc), (s, sc), (dy, dyc) = tensors(shape, dtype, 3)
        label = "x".join(map(str, shape))
        nbytes = x.numel() * x.element_size()
        odd = shape[-1] * x.element_size() % 16 != 0
        scalar = (lambda f: {"ladder: scalar loads": f}) if odd else (lambda f: {})  # noqa: E731
        impls = {"cupy_kernels": lambda: softmax_impl(xc, -1, "softmax"),
                 "cupy_kernels softmax_ (in place)": lambda: ck.softmax_(sc),
                 "ladder: scalar loads": lambda: softmax_impl(xc, -1, "softmax", "scalar"),
                 "torch.softmax": lambda: torch.softmax(x, -1), **floor(s, x)}
        if shape[-1] > 1:  # (a block for each of 2^24 rows of one: milliseconds that say nothing)
            impls["ladder: one block per row"] = lambda: softmax_impl(xc, -1, "softmax", "block")
        if shape[-1] == 32768:  # one 1024-thread block a row: the next rows staged in shared memory by default
            impls["ladder: unstaged (no next row in shared memory)"] = switched(
                S, {"stage_fwd": False}, lambda: softmax_impl(xc, -1, "softmax"))
            impls["ladder: staged one row ahead (not two)"] = switched(
                S, {"stage_fwd_two_ahead": False}, lambda: softmax_impl(xc, -1, "softmax"))
        if shape[-1] >= 32768:  # rows split over blocks (by default the pipelined kernels): the other ways
            impls["ladder: long rows, one launch (exchange)"] = lambda: softmax_impl(xc, -1, "softmax", "exchange")
            impls["ladder: long rows, two launches (split)"] = lambda: softmax_impl(xc, -1, "softmax", "split")
            impls["ladder: long rows, one launch, counter exchange"] = lambda: softmax_impl(xc, -1, "softmax",
                                                                                           "counter")
        if x.numel() * 4 <= 1 << 30:
            impls["torch formulation exp(x - max) / sum"] = lambda: (
                lambda e: e / e.sum(-1, keepdim=True))((x - x.amax(-1, keepdim=True)).exp())
        if lig is not None:
            impls["liger (Triton)"] = lambda: lig.softmax(x)
        yield Group("softmax", label, dtype, impls, bytes=2 * nbytes)
        yield Group("log_softmax", label, dtype,
                    {"cupy_kernels": lambda: softmax_impl(xc, -1, "log_softmax"),
                     **scalar(lambda: softmax_impl(xc, -1, "log_softmax", "scalar")),
                     "torch.log_softmax": lambda: torch.log_softmax(x, -1), **floor(s, x)}, bytes=2 * nbytes)
        y = torch.softmax(x, -1)
        from .._runtime import to_cupy

        yc = to_cupy(y)
        yield Group("softmax backward", label, dtype,
                    {"cupy_kernels": lambda: softmax_backward_impl(yc, dyc, -1, "softmax"),
                     **scalar(lambda: softmax_backward_impl(yc, dyc, -1, "softmax", "scalar")),
                     **({"ladder: long rows, one launch (exchange)":
                         lambda: softmax_backward_impl(yc, dyc, -1, "softmax", "exchange"),
                         "ladder: long rows, two launches (split)":
                         lambda: softmax_backward_impl(yc, dyc, -1, "softmax", "split"),
                         "ladder: long rows, one launch, counter exchange":
                         lambda: softmax_backward_impl(yc, dyc, -1, "softmax", "counter")} if shape[-1] >= 16384 else {}),
                     **({"ladder: 512-thread blocks, staged (no wide form)": switched(
                         S, {"wide_bwd": False}, lambda: softmax_backward_impl(yc, dyc, -1, "softmax"))}
                        if shape[-1] > 8192 and dtype in ("float16", "bfloat16") else {}),
                     "torch _softmax_backward_data": lambda: torch._softmax_backward_data(dy, y, -1, y.dtype),
                     "torch formulation y * (dy - sum(dy * y))": lambda: y * (dy - (dy * y).sum(-1, keepdim=True)),
                     **floor(s, y, dy)},
                    bytes=3 * nbytes)
        ly = torch.log_softmax(x, -1)
        lyc = to_cupy(ly)
        yield Group("log_softmax backward", label, dtype,
                    {"cupy_kernels": lambda: softmax_backward_impl(lyc, dyc, -1, "log_softmax"),
                     **scalar(lambda: softmax_backward_impl(lyc, dyc, -1, "log_softmax", "scalar")),
                     "torch _log_softmax_backward_data":
                         lambda: torch._log_softmax_backward_data(dy, ly, -1, ly.dtype), **floor(s, ly, dy)},
                    bytes=3 * nbytes)
        del x, xc, s, sc, dy, dyc, y, yc, ly, lyc
