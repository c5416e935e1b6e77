#!/usr/bin/env bash
# On the GPU machine (issue 4, staged backward): softmax + norm tests, the staging experiment, then one
# softmax + norm bench run. Logs under $OUT; the last lines: the experiment's table.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
timeout -s KILL ${TEST_TIMEOUT:-110} python3 -m pytest -q -ra -p no:cacheprovider tests/test_softmax.py tests/test_norm.py \
    > "$OUT/pytest.log" 2>&1; echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -12
timeout -s KILL ${EXP_TIMEOUT:-70} python3 scripts/experiment_stage.py > "$OUT/experiment.log" 2>&1; echo "experiment exit $?"
timeout -s KILL ${BENCH_TIMEOUT:-120} python3 -m cupy_kernels bench --op softmax --op norm --out "$OUT/bench1" \
    > "$OUT/bench1.log" 2>&1; echo "bench exit $?"
cut -c1-230 "$OUT/experiment.log" | tail -30
grep -E "cupy_kernels\*\*|torch" "$OUT"/bench1/*.md | grep -E "backward|65536x128" | cut -c1-120 | tail -40
