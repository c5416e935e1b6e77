"""Tuning as data: each op keeps its thresholds and choices in one frozen dataclass instance, `TUNING`, and
its launch plans in a `PlanCache`. `tuned(module, field=value, ...)` overrides a table for tests and probes
(the plans made under it are dropped on entry and exit)."""
from __future__ import annotations

import contextlib
import dataclasses
import threading


class PlanCache(dict):
    """An op's launch plans by key. Every cache is registered so that a tuning change empties them all."""

    all: list["PlanCache"] = []
    LIMIT = 4096  # distinct shapes kept per op; past it the cache starts over (a plan is cheap to rebuild)

    def __init__(self):
        super().__init__()
        PlanCache.all.append(self)

    def put(self, key, value):
        if len(self) >= self.LIMIT:
            self.clear()
        self[key] = value
        return value

    def build(self, key, device: int, planner, *args):
        """planner(*args) with `device`'s context current (planning loads kernels and asks the driver about
        them), stored under `key`."""
        from .device import on_context

        with on_context(device):
            return self.put(key, planner(*args))


def clear_plans() -> None:
    for cache in PlanCache.all:
        cache.clear()


_lock = threading.RLock()


@contextlib.contextmanager
def tuned(module, **changes):
    """Run the block with module.TUNING's fields replaced (dataclasses.replace): a probe's or a test's override,
    not thread-safe against concurrent calls of the op."""
    with _lock:
        saved = module.TUNING
        module.TUNING = dataclasses.replace(saved, **changes)
        clear_plans()
        try:
            yield module.TUNING
        finally:
            module.TUNING = saved
            clear_plans()
