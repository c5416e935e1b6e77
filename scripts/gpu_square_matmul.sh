#!/usr/bin/env bash
# One device call for square_matmul_ (issue 5): probe the Hopper TMA kernels (tma_cluster, tma) one layout
# per process, the GPU tests, the side-by-side check with rotated order (square_matmul_ab.py), sustained
# clocks and power (square_matmul_clocks.py), the benchmark suite, the attention-projection demo, and
# hardware counters of the two TMA kernels. Each step has its own time limit (a hang or fault in one
# leaves the others' results); logs and benchmarks/<device>.{json,md} land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/square_matmul_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader 2>&1 | tee "$OUT/smi.txt"
for v in tma_cluster tma; do for t in N T; do  # the Hopper kernels alone first, one process per W layout
  timeout -s KILL ${PROBE_TIMEOUT:-25} python3 scripts/square_matmul_probe.py $v $t 2>&1 | tail -2 | tee -a "$OUT/probe.log"
done; done
timeout -s KILL ${AB_TIMEOUT:-90} python3 scripts/square_matmul_ab.py 2>&1 | tee "$OUT/ab.log"
for n in 4096 1024; do
  timeout -s KILL ${CLOCKS_TIMEOUT:-45} python3 scripts/square_matmul_clocks.py $n 2>&1 | tee -a "$OUT/clocks.log"
done
timeout -s KILL ${TEST_TIMEOUT:-150} python3 -m pytest -v -rf -p no:cacheprovider --durations=5 \
    tests/test_square_matmul.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest.log" | tail -30
timeout -s KILL ${BENCH_TIMEOUT:-150} python3 -m cupy_kernels bench --op square_matmul --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | grep -E "cupy_kernels \(in place\)|ladder tma |cuBLAS" | grep -v "float32" | tail -30
timeout -s KILL ${DEMO_TIMEOUT:-20} python3 scripts/square_matmul_attention.py 2>&1 | tee "$OUT/attention.log"
# Hardware counters of the two store-warp TMA kernels at m = 65536, n = 4096 fp16 (one launch each).
timeout -s KILL ${NCU_TIMEOUT:-90} ncu --clock-control none --kernel-name regex:sqmm_tma --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis \
  python3 -c "import torch; from cupy_kernels.ops.square_matmul import square_matmul_impl as f; \
a = torch.randn(65536, 4096, device='cuda').half(); w = (torch.randn(4096, 4096, device='cuda') / 64).half(); \
f(a, w, variant='tma_cluster'); f(a, w, variant='tma'); torch.cuda.synchronize()" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"; grep -E "sqmm_tma|SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit" "$OUT/ncu.txt" | head -30
