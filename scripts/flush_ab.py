"""Same kernels timed after a write flush (zero-fill, as triton's do_bench) and a read flush (ours)."""
import cupy

import cupy_kernels as ck
from cupy_kernels.bench.timing import Timer


class WriteFlushTimer(Timer):
    def __call__(self, fn, **kw):
        cp = self.cupy
        times = []
        for i in range(60):
            self.flush.fill(i)
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e))
        return sorted(times)[len(times) // 2]


read, write = Timer(), WriteFlushTimer()
for shape, axis in [((1 << 26,), None), ((4096, 4096), -1), ((65536, 128), -1)]:
    x = cupy.random.standard_normal(shape, dtype=cupy.float32)
    fn = lambda: ck.sum(x, axis=axis)
    fn()
    print(f"sum{shape} axis={axis}: read flush {read(fn) * 1e3:.1f} us, write flush {write(fn) * 1e3:.1f} us, "
          f"cupy read/write {read(lambda: cupy.sum(x, axis=axis)) * 1e3:.1f}/{write(lambda: cupy.sum(x, axis=axis)) * 1e3:.1f} us")

# The floor under every small timing: an empty kernel between two events.
empty = cupy.RawKernel("extern \"C\" __global__ void empty() {}", "empty")
print(f"empty kernel between events: {read(lambda: empty((1,), (32,), ())) * 1e3:.1f} us; "
      f"two dependent empty kernels: {read(lambda: (empty((1,), (32,), ()), empty((1,), (32,), ()))) * 1e3:.1f} us")
