"""`python -m cupy_kernels check | bench [--op NAME] [--quick] | warmup | info`"""
from __future__ import annotations

import argparse
import sys

ARCHS = ("sm_80", "sm_90")

# Spills we accept, with the most bytes allowed: (file, arch, kernel) -> bytes.
# - norm_bwd's two-pack half-type form (PACKS = 2) keeps dweight / dbias accumulators in local memory
#   (L1): measured faster than the spill-free one-pack form on the long rows the host gives it
#   (norm.TUNING.two_pack_from). Every other half-type row takes the spill-free form.
# - The others keep one value of the row loop in local memory: a store before the loop and one load per
#   row (~1% of the loop's instructions): norm_bwd<float, LAYER, *> on sm_80 only, the float32 run-time-group
#   softmax backward (softmax_bwd<float, 4, ANY_GROUP, PLAIN, *>, compiled per mode) 8 bytes (sm_90 under NVRTC
#   13.0, the GPU machine's; sm_80 since its rows loop by whole warps, measured 1-2% faster on sm_90), and the
#   wide half softmax backward (softmax_bwd<half type, 4, ANY_GROUP, STAGED>) 8-16 bytes on sm_90.
_NORM_HALF = ("half", "bfloat16")
_NORM_SOURCES = ("FROM_X", "FROM_Y")
KNOWN_SPILLS = {
    **{("norm_bwd.cu", a, f"norm_bwd<{t}, {m}, {f}, 2, ANY_GROUP, PLAIN>"): 832 if m == "LAYER" else 160
       for a in ARCHS for t in _NORM_HALF for m in ("LAYER", "RMS") for f in _NORM_SOURCES},
    **{("norm_bwd.cu", a, f"norm_bwd<{t}, LAYER, {f}, 2, ANY_GROUP, NO_DBIAS>"): 256  # the same without dbias sums
       for a in ARCHS for t in _NORM_HALF for f in _NORM_SOURCES},
    **{("norm_bwd.cu", "sm_80", f"norm_bwd<float, LAYER, {f}, 2, ANY_GROUP, PLAIN>"): 32 for f in _NORM_SOURCES},
    **{("softmax.cu", a, f"softmax_bwd<float, 4, ANY_GROUP, PLAIN, {m}>"): 8
       for a in ARCHS for m in ("SOFTMAX", "LOG_SOFTMAX")},
    **{("softmax.cu", "sm_90", f"softmax_bwd<{t}, 4, ANY_GROUP, STAGED>"): 16 for t in ("half", "bfloat16")},
    # norm_bwd_shared's FULL one-CTA layer rows: 4-12 bytes around the row's reduction, yet 32768x1024 f16 layer
    # bwd 65.9 -> 59.9 us against the run-time form (H200)
    **{("norm_bwd_cluster.cu", a, f"norm_bwd_shared<{t}, LAYER, {f}, 1, {st}FULL_PACKS>"): 24
       for a in ARCHS for t in _NORM_HALF for f in _NORM_SOURCES for st in ("", "STAGED | ")},
    # shifted rows: the half layer backward from the output (the in-place layer_norm_'s; bench equal to from x at
    # 167772x100, 5% slower at 16760x1001), float16's staged block rows (8-52 bytes; bfloat16's spill-free form:
    # 4095x4097 bwd 108 -> 93 us staged), the run-time-group half layer forward
    **{("norm_bwd.cu", a, f"norm_bwd<{t}, LAYER, FROM_Y, 1, {g}, SHIFTED>"): 200
       for a in ARCHS for t in _NORM_HALF for g in ("ANY_GROUP", 2, 4, 8, 16, 32)},
    **{("norm_bwd.cu", a, f"norm_bwd<{t}, LAYER, FROM_Y, 1, ANY_GROUP, STAGED | SHIFTED>"): 200
       for a in ARCHS for t in _NORM_HALF},
    **{("norm_bwd.cu", a, f"norm_bwd<half, {m}, {f}, 1, ANY_GROUP, STAGED | SHIFTED>"): 64
       for a in ARCHS for m in ("LAYER", "RMS") for f in _NORM_SOURCES if (m, f) != ("LAYER", "FROM_Y")},
    **{("norm_fwd.cu", a, f"norm_fwd<{t}, LAYER, ANY_GROUP, SHIFTED>"): 16 for a in ARCHS for t in _NORM_HALF},
    # At its 128-register bound ptxas (NVRTC 13.5) gave this one 127 registers and no spill in 7 of 8 compiles, and
    # 128 registers and 92 bytes once (in a pool worker that had compiled other programs first; check now gives each
    # program a fresh process): accepted so the check cannot flip on it; the spilling form is not timed on a GPU.
    ("timex.cu", "sm_90", "timex_tiled<float, TiledTile<8, 8, 4>, Product::grad_k, Loads::vec4>"): 96,
}


def gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def load_ops():
    """Import every ops module, so each declares its kernels."""
    import importlib
    import pkgutil

    from . import ops
    from ._runtime import KernelSource

    for m in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{m.name}")
    return KernelSource.registry


def check(archs=ARCHS, jobs: int | None = None, cache: bool = True) -> int:
    """Compile every declared kernel offline (NVRTC, no GPU; every core, reports cached on disk); print registers
    and spills per file and arch; 1 on any failure (a compile error, or a spill beyond KNOWN_SPILLS)."""
    from ._runtime import all_sources
    from ._runtime.offline import compile_all, nvrtc_library
    from ._runtime.sources import cuda_include_origin

    registry = load_ops()
    failures = []
    undeclared = [s for s in all_sources() if s not in registry]
    if undeclared:
        failures.append(f"cu_src files no ops module declares: {undeclared}")
    failures += [f"{name} declares no kernels" for name, s in sorted(registry.items()) if not s.names]
    include, origin = cuda_include_origin()
    version, library = nvrtc_library()
    print(f"NVRTC {version} ({library or 'found by cuda.bindings'}); CUDA headers: {include} ({origin})")
    sys.stdout.flush()  # before the progress on stderr
    results = compile_all([registry[n] for n in sorted(registry)], archs, jobs=jobs, cache=cache)
    width = max([len("source")] + [len(n) for n in registry])
    print(f"{'source':<{width}}  {'arch':<6}  {'instances':>9}  {'max regs':>8}  {'spill B accepted':>16}  "
          f"{'spill B new':>11}  {'max stack B':>11}  {'max smem B':>10}")
    for name in sorted(registry):
        for arch in archs:
            r = results[name, arch]
            if r.errors:
                failures += r.errors
                print(f"{name:<{width}}  {r.target:<6}  FAILED")
                continue
            if not r.reports:
                continue
            allowed = {k.kernel: KNOWN_SPILLS.get((name, arch, k.kernel), 0) for k in r.reports}
            new = [k for k in r.reports if k.spill_bytes > allowed[k.kernel]]
            accepted = sum(k.spill_bytes for k in r.reports if k.spill_bytes <= allowed[k.kernel])
            print(f"{name:<{width}}  {r.target:<6}  {len(r.reports):>9}  {max(k.registers for k in r.reports):>8}  "
                  f"{accepted:>16}  {sum(k.spill_bytes for k in new):>11}  "
                  f"{max(k.stack_bytes for k in r.reports):>11}  {max(k.shared_bytes for k in r.reports):>10}")
            failures += [f"{name} {arch} {k.kernel}: {k.spill_bytes} bytes spilled"
                         + (f" (KNOWN_SPILLS allows {allowed[k.kernel]})" if allowed[k.kernel] else "") for k in new]
    print(f"{sum(len(s.names) for s in registry.values())} kernel instances compiled for {', '.join(archs)}")
    print("spill B accepted: spills of the kernels listed in KNOWN_SPILLS (cupy_kernels/__main__.py), each with "
          "the reason it is kept; spill B new: any other spill, which fails the check")
    sys.stdout.flush()
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print("offline compile check:", "FAILED" if failures else "ok")
    return 1 if failures else 0


def info() -> int:
    import platform

    from ._runtime import cu_src_dir, cuda_include_dir

    print("python", platform.python_version())
    for mod in ("numpy", "cupy", "torch", "cuda.core"):
        try:
            m = __import__(mod, fromlist=["_"])
            print(mod, getattr(m, "__version__", "?"))
        except Exception as e:
            print(mod, "unavailable:", type(e).__name__)
    print("cu_src", cu_src_dir())
    print("CUDA include", cuda_include_dir())
    n = gpu_count()
    print("GPUs", n)
    if n:
        from ._runtime import properties

        for i in range(n):
            print(" ", properties(i))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cupy_kernels")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="compile every kernel offline for sm_80 and sm_90 (no GPU needed)")
    c.add_argument("-j", "--jobs", type=int, help="compiler processes (default: one per core)")
    c.add_argument("--no-cache", action="store_true", help="compile everything again, reading no cached reports")
    b = sub.add_parser("bench", help="benchmark the ops against torch and CuPy; writes benchmarks/")
    b.add_argument("--op", action="append", help="suite name (repeatable); default: all")
    b.add_argument("--quick", action="store_true", help="fewer shapes")
    b.add_argument("--out", default="benchmarks", help="directory for <device>.json/.md/.png ('' to skip)")
    sub.add_parser("info", help="versions, paths and devices")
    w = sub.add_parser("warmup", help="compile kernel instances into the disk cache ahead of time, on every core "
                                      "(optional: each compiles when a call first needs it)")
    w.add_argument("--source", action="append", help="cu_src file (repeatable); default: all")
    w.add_argument("--arch", help="architecture, e.g. 90 (default: the current GPU's)")
    w.add_argument("-j", "--jobs", type=int, help="compiler processes (default: one per core)")
    w.add_argument("--clear", action="store_true", help="empty the kernel cache first")
    args = parser.parse_args(argv)
    if args.cmd == "warmup":
        from ._runtime.warmup import warmup

        n = warmup(args.source, args.arch, args.jobs, args.clear)
        print(f"warmup: {n} instances in the cache")
        return 0
    if args.cmd == "check":
        return check(jobs=args.jobs, cache=not args.no_cache)
    if args.cmd == "info":
        return info()
    if gpu_count() == 0:
        print("No CUDA device here: nothing to benchmark. Running the offline compile check instead.")
        return check()
    from .bench.report import run

    run(args.op, args.quick, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
