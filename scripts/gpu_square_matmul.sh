#!/usr/bin/env bash
# One device call for square_matmul_ (issue 5): compile + a smoke check, the GPU tests, the benchmark suite
# and the attention-projection demo. Each step has its own time limit (a hang in one leaves the others'
# results); logs and benchmarks/<device>.{json,md} land in $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/square_matmul_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | tee "$OUT/smi.txt"
timeout -s KILL ${SMOKE_TIMEOUT:-50} python3 - <<'PY' 2>&1 | tee "$OUT/smoke.log"
import time, torch, cupy
import cupy_kernels as ck
from cupy_kernels.ops import square_matmul as sq
from cupy_kernels._runtime import resident_blocks
t = time.time(); sq.SOURCE.load_all(); print("square_matmul.cu compiled and loaded in", round(time.time() - t, 1), "s")
for name in sq.SOURCE.names:
    if "true, true" in name or "<true, true>" in name or "false, true" in name:
        k = sq.SOURCE.kernel(name)
        smem = 0 if "simt" in name or "seed" in name else sq.MMA_SMEM
        if smem: k.max_dynamic_shared_size_bytes = smem
        print(f"  {name:36s} regs {k.num_regs:3d} local {k.local_size_bytes:4d} resident blocks {resident_blocks(k, 256, smem)}")
torch.backends.cuda.matmul.allow_tf32 = False
for dt in (torch.float32, torch.float16, torch.bfloat16):
    for m, n, tr in ((33, 7, False), (4096, 1024, False), (4096, 1000, True)):
        a = torch.randn(m, n, device="cuda").to(dt); w = (torch.randn(n, n, device="cuda") / n ** 0.5).to(dt)
        ref = a.double() @ (w.double().T if tr else w.double())
        ck.square_matmul_(a, w, transpose=tr); torch.cuda.synchronize()
        print(f"  {dt} m={m} n={n} transpose={tr}: rel err {float((a.double() - ref).norm() / ref.norm()):.2e}")
    for n in (1024, 4096):
        a = torch.randn(65536, n, device="cuda").to(dt); w = (torch.randn(n, n, device="cuda") / n ** 0.5).to(dt)
        for label, fn in (("ours", lambda: ck.square_matmul_(a, w)), ("torch", lambda: torch.matmul(a, w))):
            fn(); torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True)
            s.record(); [fn() for _ in range(3)]; e.record(); e.synchronize()
            ms = s.elapsed_time(e) / 3
            print(f"  {dt} 65536x{n} {label}: {ms:.3f} ms {2 * 65536 * n * n / ms / 1e9:.1f} TFLOP/s")
PY
timeout -s KILL ${TEST_TIMEOUT:-60} python3 -m pytest -v -rf -p no:cacheprovider --durations=8 \
    tests/test_square_matmul.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAIL|Error|passed|failed" "$OUT/pytest.log" | tail -40
timeout -s KILL ${BENCH_TIMEOUT:-50} python3 -m cupy_kernels bench --op square_matmul --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -v "^\s*$" "$OUT/bench.log" | tail -45
timeout -s KILL ${DEMO_TIMEOUT:-20} python3 scripts/square_matmul_attention.py 2>&1 | tee "$OUT/attention.log"
