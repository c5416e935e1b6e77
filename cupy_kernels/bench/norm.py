"""layer_norm / rms_norm forward and backward (and the in-place forms) vs torch (and Liger-Kernel's forward where it
is installed), on the benchmark shapes and rows that are not whole 16-byte packs (ODD_SHAPES: shifted rows and tiles).
Bytes: forward reads x and writes y once; backward reads x (or y) and dy and writes dx once
(weight, bias, dweight, dbias and the row statistics are under 0.1% and not counted)."""
from __future__ import annotations

from . import Group, suite, switched
from .softmax import SHAPES, floor, tensors

ODD_SHAPES = [((167772, 100), "bfloat16"), ((16760, 1001), "bfloat16"), ((508400, 33), "float32")]


def tuned_row(module, fn, **changes):
    """fn run with module.TUNING's fields replaced (a ladder row of an otherwise automatic choice)."""
    return switched(module, changes, fn)


@suite("norm")
def norm_suite(quick: bool):
    import torch
    import torch.nn.functional as F

    import cupy_kernels as ck
    from .._runtime import to_cupy
    from ..ops import _rowwise as rw
    from ..ops import norm as N
    from ..ops.norm import norm_backward_impl, norm_forward_impl
    from .liger import functions as liger_functions

    lig = liger_functions()  # None where Liger-Kernel is not installed
    liger = (lambda f: {} if lig is None else {"liger (Triton)": f})  # noqa: E731

    for shape, dtype in SHAPES[:3] if quick else SHAPES + ODD_SHAPES:
        (x, xc), (s, sc), (dy, dyc) = tensors(shape, dtype, 3)
        n = shape[-1]
        half = dtype in ("float16", "bfloat16")
        label = "x".join(map(str, shape))
        nbytes = x.numel() * x.element_size()
        w = (torch.rand(n, device="cuda") + 0.5).to(x.dtype)
        b = torch.randn(n, device="cuda").to(x.dtype)
        wc, bc = to_cupy(w), to_cupy(b)

        def fwd(mode, bias=None):
            return lambda: norm_forward_impl(xc, wc, bias, 1e-5 if mode == "layer_norm" else 1e-6, mode)

        def long_rows(f):  # rows over several blocks without the pipelined kernels: one launch, or two
            off = dict(pipelined_fwd=False, pipelined_bwd=False)
            return ({"ladder: long rows, one launch (exchange)": tuned_row(rw, f, **off),
                     "ladder: long rows, two launches (split)": tuned_row(rw, f, long_rows="split", **off)}
                    if n > 32768 else {})

        yield Group("layer_norm", label, dtype,
                    {"cupy_kernels": fwd("layer_norm", bc),
                     "cupy_kernels layer_norm_ (in place)": lambda: ck.layer_norm_(sc, wc, bc),
                     **long_rows(fwd("layer_norm", bc)),
                     **({"ladder: unstaged (no next row in shared memory)": tuned_row(N, fwd("layer_norm", bc),
                                                                                       stage_fwd=False)}
                        if n == 32768 else {}),  # one block a row (longer rows: the pipelined kernels)
                     "torch F.layer_norm": lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                     **liger(lambda: lig.layer_norm(x, w, b, 1e-5)), **floor(s, x)}, bytes=2 * nbytes)
        yield Group("rms_norm", label, dtype,
                    {"cupy_kernels": fwd("rms_norm"),
                     "cupy_kernels rms_norm_ (in place)": lambda: ck.rms_norm_(sc, wc),
                     **({"ladder: unstaged (no next row in shared memory)":
                         tuned_row(N, fwd("rms_norm"), stage_fwd=False)} if n == 32768 else {}),
                     **long_rows(fwd("rms_norm")),
                     "torch F.rms_norm": lambda: F.rms_norm(x, (n,), w, 1e-6),
                     **liger(lambda: lig.rms_norm(x, w, 1e-6)),
                     "torch formulation x * rsqrt(mean(x^2) + eps) * w":
                         lambda: x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w,
                     **floor(s, x)},
                    bytes=2 * nbytes)
        _, mean, rstd = norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm")
        ln_out, ln_mean, ln_rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
        yc = to_cupy(ln_out)
        _, _, rstd_rms = norm_forward_impl(xc, wc, None, 1e-6, "rms_norm")
        layer_bwd = lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm")  # noqa: E731
        rms_bwd = lambda: norm_backward_impl(dyc, xc, wc, None, None, rstd_rms, "rms_norm")  # noqa: E731
        yield Group("layer_norm backward", label, dtype,
                    {"cupy_kernels": layer_bwd,
                     "cupy_kernels from output (after layer_norm_)":
                         lambda: norm_backward_impl(dyc, yc, wc, bc, None, rstd, "layer_norm", from_output=True),
                     **long_rows(layer_bwd),
                     **({"ladder: one row a CTA (norm_bwd_shared without warp rows: a partial row from every "
                         "small CTA)": tuned_row(N, layer_bwd, warps_from=1 << 40)} if half and n == 1024 else {}),
                     "ladder: column_sum launched plainly (not after_previous: a launch gap)":
                         tuned_row(N, layer_bwd, column_sum_after=False),
                     "ladder: dx only (no dweight / dbias partial rows, no column_sum)":
                         lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm", need_dw=False,
                                                    need_db=False),
                     "torch native_layer_norm_backward": lambda: torch.ops.aten.native_layer_norm_backward(
                         dy, x, [n], ln_mean, ln_rstd, w, b, [True, True, True]),
                     **floor(s, x, dy)},
                    bytes=3 * nbytes)
        xr = x.detach().requires_grad_(True)
        wr = w.detach().requires_grad_(True)
        rms_out = F.rms_norm(xr, (n,), wr, 1e-6)
        yield Group("rms_norm backward", label, dtype,
                    {"cupy_kernels": rms_bwd,
                     **long_rows(rms_bwd),
                     "torch F.rms_norm autograd": lambda: torch.autograd.grad(rms_out, (xr, wr), dy,
                                                                              retain_graph=True),
                     **floor(s, x, dy)},
                    bytes=3 * nbytes)
        del x, xc, s, sc, dy, dyc, rms_out, xr, wr, ln_out, yc
