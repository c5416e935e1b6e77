"""Device probe (issue 4): is norm_bwd_ring slow in clusters because of the exchange, or because of the cluster launch?
Times the one-CTA instance (CTAs independent) launched plainly and in clusters of 2 and 4 (8192^2 bf16), and the
kernel alone (no column_sum) for the cluster instances, layer_norm from x."""
import cupy
import numpy as np

from cupy_kernels._runtime import current, launch, resident_blocks, use_shared_memory
from cupy_kernels._runtime.tma import max_active_clusters
from cupy_kernels.bench.timing import Timer
from cupy_kernels.ops import norm as N

timer = Timer()
for rows, n, dt, cl in ((8192, 8192, "bfloat16", 1), (2048, 16384, "float16", 2), (1024, 32768, "bfloat16", 4)):
    x = cupy.random.randn(rows, n).astype(dt)
    dy = cupy.random.randn(rows, n).astype(dt)
    w = (cupy.random.rand(n) + 0.5).astype(dt)
    b = cupy.random.randn(n).astype(dt)
    _, mean, rstd = N.norm_forward_impl(x, w, b, 1e-5, "layer_norm")
    dx = cupy.empty_like(x)
    for form in ((6, 2), (6, 1)):
        name = N._ring(dt, "layer_norm", 0, cl, form)
        k = N.SOURCE.kernel(name)
        smem = 2 * form[0] * (n // 8 // cl) * 16
        use_shared_memory(k, smem, name)
        threads = n // 8 // cl
        for launch_cl in ((1, 2, 4) if cl == 1 else (cl,)):
            groups = (resident_blocks(k, threads, smem) if launch_cl == 1 else
                      max_active_clusters(k, threads, smem, launch_cl) * launch_cl) // cl
            parts = cupy.empty((2, groups, n), cupy.float32)
            args = (x, dy, dx, w, b, mean, rstd, parts[0], parts[1], np.int64(rows), np.int64(n), np.float32(1 / n))
            ms = timer(lambda: launch(k, groups * cl, threads, args, shared_mem=smem, cluster=launch_cl))
            gb = 3 * x.nbytes / (ms * 1e-3) / 1e9
            print(f"{rows}x{n} {dt} CL {cl} form {form} launched in clusters of {launch_cl}: {groups} groups, "
                  f"{ms * 1e3:.1f} us, {gb:.0f} GB/s", flush=True)
