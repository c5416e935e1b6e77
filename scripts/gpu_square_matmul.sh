#!/usr/bin/env bash
# One device call for square_matmul_ (issue 5): probe the Hopper (wgmma) kernel one variant per process,
# the GPU tests, the benchmark suite (with the probed variants), the attention-projection demo. Each step
# has its own time limit (a hang or fault in one leaves the others' results); logs and
# benchmarks/<device>.{json,md} land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/square_matmul_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | tee "$OUT/smi.txt"
OKS=""
for v in wgmma wgmma_swap; do
  for t in N T; do
    timeout -s KILL ${PROBE_TIMEOUT:-20} python3 scripts/square_matmul_probe.py $v $t > "$OUT/probe_${v}_$t.log" 2>&1
    rc=$?; tail -2 "$OUT/probe_${v}_$t.log" | tee -a "$OUT/probe.log"
    [ $rc -eq 0 ] && OKS="$OKS,$v:$t"
  done
done
export SQMM_WGMMA=${OKS#,}
echo "probed OK: $SQMM_WGMMA" | tee -a "$OUT/probe.log"
timeout -s KILL ${TEST_TIMEOUT:-40} python3 -m pytest -v -rf -p no:cacheprovider --durations=5 \
    tests/test_square_matmul.py -k "not test_wgmma" > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest.log" | tail -30
timeout -s KILL ${BENCH_TIMEOUT:-60} python3 -m cupy_kernels bench --op square_matmul --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | grep -v "^| square_matmul_ |.*float32" | tail -60
for vt in ${SQMM_WGMMA//,/ }; do
  v=${vt%:*}; t=${vt#*:}
  if [ $v = wgmma ]; then k="w$t and not swap"; else k="w$t and swap"; fi
  timeout -s KILL ${WG_TEST_TIMEOUT:-15} python3 -m pytest -q -rf -p no:cacheprovider tests/test_square_matmul.py \
      -k "test_wgmma and $k" > "$OUT/pytest_${v}_$t.log" 2>&1
  echo "pytest $vt rc=$?: $(tail -1 "$OUT/pytest_${v}_$t.log")"
done
timeout -s KILL ${DEMO_TIMEOUT:-12} python3 scripts/square_matmul_attention.py 2>&1 | tee "$OUT/attention.log"
