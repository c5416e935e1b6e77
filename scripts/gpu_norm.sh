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
PY
timeout -s KILL ${TEST_TIMEOUT:-130} python3 -m pytest -q -ra -p no:cacheprovider --durations=8 \
    tests/test_softmax.py tests/test_norm.py 2>&1 | tee "$OUT/pytest.log" | tail -45
timeout -s KILL ${BENCH_TIMEOUT:-100} python3 -m cupy_kernels bench --op softmax --op norm --out "$OUT" 2>&1 \
    | tee "$OUT/bench.log" | grep -v "^|" | tail -20
