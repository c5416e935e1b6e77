import cupy
from cupy_kernels.ops import norm as N
from cupy_kernels._runtime import current, resident_blocks, use_shared_memory
from cupy_kernels._runtime.tma import max_active_clusters
for n, dt in ((32768, "bfloat16"), (16384, "float16"), (8192, "bfloat16"), (65536, "bfloat16")):
    for form in N.RING_FORMS:
        N.RING_BWD["form"] = form
        cl, threads, form, smem = N.ring_plan(n, dt, current().cc)
        name = N._ring(dt, "layer_norm", 0, cl, form)
        k = N.SOURCE.kernel(name)
        use_shared_memory(k, smem, name)
        res = resident_blocks(k, threads, smem) if cl == 1 else max_active_clusters(k, threads, smem, cl)
        print(n, dt, form, "cl", cl, "threads", threads, "smem", smem, "groups", res, "SMs used", res * cl, flush=True)
