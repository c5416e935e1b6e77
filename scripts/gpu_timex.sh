#!/usr/bin/env bash
# One device call for timex (issue 3): the GPU tests, the probe (fp32 FMA ceiling, each kernel alone),
# then the benchmark suite; logs and benchmarks/<device>.{json,md} land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/timex_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/smi.txt" 2>&1
timeout 120 python3 -m pytest -q -rf -p no:cacheprovider tests/test_timex.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -25 "$OUT/pytest.log"
timeout 30 python3 scripts/timex_probe.py 2>&1 | tee "$OUT/probe.log"
timeout 80 python3 -m cupy_kernels bench --op timex --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | tail -45
