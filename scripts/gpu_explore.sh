#!/usr/bin/env bash
# One device call (issue 4, session 7): the probe A/B against BASE_PKG (a whole older checkout) on SHAPES /
# OPS, the sub-warp geometry sweep (scripts/sweep_subwarp.py), ncu's stall picture of the norm forward on
# the sub-warp shapes (scripts/ncu_norm_fwd.py), then the softmax / norm tests. Logs to $OUT.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
if [ -n "${BASE_PKG:-}" ]; then
  timeout -s KILL ${PROBE_TIMEOUT:-200} python3 scripts/norm_probe.py --base-pkg $BASE_PKG --shapes "${SHAPES:-5}" \
      --ops "${OPS:-softmax fwd,log_softmax fwd,layer fwd,rms fwd}" 2>&1 | tee "$OUT/probe.log"
fi
if [ -n "${SWEEP:-}" ]; then
  timeout -s KILL ${SWEEP_TIMEOUT:-150} python3 scripts/sweep_subwarp.py $SWEEP 2>&1 | tee "$OUT/sweep.log"
fi
if [ -n "${NCU:-}" ]; then
  timeout -s KILL ${NCU_TIMEOUT:-120} ncu --clock-control none --kernel-name regex:norm_fwd \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 scripts/ncu_norm_fwd.py > "$OUT/ncu.txt" 2>&1; echo "ncu exit $?"
  grep -E "norm_fwd|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Executed Instructions  |Registers Per|Achieved Occupancy|stalled_.*(long_sc|short_sc|wait|not_sel|barrier|math|lg_thr|mio|no_inst|branch|selected|dispatch)" "$OUT/ncu.txt" | head -90
fi
if [ -n "${TESTS:-}" ]; then
  timeout -s KILL ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider $TESTS > "$OUT/pytest.log" 2>&1
  echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -8
fi
