"""Full float32 sum of 2^26: unroll depth x chunks per wave, on reduce_rows built with a patched UNROLL.
Prints median microseconds per configuration; the library's choice is unroll 4, 1 chunk per block."""
import cupy
import numpy as np

from cupy_kernels._runtime import cuda_include_dir, read_source
from cupy_kernels.bench.timing import Timer

timer = Timer()
n = 1 << 26
x = cupy.random.standard_normal(n, dtype=cupy.float32)
y = cupy.empty((), dtype=cupy.float32)
ref = float(cupy.sum(x.astype(cupy.float64)))
src = read_source("reduce.cu")
for unroll in (4, 8):
    code = src.replace("constexpr int UNROLL = 4;", f"constexpr int UNROLL = {unroll};")
    mod = cupy.RawModule(code=code, options=("-std=c++17", f"-I{cuda_include_dir()}"),
                         name_expressions=("reduce_rows<0, float, float>",))
    k = mod.get_function("reduce_rows<0, float, float>")
    from cupy_backends.cuda.api import driver

    wave = driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, 256, 0) * 132
    for per_wave in (1, 2, 4):
        splits = wave * per_wave
        chunk = -(-n // splits + 3) // 4 * 4
        splits = -(-n // chunk)
        partial = cupy.empty(splits, dtype=cupy.float32)
        arrivals = cupy.zeros(1, dtype=cupy.uint32)
        blocks = min(splits, wave)
        args = (x, y, partial, arrivals, np.int64(1), np.int64(n), np.uint32(splits), np.int64(chunk), np.int32(256),
                np.float32(1))
        fn = lambda: k((blocks,), (256,), args)
        fn()
        assert abs(float(y) - ref) < 1e-4 * float(cupy.abs(x).sum()), (float(y), ref)
        print(f"unroll {unroll} (regs {k.num_regs}, {wave // 132} blocks/SM) chunks/wave {per_wave}: "
              f"{timer(fn) * 1e3:.1f} us")
