#!/usr/bin/env bash
# On the GPU machine: the GPU test suite (COMPILE=1: every test), then benchmarks. Usage: scripts/gpu_suite.sh [suite ...]
# Logs and benchmark files go to $OUT (default ./gpu_out); TEST_TIMEOUT / BENCH_TIMEOUT in seconds.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# Benchmarks first: in two runs right after the test suite, rows that include host time (torch-in pad,
# norm backward: two launches) measured slower than in bench-only runs (benchmarks/notes.md).
ops=(); for s in "$@"; do ops+=(--op "$s"); done
timeout "${BENCH_TIMEOUT:-280}" python3 -m cupy_kernels bench "${ops[@]}" --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench exit $?"; grep -vE "^\s*$" "$OUT/bench.log" | grep -E "copy|warning|Error" | head -20
# The offline compile of every kernel (tests/test_compile.py) is CPU work that CI does; it takes minutes of device
# time (session 16 lost a call to it). COMPILE=1 keeps it (the device's NVRTC spills differently, KNOWN_SPILLS).
skip=(--ignore=tests/test_compile.py); [ "${COMPILE:-0}" = 1 ] && skip=()
timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -ra -p no:cacheprovider "${skip[@]}" tests > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -30
