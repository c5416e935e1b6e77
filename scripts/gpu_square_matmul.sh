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
for v in tma tma_direct; do for t in N T; do  # the Hopper kernels alone first, one process per W layout
  timeout -s KILL ${PROBE_TIMEOUT:-20} python3 scripts/square_matmul_probe.py $v $t 2>&1 | tail -2 | tee -a "$OUT/probe.log"
done; done
timeout -s KILL ${TEST_TIMEOUT:-40} python3 -m pytest -v -rf -p no:cacheprovider --durations=5 \
    tests/test_square_matmul.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest.log" | tail -30
timeout -s KILL ${BENCH_TIMEOUT:-60} python3 -m cupy_kernels bench --op square_matmul --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | grep -v "^| square_matmul_ |.*float32" | tail -60
timeout -s KILL ${DEMO_TIMEOUT:-12} python3 scripts/square_matmul_attention.py 2>&1 | tee "$OUT/attention.log"
# Hardware counters of the two TMA kernels at m = 65536, n = 1024 bf16 (one launch each).
timeout -s KILL ${NCU_TIMEOUT:-60} ncu --clock-control none --kernel-name regex:sqmm_tma --launch-count 2 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
  python3 -c "import torch; from cupy_kernels.ops.square_matmul import square_matmul_impl as f; \
a = torch.randn(65536, 1024, device='cuda').bfloat16(); w = (torch.randn(1024, 1024, device='cuda') / 32).bfloat16(); \
f(a, w, variant='tma'); f(a, w, variant='tma_direct'); torch.cuda.synchronize()" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"; grep -E "sqmm_tma|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput" "$OUT/ncu.txt" | head -20
