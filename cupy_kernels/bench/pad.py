"""pad: brick-wall tiling against a fill of the output and whole-tensor torch formulations;
constant / reflect / edge (and the other modes) on (32, 3, 1024, 1024) float32 against
torch.nn.functional.pad and cupy.pad; channels-last and uint8 images; the backward."""
from __future__ import annotations

from . import Group, suite

TILE = (48, 32)
BRICK_PADS = ((2048, 2048), (4096, 4096))
STAGGER = 10


def brick_torch_article_style(tile, coords, p0, p1, stagger, shift_x, shift_y, y):
    """The whole-tensor formulation of the original article (预处理加速干货:大幅加速数据预处理、轻松定制高性能ML算子,
    "data pre-processing speed-ups: custom high-performance ML operators"), adapted to this op's lattice: pixel
    coordinates -> lattice coordinates -> (band, brick) by floor -> tile pixel -> gather."""
    import torch

    th, tw = tile.shape
    arr = coords.clone()                                    # (H, W, 2): (row, col)
    arr[:, :, 0] -= p0
    arr[:, :, 1] -= p1
    arr1 = torch.flip(arr, (2,))                            # (x, y) = (col, row)
    v = torch.floor(arr1[:, :, 1] / th).to(torch.int)       # band
    u = torch.floor((arr1[:, :, 0] - v * stagger) / tw).to(torch.int)
    uu = torch.stack((u, u), dim=2)
    vv = torch.stack((v, v), dim=2)
    arr2 = arr1 - uu * shift_x - vv * shift_y               # position inside the tile, (col, row)
    table = torch.flip(arr2, (2,)).reshape(-1, 2).to(torch.float)
    inds = table.mv(y)                                      # row * tw + col
    return torch.index_select(tile.reshape(-1), 0, inds.to(torch.long)).view(coords.shape[:2])


def brick_torch_gather(tile, out_shape, p0, p1, stagger):
    """The direct whole-tensor formulation: row and column index vectors, one advanced-index gather."""
    import torch

    th, tw = tile.shape
    r = torch.arange(out_shape[0], device=tile.device) - p0
    band = torch.div(r, th, rounding_mode="floor")
    c = torch.arange(out_shape[1], device=tile.device) - p1
    cols = torch.remainder(c[None, :] - stagger * band[:, None], tw)
    return tile[(r - band * th)[:, None], cols]


def graphed(fn):
    """fn captured once in a CUDA graph (torch's capture): (replay, captured output), or (None, None).
    Replays show the device time of a call without its host time (the Python per call)."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay, out
    except Exception as e:  # report and go on without the row
        print(f"  pad: CUDA graph capture failed: {type(e).__name__}: {str(e)[:200]}")
        return None, None


@suite("pad")
def pad_suite(quick: bool):
    import cupy
    import torch
    import torch.nn.functional as F

    import cupy_kernels as ck
    from .._runtime import to_cupy
    from ..ops import pad as P
    from ..torch_ops import _pad_backward_op

    # ---- brick, the tile-padding case of the original preprocessing article: tile 48x32 fp32, pads 2048 rows / 4096 columns a side, stagger 10
    tile = torch.randn(*TILE, device="cuda")
    tc = to_cupy(tile)
    out_shape = (TILE[0] + 2 * BRICK_PADS[0][0], TILE[1] + 2 * BRICK_PADS[1][0])
    filled = torch.empty(out_shape, device="cuda")
    rows = torch.arange(out_shape[0], device="cuda", dtype=torch.int32)
    cols = torch.arange(out_shape[1], device="cuda", dtype=torch.int32)
    coords = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=2)  # made once, as the article does
    shift_x = torch.tensor([TILE[1], 0], device="cuda", dtype=torch.int32)
    shift_y = torch.tensor([STAGGER, TILE[0]], device="cuda", dtype=torch.int32)
    yvec = torch.tensor([float(TILE[1]), 1.0], device="cuda")
    p0, p1 = BRICK_PADS[0][0], BRICK_PADS[1][0]
    ours = ck.pad(tile, BRICK_PADS, mode="brick", stagger=STAGGER)
    spec = P.spec_for(tile, BRICK_PADS, "brick", stagger=STAGGER)
    for name, other in [(f"{rung} rung", P.pad_impl(tile, spec, rung=rung)) for rung in P.RUNGS] + [
            ("torch article-style", brick_torch_article_style(tile, coords, p0, p1, STAGGER, shift_x, shift_y, yvec)),
            ("torch gather", brick_torch_gather(tile, out_shape, p0, p1, STAGGER))]:
        if not torch.equal(ours, other):
            print(f"  pad brick: the {name} formulation disagrees with ours")
    del ours
    yield Group("pad brick", f"{TILE[0]}x{TILE[1]} -> {out_shape[0]}x{out_shape[1]}", "float32", {
        "cupy_kernels": lambda: ck.pad(tc, BRICK_PADS, mode="brick", stagger=STAGGER),
        "cupy_kernels (torch in)": lambda: ck.pad(tile, BRICK_PADS, mode="brick", stagger=STAGGER),
        "ladder flat (per-element path)": lambda: P.pad_impl(tc, spec, rung="flat"),
        "ladder rows (a warp per row)": lambda: P.pad_impl(tc, spec, rung="rows"),
        "torch fill_ (output size)": lambda: filled.fill_(1.0),
        "torch whole-tensor (the original article's)": lambda: brick_torch_article_style(tile, coords, p0, p1, STAGGER,
                                                                                       shift_x, shift_y, yvec),
        "torch whole-tensor (gather)": lambda: brick_torch_gather(tile, out_shape, p0, p1, STAGGER),
    }, bytes=filled.nbytes + tile.nbytes, note="bytes = output written (+ the 6 KB tile)")
    del filled, coords, rows, cols

    # ---- NCHW float32, pad 64 on H and W
    x = torch.randn(32, 3, 1024, 1024, device="cuda")
    xc = to_cupy(x)
    pw = ((0, 0), (0, 0), (64, 64), (64, 64))
    nbytes = x.nbytes + x.nbytes // (1024 * 1024) * 1152 * 1152
    torch_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
    for mode in ("constant", "reflect", "edge") + (() if quick else ("symmetric", "wrap")):
        impls = {"cupy_kernels": lambda mode=mode: ck.pad(xc, pw, mode=mode),
                 "cupy_kernels (torch in)": lambda mode=mode: ck.pad(x, pw, mode=mode)}
        spec = P.spec_for(x, pw, mode)
        if mode in ("reflect", "constant"):
            impls["ladder flat (per-element path)"] = lambda spec=spec: P.pad_impl(xc, spec, rung="flat")
        if mode in torch_mode:
            impls["torch F.pad"] = lambda mode=mode: F.pad(x, (64, 64, 64, 64), mode=torch_mode[mode])
        impls["cupy.pad"] = lambda mode=mode: cupy.pad(xc, pw, mode=mode)
        yield Group(f"pad {mode}", "32x3x1024x1024 +64 (H, W)", "float32", impls, bytes=nbytes,
                    note="bytes = input read + output written")
    gy = torch.randn(32, 3, 1152, 1152, device="cuda")
    if not quick:
        yield Group("pad reflect backward", "32x3x1152x1152 -> 32x3x1024x1024", "float32", {
            "cupy_kernels": lambda: _pad_backward_op(gy, [32, 3, 1024, 1024], [0, 0, 0, 0, 64, 64, 64, 64], "reflect", 0),
            "torch (reflection_pad2d_backward)": lambda: torch.ops.aten.reflection_pad2d_backward(gy, x, [64, 64, 64, 64]),
        }, bytes=gy.nbytes + x.nbytes, note="bytes = grad read + grad written")
    del gy

    # ---- channels-last float32 (N, H, W, C): the C axis rides inside the W rows
    xl = x.permute(0, 2, 3, 1).contiguous()          # (32, 1024, 1024, 3), C contiguous
    xlc = to_cupy(xl)
    x_cl = xl.permute(0, 3, 1, 2)                    # the same memory as an NCHW channels_last tensor
    pwl = ((0, 0), (64, 64), (64, 64), (0, 0))
    del x, xc
    for mode in ("constant", "reflect"):
        yield Group(f"pad {mode}", "32x1024x1024x3 (NHWC) +64 (H, W)", "float32", {
            "cupy_kernels": lambda mode=mode: ck.pad(xlc, pwl, mode=mode),
            "torch F.pad (channels_last)": lambda mode=mode: F.pad(x_cl, (64, 64, 64, 64), mode=mode),
            "cupy.pad": lambda mode=mode: cupy.pad(xlc, pwl, mode=mode),
        }, bytes=nbytes, note="bytes = input read + output written")
    del xl, xlc, x_cl

    # ---- uint8 images
    if not quick:
        xu = torch.randint(0, 256, (32, 3, 1024, 1024), device="cuda", dtype=torch.uint8)
        xuc = to_cupy(xu)
        for mode in ("constant", "reflect"):
            impls = {"cupy_kernels": lambda mode=mode: ck.pad(xuc, pw, mode=mode)}
            if mode == "constant":
                impls["torch F.pad"] = lambda: F.pad(xu, (64, 64, 64, 64))
            impls["cupy.pad"] = lambda mode=mode: cupy.pad(xuc, pw, mode=mode)
            yield Group(f"pad {mode}", "32x3x1024x1024 +64 (H, W)", "uint8", impls,
                        bytes=xu.nbytes + xu.nbytes // (1024 * 1024) * 1152 * 1152,
                        note="bytes = input read + output written")

    # ---- device time without host time: the torch-in calls captured in CUDA graphs (last, so a
    # failed capture cannot disturb the rows above)
    tile_g = torch.randn(*TILE, device="cuda")
    filled = torch.empty(out_shape, device="cuda")
    replay, out = graphed(lambda: ck.pad(tile_g, BRICK_PADS, mode="brick", stagger=STAGGER))
    if replay is not None:
        if not torch.equal(out, ck.pad(tile_g, BRICK_PADS, mode="brick", stagger=STAGGER)):
            print("  pad brick: graph replay output differs")
        spec = P.spec_for(tile_g, BRICK_PADS, "brick", stagger=STAGGER)
        impls = {"cupy_kernels (graph replay)": replay}
        for rung in ("flat", "rows"):
            rung_replay, _ = graphed(lambda rung=rung: P.pad_impl(tile_g, spec, rung=rung))
            if rung_replay is not None:
                impls[f"ladder {rung} (graph replay)"] = rung_replay
        impls["torch fill_ (output size)"] = lambda: filled.fill_(1.0)
        fill_g, _ = graphed(lambda: filled.fill_(2.0))
        if fill_g is not None:
            impls["torch fill_ (graph replay)"] = fill_g
        yield Group("pad brick (device time)", f"{TILE[0]}x{TILE[1]} -> {out_shape[0]}x{out_shape[1]}", "float32",
                    impls, bytes=filled.nbytes + tile_g.nbytes, note="CUDA graph replays")
    del filled
    x = torch.randn(32, 3, 1024, 1024, device="cuda")
    for mode in ("constant", "reflect", "edge"):
        replay, out = graphed(lambda mode=mode: ck.pad(x, pw, mode=mode))
        if replay is None:
            continue
        impls = {"cupy_kernels (graph replay)": replay}
        spec = P.spec_for(x, pw, mode)
        for rung in ("flat",) if mode != "edge" else ():
            rung_replay, _ = graphed(lambda spec=spec, rung=rung: P.pad_impl(x, spec, rung=rung))
            if rung_replay is not None:
                impls[f"ladder {rung} (graph replay)"] = rung_replay
        fpad, _ = graphed(lambda mode=mode: F.pad(x, (64, 64, 64, 64), mode=torch_mode[mode]))
        if fpad is not None:
            impls["torch F.pad (graph replay)"] = fpad
        yield Group(f"pad {mode} (device time)", "32x3x1024x1024 +64 (H, W)", "float32", impls, bytes=nbytes,
                    note="CUDA graph replays")
        del out
    if not quick:
        gy = torch.randn(32, 3, 1152, 1152, device="cuda")
        replay, _ = graphed(lambda: _pad_backward_op(gy, [32, 3, 1024, 1024], [0, 0, 0, 0, 64, 64, 64, 64], "reflect", 0))
        tb, _ = graphed(lambda: torch.ops.aten.reflection_pad2d_backward(gy, x, [64, 64, 64, 64]))
        if replay is not None:
            impls = {"cupy_kernels (graph replay)": replay}
            if tb is not None:
                impls["torch reflection_pad2d_backward (graph replay)"] = tb
            yield Group("pad reflect backward (device time)", "32x3x1152x1152 -> 32x3x1024x1024", "float32", impls,
                        bytes=gy.nbytes + x.nbytes, note="CUDA graph replays")
