"""Device-event timing with an L2 flush before every repetition: no cache hits, and the flush keeps
the GPU busy while the host enqueues the timed call, so host overhead stays out of small timings.
The flush READS a 512 MB buffer: a write flush (triton's do_bench zeroes one) leaves up to an L2 of dirty
lines whose write-back lands inside the next timed call (scripts/flush_ab.py measures the effect)."""
from __future__ import annotations

import statistics


class Timer:
    def __init__(self, flush_bytes: int = 512 << 20):
        import cupy

        self.cupy = cupy
        self.flush = cupy.ones(flush_bytes // 4, dtype=cupy.float32)
        self.flushed = cupy.empty((), dtype=cupy.float32)

    def __call__(self, fn, warmup: int = 3, min_reps: int = 10, max_reps: int = 100, budget_ms: float = 400.0) -> float:
        """Median milliseconds of fn() over repetitions."""
        cp = self.cupy
        for _ in range(warmup):
            fn()
        cp.cuda.Device().synchronize()
        times = []
        spent = 0.0
        while len(times) < max_reps and (len(times) < min_reps or spent < budget_ms):
            cp.sum(self.flush, out=self.flushed)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            t = cp.cuda.get_elapsed_time(start, end)
            times.append(t)
            spent += t + 0.15  # the flush
        return statistics.median(times)


def copy_bandwidth(timer: Timer, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    import cupy

    src = cupy.random.random(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    ms = timer(lambda: dst.__setitem__(Ellipsis, src))
    return 2 * nbytes / (ms * 1e-3)
