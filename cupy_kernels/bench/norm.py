"""layer_norm / rms_norm forward and backward (and the in-place forms) vs torch (and Liger-Kernel's
forward where it is installed), on the issue's shapes and rows that are not whole 16-byte packs
(ODD_SHAPES: shifted rows, against the element path).
Bytes: forward reads x and writes y once; backward reads x (or y) and dy and writes dx once
(weight, bias, dweight, dbias and the row statistics are under 0.1% and not counted)."""
from __future__ import annotations

from . import Group, suite, switched
from .softmax import SHAPES, floor, tensors

ODD_SHAPES = [((167772, 100), "bfloat16"), ((16760, 1001), "bfloat16"), ((508400, 33), "float32")]


@suite("norm")
def norm_suite(quick: bool):
    import torch
    import torch.nn.functional as F

    import cupy_kernels as ck
    from .._runtime import to_cupy
    from ..ops import norm as N
    from ..ops.norm import norm_backward_impl, norm_forward_impl
    from .liger import functions as liger_functions

    lig = liger_functions()  # None where Liger-Kernel is not installed
    liger = (lambda f: {} if lig is None else {"liger (Triton)": f})  # noqa: E731

    def half_forms(fn):
        """Ladder rows of the half-type backward: norm_bwd_shared's CTA sizes, and the register forms it
        replaced (norm.TWO_PACK_FROM picks one of those by length)."""
        registers = lambda f: switched(N.SHARED_BWD, {"on": False}, f)  # noqa: E731
        if dtype not in ("float16", "bfloat16"):
            return ({"ladder: column sums in registers (norm_bwd, two packs, 512-thread blocks)": registers(fn)}
                    if dtype == "float32" and n >= N.SHARED_BWD["from_float32"] else {})
        one_pack = registers(switched(N.TWO_PACK_FROM, {m: 1 << 40 for m in N.TWO_PACK_FROM}, fn))
        return {**({"ladder: one row a CTA (norm_bwd_shared without warp rows: a partial row from every small CTA)":
                    switched(N.SHARED_BWD, {"warps_from": 1 << 40}, fn)} if n <= 128 * 8 else {}),
                **({"ladder: column sums in shared memory, CTAs of up to 1024 threads (one or two a row)":
                    switched(N.SHARED_BWD, {"threads": 1024}, fn)} if n > 8192 else {}),
                **({"ladder: clusters of 4 CTAs of 512 threads (not 8 of 256)":
                    switched(N.SHARED_BWD, {"cl8_threads": 0}, fn)} if n > 16384 else {}),
                "ladder: column sums in registers, one pack per thread (1024-thread blocks, staged where alone "
                "on an SM)": one_pack,
                "ladder: column sums in registers, two packs per thread (512-thread blocks, spills accumulators)":
                    registers(switched(N.TWO_PACK_FROM, {m: 0 for m in N.TWO_PACK_FROM}, fn)),
                **({"ladder: one pack per thread, unstaged": switched(N.STAGE_BWD, {"on": False}, one_pack),
                    "ladder: one pack per thread, staged, one row in flight (not pipelined)":
                        switched(N.PIPELINE_BWD, {"on": False}, one_pack)}
                   if n >= 8192 else {})}

    for shape, dtype in SHAPES[:3] if quick else SHAPES + ODD_SHAPES:
        (x, xc), (s, sc), (dy, dyc) = tensors(shape, dtype, 3)
        n = shape[-1]
        odd = n * x.element_size() % 16 != 0
        forms = (lambda f: {"ladder: scalar loads": f}) if odd else half_forms  # noqa: E731  (odd: the element path)
        label = "x".join(map(str, shape))
        nbytes = x.numel() * x.element_size()
        w = (torch.rand(n, device="cuda") + 0.5).to(x.dtype)
        b = torch.randn(n, device="cuda").to(x.dtype)
        wc, bc = to_cupy(w), to_cupy(b)
        yield Group("layer_norm", label, dtype,
                    {"cupy_kernels": lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm"),
                     "cupy_kernels layer_norm_ (in place)": lambda: ck.layer_norm_(sc, wc, bc),
                     "ladder: one block per row": lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm",
                                                                            variant="block"),
                     "ladder: scalar loads": lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm",
                                                                       variant="scalar"),
                     **({"ladder: long rows, one launch (exchange)":
                         lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm", variant="exchange"),
                         "ladder: long rows, two launches (split)":
                         lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm", variant="split"),
                         "ladder: long rows, one launch, counter exchange":
                         lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm", variant="counter")}
                        if n >= 32768 else {}),
                     **({"ladder: unstaged (no next row in shared memory)": switched(
                         N.STAGE_FWD, {"on": False}, lambda: norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm"))}
                        if n == 32768 else {}),  # one block a row (longer rows: the pipelined kernels)
                     "torch F.layer_norm": lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                     **liger(lambda: lig.layer_norm(x, w, b, 1e-5)), **floor(s, x)}, bytes=2 * nbytes)
        yield Group("rms_norm", label, dtype,
                    {"cupy_kernels": lambda: norm_forward_impl(xc, wc, None, 1e-6, "rms_norm"),
                     "cupy_kernels rms_norm_ (in place)": lambda: ck.rms_norm_(sc, wc),
                     **({"ladder: unstaged (no next row in shared memory)": switched(
                         N.STAGE_FWD, {"on": False}, lambda: norm_forward_impl(xc, wc, None, 1e-6, "rms_norm"))}
                        if n == 32768 else {}),
                     **({"ladder: long rows, one launch (exchange)":
                         lambda: norm_forward_impl(xc, wc, None, 1e-6, "rms_norm", variant="exchange")}
                        if n > 32768 else {}),
                     **({"ladder: scalar loads": lambda: norm_forward_impl(xc, wc, None, 1e-6, "rms_norm",
                                                                           variant="scalar")} if odd else {}),
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
        yield Group("layer_norm backward", label, dtype,
                    {"cupy_kernels": lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm"),
                     "cupy_kernels from output (after layer_norm_)":
                         lambda: norm_backward_impl(dyc, yc, wc, bc, None, rstd, "layer_norm", from_output=True),
                     **({"ladder: long rows, one launch (exchange)":
                         lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm", variant="exchange"),
                         "ladder: long rows, two launches (split)":
                         lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm", variant="split"),
                         "ladder: long rows, one launch, counter exchange":
                         lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm", variant="counter")}
                        if n >= 8192 else {}),
                     **forms(lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm",
                                                       variant="scalar" if odd else "auto")),
                     **({"ladder: two packs, dbias summed in the kernel (not by reduce.cu)": switched(
                         N.SHARED_BWD, {"on": False}, switched(
                             N.DB_BY_REDUCE, {"on": False},
                             lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm")))}
                        if n > 8192 and dtype in ("float16", "bfloat16") else {}),
                     "ladder: column_sum launched plainly (not after_previous: a launch gap)": switched(
                         N.COLUMN_SUM_AFTER, {"on": False},
                         lambda: norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm")),
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
                    {"cupy_kernels": lambda: norm_backward_impl(dyc, xc, wc, None, None, rstd_rms, "rms_norm"),
                     **forms(lambda: norm_backward_impl(dyc, xc, wc, None, None, rstd_rms, "rms_norm",
                                                       variant="scalar" if odd else "auto")),
                     **({"ladder: long rows, one launch (exchange)": lambda: norm_backward_impl(
                         dyc, xc, wc, None, None, rstd_rms, "rms_norm", variant="exchange")} if n > 32768 else {}),
                     "torch F.rms_norm autograd": lambda: torch.autograd.grad(rms_out, (xr, wr), dy,
                                                                              retain_graph=True),
                     **floor(s, x, dy)},
                    bytes=3 * nbytes)
        del x, xc, s, sc, dy, dyc, rms_out, xr, wr, ln_out, yc
