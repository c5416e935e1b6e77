#!/usr/bin/env bash
# One device call for pad (issue 6): the GPU tests, then the "pad" benchmark suite.
# Logs and results land in $OUT (pytest.log, bench.log, <device>.json/.md).
set -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/pad_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
# The kernels compile once (NVRTC, CuPy's disk cache) in the first process.
timeout "${PAD_TEST_TIMEOUT:-130}" python3 -m pytest -q -rs -p no:cacheprovider tests/test_pad.py \
  -k "sweep or larger or ladder or repeated or many or empty or torch" 2>&1 | tee "$OUT/pytest.log"
echo "pytest exit: $?" | tee -a "$OUT/pytest.log"
timeout "${PAD_BENCH_TIMEOUT:-90}" python3 -m cupy_kernels bench --op pad --out "$OUT" 2>&1 | tee "$OUT/bench.log"
echo "bench exit: $?" | tee -a "$OUT/bench.log"
