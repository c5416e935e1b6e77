#!/usr/bin/env bash
# One device call (issue 4, pipelined long rows): the forward tests of softmax / norm, the probe A/B of the
# long-row ops against BASE_PKG (a whole older checkout), then memcheck and racecheck of the pipelined
# kernels on a small case. Logs to $OUT.
set -u
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout -s KILL ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider tests/test_softmax.py tests/test_norm.py \
    ${TESTS:+-k "$TESTS"} > "$OUT/pytest.log" 2>&1; echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -8
timeout -s KILL ${PROBE_TIMEOUT:-200} python3 scripts/norm_probe.py ${BASE_PKG:+--base-pkg $BASE_PKG} --shapes "${SHAPES:-5}" \
    --ops "${OPS:-softmax fwd,log_softmax fwd,layer fwd,rms fwd}" 2>&1 | tee "$OUT/probe.log"
case="import cupy; from cupy_kernels.ops import norm as N, softmax as S
for dt, n in (('float32', 70004), ('float16', 70008)):
    x = cupy.random.standard_normal((7, n), dtype=cupy.float32).astype(dt)
    w, b = (cupy.random.random(n) + 0.5).astype(dt), cupy.random.standard_normal(n).astype(dt)
    for m in ('softmax', 'log_softmax'):
        S.softmax_backward_impl(S.softmax_impl(x, -1, m), x, -1, m)
    for mode, bb in (('layer_norm', b), ('rms_norm', None)):
        y, mean, rstd = N.norm_forward_impl(x, w, bb, 1e-5, mode)
        N.norm_backward_impl(x, x, w, bb, mean, rstd, mode)
        N.norm_backward_impl(x, y, w, bb, None, rstd, mode, from_output=True)
cupy.cuda.Device().synchronize()"
for tool in memcheck racecheck; do
  timeout -s KILL ${SAN_TIMEOUT:-120} compute-sanitizer --tool $tool --error-exitcode 9 python3 -c "$case" > "$OUT/$tool.log" 2>&1
  echo "$tool exit $?"; tail -2 "$OUT/$tool.log"
done
