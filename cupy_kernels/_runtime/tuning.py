"""Tuning as data: each op keeps its thresholds and choices in one frozen dataclass instance, `TUNING`, and
its launch plans in a `PlanCache`. `tuned(module, field=value, ...)` overrides a table for tests, probes and
benchmark ladder rows; the plans of the default table and of each override never mix."""
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
_overridden: dict = {}  # (module, changes) -> the plans made under that override, for its next entry


@contextlib.contextmanager
def tuned(module, **changes):
    """Run the block with module.TUNING's fields replaced (dataclasses.replace): a probe's, a benchmark ladder row's
    or a test's override, not thread-safe against concurrent calls of the op. Plans made under it are kept for the
    next entry of the same override, apart from the default's."""
    with _lock:
        saved = module.TUNING
        key = (module.__name__, tuple(sorted(changes.items())))
        default_plans = [dict(c) for c in PlanCache.all]
        module.TUNING = dataclasses.replace(saved, **changes)
        for cache, plans in zip(PlanCache.all, _overridden.get(key) or [{}] * len(PlanCache.all)):
            cache.clear()
            cache.update(plans)
        try:
            yield module.TUNING
        finally:
            _overridden[key] = [dict(c) for c in PlanCache.all]
            module.TUNING = saved
            for cache, plans in zip(PlanCache.all, default_plans):
                cache.clear()
                cache.update(plans)
