"""Row reductions: time every row-group size on the benchmark shapes, to check the rule _row_group picks.

Usage: PYTHONPATH=. python scripts/sweep_row_groups.py"""
import cupy

from cupy_kernels._runtime import Call, current
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops.reduce import _reduce_rows, _row_group

timer = Timer()
props = current()
for rows, n, dtype in [(4096, 4096, "float32"), (32768, 1024, "float16"), (8192, 8192, "bfloat16"),
                       (65536, 128, "float32"), (256, 262144, "float32"), (1000, 4097, "float32"), (1, 1 << 26, "float32")]:
    x = cupy.random.standard_normal((rows, n), dtype=cupy.float32).astype(dtype)
    y = cupy.empty(rows, dtype=dtype)
    line = []
    for g in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        with Call("sum", x) as call:
            fn = lambda: _reduce_rows(call, "sum", x, y, dtype, rows, n, n, group=g)
            line.append(f"{g}:{timer(fn) * 1e3:.1f}")
    print(f"{rows}x{n} {dtype} (rule: {_row_group(n, dtype)}) us by group: {' '.join(line)}")
