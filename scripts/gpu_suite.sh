#!/usr/bin/env bash
# The GPU check of a change, sized for one device call: compile every kernel on every core, run the test files
# in parallel, then the benchmarks. Logs and results go under $OUT (default gpu_out).
# Usage: OUT=gpu_out scripts/gpu_suite.sh [step ...]   (steps: warmup tests fuzz sanitize bench; default
#        warmup tests). Settings: JOBS (test files at once, 8), TEST_TIMEOUT (s a file, 420), FUZZ_CASES (cases a
#        fuzz family, 2000), SANITIZE_ARGS (for scripts/sanitize.py), BENCH_ARGS (for `bench`, e.g. "--op host"),
#        BENCH_TIMEOUT (s, 540). The bench writes into $OUT/benchmarks, starting from a copy of the committed files.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/ckcache}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(warmup tests)
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }

for step in "${steps[@]}"; do
  case $step in
  warmup)
    python3 -m cupy_kernels warmup > "$OUT/logs/warmup.log" 2>&1
    echo "warmup exit $? ($(since)): $(tail -1 "$OUT/logs/warmup.log")" ;;
  tests)
    # one pytest a file, the largest first; the fuzz sweep is its own step
    ls -S tests/test_*.py | grep -v -e test_fuzz -e test_compile | xargs -P "${JOBS:-8}" -I{} sh -c '
      name=$(basename {} .py)
      timeout '"${TEST_TIMEOUT:-420}"' python3 -m pytest -q -ra -p no:cacheprovider --tb=short {} \
        > '"$OUT"'/logs/$name.log 2>&1
      echo "$name exit $?: $(tail -1 '"$OUT"'/logs/$name.log)"'
    echo "tests done ($(since))"
    grep -h -E "^(FAILED|ERROR)" "$OUT"/logs/test_*.log | head -40 ;;
  fuzz)
    for family in reductions softmax norm timex pad square_matmul; do
      CK_FUZZ_CASES=${FUZZ_CASES:-2000} timeout "${TEST_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider \
        --tb=short tests/test_fuzz.py -k "test_fuzz_$family" > "$OUT/logs/fuzz_$family.log" 2>&1 &
    done
    wait
    for f in "$OUT"/logs/fuzz_*.log; do echo "$(basename "$f" .log): $(tail -1 "$f")"; done
    grep -h -E "^(FAILED|ERROR)|reproduce" "$OUT"/logs/fuzz_*.log | head -40
    echo "fuzz done ($(since))" ;;
  sanitize)
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')
    mkdir -p "$OUT/benchmarks"
    python3 scripts/sanitize.py --out "$OUT/benchmarks/sanitize-$device.md" ${SANITIZE_ARGS:-} \
      > "$OUT/logs/sanitize.log" 2>&1
    echo "sanitize exit $? ($(since))"; tail -30 "$OUT/logs/sanitize.log" ;;
  bench)
    mkdir -p "$OUT/benchmarks" && cp benchmarks/*.json "$OUT/benchmarks/" 2>/dev/null
    timeout "${BENCH_TIMEOUT:-540}" python3 -m cupy_kernels bench ${BENCH_ARGS:-} --out "$OUT/benchmarks" \
      > "$OUT/logs/bench.log" 2>&1
    echo "bench exit $? ($(since))"; grep -E "copy|warning|Error" "$OUT/logs/bench.log" | head -20 ;;
  *) echo "unknown step $step (steps: warmup tests fuzz sanitize bench)"; exit 2 ;;
  esac
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"
echo "all done ($(since))"
