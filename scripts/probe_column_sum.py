"""Device probe (issue 4): column_sum alone over the partial rows the norm backward writes on the issue
shapes (dweight and dbias: two tensors), each (Y, CW, TW) form against the one column_sum_shape picks; the
result checked against a float64 sum. Times: medians of device events after a read flush (us)."""
import cupy
import numpy as np

from cupy_kernels._runtime import current
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import norm as N

timer = Timer()
sms = current().sm_count
for r, n, label in ((2112, 1024, "32768x1024 f16 (2112 CTAs)"), (264, 8192, "8192² bf16"), (62, 32768, "1024x32768 bf16"),
                    (264, 4096, "4096² f32")):
    parts = [cupy.random.standard_normal((r, n), dtype=cupy.float32) for _ in range(2)]
    outs = [cupy.empty(n, dtype=cupy.float32) for _ in range(2)]
    want = [p.astype(cupy.float64).sum(0) for p in parts]
    picked = N.column_sum_shape(r, n, sms)
    forms = {picked, (32, 1, 32), (32, 1, 8), (8, 1, 32), (8, 4, 32), (32, 4, 32)}
    line = []
    for ys, cw, tw in sorted(forms):
        if (cw == 4 and n % 4) or (tw != 32 and (ys != 32 or cw != 1)):
            continue
        k = N.SOURCE.kernel(N._colsum("float32", cw, ys, tw))
        run = lambda: k((-(-n // (tw * cw)), 2), (32, ys), (parts[0], parts[1], outs[0], outs[1], np.int64(r), np.int64(n)))
        run()
        err = max(float(abs(o - w).max() / abs(w).max()) for o, w in zip(outs, want))
        assert err < 1e-5, (ys, cw, tw, err)
        t = timer(run) * 1e3
        line.append(f"{'*' if (ys, cw, tw) == picked else ''}Y{ys} CW{cw} TW{tw} {t:6.2f} us")
    print(f"{label:28s} r {r:5d} n {n:6d}  {2 * r * n * 4 / 1e6:5.1f} MB  " + "  ".join(line), flush=True)
