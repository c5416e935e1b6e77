"""First call in a fresh process: what a user waits for before an op's first result, kernel compilation
included. For each op and dtype, a new Python process (`sys.executable -c ...`) with new, empty cache
directories (CuPy's, ours, Triton's and the CUDA driver's JIT cache) imports torch and cupy_kernels
and makes the input (not timed), then times the first call up to torch.cuda.synchronize(); a second
fresh process with the same, now warm, cache directories does the same. torch's own op (nothing to
compile) and, where it is installed, Liger-Kernel's layer_norm and softmax (Triton: compiled at first
call, cached in TRITON_CACHE_DIR) are timed the same way.

Rows: {"suite": "first_call", "op", "dtype", "impl": "ours" | "torch" | "liger", "cache": "empty" |
"warm", "seconds"} plus import_seconds (import torch + the library), setup_seconds (CUDA start-up and
the input), second_call_seconds, and "error" (seconds None) where the process failed.

Empty-cache compiles are CPU-bound: processes run one at a time unless CUPY_KERNELS_FIRST_CALL_JOBS
names more (chains of an empty then a warm process in parallel). CUPY_KERNELS_FIRST_CALL_TIMEOUT: the
seconds one process may take (default 300). Run only when named: `bench --op first_call`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import liger, row_suite
from .host import warn_if_busy

OPS = ("sum", "softmax", "log_softmax", "layer_norm", "rms_norm", "timex", "pad", "square_matmul_")
DTYPES = ("float32", "float16", "bfloat16")
LIGER_OPS = ("layer_norm", "softmax")
MARKER = "FIRST_CALL_RESULT "
CACHE_VARS = {"CUPY_CACHE_DIR": "cupy", "CUPY_KERNELS_CACHE_DIR": "cupy_kernels", "TRITON_CACHE_DIR": "triton",
              "CUDA_CACHE_PATH": "cuda_jit"}

_ROWS_SETUP = ("x = torch.randn(32, 1024, device='cuda').to(dt)\n"
               "w = (torch.rand(1024, device='cuda') + 0.5).to(dt)\n"
               "b = torch.randn(1024, device='cuda').to(dt)")
SETUP = {**{op: _ROWS_SETUP for op in ("sum", "softmax", "log_softmax", "layer_norm", "rms_norm", "pad")},
         "timex": "w = (torch.randn(64, 64, device='cuda') / 8).to(dt)\nk = torch.randn(1, 64, 64, device='cuda').to(dt)",
         "square_matmul_": ("a = torch.randn(256, 64, device='cuda').to(dt)\n"
                            "w = (torch.randn(64, 64, device='cuda') / 8).to(dt)")}
IMPORTS = {"ours": "import cupy_kernels as ck",
           "torch": "",
           "liger": "from liger_kernel.ops import LigerLayerNormFunction, LigerSoftmaxFunction"}
CALLS = {
    "ours": {"sum": "ck.sum(x, axis=-1)", "softmax": "ck.softmax(x)", "log_softmax": "ck.log_softmax(x)",
             "layer_norm": "ck.layer_norm(x, w, b, 1e-5)", "rms_norm": "ck.rms_norm(x, w, 1e-6)",
             "timex": "ck.timex(w, k)", "pad": "ck.pad(x, ((0, 0), (1, 1)))", "square_matmul_": "ck.square_matmul_(a, w)"},
    "torch": {"sum": "x.sum(-1)", "softmax": "torch.softmax(x, -1)", "log_softmax": "torch.log_softmax(x, -1)",
              "layer_norm": "F.layer_norm(x, (1024,), w, b, 1e-5)", "rms_norm": "F.rms_norm(x, (1024,), w, 1e-6)",
              "timex": "F.conv1d(F.pad(k, (63, 0)), w.unsqueeze(1), groups=64)", "pad": "F.pad(x, (1, 1))",
              "square_matmul_": "a @ w"},
    "liger": {"softmax": "LigerSoftmaxFunction.apply(x)", "layer_norm": "LigerLayerNormFunction.apply(x, w, b, 1e-5)"},
}

_TEMPLATE = """\
import json, time
t0 = time.perf_counter()
import torch
import torch.nn.functional as F
{imports}
t1 = time.perf_counter()
dt = getattr(torch, {dtype!r})
{setup}
torch.cuda.synchronize()
t2 = time.perf_counter()
result = {call}
torch.cuda.synchronize()
t3 = time.perf_counter()
result = {call}
torch.cuda.synchronize()
t4 = time.perf_counter()
print({marker!r} + json.dumps({{"import_seconds": t1 - t0, "setup_seconds": t2 - t1, "seconds": t3 - t2,
                               "second_call_seconds": t4 - t3}}))
"""


def script(op: str, dtype: str, impl: str = "ours") -> str:
    """The program a fresh process runs: imports, the input, the first call and a second, timed."""
    return _TEMPLATE.format(imports=IMPORTS[impl], dtype=dtype, setup=SETUP[op], call=CALLS[impl][op], marker=MARKER)


def package_root() -> str:
    """The directory holding this cupy_kernels package, so the child imports the same copy."""
    return str(Path(__file__).resolve().parent.parent.parent)


def fresh_env(cache_dir: str | Path) -> dict:
    """This process's environment with every kernel cache pointed into cache_dir."""
    env = dict(os.environ)
    env.pop("CUPY_CACHE_IN_MEMORY", None)  # a memory-only cache would make "warm" the same as "empty"
    for var, sub in CACHE_VARS.items():
        path = Path(cache_dir) / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    env["PYTHONPATH"] = os.pathsep.join([package_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_fresh(program: str, cache_dir: str | Path, timeout_s: float) -> dict:
    """Run `program` in a new interpreter with its caches in cache_dir: the dict it prints after MARKER,
    or {"error": ...}."""
    try:
        p = subprocess.run([sys.executable, "-c", program], env=fresh_env(cache_dir), capture_output=True,
                           text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = " | ".join((p.stderr or p.stdout or "").strip().splitlines()[-3:])
    return {"error": f"exit status {p.returncode}: {tail[-400:]}"}


def first_call_row(op: str, dtype: str, impl: str, cache: str, measured: dict) -> dict:
    row = {"suite": "first_call", "op": op, "dtype": dtype, "impl": impl, "cache": cache, "seconds": None}
    row.update(measured)
    return row


def chain(op: str, dtype: str, impl: str, caches, timeout_s: float) -> list[dict]:
    """One process per entry of `caches` ("empty", then "warm") sharing one new cache directory."""
    rows = []
    cache_dir = tempfile.mkdtemp(prefix="cupy-kernels-first-call-")
    try:
        program = script(op, dtype, impl)
        for cache in caches:
            if rows and rows[-1].get("error"):
                measured = {"error": "not run: the empty-cache process failed"}
            else:
                measured = run_fresh(program, cache_dir, timeout_s)
            rows.append(first_call_row(op, dtype, impl, cache, measured))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return rows


def plan(quick: bool, with_liger: bool) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(op, dtype, impl, caches) chains, in run order: per op and dtype ours, torch, then Liger."""
    chains = []
    for op in OPS:
        for dtype in DTYPES[:1] if quick else DTYPES:
            chains.append((op, dtype, "ours", ("empty", "warm")))
            chains.append((op, dtype, "torch", ("empty",)))  # nothing to cache: one process
            if with_liger and op in LIGER_OPS:
                chains.append((op, dtype, "liger", ("empty", "warm")))
    return chains


@row_suite("first_call", by_default=False)
def first_call_suite(quick: bool):
    jobs = max(1, int(os.environ.get("CUPY_KERNELS_FIRST_CALL_JOBS", "1")))
    timeout_s = float(os.environ.get("CUPY_KERNELS_FIRST_CALL_TIMEOUT", "300"))
    chains = plan(quick, liger.functions() is not None)  # (installed and importing)
    warn_if_busy("first_call")
    if jobs == 1:
        for c in chains:
            yield from chain(*c, timeout_s)
        return
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for rows in pool.map(lambda c: chain(*c, timeout_s), chains):
            yield from rows
