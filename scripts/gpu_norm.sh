#!/usr/bin/env bash
# On the GPU machine: softmax + norm tests, then their benchmarks (suites "softmax" and "norm").
# Logs and benchmark files go to $OUT (default ./gpu_out). Each step has its own time limit, so a
# failure (or a hang) in one still leaves the other's results.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY' 2>&1 | tee "$OUT/compile.log"
import time, cupy_kernels
from cupy_kernels.ops import softmax, norm
for src in (softmax.SOURCE, norm.SOURCE):
    t = time.time(); src.load_all(); print(src.filename, "compiled and loaded in", round(time.time() - t, 1), "s")
from cupy_kernels.ops import _rowwise as rw
from cupy_kernels._runtime import current
sms = current().sm_count
for src in (softmax.SOURCE, norm.SOURCE):  # registers and resident blocks per SM by block size
    for name in src.names:
        if "float>" in name or "float," in name or "half," in name:
            k = src.kernel(name)
            smem = (lambda t, d=("float16" if "half" in name else "float32"): norm.bwd_smem(d, t)) if "norm_bwd" in name else 0
            if "norm_bwd" in name:
                from cupy_kernels._runtime import use_shared_memory
                use_shared_memory(k, smem(512))
            occ = rw.occupancy(k, name, smem)
            print(f"{name:32s} regs {k.num_regs:3d}  blocks/SM at 64/128/256/512/1024 threads:",
                  [occ(t) for t in (64, 128, 256, 512, 1024)])
for shape, dt in [((65536, 128), "float32"), ((32768, 1024), "float16"), ((4096, 4096), "float32"),
                  ((8192, 8192), "bfloat16"), ((1024, 32768), "bfloat16"), ((256, 262144), "float32")]:
    fk = norm.SOURCE.kernel(norm._fwd(dt, "layer_norm")); bk = norm.SOURCE.kernel(norm._bwd(dt, "layer_norm", 0))
    print(shape, dt, "fwd", rw.plan(*shape, dt, rw.fwd_maxp(dt), rw.fwd_threads(dt), sms, occupancy=rw.occupancy(fk, "")),
          "\n   norm bwd", rw.plan(*shape, dt, norm.bwd_maxp(dt), norm.bwd_threads(dt), sms, persistent=True,
                                   occupancy=rw.occupancy(bk, "", lambda t: norm.bwd_smem(dt, t))))
PY
timeout -s KILL ${TEST_TIMEOUT:-130} python3 -m pytest -q -ra -p no:cacheprovider --durations=8 \
    tests/test_softmax.py tests/test_norm.py 2>&1 | tee "$OUT/pytest.log" | tail -45
timeout -s KILL ${BENCH_TIMEOUT:-100} python3 -m cupy_kernels bench --op softmax --op norm --out "$OUT" 2>&1 \
    | tee "$OUT/bench.log" | grep -v "^|" | tail -20
