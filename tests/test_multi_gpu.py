"""Devices and streams: every op on tensors of one GPU while another is current (both ways), launched on the current
stream of the tensor's device (a non-default stream whose inputs are written only after a long sleep on it: a launch
on any other stream reads them too early), CuPy arrays of device 1 under `cupy.cuda.Device(0)`, autograd backward on
cuda:1. Needs two GPUs; the last test (two streams of one device running different ops at once) needs one."""
from __future__ import annotations

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import HAS_TORCH_CUDA, torch, torch_gpu
from oracle import assert_close, gpu_count, run_python

TWO = gpu_count() >= 2 and HAS_TORCH_CUDA and torch.cuda.device_count() >= 2
two_gpus = pytest.mark.skipif(not TWO, reason="needs two or more CUDA devices (and torch with CUDA)")
SLEEP_CYCLES = 100_000_000  # ~50-70 ms of one SM spinning: longer than any launch gap


def F():
    return torch.nn.functional


def _rand(dev, *shape, scale=1.0, shift=0.0):
    return torch.randn(*shape, device=dev, dtype=torch.float64).mul_(scale).add_(shift).float()


def _weight(dev, n):
    return torch.rand(n, device=dev).add_(0.5)


def _ln_backward(x, w, b, dy):
    _, mean, rstd = ck.layer_norm_forward(x, w, b)
    return ck.layer_norm_backward(dy, x, w, b, mean, rstd)


def _ln_backward_ref(x, w, b, dy):
    xs = [t.double().requires_grad_() for t in (x, w, b)]
    return torch.autograd.grad(F().layer_norm(xs[0], (x.shape[-1],), xs[1], xs[2], 1e-5), xs, dy.double())


def _timex_ref(w, k, eps=0.0):
    T = k.shape[-1]
    return eps + F().conv1d(F().pad(k.double(), (T - 1, 0)), w.double().unsqueeze(1), groups=k.shape[1])


def _timex_backward_ref(w, k, g):
    wd, kd = w.double().requires_grad_(), k.double().requires_grad_()
    return torch.autograd.grad(_timex_ref(wd, kd), (wd, kd), g.double())


# name -> (inputs on a device, our call, the float64 torch reference); calls returning a tuple are compared entry-wise
OPS = {
    "sum-rows": (lambda d: [_rand(d, 300, 1000, shift=1)], lambda x: ck.sum(x, axis=1), lambda x: x.double().sum(1)),
    "sum-full": (lambda d: [_rand(d, 1 << 20, shift=1)], lambda x: ck.sum(x), lambda x: x.double().sum()),
    "mean-columns": (lambda d: [_rand(d, 3000, 70, shift=1)], lambda x: ck.mean(x, axis=0),
                     lambda x: x.double().mean(0)),
    "max": (lambda d: [_rand(d, 70, 3000)], lambda x: ck.max(x, axis=-1), lambda x: x.double().amax(-1)),
    "min": (lambda d: [_rand(d, 5, 300, 7)], lambda x: ck.min(x, axis=(0, 2)), lambda x: x.double().amin((0, 2))),
    "softmax": (lambda d: [_rand(d, 64, 5000, scale=3)], lambda x: ck.softmax(x), lambda x: torch.softmax(x.double(), -1)),
    "softmax-long-rows": (lambda d: [_rand(d, 4, 70000, scale=3)], lambda x: ck.softmax(x),
                          lambda x: torch.softmax(x.double(), -1)),
    "log_softmax-axis0": (lambda d: [_rand(d, 300, 33, scale=3)], lambda x: ck.log_softmax(x, axis=0),
                          lambda x: torch.log_softmax(x.double(), 0)),
    "softmax_": (lambda d: [_rand(d, 33, 1000, scale=3)], lambda x: ck.softmax_(x.clone()),
                 lambda x: torch.softmax(x.double(), -1)),
    "softmax_backward": (lambda d: [torch.softmax(_rand(d, 40, 3000), -1), _rand(d, 40, 3000)],
                         lambda y, dy: ck.softmax_backward(y, dy),
                         lambda y, dy: y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))),
    "layer_norm": (lambda d: [_rand(d, 96, 1000, scale=2, shift=0.5), _weight(d, 1000), _rand(d, 1000)],
                   lambda x, w, b: ck.layer_norm(x, w, b),
                   lambda x, w, b: F().layer_norm(x.double(), (1000,), w.double(), b.double(), 1e-5)),
    "layer_norm-long-rows": (lambda d: [_rand(d, 3, 70000, scale=2, shift=0.5), _weight(d, 70000), _rand(d, 70000)],
                             lambda x, w, b: ck.layer_norm(x, w, b),
                             lambda x, w, b: F().layer_norm(x.double(), (70000,), w.double(), b.double(), 1e-5)),
    "rms_norm": (lambda d: [_rand(d, 96, 1000, scale=2), _weight(d, 1000)], lambda x, w: ck.rms_norm(x, w),
                 lambda x, w: F().rms_norm(x.double(), (1000,), w.double(), 1e-6)),
    "layer_norm_": (lambda d: [_rand(d, 96, 1000, scale=2), _weight(d, 1000), _rand(d, 1000)],
                    lambda x, w, b: ck.layer_norm_(x.clone(), w, b),
                    lambda x, w, b: F().layer_norm(x.double(), (1000,), w.double(), b.double(), 1e-5)),
    "rms_norm_": (lambda d: [_rand(d, 96, 1000, scale=2), _weight(d, 1000)], lambda x, w: ck.rms_norm_(x.clone(), w),
                  lambda x, w: F().rms_norm(x.double(), (1000,), w.double(), 1e-6)),
    "layer_norm_backward": (lambda d: [_rand(d, 300, 1024, scale=2), _weight(d, 1024), _rand(d, 1024), _rand(d, 300, 1024)],
                            _ln_backward, _ln_backward_ref),
    "timex": (lambda d: [_rand(d, 8, 256, scale=0.06), _rand(d, 16, 8, 256)], lambda w, k: ck.timex(w, k),
              lambda w, k: _timex_ref(w, k)),
    "timex_backward": (lambda d: [_rand(d, 8, 200, scale=0.07), _rand(d, 4, 8, 200), _rand(d, 4, 8, 200)],
                       lambda w, k, g: ck.timex_backward(w, k, g), _timex_backward_ref),
    "pad": (lambda d: [_rand(d, 3, 40, 50)], lambda x: ck.pad(x, ((0, 0), (3, 2), (5, 4)), mode="reflect"),
            lambda x: F().pad(x.double(), (5, 4, 3, 2), mode="reflect")),
    "square_matmul_": (lambda d: [_rand(d, 300, 256), _rand(d, 256, 256, scale=1 / 16)],
                       lambda a, w: ck.square_matmul_(a.clone(), w), lambda a, w: a.double() @ w.double()),
    "linear_": (lambda d: [_rand(d, 300, 256).half(), _rand(d, 256, 256, scale=1 / 16).half(), _rand(d, 256).half()],
                lambda x, w, b: ck.linear_(x.clone(), w, b),
                lambda x, w, b: x.double() @ w.double().t() + b.double()),
}


def _compare(got, want, dev, what):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, torch.Tensor) and g.device == torch.device(dev), f"{what}[{i}]: on {g.device}, not {dev}"
        dtype = "float16" if g.dtype == torch.float16 else "float32"
        assert_close(g, w, dtype, k=2, what=f"{what}[{i}]")


@two_gpus
@pytest.mark.parametrize("tensors_on, current", [(1, 0), (0, 1)], ids=["tensors-on-1-current-0", "tensors-on-0-current-1"])
@pytest.mark.parametrize("op", list(OPS))
def test_tensors_of_another_device(op, tensors_on, current):
    make, call, ref = OPS[op]
    dev = f"cuda:{tensors_on}"
    with torch.cuda.device(tensors_on):
        inputs = make(dev)
    torch.cuda.synchronize(tensors_on)
    with torch.cuda.device(current):
        got = call(*inputs)
    torch.cuda.synchronize(tensors_on)
    _compare(got, ref(*inputs), dev, f"{op} on {dev}, current cuda:{current}")


@two_gpus
@pytest.mark.parametrize("tensors_on, current", [(1, 0), (0, 1)], ids=["tensors-on-1-current-0", "tensors-on-0-current-1"])
@pytest.mark.parametrize("op", list(OPS))
def test_launches_on_the_tensor_devices_current_stream(op, tensors_on, current):
    """On a non-default stream s of the tensors' device, the inputs are written after a long sleep on s and the op is
    called at once (another device current): launched on s, it sees the inputs; launched anywhere else it reads them
    before they are written. Results are checked after s.synchronize() alone."""
    make, call, ref = OPS[op]
    dev = f"cuda:{tensors_on}"
    with torch.cuda.device(tensors_on):
        inputs = make(dev)
        staged = [torch.zeros_like(t) for t in inputs]
        s = torch.cuda.Stream(device=tensors_on)
    torch.cuda.synchronize(tensors_on)
    with torch.cuda.stream(s):  # (makes the stream's device current)
        with torch.cuda.device(tensors_on):
            torch.cuda._sleep(SLEEP_CYCLES)
            for dst, src in zip(staged, inputs):
                dst.copy_(src)
        with torch.cuda.device(current):
            assert torch.cuda.current_device() == current
            got = call(*staged)
    s.synchronize()
    _compare(got, ref(*inputs), dev, f"{op} on {dev}'s stream, current cuda:{current}")


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# name -> (our call, NumPy reference); in-place calls get a copy made on the array's own device
CUPY_OPS = {
    "sum": (lambda x: ck.sum(x, axis=1), lambda x: x.sum(1)),
    "max": (lambda x: ck.max(x), lambda x: x.max()),
    "softmax": (lambda x: ck.softmax(x), _np_softmax),
    "softmax_": (lambda x: ck.softmax_(x), _np_softmax),
    "rms_norm": (lambda x: ck.rms_norm(x), lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)),
    "layer_norm_": (lambda x: ck.layer_norm_(x),
                    lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
    "pad": (lambda x: ck.pad(x, ((1, 2), (3, 0)), mode="wrap"), lambda x: np.pad(x, ((1, 2), (3, 0)), mode="wrap")),
}


@two_gpus
@pytest.mark.parametrize("op", list(CUPY_OPS))
def test_cupy_arrays_of_device_1_under_device_0(op):
    import cupy

    call, ref = CUPY_OPS[op]
    host = np.random.default_rng().standard_normal((70, 3000)).astype(np.float32)
    with cupy.cuda.Device(1):
        x = cupy.asarray(host)
    with cupy.cuda.Device(0):
        got = call(x)
        assert cupy.cuda.Device().id == 0
    assert got.device.id == 1, f"{op}: result on cuda:{got.device.id}"
    with cupy.cuda.Device(1):
        got_host = cupy.asnumpy(got)
    assert_close(got_host, ref(host.astype(np.float64)), "float32", k=2, what=f"cupy {op} on device 1")


AUTOGRAD = {
    "layer_norm": (lambda d: [_rand(d, 64, 700, scale=2), _weight(d, 700), _rand(d, 700)], lambda x, w, b: ck.layer_norm(x, w, b),
                   lambda x, w, b: F().layer_norm(x, (700,), w, b, 1e-5)),
    "layer_norm_": (lambda d: [_rand(d, 64, 700, scale=2), _weight(d, 700), _rand(d, 700)],
                    lambda x, w, b: ck.layer_norm_(x * 2, w, b), lambda x, w, b: F().layer_norm(x * 2, (700,), w, b, 1e-5)),
    "rms_norm": (lambda d: [_rand(d, 64, 700, scale=2), _weight(d, 700)], lambda x, w: ck.rms_norm(x, w),
                 lambda x, w: F().rms_norm(x, (700,), w, 1e-6)),
    "softmax": (lambda d: [_rand(d, 64, 3000, scale=3)], lambda x: ck.softmax(x), lambda x: torch.softmax(x, -1)),
    "log_softmax": (lambda d: [_rand(d, 64, 30, scale=3)], lambda x: ck.log_softmax(x, axis=0),
                    lambda x: torch.log_softmax(x, 0)),
    "softmax_": (lambda d: [_rand(d, 64, 3000, scale=3)], lambda x: ck.softmax_(x * 2), lambda x: torch.softmax(x * 2, -1)),
    "sum": (lambda d: [_rand(d, 64, 300)], lambda x: ck.sum(x, axis=0), lambda x: x.sum(0)),
    "mean": (lambda d: [_rand(d, 64, 300)], lambda x: ck.mean(x), lambda x: x.mean()),
    "timex": (lambda d: [_rand(d, 8, 128, scale=0.09), _rand(d, 4, 8, 128)], lambda w, k: ck.timex(w, k, 0.5),
              lambda w, k: _timex_ref(w, k, 0.5)),
    "pad": (lambda d: [_rand(d, 2, 30, 40)], lambda x: ck.pad(x, ((0, 0), (2, 2), (1, 3)), mode="symmetric"),
            lambda x: _symmetric_pad_ref(x)),
}


def _symmetric_pad_ref(x):
    # numpy's 'symmetric' (the edge repeated) as a torch gather, so autograd gives the reference gradient
    def index(n, before, after):
        k = np.arange(-before, n + after)
        return torch.from_numpy(np.where(k < 0, -k - 1, np.where(k >= n, 2 * n - 1 - k, k))).to(x.device)

    y = x.index_select(1, index(x.shape[1], 2, 2))
    return y.index_select(2, index(x.shape[2], 1, 3))


@two_gpus
@pytest.mark.parametrize("op", list(AUTOGRAD))
def test_autograd_backward_on_cuda1(op):
    make, call, ref = AUTOGRAD[op]
    with torch.cuda.device(1):
        inputs = [t.requires_grad_() for t in make("cuda:1")]
        refs = [t.detach().double().requires_grad_() for t in inputs]
    with torch.cuda.device(0):
        y = call(*inputs)
        assert y.device == torch.device("cuda:1")
        g = torch.randn_like(y)
        y.backward(g)
    want = ref(*refs)
    want.backward(g.double())
    assert_close(y, want, "float32", k=2, what=f"{op} forward on cuda:1")
    for i, (t, r) in enumerate(zip(inputs, refs)):
        assert t.grad is not None and t.grad.device == torch.device("cuda:1"), f"{op}: grad {i}"
        assert_close(t.grad, r.grad, "float32", k=3, scale=float(g.abs().max()), what=f"{op} grad {i} on cuda:1")


TWO_STREAMS = r'''
import sys, torch
import cupy_kernels as ck
torch.manual_seed(0)
x = torch.randn(256, 262144, device="cuda")               # long softmax rows: blocks of a row meet in memory
a = torch.randn(1024, 32768, device="cuda", dtype=torch.bfloat16)
w = (torch.rand(32768, device="cuda") + 0.5).to(torch.bfloat16)
b = torch.randn(32768, device="cuda", dtype=torch.bfloat16)
dy = torch.randn_like(a)
_, mean, rstd = ck.layer_norm_forward(a, w, b)
want_y = ck.softmax(x)
want_g = ck.layer_norm_backward(dy, a, w, b, mean, rstd)
torch.cuda.synchronize()
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
ys, gs = [], []
for i in range(ROUNDS):
    with torch.cuda.stream(s1):
        ys.append(ck.softmax(x))
    with torch.cuda.stream(s2):
        gs.append(ck.layer_norm_backward(dy, a, w, b, mean, rstd))
torch.cuda.synchronize()
bad = [i for i, y in enumerate(ys) if not torch.equal(y, want_y)]
bad += [("g", i) for i, g in enumerate(gs) if not all(torch.equal(p, q) for p, q in zip(g, want_g))]
print("BAD", bad) if bad else print("OK")
sys.exit(1 if bad else 0)
'''


@torch_gpu
def test_two_streams_of_one_device_at_once():
    """Long softmax rows on s1 and a layer_norm backward (clusters meeting in distributed shared memory on sm_90) on
    s2, alternated ROUNDS times so the kernels overlap: every result equals the serial one (both are deterministic).
    In a subprocess with a timeout: kernels that each wait for their own blocks could wait on each other forever."""
    code = TWO_STREAMS.replace("ROUNDS", "8")
    rc, out, err, secs = run_python(code, timeout=300)
    assert rc is not None, f"hang: no result after {secs:.0f} s (two co-resident-grid kernels waiting on each other?)"
    assert rc == 0 and "OK" in out, f"rc={rc}\n{out}\n{err[-3000:]}"
