#!/usr/bin/env bash
# ncu of norm_bwd_ring (layer_norm, from x; dy = x) on clusters of 2 (2048x16384 f16) and 4 (1024x32768 bf16):
# throughput, warp states, scheduler, L2 / DRAM traffic and stall reasons. (8192^2 bf16 rows take norm_bwd_shared.)
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=.
timeout -s KILL 200 ncu --clock-control none --kernel-name regex:"norm_bwd_ring" \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --metrics lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_red.sum,\
dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_global_st.sum,\
lts__t_sectors_srcunit_tex.sum,lts__t_sectors.sum,smsp__inst_executed.sum,lts__t_requests.sum,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio \
  python3 -c "
import cupy, cupy_kernels.ops.norm as N
for rows, n, dt in ((8192, 8192, 'bfloat16'), (2048, 16384, 'float16'), (1024, 32768, 'bfloat16')):
    x = cupy.random.randn(rows, n).astype(dt); w = (cupy.random.rand(n) + 0.5).astype(dt); b = cupy.random.randn(n).astype(dt)
    y, m, r = N.norm_forward_impl(x, w, b, 1e-5, 'layer_norm')
    N.norm_backward_impl(x, x, w, b, m, r, 'layer_norm')
cupy.cuda.Device().synchronize()" > "$OUT/ncu.txt" 2>&1; echo "ncu exit $?"
grep -E "lts__|dram__|smsp__|norm_bwd_ring|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Cluster" "$OUT/ncu.txt" | head -90
