"""Device probe (issue 4): layer_norm / rms_norm forward and backward on the issue's shapes, ours vs
torch, in % of the copy bandwidth measured in the same process. With --base DIR (a cu_src tree, e.g.
an older commit's, exported with `git archive`), each of our rows is timed alternately with the kernels
built from DIR and from the working tree (A/B in one process: same clocks, same allocations)."""
import argparse
from pathlib import Path

import torch

from cupy_kernels._runtime import sources, to_cupy
from cupy_kernels.bench.softmax import SHAPES, tensors
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops import _rowwise as RW
from cupy_kernels.ops import norm as N
from cupy_kernels.ops import softmax as S

ap = argparse.ArgumentParser()
ap.add_argument("--base", help="cu_src directory of the baseline kernels")
ap.add_argument("--base-pkg", help="a whole older checkout (cupy_kernels/ and cu_src/, e.g. `git archive REV | tar -x "
                                   "-C DIR`), imported under another name: for changes to the host code as well")
ap.add_argument("--shapes", default="all", help="comma-separated indices into SHAPES")
ap.add_argument("--stage-ab", action="store_true", help="A/B the staged forwards and backwards (on: new, off: unstaged)")
ap.add_argument("--pipe-ab", action="store_true",
                help="also time the backward with norm_bwd_pipelined off (nopipe) and with the one-pack form on "
                     "every length (onepack)")
ap.add_argument("--shared-ab", action="store_true",
                help="also time the backward with norm_bwd_shared off (noshared), on every half-type length "
                     "(sharedall), in CTAs of up to 1024 threads (shared1024), and not for float32 (nosharedf32)")
ap.add_argument("--two-ahead-ab", action="store_true",
                help="also time softmax's forward with one-block rows staged one row ahead, not two (oneahead)")
ap.add_argument("--parts-threads", default="",
                help="comma-separated block sizes: also time the pipelined long rows (softmax_fwd_parts, ...) in blocks "
                     "of each (parts<T>)")
ap.add_argument("--parts-packs", default="",
                help="comma-separated pack counts (4, 8): also time softmax's pipelined long-row forward with each (packs<P>)")
ap.add_argument("--shared-stage", default="",
                help="comma-separated CTA sizes: also time norm_bwd_shared staging one-CTA rows from CTAs of that many "
                     "threads (sstage<T>; 0: every CTA staged)")
ap.add_argument("--switches", default="",
                help="comma-separated: also time the working tree with the pipelined launches' words zeroed by a memset "
                     "(memset), norm_fwd_parts' FULL instances off (nofull), softmax_fwd / norm_fwd's FULL rows off (nofullrows) or also for softmax's rows staged two ahead (full2), norm_bwd_shared's clusters of 8 unstaged "
                     "(cl8unstaged) or staged (cl8staged), the sub-warp backward (nostageshort) or forward (nostageshortfwd) rows unstaged, softmax_bwd's full 8192-element rows staged at any row count "
                     "(stagedfull), norm_bwd_ring off (noring), with S stages and a lag of L rows, clusters of C, P packs a "
                     "thread (ring[S_L][cl<C>][pk<P>]), CTAs of up to 512 packs (ring512), or norm_bwd's persistent sub-warp grids "
                     "in blocks of T threads (psub<T>)")
ap.add_argument("--extra-shapes", default="", help="comma-separated ROWSxN:dtype shapes besides --shapes")
ap.add_argument("--ops", default="layer fwd,rms fwd,layer bwd,rms bwd,softmax fwd,log_softmax fwd,softmax bwd,log_softmax bwd")
args = ap.parse_args()

timer = Timer()
copy = copy_bandwidth(timer)
print(f"copy {copy / 1e12:.2f} TB/s", flush=True)
tree = sources.cu_src_dir()


TWO_PACK_FROM = dict(N.TWO_PACK_FROM)
PARTS_PACKS = RW.PARTS_PACKS["softmax"]
PSUB = RW.PERSISTENT_SUBWARP_BLOCK
SOFTMAX_STAGE_BWD = S.STAGE_BWD
FULL_STEPS = S.STAGE_BWD_FULL_STEPS
SHARED = dict(getattr(N, "SHARED_BWD", {}))
RING = dict(getattr(N, "RING_BWD", {}))
SHARED_FROM, SHARED_F32, SHARED_THREADS, SHARED_DTYPES = (SHARED.get(k) for k in ("from", "from_float32", "threads",
                                                                                   "dtypes"))
BASE_TWO_PACK_FROM = {"layer_norm": 8193, "rms_norm": 8192}  # the forms' switch at c2e0204 (the usual base)
RING_CLUSTERS = getattr(N, "RING_CLUSTERS", ())


def ring_switch(v):
    """(form or None, clusters or None, packs or None) of a ring[S_L][cl<C>][pk<P>] switch, else None."""
    import re

    m = re.fullmatch(r"ring(?:(\d+)_(\d+))?(?:cl(\d+))?(?:pk(\d+))?", str(v))
    if not m or not any(m.groups()):
        return None
    return (tuple(map(int, m.groups()[:2])) if m.group(1) else None, int(m.group(3)) if m.group(3) else None,
            int(m.group(4)) if m.group(4) else None)


for v in args.switches.split(","):  # the switches' ring instances, compiled with the rest
    if (sw := ring_switch(v)) and "packs" in RING:
        N.SOURCE.declare([N._ring(t, m, f, c, sw[0] or RING["form"], p)
                          for t in RING["dtypes"] for m in N.MODES for f in (0, 1) for c in RING_CLUSTERS
                          for p in ((sw[2],) if sw[2] else N.RING_PACKS)])
ALL_NAMES = list(N.SOURCE.names)
if "full2" in args.switches.split(","):  # softmax's FULL instances of rows staged two ahead (not declared by default)
    S.SOURCE.declare([S._name("fwd", t, m, 2, group=RW.ROW_BLOCK, full=True) for t in RW.SHORT_DTYPES for m in S.MODES])
BASE_KERNELS = set()
if args.base:
    import re

    BASE_KERNELS = set(re.findall(r"__global__ void(?: __launch_bounds__\([^)]*\))? (\w+)\(",
                                  (Path(args.base) / "norm.cu").read_text()))


def use(cu_dir):
    """Point the norm kernels at the sources in cu_dir (compiled on first use); "unstaged": the working
    tree with the staged forwards and backwards switched off; "nopipe" / "onepack": see --pipe-ab."""
    N.STAGE_FWD["on"] = S.STAGE_FWD["on"] = N.STAGE_BWD["on"] = S.WIDE_BWD["on"] = cu_dir != "unstaged"
    S.STAGE_BWD = () if cu_dir == "unstaged" else SOFTMAX_STAGE_BWD  # softmax_bwd's staged block rows too
    S.STAGE_BWD_FULL_STEPS = 1 << 30 if cu_dir == "stagedfull" else FULL_STEPS  # full 8192 rows staged at any length
    if "two_ahead" in S.STAGE_FWD:
        S.STAGE_FWD["two_ahead"] = cu_dir != "oneahead"
    if hasattr(N, "PIPELINE_BWD"):
        N.PIPELINE_BWD["on"] = cu_dir not in ("nopipe", args.base)
    N.TWO_PACK_FROM.update({m: 1 << 40 for m in TWO_PACK_FROM} if cu_dir == "onepack" else
                           BASE_TWO_PACK_FROM if cu_dir == args.base else TWO_PACK_FROM)
    if hasattr(N, "SHARED_BWD"):
        N.SHARED_BWD["from"] = 0 if cu_dir == "sharedall" else 1 << 40 if cu_dir == "noshared" else SHARED_FROM
        N.SHARED_BWD["from_float32"] = 0 if cu_dir == "sharedall" else 1 << 40 if cu_dir == "noshared" else SHARED_F32
        N.SHARED_BWD["threads"] = 1024 if cu_dir == "shared1024" else SHARED_THREADS
        N.SHARED_BWD["dtypes"] = ("float16", "bfloat16") if cu_dir == "nosharedf32" else SHARED_DTYPES
        if "stage_threads" in SHARED:  # sstage<T>: norm_bwd_shared stages one-CTA rows from CTAs of T threads
            N.SHARED_BWD["stage_threads"] = int(cu_dir[6:]) if str(cu_dir).startswith("sstage") else SHARED["stage_threads"]
    from cupy_kernels.ops import _rowwise as rw

    if hasattr(rw, "ZERO_WORDS_AFTER"):
        rw.ZERO_WORDS_AFTER["on"] = cu_dir != "memset"
    if hasattr(N, "FULL_PARTS"):
        N.FULL_PARTS["on"] = cu_dir != "nofull"
    for M in (N, S):  # nostageshort / nostageshortfwd: the sub-warp backward / forward rows unstaged
        for key, off in (("STAGE_SHORT_BWD", "nostageshort"), ("STAGE_SHORT_FWD", "nostageshortfwd")):
            if hasattr(M, key):
                getattr(M, key)["on"] = cu_dir != off
    if hasattr(rw, "FULL_ROWS"):
        rw.FULL_ROWS["on"] = cu_dir != "nofullrows"
        rw.FULL_ROWS["two_ahead"] = cu_dir == "full2"  # softmax's rows staged two ahead in FULL instances too
    # psub<T>: the persistent sub-warp grids (norm_bwd's short rows, one partial row a block) in blocks of T threads
    rw.PERSISTENT_SUBWARP_BLOCK = int(cu_dir[4:]) if str(cu_dir).startswith("psub") else PSUB
    if "stage_cl8" in SHARED:  # cl8unstaged / cl8staged: norm_bwd_shared's clusters of 8 load rows straight into
        # registers / stage them (the default since 10b59e7 is unstaged; until session 16 every other variant staged)
        N.SHARED_BWD["stage_cl8"] = (False if cu_dir == "cl8unstaged" else True if cu_dir == "cl8staged"
                                     else SHARED["stage_cl8"])
    if hasattr(N, "RING_BWD"):  # noring: norm_bwd_ring off; ring512: CTAs of <= 512 packs; ring[S_L][cl<C>][pk<P>]:
        # S stages and a lag of L rows, clusters of C, P packs a thread (declared at the start)
        sw = ring_switch(cu_dir)
        form = sw[0] if sw and sw[0] else RING["form"]
        N.RING_BWD.update(on=cu_dir != "noring", form=form, max_slots=512 if cu_dir == "ring512" else RING["max_slots"])
        if "packs" in RING:
            N.RING_BWD["packs"] = sw[2] if sw and sw[2] else RING["packs"]  # None: the plan's choice
            N.RING_CLUSTERS = (sw[1],) if sw and sw[1] else RING_CLUSTERS
    t = int(cu_dir[5:]) if str(cu_dir).startswith("parts") else None
    rw.PARTS_THREADS.update(fwd=t, bwd=t)
    k = int(cu_dir[5:]) if str(cu_dir).startswith("packs") else None
    rw.PARTS_PACKS["softmax"] = k or PARTS_PACKS  # (norm_fwd_parts has one instance)
    if cu_dir in ("unstaged", "nopipe", "onepack", "sharedall", "shared1024", "noshared", "nosharedf32", "oneahead",
                  "memset", "nofull", "nostageshort", "nostageshortfwd", "nofullrows", "full2", "cl8unstaged", "cl8staged", "stagedfull", "noring", "ring512") \
            or t or k or str(cu_dir).startswith(("sstage", "psub", "ring")):
        cu_dir = tree
    sources.cu_src_dir = lambda: Path(cu_dir)
    sources.read_source.cache_clear()
    # a baseline tree declares only the kernels it has
    N.SOURCE.names[:] = [k for k in ALL_NAMES if cu_dir != args.base or k.split("<")[0] in BASE_KERNELS]
    for src in (N.SOURCE, S.SOURCE):
        src._modules.clear()
        src._kernels.clear()


MODS = {}  # variant -> (norm, softmax) host modules, when not this tree's
if args.base_pkg:
    import importlib.util
    import sys

    root = Path(args.base_pkg).resolve() / "cupy_kernels"
    spec = importlib.util.spec_from_file_location("ck_base", root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    ck_base = importlib.util.module_from_spec(spec)
    sys.modules["ck_base"] = ck_base
    spec.loader.exec_module(ck_base)
    import ck_base.ops.norm
    import ck_base.ops.softmax

    MODS["basepkg"] = (ck_base.ops.norm, ck_base.ops.softmax)

variants = ([("new", tree)] + ([("basepkg", tree)] if args.base_pkg else []) + ([("base", args.base)] if args.base else [])
            + ([("unstaged", "unstaged")] if args.stage_ab else [])
            + ([("nopipe", "nopipe"), ("onepack", "onepack")] if args.pipe_ab else [])
            + ([(v, v) for v in ("noshared", "sharedall", "shared1024", "nosharedf32")] if args.shared_ab else [])
            + ([("oneahead", "oneahead")] if args.two_ahead_ab else [])
            + [(f"parts{t}", f"parts{t}") for t in args.parts_threads.split(",") if t]
            + [(f"packs{k}", f"packs{k}") for k in args.parts_packs.split(",") if k]
            + [(f"sstage{t}", f"sstage{t}") for t in args.shared_stage.split(",") if t]
            + [(v, v) for v in args.switches.split(",") if v])
shapes = SHAPES if args.shapes == "all" else [SHAPES[int(i)] for i in args.shapes.split(",") if i]
shapes += [(tuple(map(int, s.split(":")[0].split("x"))), s.split(":")[1]) for s in args.extra_shapes.split(",") if s]
for shape, dtype in shapes:
    (x, xc), (dy, dyc) = tensors(shape, dtype, 2)
    n = shape[-1]
    nbytes = x.numel() * x.element_size()
    w = (torch.rand(n, device="cuda") + 0.5).to(x.dtype)
    b = torch.randn(n, device="cuda").to(x.dtype)
    wc, bc = to_cupy(w), to_cupy(b)
    _, mean, rstd = N.norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm")
    _, _, rstd_r = N.norm_forward_impl(xc, wc, None, 1e-6, "rms_norm")
    _, mean_t, rstd_t = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
    xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    rms_out = torch.nn.functional.rms_norm(xr, (n,), wr, 1e-6)
    y, ly = torch.softmax(x, -1), torch.log_softmax(x, -1)
    yc, lyc = to_cupy(y), to_cupy(ly)
    def ours_of(N, S):
        return {"layer fwd": (lambda: N.norm_forward_impl(xc, wc, bc, 1e-5, "layer_norm"), 2),
                "rms fwd": (lambda: N.norm_forward_impl(xc, wc, None, 1e-6, "rms_norm"), 2),
                "layer bwd": (lambda: N.norm_backward_impl(dyc, xc, wc, bc, mean, rstd, "layer_norm"), 3),
                "rms bwd": (lambda: N.norm_backward_impl(dyc, xc, wc, None, None, rstd_r, "rms_norm"), 3),
                "softmax fwd": (lambda: S.softmax_impl(xc, -1, "softmax"), 2),
                "log_softmax fwd": (lambda: S.softmax_impl(xc, -1, "log_softmax"), 2),
                "softmax bwd": (lambda: S.softmax_backward_impl(yc, dyc, -1, "softmax"), 3),
                "log_softmax bwd": (lambda: S.softmax_backward_impl(lyc, dyc, -1, "log_softmax"), 3),
                "copy": (lambda: xc.copy(), 2)}  # a copy of the same bytes: the size's own ceiling
    ours = ours_of(N, S)
    theirs = {"layer fwd": lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5),
              "rms fwd": lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6),
              "layer bwd": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean_t, rstd_t, w, b,
                                                                              [True, True, True]),
              "rms bwd": lambda: torch.autograd.grad(rms_out, (xr, wr), dy, retain_graph=True),
              "softmax fwd": lambda: torch.softmax(x, -1),
              "log_softmax fwd": lambda: torch.log_softmax(x, -1),
              "softmax bwd": lambda: torch._softmax_backward_data(dy, y, -1, y.dtype),
              "log_softmax bwd": lambda: torch._log_softmax_backward_data(dy, ly, -1, ly.dtype),
              "copy": lambda: x.clone()}
    label = f"{'x'.join(map(str, shape))} {dtype}"
    for op in args.ops.split(","):
        k = ours[op][1]
        res = {}
        for rep in range(2):
            for name, d in variants if rep == 0 else variants[::-1]:
                use(d)
                fn = (ours_of(*MODS[name]) if name in MODS else ours)[op][0]
                res.setdefault(name, []).append(timer(fn))
        use(tree)
        t_torch = timer(theirs[op])
        pct = lambda ms: 100 * k * nbytes / (ms * 1e-3) / copy
        line = "  ".join(f"{name} {min(v) * 1e3:7.1f} us {pct(min(v)):5.1f}%" for name, v in res.items())
        print(f"{label:22s} {op:9s} {line}  torch {t_torch * 1e3:7.1f} us {pct(t_torch):5.1f}%  "
              f"x torch {t_torch / min(res['new']):.2f}", flush=True)
    del x, xc, dy, dyc, xr, wr, rms_out, y, ly, yc, lyc
