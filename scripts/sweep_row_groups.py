"""Row reductions: time every row-group size on the benchmark shapes, to check the rule _row_group picks.

Usage: PYTHONPATH=. python scripts/sweep_row_groups.py"""
import cupy

import cupy_kernels as ck
from cupy_kernels._runtime.tuning import tuned
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import reduce as R

timer = Timer()
for rows, n, dtype in [(4096, 4096, "float32"), (32768, 1024, "float16"), (8192, 8192, "bfloat16"),
                       (65536, 128, "float32"), (256, 262144, "float32"), (1000, 4097, "float32"), (1, 1 << 26, "float32")]:
    x = cupy.random.standard_normal((rows, n), dtype=cupy.float32).astype(dtype)
    line = []
    for g in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        with tuned(R, row_group=g):  # the timed calls replay this override's plan
            line.append(f"{g}:{timer(lambda: ck.sum(x, axis=-1)) * 1e3:.1f}")
    print(f"{rows}x{n} {dtype} (rule: {R._row_group(n, dtype)}) us by group: {' '.join(line)}")
