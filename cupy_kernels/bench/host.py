"""Per-call wall time of eager calls on small inputs: what a Python loop pays for each op, host work
(Python, dispatch, allocation, launch) included - the number the device-time suites hide by design.

For each implementation: warm-up calls, then rounds of `calls` back-to-back calls with no
synchronisation between them and one synchronize after the last; time per call = the round's wall time
/ calls, the median over the rounds. Rounds go round-robin over an op's implementations so drift
(clocks, other load) hits all of them alike. `calls` adapts to the implementation's speed (200-1000) so a
row takes about TARGET_ROW_S.

Rows: {"suite": "host", "op", "impl": "ours-torch" | "ours-cupy" | "torch" | "cupy" | "liger",
"us_per_call", "shape", "dtype", "kind": "forward" | "autograd" | "module"} plus the spread (us_min,
us_max), calls, repeats, and "error" (us_per_call None) where the call raised."""
from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from . import liger, row_suite

DEVICE = "cuda"  # (the CPU tests point it at "cpu" for a dry run of every case with stand-in ops)
ROWS = (32, 1024)
ROWS_LABEL = "32x1024"
TIMEX_SHAPE = (1, 64, 64)  # B, C, T
MATMUL_SHAPE = (256, 64)  # a (m, n), w (n, n)
MIN_CALLS, MAX_CALLS = 200, 1000
TARGET_ROW_S = 0.2
IMPLS = ("ours-torch", "ours-cupy", "torch", "cupy", "liger")
KINDS = ("forward", "autograd", "module")
TORCH_OUT_OF_PLACE = "torch: the out-of-place op (torch has no in-place form)"


@dataclass
class Case:
    op: str
    shape: str
    kind: str  # one of KINDS
    impls: dict[str, Callable[[], object]]  # impl (one of IMPLS) -> zero-argument call
    dtype: str = "float32"
    no_grad: bool = False  # the calls run under torch.no_grad() (nn modules at inference)
    note: str = ""


@dataclass
class Family:
    """A builder of Cases over the shared small inputs; `op` and `kind` name its error row if building fails."""
    op: str
    kind: str
    build: Callable[["SmallInputs"], list[Case]]
    shape: str = ROWS_LABEL


def calls_for(seconds_per_call: float, repeats: int, target_s: float) -> int:
    """Calls per round so that `repeats` rounds take about target_s, within [MIN_CALLS, MAX_CALLS]."""
    return max(MIN_CALLS, min(MAX_CALLS, round(target_s / repeats / max(seconds_per_call, 1e-9))))


def measure(impls: dict, sync: Callable[[], object], repeats: int = 7, target_s: float = TARGET_ROW_S,
            warmup: int = 10, probe: int = 20) -> dict:
    """impl -> {"us_per_call", "us_min", "us_max", "calls", "repeats"} or the exception it raised."""
    results, plans = {}, {}
    for label, fn in impls.items():
        try:
            for _ in range(warmup):  # the first calls compile and load kernels: not what this measures
                fn()
            sync()
            t = time.perf_counter()
            for _ in range(probe):
                fn()
            sync()
            plans[label] = (fn, calls_for((time.perf_counter() - t) / probe, repeats, target_s), [])
        except Exception as e:
            results[label] = e
    for _ in range(repeats):
        for label, (fn, calls, samples) in list(plans.items()):
            try:
                sync()
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync()
                samples.append((time.perf_counter() - t) / calls)
            except Exception as e:
                results[label] = e
                del plans[label]
    for label, (_, calls, samples) in plans.items():
        results[label] = {"us_per_call": statistics.median(samples) * 1e6, "us_min": min(samples) * 1e6,
                          "us_max": max(samples) * 1e6, "calls": calls, "repeats": len(samples)}
    return {label: results[label] for label in impls}


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip()[:200]}"


def host_row(op: str, impl: str, result, shape: str, dtype: str, kind: str, note: str = "") -> dict:
    """One row of the host suite; `result` is measure()'s entry (a dict or an exception)."""
    row = {"suite": "host", "op": op, "impl": impl, "us_per_call": None, "shape": shape, "dtype": dtype,
           "kind": kind}
    if isinstance(result, BaseException):
        row["error"] = error_text(result)
    else:
        row.update(result)
    if note:
        row["note"] = note
    return row


# ---- inputs and peer formulations

class SmallInputs:
    """The small float32 inputs every case shares (torch tensors and zero-copy CuPy views)."""

    def __init__(self):
        import cupy
        import torch

        view = cupy.from_dlpack
        n = ROWS[1]
        self.x = torch.randn(*ROWS, device=DEVICE)
        self.w = torch.rand(n, device=DEVICE) + 0.5
        self.b = torch.randn(n, device=DEVICE)
        self.xc, self.wc, self.bc = view(self.x), view(self.w), view(self.b)
        self.g = torch.randn(*ROWS, device=DEVICE)  # incoming gradient of a row op
        B, C, T = TIMEX_SHAPE
        self.tw = torch.randn(C, T, device=DEVICE) / T ** 0.5
        self.tk = torch.randn(B, C, T, device=DEVICE)
        self.twc, self.tkc = view(self.tw), view(self.tk)
        self.tg = torch.randn(B, C, T, device=DEVICE)
        m, k = MATMUL_SHAPE
        # an orthogonal weight: a <- a @ w repeated thousands of times keeps |a| steady
        self.mw = torch.linalg.qr(torch.randn(k, k, dtype=torch.float64))[0].float().contiguous().to(DEVICE)
        self.ma = torch.randn(m, k, device=DEVICE)
        self.mwc = view(self.mw)

    def scratch(self, t):
        """A copy of t for in-place calls, and its CuPy view (the torch tensor stays alive beside it)."""
        import cupy

        c = t.clone()
        self._keep = getattr(self, "_keep", []) + [c]
        return c, cupy.from_dlpack(c)

    def leaf(self, t):
        return t.detach().clone().requires_grad_(True)


def cupy_softmax(a):
    import cupy

    e = cupy.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cupy_log_softmax(a):
    import cupy

    s = a - a.max(axis=-1, keepdims=True)
    return s - cupy.log(cupy.exp(s).sum(axis=-1, keepdims=True))


def cupy_layer_norm(a, w, b, eps=1e-5):
    import cupy

    d = a - a.mean(axis=-1, keepdims=True)
    return d / cupy.sqrt((d * d).mean(axis=-1, keepdims=True) + eps) * w + b


def cupy_rms_norm(a, w, eps=1e-6):
    import cupy

    return a / cupy.sqrt((a * a).mean(axis=-1, keepdims=True) + eps) * w


def torch_timex(w, k):
    """timex as torch's depthwise conv1d over the causally padded k (bench/timex.py's peer)."""
    import torch.nn.functional as F

    return F.conv1d(F.pad(k, (k.shape[-1] - 1, 0)), w.unsqueeze(1), groups=w.shape[0])


def _liger(impl):
    """{"liger": impl} where Liger imports, else {}: `impl(lig)` makes the call from Liger's functions."""
    lig = liger.functions()
    return {} if lig is None else {"liger": impl(lig)}


# ---- the cases

def _row_forward(s: SmallInputs) -> list[Case]:
    import cupy
    import torch
    import torch.nn.functional as F

    import cupy_kernels as ck

    x, xc, w, wc, b, bc = s.x, s.xc, s.w, s.wc, s.b, s.bc
    n = ROWS[1]
    return [
        Case("softmax", ROWS_LABEL, "forward", {
            "ours-torch": lambda: ck.softmax(x), "ours-cupy": lambda: ck.softmax(xc),
            "torch": lambda: torch.softmax(x, -1), "cupy": lambda: cupy_softmax(xc),
            **_liger(lambda lig: lambda: lig.softmax(x))}),
        Case("log_softmax", ROWS_LABEL, "forward", {
            "ours-torch": lambda: ck.log_softmax(x), "ours-cupy": lambda: ck.log_softmax(xc),
            "torch": lambda: torch.log_softmax(x, -1), "cupy": lambda: cupy_log_softmax(xc)}),
        Case("layer_norm", ROWS_LABEL, "forward", {
            "ours-torch": lambda: ck.layer_norm(x, w, b, 1e-5), "ours-cupy": lambda: ck.layer_norm(xc, wc, bc, 1e-5),
            "torch": lambda: F.layer_norm(x, (n,), w, b, 1e-5), "cupy": lambda: cupy_layer_norm(xc, wc, bc),
            **_liger(lambda lig: lambda: lig.layer_norm(x, w, b, 1e-5))}),
        Case("rms_norm", ROWS_LABEL, "forward", {
            "ours-torch": lambda: ck.rms_norm(x, w, 1e-6), "ours-cupy": lambda: ck.rms_norm(xc, wc, 1e-6),
            "torch": lambda: F.rms_norm(x, (n,), w, 1e-6), "cupy": lambda: cupy_rms_norm(xc, wc),
            **_liger(lambda lig: lambda: lig.rms_norm(x, w, 1e-6))}),
        *[Case(f"{op}(axis=-1)", ROWS_LABEL, "forward", {
            "ours-torch": lambda op=op: getattr(ck, op)(x, axis=-1),
            "ours-cupy": lambda op=op: getattr(ck, op)(xc, axis=-1),
            "torch": (lambda: x.amax(-1)) if op == "max" else (lambda op=op: getattr(x, op)(-1)),
            "cupy": lambda op=op: getattr(cupy, op)(xc, axis=-1)}) for op in ("sum", "mean", "max")],
    ]


def _other_forward(s: SmallInputs) -> list[Case]:
    import cupy
    import torch.nn.functional as F

    import cupy_kernels as ck

    x, xc = s.x, s.xc
    B, C, T = TIMEX_SHAPE
    m, k = MATMUL_SHAPE
    a, ac = s.scratch(s.ma)  # overwritten in place by ours
    pw = ((0, 0), (1, 1))
    return [
        Case("timex", f"B={B} C={C} T={T}", "forward", {
            "ours-torch": lambda: ck.timex(s.tw, s.tk), "ours-cupy": lambda: ck.timex(s.twc, s.tkc),
            "torch": lambda: torch_timex(s.tw, s.tk)}, note="torch: the conv1d formulation"),
        Case("square_matmul_", f"{m}x{k} @ {k}x{k}", "forward", {
            "ours-torch": lambda: ck.square_matmul_(a, s.mw), "ours-cupy": lambda: ck.square_matmul_(ac, s.mwc),
            "torch": lambda: s.ma @ s.mw, "cupy": lambda: ac @ s.mwc},
            note="torch and CuPy: a @ w out of place (no in-place product)"),
        *[Case(f"pad {mode}", f"{ROWS_LABEL} +1 (last axis)", "forward", {
            "ours-torch": lambda mode=mode: ck.pad(x, pw, mode=mode),
            "ours-cupy": lambda mode=mode: ck.pad(xc, pw, mode=mode),
            "torch": lambda mode=mode: F.pad(x, (1, 1), mode=mode),
            "cupy": lambda mode=mode: cupy.pad(xc, pw, mode=mode)}) for mode in ("constant", "reflect")],
    ]


def _inplace_forward(s: SmallInputs) -> list[Case]:
    import torch
    import torch.nn.functional as F

    import cupy_kernels as ck

    n = ROWS[1]
    cases = []
    for op, ours, peer in (
            ("softmax_", lambda t, w, b: ck.softmax_(t), lambda: torch.softmax(s.x, -1)),
            ("layer_norm_", lambda t, w, b: ck.layer_norm_(t, w, b, 1e-5), lambda: F.layer_norm(s.x, (n,), s.w, s.b, 1e-5)),
            ("rms_norm_", lambda t, w, b: ck.rms_norm_(t, w, 1e-6), lambda: F.rms_norm(s.x, (n,), s.w, 1e-6))):
        t, tc = s.scratch(s.x)
        cases.append(Case(f"{op} (in place)", ROWS_LABEL, "forward", {
            "ours-torch": lambda ours=ours, t=t: ours(t, s.w, s.b),
            "ours-cupy": lambda ours=ours, tc=tc: ours(tc, s.wc, s.bc),
            "torch": peer}, note=TORCH_OUT_OF_PLACE))
    return cases


def _autograd(s: SmallInputs) -> list[Case]:
    import torch
    import torch.nn.functional as F

    import cupy_kernels as ck

    def grad(f, inputs, g):
        return lambda: torch.autograd.grad(f(), inputs, g)

    n = ROWS[1]
    x, w, b = s.leaf(s.x), s.leaf(s.w), s.leaf(s.b)
    tw, tk = s.leaf(s.tw), s.leaf(s.tk)
    B, C, T = TIMEX_SHAPE
    g, gpad, gsum = s.g, torch.randn(ROWS[0], n + 2, device=DEVICE), torch.randn(ROWS[0], device=DEVICE)
    return [
        Case("softmax", ROWS_LABEL, "autograd", {
            "ours-torch": grad(lambda: ck.softmax(x), (x,), g), "torch": grad(lambda: torch.softmax(x, -1), (x,), g),
            **_liger(lambda lig: grad(lambda: lig.softmax(x), (x,), g))}),
        Case("log_softmax", ROWS_LABEL, "autograd", {
            "ours-torch": grad(lambda: ck.log_softmax(x), (x,), g),
            "torch": grad(lambda: torch.log_softmax(x, -1), (x,), g)}),
        Case("layer_norm", ROWS_LABEL, "autograd", {
            "ours-torch": grad(lambda: ck.layer_norm(x, w, b, 1e-5), (x, w, b), g),
            "torch": grad(lambda: F.layer_norm(x, (n,), w, b, 1e-5), (x, w, b), g),
            **_liger(lambda lig: grad(lambda: lig.layer_norm(x, w, b, 1e-5), (x, w, b), g))}),
        Case("rms_norm", ROWS_LABEL, "autograd", {
            "ours-torch": grad(lambda: ck.rms_norm(x, w, 1e-6), (x, w), g),
            "torch": grad(lambda: F.rms_norm(x, (n,), w, 1e-6), (x, w), g),
            **_liger(lambda lig: grad(lambda: lig.rms_norm(x, w, 1e-6), (x, w), g))}),
        Case("timex", f"B={B} C={C} T={T}", "autograd", {
            "ours-torch": grad(lambda: ck.timex(tw, tk), (tw, tk), s.tg),
            "torch": grad(lambda: torch_timex(tw, tk), (tw, tk), s.tg)}, note="torch: the conv1d formulation"),
        Case("pad constant", f"{ROWS_LABEL} +1 (last axis)", "autograd", {
            "ours-torch": grad(lambda: ck.pad(x, ((0, 0), (1, 1))), (x,), gpad),
            "torch": grad(lambda: F.pad(x, (1, 1)), (x,), gpad)}),
        Case("sum(axis=-1)", ROWS_LABEL, "autograd", {
            "ours-torch": grad(lambda: ck.sum(x, axis=-1), (x,), gsum),
            "torch": grad(lambda: x.sum(-1), (x,), gsum)}),
    ]


def _modules(s: SmallInputs) -> list[Case]:
    import torch

    import cupy_kernels.nn as cknn

    n = ROWS[1]
    m, k = MATMUL_SHAPE
    lm = liger.modules()
    ours_ln, torch_ln = cknn.LayerNorm(n, device=DEVICE), torch.nn.LayerNorm(n, device=DEVICE)
    ours_rms, torch_rms = cknn.RMSNorm(n, eps=1e-6, device=DEVICE), torch.nn.RMSNorm(n, eps=1e-6, device=DEVICE)
    ours_ln_, ours_rms_ = (cknn.LayerNorm(n, device=DEVICE, inplace=True),
                           cknn.RMSNorm(n, eps=1e-6, device=DEVICE, inplace=True))
    lig_ln = lig_rms = None
    if lm is not None:
        lig_ln = lm.LayerNorm(n, eps=1e-5, bias=True).to(DEVICE)
        lig_rms = lm.RMSNorm(n, eps=1e-6, in_place=False).to(DEVICE)  # (in place: dx over the shared dy)
    lin = cknn.InplaceLinear(k, device=DEVICE)
    torch_lin = torch.nn.Linear(k, k, device=DEVICE)
    with torch.no_grad():
        lin.weight.copy_(s.mw.T)  # x <- x @ weight.T: orthogonal, |x| steady
        lin.bias.zero_()
        torch_lin.weight.copy_(s.mw.T)
    t, _ = s.scratch(s.x)
    t2, _ = s.scratch(s.x)
    a, _ = s.scratch(s.ma)
    x = s.leaf(s.x)

    def grad(mod):
        params = tuple(p for p in mod.parameters())
        return lambda: torch.autograd.grad(mod(x), (x, *params), s.g)

    infer = "(no_grad)"
    return [
        Case(f"nn.LayerNorm {infer}", ROWS_LABEL, "module", {
            "ours-torch": lambda: ours_ln(s.x), "torch": lambda: torch_ln(s.x),
            **({"liger": lambda: lig_ln(s.x)} if lig_ln is not None else {})}, no_grad=True),
        Case(f"nn.LayerNorm(inplace=True) {infer}", ROWS_LABEL, "module", {
            "ours-torch": lambda: ours_ln_(t), "torch": lambda: torch_ln(s.x)}, no_grad=True,
            note=TORCH_OUT_OF_PLACE),
        Case(f"nn.RMSNorm {infer}", ROWS_LABEL, "module", {
            "ours-torch": lambda: ours_rms(s.x), "torch": lambda: torch_rms(s.x),
            **({"liger": lambda: lig_rms(s.x)} if lig_rms is not None else {})}, no_grad=True),
        Case(f"nn.RMSNorm(inplace=True) {infer}", ROWS_LABEL, "module", {
            "ours-torch": lambda: ours_rms_(t2), "torch": lambda: torch_rms(s.x)}, no_grad=True,
            note=TORCH_OUT_OF_PLACE),
        Case(f"nn.InplaceLinear {infer}", f"{m}x{k}", "module", {
            "ours-torch": lambda: lin(a), "torch": lambda: torch_lin(s.ma)}, no_grad=True,
            note="torch: nn.Linear, out of place"),
        Case("nn.LayerNorm forward+backward", ROWS_LABEL, "module", {
            "ours-torch": grad(ours_ln), "torch": grad(torch_ln),
            **({"liger": grad(lig_ln)} if lig_ln is not None else {})}),
        Case("nn.RMSNorm forward+backward", ROWS_LABEL, "module", {
            "ours-torch": grad(ours_rms), "torch": grad(torch_rms),
            **({"liger": grad(lig_rms)} if lig_rms is not None else {})}),
    ]


FAMILIES = [Family("row ops", "forward", _row_forward), Family("timex / square_matmul_ / pad", "forward", _other_forward),
            Family("in-place row ops", "forward", _inplace_forward), Family("autograd", "autograd", _autograd),
            Family("nn modules", "module", _modules)]


def warn_if_busy(suite: str) -> None:
    """Say so when other processes keep more than a quarter of the cores busy: host times then measure them too."""
    import os

    from .report import load_average

    load, cores = load_average(), os.cpu_count() or 1
    if load is not None and load > max(1.0, cores / 4):
        print(f"  {suite}: warning: the host's load average is {load} on {cores} cores; other processes inflate "
              f"these times", flush=True)


def run_cases(cases, sync, repeats, target_s, no_grad_context=None):
    """Measure each case; yield its rows (one per impl, in the case's order)."""
    for case in cases:
        gc.collect()
        ctx = no_grad_context() if case.no_grad and no_grad_context else contextlib.nullcontext()
        with ctx:
            results = measure(case.impls, sync, repeats, target_s)
        for impl, result in results.items():
            yield host_row(case.op, impl, result, case.shape, case.dtype, case.kind, case.note)


@row_suite("host")
def host_suite(quick: bool):
    import torch

    repeats, target_s = (5, TARGET_ROW_S / 2) if quick else (7, TARGET_ROW_S)
    warn_if_busy("host")
    inputs = SmallInputs()
    for family in FAMILIES:
        try:
            cases = family.build(inputs)
        except Exception as e:  # an op missing or renamed: one error row, the other families go on
            yield host_row(family.op, "ours-torch", e, family.shape, "float32", family.kind)
            continue
        yield from run_cases(cases, torch.cuda.synchronize, repeats, target_s, torch.no_grad)
