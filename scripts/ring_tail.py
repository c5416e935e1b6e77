"""Device probe (issue 4): where norm_bwd_ring's backward time goes at 1024x32768 bf16 and 2048x16384 f16 (the
plan's packs, or --packs): layer_norm full, dx only, dx + dweight, with column_sum's launch skipped (the partial rows
still written), rms_norm full and dx only; then column_sum alone over as many partial rows as the ring writes. In %
of the copy bandwidth of the same process (bytes: x, dy read, dx written)."""
import argparse

import cupy
import numpy as np

from cupy_kernels._runtime import current
from cupy_kernels.bench.timing import Timer, copy_bandwidth
from cupy_kernels.ops import norm as N

ap = argparse.ArgumentParser()
ap.add_argument("--packs", default="", help="comma-separated packs a thread (a RING_PACKS entry each); default: the plan's")
args = ap.parse_args()
timer = Timer()
_launch = N.launch


def no_colsum(fn):
    """fn() with column_sum's launches skipped."""
    skip = {id(N.SOURCE.kernel(name)) for name in N.SOURCE.names if name.startswith("column_sum")}
    N.launch = lambda k, *a, **kw: None if id(k) in skip else _launch(k, *a, **kw)
    try:
        return fn()
    finally:
        N.launch = _launch


copy = copy_bandwidth(timer)
print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()} copy {copy / 1e12:.2f} TB/s")
for rows, n, dt in ((1024, 32768, "bfloat16"), (2048, 16384, "float16")):
    x, dy = (cupy.random.randn(rows, n).astype(dt) for _ in range(2))
    w, b = (cupy.random.rand(n) + 0.5).astype(dt), cupy.random.randn(n).astype(dt)
    _, m, r = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
    _, _, rr = N.norm_forward_impl(x, w, None, 1e-6, "rms_norm")
    for pk in [int(p) for p in args.packs.split(",") if p] or [None]:
        N.RING_BWD["packs"] = pk
        line = []
        for label, fn in (("layer", lambda: N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm")),
                          ("layer dx", lambda: N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm", need_dw=False,
                                                                    need_db=False)),
                          ("layer dx+dw", lambda: N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm", need_db=False)),
                          ("layer no column_sum",
                           lambda: no_colsum(lambda: N.norm_backward_impl(dy, x, w, b, m, r, "layer_norm"))),
                          ("rms", lambda: N.norm_backward_impl(dy, x, w, None, None, rr, "rms_norm")),
                          ("rms dx", lambda: N.norm_backward_impl(dy, x, w, None, None, rr, "rms_norm",
                                                                  need_dw=False))):
            t = timer(fn) * 1e3
            line.append(f"{label} {t:6.1f} us {3 * x.nbytes / (t * 1e-6) / copy:5.1%}")
        cl, threads, form, packs, smem = N.ring_plan(n, dt, current().cc)
        print(f"{rows}x{n} {dt} (clusters of {cl}, {threads} threads, {packs} packs): " + " | ".join(line), flush=True)
    N.RING_BWD["packs"] = None
    kernel = N.SOURCE.kernel(N._ring(dt, "layer_norm", 0, cl, form, packs))
    groups = min(rows, N.max_active_clusters(kernel, threads, smem, cl))
    part, out = cupy.random.randn(groups, n).astype(cupy.float32), cupy.empty(n, dt)
    ys, cw, tw = N.column_sum_shape(groups, n, current().sm_count)
    colsum = N.SOURCE.kernel(N._colsum(dt, cw, ys, tw))
    for two in (False, True):
        t = timer(lambda: N.launch(colsum, (N.ceil_div(n, tw * cw), 2), (32, ys),
                                   (part, part if two else np.uint64(0), out, out if two else np.uint64(0),
                                    np.int64(groups), np.int64(n)))) * 1e3
        print(f"  column_sum {groups}x{n}, {'two tensors' if two else 'one tensor'}: {t:.1f} us (alone)")
