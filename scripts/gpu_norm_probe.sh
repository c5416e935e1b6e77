#!/usr/bin/env bash
# One device call (issue 4): softmax / norm / reduce tests, scripts/norm_probe.py (A/B against the cu_src
# tree in BASE when given), then ncu's stall and instruction sections of the norm kernels at 32768x1024 fp16.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout -s KILL ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider tests/test_norm.py tests/test_softmax.py \
    tests/test_reduce.py > "$OUT/pytest.log" 2>&1; echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -8
timeout -s KILL ${PROBE_TIMEOUT:-150} python3 scripts/norm_probe.py ${BASE:+--base $BASE} ${PROBE_ARGS:-} ${OPS:+--ops "$OPS"} 2>&1 | tee "$OUT/probe.log"
timeout -s KILL ${NCU_TIMEOUT:-90} ncu --clock-control none --kernel-name regex:"norm_|column_sum" --launch-count ${NCU_LAUNCHES:-5} \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy \
  python3 -c "import torch, cupy_kernels.ops.norm as N; from cupy_kernels._runtime import to_cupy; \
x = to_cupy(torch.randn(32768, 1024, device='cuda').half()); w = to_cupy(torch.rand(1024, device='cuda').half() + 0.5); \
b = to_cupy(torch.randn(1024, device='cuda').half()); _, m, r = N.norm_forward_impl(x, w, b, 1e-5, 'layer_norm'); \
N.norm_forward_impl(x, w, None, 1e-6, 'rms_norm'); N.norm_backward_impl(x, x, w, b, m, r, 'layer_norm'); \
torch.cuda.synchronize()" > "$OUT/ncu.txt" 2>&1; echo "ncu exit $?"
grep -E "norm_|Duration|Memory Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Executed Instructions  |Registers Per|Achieved Occupancy|Stall" "$OUT/ncu.txt" | head -60
