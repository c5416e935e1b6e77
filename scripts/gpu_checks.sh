#!/usr/bin/env bash
# One device call: the whole GPU test suite, host time of torch calls, compute-sanitizer memcheck of the
# TMA square-matmul kernel, its SM clock/power check, and the name/speed of cuBLAS's kernel beside ours.
# Logs land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/checks_out}; mkdir -p "$OUT"
timeout ${TEST_TIMEOUT:-330} python3 -m pytest -q -ra -p no:cacheprovider tests > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -25
timeout 60 python3 scripts/profile_host.py 8 > "$OUT/profile_host.log" 2>&1; grep "==" "$OUT/profile_host.log"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/square_matmul_probe.py tma N \
  > "$OUT/memcheck.log" 2>&1; echo "memcheck exit $?"; tail -3 "$OUT/memcheck.log"
timeout 40 python3 scripts/square_matmul_clocks.py 4096 2>&1 | tee "$OUT/clocks.log"
timeout 60 ncu --clock-control none --launch-count 2 --section SpeedOfLight python3 -c "import torch; \
a = torch.randn(65536, 4096, device='cuda').half(); w = torch.randn(4096, 4096, device='cuda').half(); \
torch.matmul(a, w); torch.matmul(a.bfloat16(), w.bfloat16()); torch.cuda.synchronize()" > "$OUT/ncu_cublas.txt" 2>&1
grep -E "Context 1|Duration|Compute \(SM\)|SM Frequency" "$OUT/ncu_cublas.txt" | head -12
