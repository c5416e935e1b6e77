"""Benchmark harness: a registry of suites (one module per op family), event timing, reports.

A suite is a generator of `Group`s: one problem (op, shape, dtype, bytes that must move, FLOPs) and
the implementations timed on it - ours first, then its ladder variants and the peers (torch's own
op, CuPy's own op, the plain torch formulation), timed on the device by the harness (timing.py).
A row suite (`row_suite`) measures something else itself - wall time per eager call (host.py), the
first call of a fresh process (first_call.py) - and yields finished rows (dicts)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

SUITES: dict[str, Callable[[bool], Iterator["Group"]]] = {}
ROW_SUITES: set[str] = set()  # suites that yield finished rows (dicts), not Groups
EXPLICIT_ONLY: set[str] = set()  # suites run only when named (`--op NAME`), not by a plain `bench`
HARNESS_MODULES = ("timing", "report", "tables", "liger")  # modules of this package that register no suite


@dataclass
class Group:
    op: str
    shape: str
    dtype: str
    impls: dict[str, Callable[[], object]]  # label -> zero-argument call; the first is ours
    bytes: int = 0  # bytes that must be read once + written once
    flops: int = 0
    note: str = ""
    ours: str = field(default="")

    def __post_init__(self):
        self.ours = self.ours or next(iter(self.impls))


def switched(module, changes: dict, fn: Callable[[], object]) -> Callable[[], object]:
    """fn run with module.TUNING's fields changed (a ladder row of an otherwise automatic choice)."""
    from .._runtime.tuning import tuned

    def run():
        with tuned(module, **changes):
            return fn()
    return run


def suite(name: str):
    """Decorator registering a suite: fn(quick: bool) -> iterator of Group."""
    def deco(fn):
        SUITES[name] = fn
        return fn
    return deco


def row_suite(name: str, by_default: bool = True):
    """Decorator registering a row suite: fn(quick: bool) -> iterator of row dicts, each with at least
    "suite" and "op". by_default=False: run only when named."""
    def deco(fn):
        SUITES[name] = fn
        ROW_SUITES.add(name)
        if not by_default:
            EXPLICIT_ONLY.add(name)
        return fn
    return deco


def load_suites() -> dict:
    """Import every module of this package except the harness's own; each registers its suites."""
    import pkgutil

    for m in pkgutil.iter_modules(__path__):
        if m.name not in HARNESS_MODULES:
            try:
                importlib.import_module(f"{__name__}.{m.name}")
            except Exception as e:  # one broken suite must not hide the others
                print(f"warning: benchmark module {m.name} failed to import: {type(e).__name__}: {e}")
    return SUITES
