"""Device-event timing with an L2 flush before every repetition: no cache hits, and the flush keeps
the GPU busy while the host enqueues the timed call, so host overhead stays out of small timings.
The flush READS a 512 MB buffer: a write flush (triton's do_bench zeroes one) leaves up to an L2 of dirty
lines whose write-back lands inside the next timed call (scripts/flush_ab.py measures the effect).
After the flush a one-thread kernel waits `delay_us` on the device: the flush alone (~0.13 ms) did not
cover the host time of a multi-launch call when the host was slow, and that host time then landed
between the events (the norm rows' run-to-run swings between runs)."""
from __future__ import annotations

import statistics
import time

# One thread sleeping on the device for `ns` nanoseconds (globaltimer): the stream stays busy while
# the host enqueues the timed call.
_DELAY_SRC = r"""
extern "C" __global__ void delay_ns(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
"""


class Timer:
    def __init__(self, flush_bytes: int = 512 << 20, delay_us: float = 500.0):
        import cupy

        self.cupy = cupy
        self.flush = cupy.ones(flush_bytes // 4, dtype=cupy.float32)
        self.flushed = cupy.empty((), dtype=cupy.float32)
        self.delay_ns = int(delay_us * 1e3)
        self.delay = cupy.RawKernel(_DELAY_SRC, "delay_ns") if self.delay_ns else None
        self.host_ms = 0.0  # median host time of enqueueing fn() in the last call (events included)

    def __call__(self, fn, warmup: int = 3, min_reps: int = 10, max_reps: int = 100, budget_ms: float = 400.0) -> float:
        """Median milliseconds of fn() over repetitions."""
        import numpy as np

        cp = self.cupy
        for _ in range(warmup):
            fn()
        cp.cuda.Device().synchronize()
        times, host = [], []
        spent = 0.0
        while len(times) < max_reps and (len(times) < min_reps or spent < budget_ms):
            cp.sum(self.flush, out=self.flushed)
            if self.delay is not None:
                self.delay((1,), (1,), (np.uint64(self.delay_ns),))
            start, end = cp.cuda.Event(), cp.cuda.Event()
            h = time.perf_counter()
            start.record()
            fn()
            end.record()
            host.append((time.perf_counter() - h) * 1e3)
            end.synchronize()
            t = cp.cuda.get_elapsed_time(start, end)
            times.append(t)
            spent += t + 0.15  # the flush
        self.host_ms = statistics.median(host)
        return statistics.median(times)


def copy_bandwidth(timer: Timer, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    import cupy

    src = cupy.random.random(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    ms = timer(lambda: dst.__setitem__(Ellipsis, src))
    return 2 * nbytes / (ms * 1e-3)
