#!/usr/bin/env bash
# One device call for square_matmul_ (issue 5): probe the Hopper kernels (tma, wgmma) one layout per process,
# the GPU tests, the benchmark suite, the attention-projection demo. Each step
# has its own time limit (a hang or fault in one leaves the others' results); logs and
# benchmarks/<device>.{json,md} land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/square_matmul_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | tee "$OUT/smi.txt"
for v in tma wgmma; do for t in N T; do  # the Hopper kernels alone first, one process per W layout
  timeout -s KILL ${PROBE_TIMEOUT:-20} python3 scripts/square_matmul_probe.py $v $t 2>&1 | tail -2 | tee -a "$OUT/probe.log"
done; done
timeout -s KILL ${TEST_TIMEOUT:-40} python3 -m pytest -v -rf -p no:cacheprovider --durations=5 \
    tests/test_square_matmul.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest.log" | tail -30
timeout -s KILL ${BENCH_TIMEOUT:-60} python3 -m cupy_kernels bench --op square_matmul --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | grep -v "^| square_matmul_ |.*float32" | tail -60
timeout -s KILL ${DEMO_TIMEOUT:-12} python3 scripts/square_matmul_attention.py 2>&1 | tee "$OUT/attention.log"
