#!/usr/bin/env bash
# The GPU check of a change: the benchmarks, then the test suite, logs and results under $OUT.
# Usage: OUT=gpu_out scripts/gpu_suite.sh [suite ...]   (suites: reduce softmax norm timex pad square_matmul; default all)
# COMPILE=1 also runs the offline compile tests (CPU work that CI already does); TEST_TIMEOUT / BENCH_TIMEOUT in seconds.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# Benchmarks first: run right after the test suite, rows that include host time (torch-in pad, the norm
# backward's several launches) measured slower than in a fresh process.
ops=(); for s in "$@"; do ops+=(--op "$s"); done
timeout "${BENCH_TIMEOUT:-280}" python3 -m cupy_kernels bench "${ops[@]}" --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench exit $?"; grep -vE "^\s*$" "$OUT/bench.log" | grep -E "copy|warning|Error" | head -20
# The offline compile of every kernel takes minutes and needs no GPU; COMPILE=1 keeps it (the device's NVRTC may
# spill differently from CI's: see KNOWN_SPILLS, the accepted spills).
skip=(--ignore=tests/test_compile.py); [ "${COMPILE:-0}" = 1 ] && skip=()
timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -ra -p no:cacheprovider "${skip[@]}" tests > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -30
