#!/usr/bin/env bash
# On the GPU machine: the whole test suite, then benchmarks. Usage: scripts/gpu_suite.sh [suite ...]
# Logs and benchmark files go to $OUT (default ./gpu_out).
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m cupy_kernels info 2>&1 | tail -4
python3 -m pytest -q -ra -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|FAILED|ERROR|Error" | tail -40
ops=(); for s in "$@"; do ops+=(--op "$s"); done
python3 -m cupy_kernels bench "${ops[@]}" --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60
