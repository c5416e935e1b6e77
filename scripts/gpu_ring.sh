#!/usr/bin/env bash
# One device call (issue 4, norm_bwd_ring): the norm tests (TESTS_K: a -k filter), memcheck of the ring on clusters of
# 2 and 4, then scripts/norm_probe.py's backward rows (PROBE_SWITCHES) against the ring off (noring).
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider tests/test_norm.py ${TESTS_K:+-k "$TESTS_K"} \
    > "$OUT/pytest.log" 2>&1; echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -12
timeout -s KILL ${SAN_TIMEOUT:-120} compute-sanitizer --tool memcheck --print-limit 5 python3 -c "
import cupy, cupy_kernels.ops.norm as N
for rows, n, dt in ((300, 16384, 'bfloat16'), (70, 32768, 'float16'), (5, 16384, 'float32')):
    x = cupy.random.randn(rows, n).astype(dt); w = (cupy.random.rand(n) + 0.5).astype(dt); b = cupy.random.randn(n).astype(dt)
    y, m, r = N.norm_forward_impl(x, w, b, 1e-5, 'layer_norm')
    assert N.ring_plan(n, dt, 90)
    N.norm_backward_impl(x, x, w, b, m, r, 'layer_norm'); N.norm_backward_impl(x, y, w, b, None, r, 'layer_norm', True)
cupy.cuda.Device().synchronize(); print('ring memcheck ran')" > "$OUT/memcheck.log" 2>&1; echo "memcheck exit $?"; tail -4 "$OUT/memcheck.log"
timeout -s KILL ${PROBE_TIMEOUT:-240} python3 scripts/norm_probe.py --shapes 4,3 --ops "layer bwd,rms bwd" \
    --switches "${PROBE_SWITCHES:-noring,ring512}" --extra-shapes 2048x16384:float16,4096x24576:bfloat16 2>&1 | tee "$OUT/probe.log"
