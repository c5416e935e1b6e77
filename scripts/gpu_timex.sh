#!/usr/bin/env bash
# One device call for timex (issue 3): the GPU tests, the probe (fp32 FMA ceiling, each kernel alone),
# then the benchmark suite; logs and benchmarks/<device>.{json,md} land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/timex_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/smi.txt" 2>&1
# the device's NVRTC (13.0) may allocate registers differently from the CPU machines': no spills here either
timeout 200 python3 -m pytest -q -rf -p no:cacheprovider tests/test_compile.py -k "timex" > "$OUT/compile.log" 2>&1
echo "compile rc=$?"; tail -3 "$OUT/compile.log"
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_timex.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -25 "$OUT/pytest.log"
# PROBE=ab: only the A/B of the current experiment (scripts/timex_probe.py ab); PROBE=full: the whole probe
if [ "${PROBE:-ab}" = full ]; then timeout 100 python3 scripts/timex_probe.py 2>&1 | tee "$OUT/probe.log"
else timeout 100 python3 scripts/timex_probe.py ab 2>&1 | tee "$OUT/probe.log"; fi
timeout 120 python3 -m cupy_kernels bench --op timex --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | tail -45
# Hardware counters of the auto (tf32x3: forward, grad_k, grad_w + combine) and tiled kernels at B=32 C=768 T=768 (one launch each).
timeout 30 ncu --clock-control none --kernel-name regex:timex_ --launch-count 7 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
  python3 -c "import cupy, cupy_kernels as ck; w = cupy.random.standard_normal((768, 768), dtype=cupy.float32); \
k = cupy.random.standard_normal((32, 768, 768), dtype=cupy.float32); ck.timex(w, k); ck.timex_backward(w, k, k); \
ck.timex(w, k, variant='tiled'); ck.timex_backward(w, k, k, variant='tiled'); cupy.cuda.Device().synchronize()" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
