"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over one run of every kernel family, reaching every
dispatch path: reductions (full, rows, columns, middle axes, the ladder's rungs), softmax and norm rows of every
kind (small rows, tiled, sub-warp groups, shifted, block rows, staged, pipelined long rows, exchange / split /
counter rows, the norm backward's warp rows, one-CTA rows, clusters and ring), timex (every forward and backward
variant), pad (every mode, every kernel path, every element size, the separable fallback, the backward) and
square_matmul_ (SIMT, mma, wgmma / TMA variants, transposed, unaligned, linear_ with a bias).

    python scripts/sanitize.py --workload softmax [--small]     # one family's workload, in this process
    python scripts/sanitize.py [--jobs 8]                       # every tool x every workload under the sanitizer
    python scripts/sanitize.py --tool memcheck --tool racecheck --only norm,pad --out benchmarks/sanitize-H100.md

Calls on the same device and commit add their cells to the same table (a long sweep can be split over calls);
--fresh starts a new one.

The driver runs `compute-sanitizer --tool T --error-exitcode 1 python scripts/sanitize.py --workload W` for each
(tool, workload) (racecheck with --small: fewer rows, the same row lengths and paths), reads the "ERROR SUMMARY: N
errors" line, and writes a markdown table (and a JSON file beside it) with the device, the commit (git rev-parse
--short HEAD) and the error count of each cell; full logs go to --logs. A workload step that raises (not a sanitizer
finding: an exception) is listed too, and the workload exits with 3. Non-default paths are reached with the
`variant=` / `rung=` arguments of the ops' host functions; a step whose function or variant is gone is skipped and
named."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
TOOL_ARGS = {"memcheck": ["--leak-check", "no"], "racecheck": ["--racecheck-report", "hazard"], "synccheck": [],
             "initcheck": []}
SMALL_TOOLS = ("racecheck",)


class Skip(Exception):
    pass


# ---- helpers for the workloads --------------------------------------------------------------------------


def impl(module: str, name: str):
    """cupy_kernels.ops.<module>.<name>, or Skip when it is gone (the ops' internals change)."""
    try:
        mod = importlib.import_module(f"cupy_kernels.ops.{module}")
    except ImportError as e:
        raise Skip(f"cupy_kernels.ops.{module}: {e}") from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise Skip(f"cupy_kernels.ops.{module}.{name} is gone")
    return fn


def variants(module: str, attr: str, fallback):
    try:
        return tuple(getattr(importlib.import_module(f"cupy_kernels.ops.{module}"), attr))
    except (ImportError, AttributeError):
        return tuple(fallback)


SLACK = 16  # elements written after every array: a kernel's aligned 16-byte pack reads past a row's end (by design,
            # values unused) then read initialised memory, and initcheck reports only real uninitialised reads


def arr(shape, dtype="float32", offset=0, scale=1.0, shift=0.0, positive=False):
    """A CuPy array of normal values (bfloat16 through ml_dtypes), `offset` elements into a fresh buffer that holds
    SLACK initialised elements after it."""
    import cupy

    from cupy_kernels._runtime import numpy_dtype

    size = int(np.prod(shape))
    rng = np.random.default_rng(size)
    v = rng.standard_normal(size + offset + SLACK) * scale + shift
    if positive:
        v = np.abs(v) + 0.5
    if dtype.startswith(("int", "uint")) or dtype == "bool":
        v = (v * 10).astype(np.int64) % 100 if dtype != "bool" else v > 0
    buf = cupy.asarray(v.astype(numpy_dtype(dtype) if dtype not in ("bool",) and not dtype.startswith(("int", "uint"))
                                else dtype))
    return buf[offset:offset + size].reshape(shape)


def copy(a):
    """A copy of C-contiguous `a` in a buffer like arr's (initialised slack after it): an in-place step's target."""
    out = arr(a.shape, a.dtype.name)
    out.data.copy_from_device(a.data, a.nbytes)  # a byte copy (any dtype); a is C-contiguous
    return out


class Steps:
    """Runs labelled steps, recording skips and exceptions (a failing step does not stop the workload)."""

    def __init__(self):
        self.ran, self.skipped, self.failed = 0, [], []

    def __call__(self, label, fn, *args, **kw):
        try:
            fn(*args, **kw)
            self.ran += 1
        except Skip as e:
            self.skipped.append((label, str(e)))
        except Exception as e:  # noqa: BLE001 (recorded and reported, the next step still runs)
            self.failed.append((label, f"{type(e).__name__}: {e}"))
            traceback.print_exc()


WORKLOADS = {}


def workload(fn):
    WORKLOADS[fn.__name__] = fn
    return fn


FLOATS = ("float32", "float16", "bfloat16", "float64")


# ---- the workloads ----------------------------------------------------------------------------------------


@workload
def reduce(step: Steps, small: bool):
    import cupy_kernels as ck

    rows = 67 if small else 300
    for dtype in ("float32", "bfloat16", "float16", "float64", "int32", "int64"):
        step(f"sum full {dtype}", ck.sum, arr((1 << 20) + 3, dtype))  # one row cut in chunks: the arrival counter
        step(f"sum rows {dtype}", ck.sum, arr((rows, 1000), dtype), axis=1)
        step(f"max short rows {dtype}", ck.max, arr((rows * 8, 7), dtype), axis=1)
        step(f"min columns {dtype}", ck.min, arr((1000, rows), dtype), axis=0)  # split columns + combine
        step(f"sum middle axis {dtype}", ck.sum, arr((4, 500, 33), dtype), axis=1)
        step(f"sum non-adjacent axes {dtype}", ck.sum, arr((6, 50, 7), dtype), axis=(0, 2))
        step(f"max unaligned {dtype}", ck.max, arr((rows, 1001), dtype, offset=1), axis=1)
        if not dtype.startswith("int"):
            step(f"mean columns {dtype}", ck.mean, arr((3000, 40), dtype), axis=0)
    for rung in variants("reduce", "LADDER", ("interleaved", "no_divergence", "sequential", "first_add",
                                              "unroll_warp", "vectorized")):
        step(f"sum_ladder {rung}", ck.sum_ladder, arr(100003, "float32"), rung=rung)


SOFTMAX_LENGTHS = {  # row length -> the path it takes by default (float32 / half; see docs/softmax.md)
    1: "small rows", 2: "small rows", 4: "small rows (half)", 3: "tiled", 33: "tiled", 100: "tiled", 64: "sub-warp",
    128: "sub-warp G 8 (staged float32)", 1001: "shifted", 4096: "block", 16384: "one 1024-thread block, staged",
    32768: "half: one 1024-thread block staged two ahead", 70000: "pipelined parts", 70001: "multi-block, unaligned",
}


@workload
def softmax(step: Steps, small: bool):
    import cupy_kernels as ck

    for dtype in FLOATS:
        for n in SOFTMAX_LENGTHS:
            rows = 3 if n >= 16384 else (9 if small else 67)
            x, dy = arr((rows, n), dtype, scale=3.0), arr((rows, n), dtype)
            for op in ("softmax", "log_softmax"):
                step(f"{op} and backward {dtype} n={n}",
                     lambda op=op, x=x, dy=dy: getattr(ck, f"{op}_backward")(copy(getattr(ck, op)(x)), dy))
            step(f"softmax_ {dtype} n={n}", ck.softmax_, copy(x))
            step(f"softmax {dtype} n={n} unaligned", ck.softmax, arr((rows, n), dtype, offset=1))
            step(f"softmax axis 0 {dtype} n={n}", ck.softmax, arr((min(n, 300), 5), dtype), axis=0)
    fwd, bwd = impl("softmax", "softmax_impl"), impl("softmax", "softmax_backward_impl")
    for variant in variants("softmax", "VARIANTS", ("auto", "block", "scalar", "split", "exchange", "counter")):
        for dtype in ("float32", "bfloat16", "float64"):
            for n in (33, 1000, 20000):
                x = arr((5, n), dtype, scale=3.0)
                for mode in ("softmax", "log_softmax"):
                    step(f"{mode} variant={variant} {dtype} n={n}", fwd, x, -1, mode, variant=variant)
                    step(f"{mode} backward variant={variant} {dtype} n={n}", bwd, x, x, -1, mode, variant=variant)


NORM_FWD_LENGTHS = (1, 3, 33, 100, 64, 128, 512, 1001, 4096, 16384, 32768, 70000, 70001)
# backward lengths and what they reach on sm_90 (bfloat16 / float32): warp rows, one-CTA rows, clusters, ring
NORM_BWD_CASES = (("float32", 128), ("float32", 384), ("float32", 1001), ("float32", 4096), ("float32", 8196),
                  ("float32", 16384), ("float32", 65536), ("float32", 70001), ("bfloat16", 100), ("bfloat16", 1001),
                  ("bfloat16", 1024), ("bfloat16", 768), ("bfloat16", 8192), ("bfloat16", 8200), ("bfloat16", 16384),
                  ("bfloat16", 32768), ("bfloat16", 65536), ("float16", 32768), ("float16", 4097),
                  ("float64", 1000), ("float64", 20000))


@workload
def norm(step: Steps, small: bool):
    import cupy_kernels as ck

    for mode in ("layer_norm", "rms_norm"):
        bias = mode == "layer_norm"
        for dtype in FLOATS:
            for n in NORM_FWD_LENGTHS:
                rows = 3 if n >= 16384 else (9 if small else 67)
                x, w, b = arr((rows, n), dtype, scale=2.0), arr(n, dtype, positive=True), arr(n, dtype)
                args = (w, b) if bias else (w,)
                step(f"{mode} {dtype} n={n}", getattr(ck, mode), x, *args)
                step(f"{mode}_ {dtype} n={n}", getattr(ck, mode + "_"), copy(x), *args)
                step(f"{mode} {dtype} n={n} unaligned", getattr(ck, mode), arr((rows, n), dtype, offset=1), *args)
        for dtype, n in NORM_BWD_CASES:
            rows = 3 if n >= 16384 else (9 if small else 300)
            x, dy = arr((rows, n), dtype, scale=2.0), arr((rows, n), dtype)
            w, b = arr(n, dtype, positive=True), arr(n, dtype)
            label = f"{mode} backward {dtype} n={n}"
            xu, dyu = arr((rows, n), dtype, offset=1), arr((rows, n), dtype, offset=1)
            if bias:
                step(label, lambda: ck.layer_norm_backward(dy, x, w, b, *ck.layer_norm_forward(x, w, b)[1:]))
                step(label + " no affine", lambda: ck.layer_norm_backward(dy, x, None, None,
                                                                          *ck.layer_norm_forward(x)[1:]))

                def from_output():
                    y2, _, rstd2 = ck.layer_norm_forward(copy(x), w, b, inplace=True)
                    ck.layer_norm_backward(dy, y2, w, b, None, rstd2, from_output=True)
                step(label + " from the output", from_output)
                step(label + " unaligned", lambda: ck.layer_norm_backward(dyu, xu, w, b,
                                                                          *ck.layer_norm_forward(xu, w, b)[1:]))
            else:
                step(label, lambda: ck.rms_norm_backward(dy, x, w, ck.rms_norm_forward(x, w)[1]))

                def from_output():
                    y2, rstd2 = ck.rms_norm_forward(copy(x), w, inplace=True)
                    ck.rms_norm_backward(dy, y2, w, rstd2, from_output=True)
                step(label + " from the output", from_output)
                step(label + " unaligned", lambda: ck.rms_norm_backward(dyu, xu, w, ck.rms_norm_forward(xu, w)[1]))


@workload
def timex(step: Steps, small: bool):
    import cupy_kernels as ck

    B, C, T = (8, 2, 256) if small else (16, 3, 256)
    for variant in variants("timex", "VARIANTS", ("auto", "tiled", "naive")):
        dtypes = FLOATS if variant in ("auto", "tiled", "naive") else \
            ("float32", "float16", "bfloat16") if variant.startswith("tiled_") else \
            ("float16", "bfloat16") if variant == "mma16" else ("float32",)
        for dtype in dtypes:
            w, k = arr((C, T), dtype, scale=0.06), arr((B, C, T), dtype)
            step(f"timex variant={variant} {dtype}", ck.timex, w, k, 0.5, variant=variant)
    for variant in variants("timex", "BACKWARD_VARIANTS", ("auto", "tiled", "naive", "tf32x3")):
        for dtype in {"tf32x3": ("float32",), "mma16": ("float16", "bfloat16")}.get(variant, FLOATS):
            w, k, g = arr((C, T), dtype, scale=0.06), arr((B, C, T), dtype), arr((B, C, T), dtype)
            step(f"timex_backward variant={variant} {dtype}", ck.timex_backward, w, k, g, variant=variant)
    for T2 in (1, 7, 130, 1025):  # odd lengths, past a tile
        w, k, g = arr((C, T2), "float32"), arr((3, C, T2), "float32", offset=1), arr((3, C, T2), "float32")
        step(f"timex unaligned T={T2}", ck.timex, w, k)
        step(f"timex_backward unaligned T={T2}", ck.timex_backward, w, k, g)
    wide = arr((C, T + 64), "float32")[:, -T:]  # a row-strided view of a longer filter
    step("timex strided w", ck.timex, wide, arr((B, C, T), "float32"))
    step("timex auto tf32x3 shape", ck.timex, arr((C, 512), "float32"), arr((16, C, 512), "float32"))
    # long T, small B: tf32x3 folded (time block, b) rows, a partial last block, dynamic shared totals
    w, k, g = arr((C, 2100), "float32"), arr((3, C, 2100), "float32", offset=1), arr((3, C, 2100), "float32")
    step("timex folded tf32x3 T=2100", ck.timex, w, k)
    step("timex_backward folded tf32x3 T=2100", ck.timex_backward, w, k, g)


PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "brick")


@workload
def pad(step: Steps, small: bool):
    import cupy_kernels as ck

    rows = 16 if small else 64
    cases = (((rows, 7), ((1, 2), (3, 4))),           # narrow rows: the flat path
             ((rows, 1000), ((2, 1), (5, 3))),        # wide rows: the rows path (brick, wrap: periodic)
             ((3, 5, 130), ((0, 0), (2, 1), (7, 9))),
             ((2,) * 8, ((1, 0),) * 8))               # more padded axes than the kernel takes: separable
    for dtype in ("int8", "float16", "float32", "float64", "bool", "complex64"):
        for shape, pads in cases:
            for mode in PAD_MODES:
                kw = {"stagger": 3} if mode == "brick" else {}
                step(f"pad {mode} {dtype} {shape}", ck.pad, arr(shape, dtype), pads, mode=mode, **kw)
                step(f"pad {mode} {dtype} {shape} unaligned", ck.pad, arr(shape, dtype, offset=1), pads, mode=mode, **kw)
    pad_impl, spec_for = impl("pad", "pad_impl"), impl("pad", "spec_for")
    for rung in variants("pad", "RUNGS", ("flat", "tiled", "staged", "rows", "default")):
        for mode in PAD_MODES:
            x = arr((rows, 1000), "float32")
            kw = {"stagger": 5} if mode == "brick" else {}
            step(f"pad rung={rung} {mode}", lambda x=x, mode=mode, kw=kw, rung=rung:
                 pad_impl(x, spec_for(x, ((2, 3), (4, 5)), mode, **kw), rung=rung))
    try:
        import torch
    except ImportError:
        step.skipped.append(("pad backward", "torch is not installed"))
        return
    for dtype in ("float32", "bfloat16", "float64"):
        for mode in PAD_MODES:
            kw = {"stagger": 3} if mode == "brick" else {}

            def backward(dtype=dtype, mode=mode, kw=kw):
                x = torch.randn(3, 40, 130, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
                y = ck.pad(x, ((1, 1), (2, 3), (4, 5)), mode=mode, **kw)
                y.backward(torch.randn_like(y))
            step(f"pad backward {mode} {dtype}", backward)


@workload
def square_matmul(step: Steps, small: bool):
    import cupy_kernels as ck

    m = 300
    for dtype in ("float32", "float16", "bfloat16"):
        for n in (256, 264, 255, 1024):
            w = arr((n, n), dtype, scale=n ** -0.5)
            for transpose in (False, True):
                step(f"square_matmul_ {dtype} n={n} transpose={transpose}", ck.square_matmul_, arr((m, n), dtype), w,
                     transpose=transpose)
            step(f"square_matmul_ {dtype} n={n} w.T view", ck.square_matmul_, arr((m, n), dtype), w.T)
            step(f"square_matmul_ {dtype} n={n} unaligned a", ck.square_matmul_, arr((m, n), dtype, offset=1), w)
            step(f"linear_ {dtype} n={n}", ck.linear_, arr((3, 100, n), dtype), w, arr(n, dtype))
    import cupy

    sq = impl("square_matmul", "square_matmul_impl")
    hopper = variants("square_matmul", "HOPPER", ("tma_cluster", "tma", "tma_direct", "wgmma"))
    cc = int(cupy.cuda.Device().compute_capability)

    def product(*args, variant, **kw):
        if variant in hopper and cc != 90:
            raise Skip(f"variant {variant} runs on compute capability 9.0 only (this device: {cc})")
        sq(*args, variant=variant, **kw)

    for variant in variants("square_matmul", "VARIANTS", ("auto", "tma_cluster", "tma", "wgmma", "mma256",
                                                          "warp_per_row")):
        for dtype in ("float16", "bfloat16"):
            for n in (256, 1024):
                w, b = arr((n, n), dtype, scale=n ** -0.5), arr(n, dtype)
                step(f"square_matmul_ variant={variant} {dtype} n={n}", product, arr((m, n), dtype), w, False, None,
                     variant=variant)
                step(f"square_matmul_ variant={variant} {dtype} n={n} transposed", product, arr((m, n), dtype), w,
                     True, None, variant=variant)
                if variant != "warp_per_row":
                    step(f"linear_ variant={variant} {dtype} n={n}", product, arr((m, n), dtype), w, True, b,
                         variant=variant, op="linear_")
    step("square_matmul_ variant=warp_per_row float32", sq, arr((m, 256), "float32"),
         arr((256, 256), "float32", scale=1 / 16), False, None, variant="warp_per_row")


def run_workload(name: str, small: bool) -> int:
    import cupy

    step = Steps()
    start = time.monotonic()
    WORKLOADS[name](step, small)
    cupy.cuda.Device().synchronize()
    print(f"WORKLOAD {name}: {step.ran} steps ran, {len(step.skipped)} skipped, {len(step.failed)} raised "
          f"({time.monotonic() - start:.1f} s)")
    for label, why in step.skipped:
        print(f"SKIPPED {label}: {why}")
    for label, why in step.failed:
        print(f"RAISED {label}: {why}")
    return 3 if step.failed else 0


# ---- the driver ---------------------------------------------------------------------------------------------


def device_name() -> str:
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        return (name.decode() if isinstance(name, bytes) else name).replace(" ", "_")
    except Exception:  # noqa: BLE001
        return "unknown-device"


def commit() -> str:
    """git rev-parse --short HEAD, or CUPY_KERNELS_COMMIT when set (a copy of the tree without its history)."""
    if os.environ.get("CUPY_KERNELS_COMMIT"):
        return os.environ["CUPY_KERNELS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


# memcheck, synccheck, initcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: H hazards displayed (N errors,"
KERNEL = re.compile(r"^=+ +(?:Uninitialized|Invalid|Race|Barrier|Error|Warning).*\n=+ +at (?:void )?([\w:]+(?:<.*?>)?)\(", re.M)
SUMMARY = re.compile(r"(?:ERROR SUMMARY:\s+|hazards displayed \()(\d+)\s+error")


def run_one(sanitizer, tool, name, logs, timeout):
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "1", "--print-limit", "1000", *TOOL_ARGS[tool],
           sys.executable, os.path.abspath(__file__), "--workload", name]
    if tool in SMALL_TOOLS:
        cmd.append("--small")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    secs = time.monotonic() - start
    log = os.path.join(logs, f"{tool}-{name}.log")
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n\n" + out)
    found = SUMMARY.findall(out)
    raised = [ln for ln in out.splitlines() if ln.startswith("RAISED ")]
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED ")]
    finished = any(ln.startswith(f"WORKLOAD {name}:") for ln in out.splitlines())
    kernels: dict = {}  # the kernel of each printed error (the first --print-limit of them)
    for k in KERNEL.findall(out):
        kernels[k] = kernels.get(k, 0) + 1
    return {"tool": tool, "workload": name, "rc": rc, "errors": int(found[-1]) if found else None,
            "finished": finished, "seconds": round(secs, 1), "raised": raised, "skipped": skipped, "log": log,
            "kernels": kernels}


def cell(r) -> str:
    if r is None:
        return "-"
    if r["rc"] is None:
        return f"timeout ({r['seconds']:.0f} s)"
    if r["errors"] is None:
        return f"no summary (rc {r['rc']})"
    text = str(r["errors"])
    if not r.get("finished", True):
        text += f" (workload crashed, rc {r['rc']})"
    if r["raised"]:
        text += f" (+{len(r['raised'])} raised)"
    return text


def write_report(results, out, device, rev, tools, names):
    by = {(r["tool"], r["workload"]): r for r in results}
    lines = [f"# compute-sanitizer: {device}, {rev}", "",
             "`python scripts/sanitize.py`: compute-sanitizer errors per tool and workload (\"+N raised\": workload "
             "steps that raised an exception; \"crashed\": the workload stopped before its end; \"skipped\": steps "
             "whose host function or variant is gone).", "",
             "| workload | " + " | ".join(tools) + " |", "|---|" + "---:|" * len(tools)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(cell(by.get((t, name))) for t in tools) + " |")
    found = [r for r in results if r.get("kernels")]
    if found:
        lines += ["", "## Kernels of the printed errors", ""]
        lines += [f"- {r['tool']} / {r['workload']}: " + ", ".join(f"`{k.strip()}` {n}" for k, n in
                                                               sorted(r["kernels"].items(), key=lambda kv: -kv[1]))
                  for r in found]
    notes = [(r, ln) for r in results for ln in r["raised"] + r["skipped"][:5]]
    if notes:
        lines += ["", "## Steps that raised or were skipped", ""]
        lines += [f"- {r['tool']} / {r['workload']}: {ln}" for r, ln in notes]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"device": device, "commit": rev, "results": results}, f, indent=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=sorted(WORKLOADS), help="run this workload here (what the sanitizer runs)")
    p.add_argument("--small", action="store_true", help="fewer rows (racecheck)")
    p.add_argument("--tool", action="append", choices=TOOLS, help="sanitizer tools (default: all four)")
    p.add_argument("--only", help="comma-separated workloads (default: all)")
    p.add_argument("--out", help="markdown summary (default benchmarks/sanitize-<device>.md; JSON beside it)")
    p.add_argument("--logs", default=os.path.join("/tmp", "ck-sanitize-logs"), help="full logs, one per run")
    p.add_argument("--sanitizer", default=None, help="compute-sanitizer executable")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per (tool, workload)")
    p.add_argument("--jobs", type=int, default=1, help="(tool, workload) cells under the sanitizer at once")
    p.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                   help="run each workload once without the sanitizer first (compiles its kernels)")
    p.add_argument("--fresh", action="store_true",
                   help="start a new table (default: keep the cells of earlier calls on this device and commit)")
    args = p.parse_args(argv)
    if args.workload:
        return run_workload(args.workload, args.small)

    sanitizer = args.sanitizer or shutil.which("compute-sanitizer") or next(
        (c for c in ("/usr/local/cuda/bin/compute-sanitizer", "/opt/nvidia/compute-sanitizer/compute-sanitizer")
         if os.path.exists(c)), None)
    if sanitizer is None:
        print("compute-sanitizer not found (give --sanitizer PATH)", file=sys.stderr)
        return 2
    tools = tuple(args.tool or TOOLS)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        print(f"unknown workloads {unknown}; have {sorted(WORKLOADS)}", file=sys.stderr)
        return 2
    device, rev = device_name(), commit()
    out = args.out or os.path.join(ROOT, "benchmarks", f"sanitize-{device}.md")
    os.makedirs(args.logs, exist_ok=True)
    planned = {(t, n) for t in tools for n in names}
    kept = []  # the cells of earlier calls on this device and commit (a long sweep split over several calls)
    previous = os.path.splitext(out)[0] + ".json"
    if not args.fresh and os.path.exists(previous):
        with open(previous) as f:
            old = json.load(f)
        if old.get("device") == device and old.get("commit") == rev:
            kept = [r for r in old["results"] if (r["tool"], r["workload"]) not in planned]
    if args.warm:  # compile every kernel the workloads use once, outside the sanitizer (CuPy's disk cache)
        for name in names:
            start = time.monotonic()
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--workload", name], cwd=ROOT,
                               capture_output=True, text=True, timeout=args.timeout)
            print(f"warm-up  {name:14s} rc {p.returncode} {time.monotonic() - start:7.1f} s", flush=True)
    results = []

    def done(r):  # a partial table survives a sweep cut short
        results.append(r)
        print(f"{r['tool']:10s} {r['workload']:14s} {cell(r):24s} {r['seconds']:7.1f} s  {r['log']}", flush=True)
        every = kept + results
        write_report(every, out, device, rev, [t for t in TOOLS if any(x["tool"] == t for x in every)],
                     [n for n in WORKLOADS if any(x["workload"] == n for x in every)])

    cells = [(tool, name) for tool in tools for name in names]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:  # each cell is its own process
        for future in as_completed([pool.submit(run_one, sanitizer, t, n, args.logs, args.timeout) for t, n in cells]):
            done(future.result())
    print(f"wrote {out}")
    bad = [r for r in results if r["rc"] is None or r["errors"] is None or r["errors"] or r["raised"]
           or not r["finished"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
