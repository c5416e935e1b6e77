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
        if "float>" in name or "float," in name:
            k = src.kernel(name)
            occ = rw.occupancy(k, name, (lambda t: 2 * t * 16 * 4) if "norm_bwd" in name else 0)
            print(f"{name:32s} regs {k.num_regs:3d}  blocks/SM at 64/128/256/512 threads:",
                  [occ(t) for t in (64, 128, 256, 512)])
for shape, dt in [((65536, 128), "float32"), ((32768, 1024), "float16"), ((4096, 4096), "float32"),
                  ((8192, 8192), "bfloat16"), ((1024, 32768), "bfloat16"), ((256, 262144), "float32")]:
    print(shape, dt, "fwd", rw.plan(*shape, dt, rw.fwd_maxp(dt), 512, sms),
          "\n   norm bwd", rw.plan(*shape, dt, rw.maxp(dt), 256, sms, persistent=True))
PY
timeout -s KILL ${TEST_TIMEOUT:-130} python3 -m pytest -q -ra -p no:cacheprovider --durations=8 \
    tests/test_softmax.py tests/test_norm.py 2>&1 | tee "$OUT/pytest.log" | tail -45
timeout -s KILL ${BENCH_TIMEOUT:-100} python3 -m cupy_kernels bench --op softmax --op norm --out "$OUT" 2>&1 \
    | tee "$OUT/bench.log" | grep -v "^|" | tail -20
