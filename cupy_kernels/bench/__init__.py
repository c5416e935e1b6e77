"""Benchmark harness: a registry of suites (one module per op family), event timing, reports.

A suite is a generator of `Group`s: one problem (op, shape, dtype, bytes that must move, FLOPs) and
the implementations timed on it - ours first, then its ladder variants and the peers (torch's own
op, CuPy's own op, the plain torch formulation)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

SUITES: dict[str, Callable[[bool], Iterator["Group"]]] = {}


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


def switched(flags: dict, updates: dict, fn: Callable[[], object]) -> Callable[[], object]:
    """fn run with a module's switch dict updated (a ladder row of an otherwise automatic choice)."""
    def run():
        saved = dict(flags)
        flags.update(updates)
        try:
            return fn()
        finally:
            flags.update(saved)
    return run


def suite(name: str):
    """Decorator registering a suite: fn(quick: bool) -> iterator of Group."""
    def deco(fn):
        SUITES[name] = fn
        return fn
    return deco


def load_suites() -> dict:
    """Import every module of this package except the harness's own; each registers its suites."""
    import pkgutil

    for m in pkgutil.iter_modules(__path__):
        if m.name not in ("timing", "report"):
            try:
                importlib.import_module(f"{__name__}.{m.name}")
            except Exception as e:  # one broken suite must not hide the others
                print(f"warning: benchmark module {m.name} failed to import: {type(e).__name__}: {e}")
    return SUITES
