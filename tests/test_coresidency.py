"""Co-residency: some kernels spin-wait across blocks and assume every block of their grid is resident at once (long
softmax / norm rows whose blocks meet in memory, the norm backward's clusters, the persistent square_matmul_ with
its row-block barrier). What happens when another stream already holds SMs with a long-running kernel?

A CuPy RawKernel ("the holder") takes every thread slot of every other SM (two 1024-thread blocks on each SM whose
id is even; blocks landing elsewhere exit at once) on stream A and spins; the op is then called on stream B,
where it gets the other half of the chip. Two ways:

- finite: the holder spins ~1.5 s and ends. Every op must return the right result (late, perhaps).
- waits_for_op: the holder waits for a flag that stream B sets after the op (a persistent kernel that waits on
  other work, as communication kernels do), giving up only after SAFETY_S. An op that needs its whole grid
  resident cannot finish before the holder gives up: the test fails with the time it took (in real use: a hang).

Each case runs in its own process with a timeout, so a hang fails the test instead of freezing the suite."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conftest import gpu
from oracle import run_python

SAFETY_S = 12.0     # the waiting holder gives up after this long
FINITE_S = 1.5      # the finite holder's spin
TIMEOUT_S = 120.0   # the whole child process

HOLD_SRC = r"""
extern "C" __global__ void __launch_bounds__(1024, 2)
hold_sms(int* taken, const volatile int* release, unsigned long long max_ns, int* held, int every) {
    __shared__ int keep;
    if (threadIdx.x == 0) {
        unsigned int sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        keep = (sm % every == 0) && atomicAdd(&taken[sm & 1023], 1) < 2;
        if (keep) atomicAdd(held, 1);
    }
    __syncthreads();
    if (!keep) return;
    if (threadIdx.x == 0) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do {
            __nanosleep(10000);
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        } while (*release == 0 && t - t0 < max_ns);
    }
    __syncthreads();
}

extern "C" __global__ void release_sms(int* release) { *release = 1; }
"""


# ---- the ops (CuPy inputs): name -> setup() returning run(), which returns the result ----------------


def _randn(shape, dtype="float32", scale=1.0):
    """Normal values on the device, made on the host (no CuPy arithmetic on bfloat16, no cuRAND needed)."""
    from conftest import cupy_array

    x = np.random.default_rng(1).standard_normal(shape, dtype=np.float64 if dtype == "float64" else np.float32)
    if scale != 1.0:
        x *= scale
    return cupy_array(x, dtype)


def _copy(a):
    """A copy on the current stream (a byte copy: any dtype)."""
    import cupy

    out = cupy.empty_like(a)
    out.data.copy_from_device_async(a.data, a.nbytes)
    return out


def _softmax(log=False, dtype="float32", shape=(256, 262144)):
    import cupy_kernels as ck

    x = _randn(shape, dtype)
    return lambda: (ck.log_softmax if log else ck.softmax)(x)


def _softmax_backward(shape=(256, 262144)):
    import cupy_kernels as ck

    y, dy = ck.softmax(_randn(shape)), _randn(shape)
    return lambda: ck.softmax_backward(y, dy)


def _norm_forward(mode, shape, dtype="float32"):
    import cupy_kernels as ck

    x, w = _randn(shape, dtype), _randn(shape[-1:], dtype)
    if mode == "layer_norm":
        return lambda: ck.layer_norm(x, w, w)
    return lambda: ck.rms_norm(x, w)


def _norm_backward(mode, shape, dtype):
    import cupy_kernels as ck

    x, dy = _randn(shape, dtype), _randn(shape, dtype)
    w = _randn(shape[-1:], dtype)
    if mode == "layer_norm":
        _, mean, rstd = ck.layer_norm_forward(x, w, w)
        return lambda: ck.layer_norm_backward(dy, x, w, w, mean, rstd)
    _, rstd = ck.rms_norm_forward(x, w)
    return lambda: ck.rms_norm_backward(dy, x, w, rstd)


def _square_matmul(shape, dtype):
    import cupy_kernels as ck

    a0, w = _randn(shape, dtype), _randn((shape[-1], shape[-1]), dtype, scale=shape[-1] ** -0.5)
    return lambda: ck.square_matmul_(_copy(a0), w)


def _sum(shape, axis):
    import cupy_kernels as ck

    x = _randn(shape)
    return lambda: ck.sum(x, axis=axis)


def _timex():
    import cupy_kernels as ck

    w, k = _randn((768, 768), scale=768 ** -0.5), _randn((32, 768, 768))
    return lambda: ck.timex(w, k)


CASES = {
    # blocks of a row meet in memory (pipelined parts, exchange)
    "softmax-256x262144-f32": lambda: _softmax(),
    "log_softmax-256x262144-f32": lambda: _softmax(log=True),
    "softmax-64x100000-f64": lambda: _softmax(dtype="float64", shape=(64, 100000)),
    "softmax_backward-256x262144-f32": lambda: _softmax_backward(),
    "layer_norm-256x262144-f32": lambda: _norm_forward("layer_norm", (256, 262144)),
    "rms_norm-256x262144-f32": lambda: _norm_forward("rms_norm", (256, 262144)),
    "layer_norm_backward-256x262144-f32": lambda: _norm_backward("layer_norm", (256, 262144), "float32"),
    # clusters (sm_90: a row over a cluster, sums in distributed shared memory, ring of stages)
    "layer_norm_backward-1024x32768-bf16": lambda: _norm_backward("layer_norm", (1024, 32768), "bfloat16"),
    "rms_norm_backward-1024x16384-bf16": lambda: _norm_backward("rms_norm", (1024, 16384), "bfloat16"),
    # persistent grids with a row-block barrier
    "square_matmul_-65536x1024-f32": lambda: _square_matmul((65536, 1024), "float32"),
    "square_matmul_-65536x2048-bf16": lambda: _square_matmul((65536, 2048), "bfloat16"),
    "square_matmul_-16384x4096-f16": lambda: _square_matmul((16384, 4096), "float16"),
    # controls: no waits between blocks
    "sum-full-64M": lambda: _sum((1 << 26,), None),
    "sum-rows-8x4M": lambda: _sum((8, 1 << 22), 1),
    "timex-32x768x768": lambda: _timex(),
}


def _as_list(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _max_rel_diff(got, want) -> float:
    """max |got - want| / max |want| over the results (on the host: any dtype)."""
    import cupy

    worst = 0.0
    for g, w in zip(_as_list(got), _as_list(want)):
        if g is None and w is None:
            continue
        g64, w64 = cupy.asnumpy(g).astype(np.float64), cupy.asnumpy(w).astype(np.float64)
        if np.isnan(g64).any() and not np.isnan(w64).any():
            return float("inf")
        scale = float(np.abs(w64).max()) if w64.size else 1.0
        worst = max(worst, float(np.abs(g64 - w64).max()) / (scale or 1.0) if w64.size else 0.0)
    return worst


def child(name: str, mode: str, every: int = 2) -> dict:
    """In the child process: the op once alone (kernels compiled, the reference), then on stream B while the holder
    occupies SMs on stream A. Returns what happened (printed as one JSON line)."""
    import cupy

    run = CASES[name]()
    want = run()
    dev = cupy.cuda.Device()
    dev.synchronize()
    sms = dev.attributes["MultiProcessorCount"]
    module = cupy.RawModule(code=HOLD_SRC)
    hold, release_kernel = module.get_function("hold_sms"), module.get_function("release_sms")
    taken = cupy.zeros(1024, dtype=cupy.int32)
    release = cupy.zeros(1, dtype=cupy.int32)
    held = cupy.zeros(1, dtype=cupy.int32)
    max_ns = int((FINITE_S if mode == "finite" else SAFETY_S) * 1e9)
    dev.synchronize()
    a = cupy.cuda.Stream(non_blocking=True)
    b = cupy.cuda.Stream(non_blocking=True)
    start = time.monotonic()
    with a:
        hold((4 * sms,), (1024,), (taken, release, np.uint64(max_ns), held, np.int32(every)))
    time.sleep(0.3)  # the holder's blocks are placed (or gone) by now
    with b:
        launched = time.monotonic()
        got = run()
        returned = time.monotonic() - launched
        if mode == "waits_for_op":
            release_kernel((1,), (1,), (release,))
    b.synchronize()
    op_done = time.monotonic() - launched
    a.synchronize()
    total = time.monotonic() - start
    return {"name": name, "mode": mode, "sms": sms, "held_blocks": int(held.get()[0]),
            "op_returned_s": returned, "op_done_s": op_done, "total_s": total,
            "max_rel_diff": _max_rel_diff(got, want)}


CHILD = """
import json, sys
sys.path[:0] = ["{root}", "{tests}"]
import test_coresidency as t
print("RESULT " + json.dumps(t.child({name!r}, {mode!r})), flush=True)
"""


@gpu
@pytest.mark.parametrize("mode", ["finite", "waits_for_op"])
@pytest.mark.parametrize("name", list(CASES))
def test_op_beside_a_kernel_that_holds_sms(name, mode):
    from oracle import ROOT

    code = CHILD.format(root=ROOT, tests=f"{ROOT}/tests", name=name, mode=mode)
    rc, out, err, secs = run_python(code, timeout=TIMEOUT_S)
    assert rc is not None, (f"{name} ({mode}): no result after {secs:.0f} s: the op hung beside a kernel holding "
                            f"half the SMs\n{out[-2000:]}\n{err[-2000:]}")
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert rc == 0 and lines, f"{name} ({mode}): rc={rc}\n{out[-2000:]}\n{err[-3000:]}"
    r = json.loads(lines[-1][len("RESULT "):])
    print(r)
    assert r["held_blocks"] > 0, f"{name}: the holder held no SM ({r})"
    assert r["max_rel_diff"] <= 1e-6, f"{name} ({mode}): wrong result beside the holder ({r})"
    if mode == "waits_for_op":
        assert r["op_done_s"] < SAFETY_S / 2, (
            f"{name}: finished only after {r['op_done_s']:.1f} s, when the holder gave up its SMs ({SAFETY_S} s): the "
            f"op needs all its blocks resident at once, and beside a kernel that waits for it, it would hang ({r})")
    else:
        assert r["total_s"] < TIMEOUT_S, r
