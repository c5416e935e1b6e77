#!/usr/bin/env bash
# On the GPU machine (issue 4): softmax + norm tests, an experiment (EXPERIMENT=scripts/experiment_issue4.py
# by default, scripts/experiment_stage.py for the staged backward, '' for none), then the softmax + norm
# benchmarks twice in separate processes (after the tests on purpose: the order that gave the slowest norm
# rows before). Logs under $OUT; the last lines: the two runs side by side (scripts/bench_spread.py).
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
timeout -s KILL ${TEST_TIMEOUT:-110} python3 -m pytest -q -ra -p no:cacheprovider tests/test_softmax.py tests/test_norm.py \
    > "$OUT/pytest.log" 2>&1; echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -12
EXPERIMENT=${EXPERIMENT-scripts/experiment_issue4.py}
[ -n "$EXPERIMENT" ] && { timeout -s KILL ${EXP_TIMEOUT:-80} python3 "$EXPERIMENT" > "$OUT/experiment.log" 2>&1
    echo "experiment exit $?"; }
for i in 1 2; do
    timeout -s KILL ${BENCH_TIMEOUT:-100} python3 -m cupy_kernels bench --op softmax --op norm --out "$OUT/bench$i" \
        > "$OUT/bench$i.log" 2>&1; echo "bench $i exit $?"
done
python3 scripts/bench_spread.py "$OUT"/bench1/*.json "$OUT"/bench2/*.json > "$OUT/spread.md" 2>&1
grep -E "^A .*rep 0|^B|^C" "$OUT/experiment.log" | cut -c1-200 | tail -40
grep -E "65536x128|32768x1024 \| float16|4096x4096|1024x32768" "$OUT/spread.md" | cut -c1-150
