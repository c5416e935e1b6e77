"""square_matmul_ / linear_ / InplaceLinear: in-place A <- A @ W (+ bias) against float64 products on
the device, over a grid of n and m, both W layouts, the unaligned paths, the original article's rung, peak
memory, and the error cases; the kernel choice and the launch plans' arguments on the CPU."""
import itertools

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import FLOATS, TOL, gpu, rng, torch, torch_gpu
from cupy_kernels._runtime import Deferred, dtype_name
from cupy_kernels.ops import square_matmul as sq
from planning import HOST, Array, Recorder, check_launch, fake_device

NS = (1, 7, 64, 1000, 1024, 2048, 4096, 8192)
MS = (1, 33, 4096, 65536)


# ---- helpers (device side: the big cases are too large for host references) ---------------------


def _gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(int(rng().integers(2 ** 62)))
    return g


def randn(shape, dtype, scale=1.0):
    """Fresh normal values (never zeros) on the device, rounded to dtype."""
    return (torch.randn(*shape, device="cuda", generator=_gen(), dtype=torch.float32) * scale).to(getattr(torch, dtype))


def rel(got, ref):
    got = got.double()
    if torch.isnan(got).any():
        return float("inf")
    return float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref).clamp_min(1e-300))


def reference(a, w, transpose, bias=None):
    w64 = w.detach().double()
    out = a.detach().double().reshape(-1, a.shape[-1]) @ (w64.T if transpose else w64)
    if bias is not None:
        out = out + bias.detach().double()
    return out.reshape(a.shape)


def check_product(m, n, dtype, transpose, via="torch", lead=None, variant="auto"):
    shape = (m, n) if lead is None else (*lead, n)
    a = randn(shape, dtype)
    w = randn((n, n), dtype, 1 / n ** 0.5)
    ref = reference(a, w, transpose)
    ptr = a.data_ptr()
    if variant != "auto":
        sq.square_matmul_impl(a, w, transpose, variant=variant)
    elif via == "torch":
        with torch.no_grad():
            out = ck.square_matmul_(a, w, transpose=transpose)
        assert out is a
    else:
        from cupy_kernels._runtime import to_cupy

        ac = to_cupy(a)
        assert ck.square_matmul_(ac, to_cupy(w), transpose=transpose) is ac
    assert a.data_ptr() == ptr
    err = rel(a, ref)
    assert err <= TOL[dtype], f"m={m} n={n} {dtype} transpose={transpose} {variant}: rel err {err:.2e}"
    return err


# ---- the grid of n and m ------------------------------------------------------------------------


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", MS)
def test_grid(m, n, dtype):
    check_product(m, n, dtype, False)


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", (33, 4096))
def test_grid_transposed(m, n, dtype):
    check_product(m, n, dtype, True)


@torch_gpu
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("n", NS + (129, 257, 4097))
def test_mma256(n, dtype):
    """The mma.sync tile (the half default off Hopper), whatever "auto" picks here, on both W layouts."""
    for m in (33, 4096):
        for transpose in (False, True):
            check_product(m, n, dtype, transpose, variant="mma256")


@torch_gpu
@pytest.mark.parametrize("variant", sq.HOPPER)
@pytest.mark.parametrize("transpose", (True, False), ids=("wT", "wN"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("n", (8, 64, 264, 1000, 1024, 2048, 4096, 8192))
def test_hopper(n, dtype, transpose, variant):
    """The Hopper kernels (compute capability 9.0 only; tma_cluster is the default there for aligned
    half inputs), both W layouts, m around the 128-row block (and the cluster's pair of them) and its
    partial last block."""
    if not sq.has_wgmma():
        pytest.skip("needs a compute capability 9.0 device")
    for m in (1, 33, 129, 4096) + ((65536,) if n == 4096 else ()):
        check_product(m, n, dtype, transpose, variant=variant)


@torch_gpu
@pytest.mark.parametrize("variant", sq.HOPPER)
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_hopper_bias(dtype, variant):
    """linear_ with a bias on the Hopper kernels."""
    if not sq.has_wgmma():
        pytest.skip("needs a compute capability 9.0 device")
    for n in (264, 1024):
        x = randn((1000, n), dtype)
        weight, bias = randn((n, n), dtype, 1 / n ** 0.5), randn((n,), dtype)
        ref = reference(x, weight, True, bias)
        sq.square_matmul_impl(x, weight, True, bias, variant=variant, op="linear_")
        assert rel(x, ref) <= TOL[dtype]


@torch_gpu
@pytest.mark.parametrize("variant", ("tma", "tma_cluster"))
def test_tma_repeated_calls_and_graph(variant):
    """The TMA kernels launched through cuLaunchKernel (tma_cluster: cuLaunchKernelEx with a cluster
    dimension): many calls in a row on torch's stream, then a CUDA graph replay (the descriptors are
    baked into the captured launch)."""
    if not sq.has_wgmma():
        pytest.skip("needs a compute capability 9.0 device")
    n = 1024
    a, w = randn((3000, n), "bfloat16"), randn((n, n), "bfloat16", 1 / n ** 0.5)
    ref = reference(a, w, False)
    for _ in range(3):
        ref = ref.float().to(torch.bfloat16).double() @ w.double()
    for _ in range(4):
        sq.square_matmul_impl(a, w, variant=variant)
    assert rel(a, ref) <= 4 * TOL["bfloat16"]
    b = randn((3000, n), "bfloat16")
    ref = reference(b, w, False)
    # the calls above planned this (shape, alignment): the captured call replays the plan (no compilation,
    # no module load inside the capture); its counters come from the graph's pool, zeroed by a captured memset
    graph = torch.cuda.CUDAGraph()
    keep = b.clone()
    with torch.cuda.graph(graph):
        sq.square_matmul_impl(b, w, variant=variant)
    b.copy_(keep)
    graph.replay()
    torch.cuda.synchronize()
    assert rel(b, ref) <= TOL["bfloat16"]


def test_choose_kernel():
    from cupy_kernels._runtime.tuning import tuned

    c = sq.choose_kernel
    assert c("float32", "auto", True, True) == "simt"
    assert c("bfloat16", "auto", True, True) == "tma_cluster"
    assert c("float16", "auto", True, False) == "mma256"   # unaligned rows: scalar-load mma path
    assert c("float16", "auto", False, True) == "mma256"   # not Hopper
    assert c("float16", "mma256", True, True) == "mma256"
    assert c("float16", "wgmma", True, True) == "wgmma"
    assert c("float32", "warp_per_row", False, False) == "warp_per_row"
    for variant in sq.HOPPER:
        with pytest.raises(ValueError, match="compute capability 9.0"):
            c("float16", variant, False, True)
        with pytest.raises(ValueError, match="float16 / bfloat16"):
            c("float32", variant, True, True)
    with tuned(sq, hopper_half="tma"):  # the choice is data
        assert c("bfloat16", "auto", True, True) == "tma"
    assert c("bfloat16", "auto", True, True) == "tma_cluster"


def test_kernel_names_read_as_what_they_are():
    assert sq.tiled_name("float16", True, True) == "sqmm_mma<half, sqmm::W::transposed, sqmm::Loads::vector>"
    assert sq.tiled_name("float32", False, False) == "sqmm_simt<sqmm::W::plain, sqmm::Loads::scalar>"
    assert sq.tma_name("bfloat16", False, 2) == "sqmm_tma<bfloat16, sqmm::W::plain, sqmm::Ctas::pair>"
    assert sq.warp_per_row_name("float32", True) == "sqmm_warp_per_row<float, sqmm::W::transposed>"
    names = sq.SOURCE.names + sq.SOURCE90.names
    assert len(names) == 18 + 12 and not [n for n in names if "true" in n or "false" in n]


@torch_gpu
def test_float32_refuses_mma_variants():
    a, w = randn((4, 8), "float32"), randn((8, 8), "float32")
    before = a.clone()
    with pytest.raises(ValueError, match="float16 / bfloat16"):
        sq.square_matmul_impl(a, w, variant="mma256")
    for retired in ("tiled", "mma128", "tma_direct"):
        with pytest.raises(ValueError, match="variant must be one of"):
            sq.square_matmul_impl(a, w, variant=retired)
    assert torch.equal(a, before)


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", (3, 127, 129, 1000, 4097))
def test_odd_sizes_and_cupy_path(n, dtype):
    for transpose in (False, True):
        check_product(1000, n, dtype, transpose, via="cupy")


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_leading_dims_and_empty(dtype):
    check_product(None, 96, dtype, False, lead=(2, 3, 17))
    a = randn((0, 64), dtype)
    assert ck.square_matmul_(a, randn((64, 64), dtype)) is a
    a = randn((5, 0), dtype)
    assert ck.square_matmul_(a, randn((0, 0), dtype)) is a


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", (1024, 1000))
def test_unaligned_base_pointer(dtype, n):
    """A view starting one element into its storage: not 16-byte aligned, so the scalar-load kernels."""
    m = 300
    for transpose, variant in ((False, "auto"), (True, "auto"), (False, "mma256"), (True, "mma256")):
        if variant != "auto" and dtype == "float32":
            continue
        buf = randn((m * n + 1,), dtype)
        a = buf[1:].view(m, n)
        wbuf = randn((n * n + 1,), dtype, 1 / n ** 0.5)
        w = wbuf[1:].view(n, n)
        ref = reference(a, w, transpose)
        head = buf[0].clone()
        sq.square_matmul_impl(a, w, transpose, variant=variant)
        assert rel(a, ref) <= TOL[dtype]
        assert buf[0] == head  # the element before the view is untouched


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_transposed_view_of_w(dtype):
    """w given as an F-contiguous view (w.T of a C-contiguous matrix) is used without a copy."""
    n, m = 1000, 513
    base = randn((n, n), dtype, 1 / n ** 0.5)
    for transpose in (False, True):
        a = randn((m, n), dtype)
        ref = reference(a, base.T, transpose)
        ck.square_matmul_(a, base.T, transpose=transpose)
        assert rel(a, ref) <= TOL[dtype]
    # a strided (neither C nor F) w is copied and still correct
    big = randn((2 * n, n), dtype, 1 / n ** 0.5)
    a = randn((m, n), dtype)
    ref = reference(a, big[::2], False)
    ck.square_matmul_(a, big[::2])
    assert rel(a, ref) <= TOL[dtype]


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", (7, 1000, 2048))
def test_warp_per_row_rung(dtype, n):
    """The original article's kernel (make-torch-inplace: a warp per row), the ladder's bottom rung."""
    from cupy_kernels._runtime import to_cupy

    for transpose in (False, True):
        a = randn((257, n), dtype)
        w = randn((n, n), dtype, 1 / n ** 0.5)
        ref = reference(a, w, transpose)
        sq.square_matmul_impl(to_cupy(a), to_cupy(w), transpose, variant="warp_per_row")
        assert rel(a, ref) <= TOL[dtype]


@torch_gpu
def test_warp_per_row_rung_refuses_large_n():
    a, w = randn((4, 2056), "float32"), randn((2056, 2056), "float32")
    before = a.clone()
    with pytest.raises(ValueError, match="n <= 2048"):
        sq.square_matmul_impl(a, w, variant="warp_per_row")
    with pytest.raises(ValueError, match="takes no bias"):
        sq.square_matmul_impl(a[:, :8].contiguous(), w[:8, :8].contiguous(), bias=w[0, :8].contiguous(),
                              variant="warp_per_row", op="linear_")
    assert torch.equal(a, before)


# ---- linear_ and the module ---------------------------------------------------------------------


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", (7, 1024, 1000))
def test_linear_(dtype, n):
    x = randn((3, 333, n), dtype)
    weight, bias = randn((n, n), dtype, 1 / n ** 0.5), randn((n,), dtype)
    ref = reference(x, weight, True, bias)
    with torch.no_grad():
        assert ck.linear_(x, weight, bias) is x
    assert rel(x, ref) <= TOL[dtype]
    x = randn((333, n), dtype)
    ref = reference(x, weight, True)
    ck.linear_(x, weight)
    assert rel(x, ref) <= TOL[dtype]


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_inplace_linear_module(dtype):
    from cupy_kernels.nn import InplaceLinear

    n = 512
    lin = torch.nn.Linear(n, n, device="cuda", dtype=getattr(torch, dtype))
    mod = InplaceLinear(n, device="cuda", dtype=getattr(torch, dtype))
    mod.load_state_dict(lin.state_dict())
    x = randn((4, 100, n), dtype)
    ref = reference(x, lin.weight, True, lin.bias)
    with torch.no_grad():
        out = mod(x)
    assert out is x and rel(x, ref) <= TOL[dtype]
    x = randn((100, n), dtype)
    ref = reference(x, lin.weight, True, lin.bias)
    out = InplaceLinear.from_linear(lin)(x)  # parameters need no grad: fine with grad mode on
    assert rel(out, ref) <= TOL[dtype]


# ---- memory: the whole point --------------------------------------------------------------------


@torch_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_peak_memory_within_one_percent_of_a(dtype):
    m, n = 65536, 1024
    a, w = randn((m, n), dtype), randn((n, n), dtype, 1 / n ** 0.5)
    ck.square_matmul_(a, w)  # compile and load outside the measurement
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        ck.square_matmul_(a, w)
        ck.linear_(a, w, w[0])
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra <= 0.01 * a.nbytes, f"{extra} bytes beyond a and w (a is {a.nbytes})"


# ---- errors (a left untouched) ------------------------------------------------------------------


@torch_gpu
def test_errors_on_device():
    a, w = randn((64, 32), "float32"), randn((32, 32), "float32")
    before = a.clone()
    with pytest.raises(TypeError, match="w has dtype float16"):
        ck.square_matmul_(a, w.half())
    with pytest.raises(ValueError, match=r"w must be square"):
        ck.square_matmul_(a, randn((32, 31), "float32"))
    with pytest.raises(ValueError, match="C-contiguous"):
        ck.square_matmul_(randn((32, 64), "float32").T, w)
    with pytest.raises(ValueError, match="overlaps"):
        ck.square_matmul_(a, a[:32])  # w is a view of a's first rows
    with pytest.raises(ValueError, match="overlaps"):
        ck.linear_(a, w, a[0])
    with pytest.raises(TypeError, match="float64"):
        ck.square_matmul_(a.double(), w.double())
    with pytest.raises(RuntimeError, match="requires grad"):
        ck.square_matmul_(a.clone().requires_grad_(), w)
    with pytest.raises(RuntimeError, match="requires grad"):
        ck.linear_(a, w.clone().requires_grad_())
    assert torch.equal(a, before)
    with torch.no_grad():  # inference with parameters that require grad is fine
        ck.linear_(a, w.clone().requires_grad_())
    assert not torch.equal(a, before)


@torch_gpu
def test_plan_replayed_and_overlap_checked_per_call():
    """A call plans once per (shapes, strides, alignment, ...); later calls replay the plan (its kernel, its zeroed
    counters, or none when a row block is one column tile) and still check the pointers: a w that overlaps a raises
    on a plan hit too."""
    for n, counters in ((300, [True]), (64, [])):  # 128-column tiles: three a row block, then one
        a, w = randn((256, n), "float32"), randn((n, n), "float32", 1 / n ** 0.5)
        sq.PLANS.clear()
        for _ in range(2):
            ref = reference(a, w, False)
            sq.square_matmul_impl(a, w)
            assert rel(a, ref) <= TOL["float32"]
        (entry,) = sq.PLANS.values()
        assert entry.plan.kernels == ("sqmm_simt<sqmm::W::plain, sqmm::Loads::vector>",)
        assert [ws.zero for ws in entry.plan.workspaces] == counters, n
    before = a.clone()
    with pytest.raises(ValueError, match="overlaps"):
        sq.square_matmul_impl(a, a[:n])  # the same key as (a, w): a hit
    assert len(sq.PLANS) == 1 and torch.equal(a, before)
    if sq.has_wgmma():
        a, w = randn((1000, 1024), "bfloat16"), randn((1024, 1024), "bfloat16", 1 / 32)
        sq.PLANS.clear()
        sq.square_matmul_impl(a, w)
        (entry,) = sq.PLANS.values()
        assert entry.plan.kernels == ("sqmm_tma<bfloat16, sqmm::W::plain, sqmm::Ctas::pair>",)


@gpu
def test_cupy_errors():
    import cupy

    a = cupy.ones((8, 4), dtype=cupy.float32)
    with pytest.raises(TypeError, match="w must be a cupy.ndarray"):
        ck.square_matmul_(a, np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="w must have 2 dimensions"):
        ck.square_matmul_(a, cupy.ones(4, dtype=cupy.float32))


def test_host_inputs_rejected():
    with pytest.raises(TypeError, match="a must be a cupy.ndarray or a CUDA torch.Tensor"):
        ck.square_matmul_(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    with pytest.raises(TypeError, match="x must be a cupy.ndarray"):
        ck.linear_([1.0], np.ones((1, 1)))


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_torch_cpu_and_grad_rules():
    a, w = torch.ones(4, 4), torch.eye(4)
    with pytest.raises(TypeError, match="a must be a CUDA tensor"):
        ck.square_matmul_(a, w)
    with pytest.raises(RuntimeError, match="a requires grad"):
        ck.square_matmul_(a.clone().requires_grad_(), w)
    with pytest.raises(RuntimeError, match="bias requires grad"):
        ck.linear_(a, w, torch.zeros(4, requires_grad=True))
    assert torch.equal(a, torch.ones(4, 4))


@torch_gpu
def test_torch_inplace_bumps_the_version_counter():
    """Eager calls run the kernels directly (no custom op): the in-place write must still be visible to
    autograd's saved-tensor check, as the custom op's mutates_args makes it."""
    g = rng()
    a = torch.tensor(g.standard_normal((33, 64)), dtype=torch.float32, device="cuda")
    w = torch.tensor(g.standard_normal((64, 64)), dtype=torch.float32, device="cuda")
    ref = (a.double() @ w.double()).float()
    before = a._version
    ck.square_matmul_(a, w)
    assert a._version > before
    assert float((a - ref).norm() / ref.norm()) < TOL["float32"]
    x = torch.randn(8, 64, device="cuda", requires_grad=True)
    y = torch.sigmoid(x)  # saves y for its backward
    with torch.no_grad():
        ck.linear_(y, w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_inplace_linear_state_dict_cpu():
    from cupy_kernels.nn import InplaceLinear

    lin = torch.nn.Linear(16, 16)
    mod = InplaceLinear(16)
    mod.load_state_dict(lin.state_dict())
    assert torch.equal(mod.weight, lin.weight) and torch.equal(mod.bias, lin.bias)
    assert not mod.weight.requires_grad
    nob = InplaceLinear(16, bias=False)
    nob.load_state_dict(torch.nn.Linear(16, 16, bias=False).state_dict())
    with pytest.raises(ValueError, match="square"):
        InplaceLinear.from_linear(torch.nn.Linear(16, 8))


def test_tile_schedule_and_limits():
    tiles_n, rbs, total, grid = sq.tile_schedule(65536, 4096, 128, 264)
    assert (tiles_n, rbs, total, grid) == (32, 512, 16384, 264)
    assert sq.tile_schedule(65536, 4097, 256, 132) == (17, 512, 17 * 512, 132)
    assert sq.tile_schedule(1, 1, 128, 264) == (1, 1, 1, 1)
    assert sq.max_n(264, 128) == sq.max_n(132, 256) == 33792 >= 8192
    assert sq.mma_smem() == 98304
    assert sq.tile_cols("float32") == 128 and sq.tile_cols("float16") == 256
    assert set(sq.VARIANTS) == {"auto", "tma_cluster", "tma", "wgmma", "mma256", "warp_per_row"}
    # clusters of two: tiles of two row blocks, row blocks rounded up to an even count, grid in clusters
    assert sq.tile_schedule(65536, 4096, 256, 66, 2) == (16, 512, 16 * 256, 66)
    assert sq.tile_schedule(129, 264, 256, 66, 2) == (2, 2, 2, 2)
    assert sq.tile_schedule(300, 1024, 256, 66, 2) == (4, 4, 8, 8)
    assert sq.WGMMA_SMEM == 4 * (128 * 64 + 64 * 256) * 2 + 1024
    assert sq.TMA_SMEM == 3 * (128 * 64 + 64 * 256) * 2 + 128 * 256 * 2 + 1024


# ---- launch plans on the CPU (a recording builder, no kernels loaded) ---------------------------------


class RecordingBuilder:
    def __init__(self, nbuffers):
        from cupy_kernels._runtime import Buffer

        self.Buffer = Buffer
        self.buffers = [Buffer(i) for i in range(nbuffers)]
        self.workspaces = []
        self.launches = []

    def workspace(self, nbytes, zero=False, persistent=None):
        w = self.Buffer(len(self.buffers) + len(self.workspaces), 256, nbytes, zero, persistent)
        self.workspaces.append(w)
        return w

    def launch(self, kernel, grid, block, args, shared_mem=0, cluster=1, after_previous=False):
        self.launches.append(dict(name=kernel.name, grid=grid, block=block, args=args, smem=shared_mem,
                                  cluster=cluster))


class FakeKernel:
    def __init__(self, name):
        self.name = name


def test_persistent_plan_arguments(monkeypatch):
    """The SIMT plan: one launch of at most one wave, the zeroed row-block counters as its only workspace, a's
    buffer standing in for an absent bias."""
    monkeypatch.setattr(sq, "resident_blocks", lambda kernel, threads, smem=0: 264)
    b = RecordingBuilder(2)
    a, w = b.buffers
    sq.plan_product(b, "simt", "float32", False, True, a, w, None, 65536, 4096)
    (ctrl,) = b.workspaces
    assert ctrl.zero and ctrl.nbytes == 4 * (1 + 512) and not ctrl.persistent
    (launch,) = b.launches
    assert launch["name"] == "sqmm_simt<sqmm::W::plain, sqmm::Loads::vector>"
    assert launch["grid"] == 264 and launch["block"] == 256 and launch["smem"] == 0
    args = launch["args"]
    assert args[0] is a and args[1] is w and args[2] is a and args[3] == 0 and args[6] is ctrl
    assert [type(v) for v in args[3:]] == [np.int32, np.int64, np.int32, type(ctrl), np.uint32, np.uint32]
    assert (int(args[4]), int(args[5]), int(args[7]), int(args[8])) == (65536, 4096, 32, 32 * 512)
    with pytest.raises(ValueError, match="column tiles"):  # n beyond the tiles one wave holds
        sq.plan_product(RecordingBuilder(2), "simt", "float32", False, True, a, w, None, 64, 264 * 128 + 1)


def test_tma_cluster_plan_arguments(monkeypatch):
    """The Hopper default's plan: TMA descriptors computed per call from the call's pointers (Deferred, 128 bytes
    each, from a and w), a cluster launch of two CTAs, the counters rounded up to whole clusters."""
    monkeypatch.setattr(sq.SOURCE90, "kernel", lambda name, shared_mem=0: FakeKernel(name))
    monkeypatch.setattr(sq, "max_active_clusters", lambda kernel, threads, smem, cluster: 66)
    from cupy_kernels._runtime import Deferred

    b = RecordingBuilder(3)
    a, w, bias = b.buffers
    sq.plan_product(b, "tma_cluster", "bfloat16", True, True, a, w, bias, 300, 1024, "linear_")
    (launch,) = b.launches
    assert launch["name"] == "sqmm_tma<bfloat16, sqmm::W::transposed, sqmm::Ctas::pair>"
    assert launch["cluster"] == 2 and launch["grid"] == 2 * 8 and launch["block"] == 384
    assert launch["smem"] == sq.TMA_SMEM
    map_a, map_w, *rest = launch["args"]
    assert isinstance(map_a, Deferred) and map_a.indices == (0,) and map_a.nbytes == 128
    assert isinstance(map_w, Deferred) and map_w.indices == (1,) and map_w.nbytes == 128
    assert rest[0] is a and rest[1] is bias and rest[2] == 1
    (ctrl,) = b.workspaces
    assert ctrl.zero and ctrl.nbytes == 4 * (1 + 4)  # 300 rows: 3 row blocks, rounded up to 4 (two clusters)


def test_warp_per_row_plan_limits():
    """The original article's kernel: no counters, a warp a row, refused for a bias or n > 2048 at plan time."""
    b = RecordingBuilder(3)
    a, w, bias = b.buffers
    with pytest.raises(ValueError, match="takes no bias"):
        sq.plan_product(b, "warp_per_row", "float32", False, False, a, w, bias, 4, 8)
    with pytest.raises(ValueError, match="n <= 2048"):
        sq.plan_product(b, "warp_per_row", "float32", False, False, a, w, None, 4, 2056)
    assert not b.launches and not b.workspaces


def test_every_launch_matches_its_kernel_signature(monkeypatch):
    """_build over every variant, dtype, transpose, W layout (plain, transposed view, strided copy), bias or none, n
    (of whole 16-byte packs, not, beyond the clusters that fit at once), m (beyond TMA's row coordinates), aligned
    and misaligned a, on sm_80 and sm_90: each launch passes its kernel's parameters (check_launch: the TMA maps
    128-byte structs computed from a's and w's pointers), with the call's m, n and bias; every declared instance of
    both sources is planned, the Hopper kernels on sm_90 only, and "auto" falls back where _build says."""
    calls = []
    monkeypatch.setattr(Recorder, "calls", calls)
    monkeypatch.setattr(sq, "PlanBuilder", Recorder)
    monkeypatch.setattr(sq, "check_like", lambda kind, x, op, name, device, dtypes=None: dtype_name(x))  # (Arrays)
    planned, chosen = {80: set(), 90: set()}, {}
    for cc in (80, 90):
        with fake_device(monkeypatch, cc, sq):
            for dtype, variant, trans, n, m, skew, w_form, bias in itertools.product(
                    sq.DTYPES, sq.VARIANTS, (False, True), (64, 1001, 20000), (300, 2 ** 31), (0, 2),
                    ("plain", "flip", "strided"), (None, "dense", "strided")):
                if m > 300 and (skew or w_form != "plain" or bias == "strided" or n > 64):
                    continue  # (the long m only for the kernel it changes)
                w = Array((n, n), dtype, {"plain": None, "flip": (1, n), "strided": (2 * n, 1)}[w_form], ptr=1 << 30)
                b = None if bias is None else Array((n,), dtype, (2,) if bias == "strided" else None, ptr=1 << 31)
                calls.clear()
                try:
                    e = sq._build(HOST, "square_matmul_", variant, trans, Array((m, n), dtype, ptr=(1 << 20) + skew),
                                  w, b, 0)
                except ValueError:  # a variant that does not apply
                    continue
                assert e.w_copy == (w_form == "strided") and e.bias_copy == (bias == "strided")
                (kernel, args, _), = calls
                a = dict(check_launch(kernel.source.filename, kernel.name, args))
                assert (a["m"], a["n"]) == (m, n), (kernel.name, m, n)
                assert ("W::transposed" in kernel.name) == (trans != (w_form == "flip")), kernel.name
                if "bias" in a:  # (warp_per_row takes none)
                    assert a["has_bias"] == (bias is not None) and (a["bias"] is a["a"]) == (bias is None), kernel.name
                if "map_a" in a:
                    assert isinstance(a["map_a"], Deferred) and (a["map_a"].indices, a["map_w"].indices) == ((0,), (1,))
                planned[cc].add(kernel.name)
                chosen[cc, dtype, variant, trans, n, m, skew, w_form, bias] = kernel.name
    auto = lambda cc, n, m=300, skew=0: chosen[cc, "float16", "auto", False, n, m, skew, "plain", None]  # noqa: E731
    assert auto(90, 64) == sq.tma_name("float16", False, 2)
    assert auto(90, 20000) == sq.tma_name("float16", False, 1)  # more column tiles than clusters fit at once
    assert auto(90, 64, 2 ** 31) == sq.wgmma_name("float16", False)  # rows beyond TMA's coordinates
    assert auto(90, 1001) == auto(90, 64, skew=2) == auto(80, 1001) == sq.tiled_name("float16", False, False)
    assert auto(80, 64) == auto(80, 64, 2 ** 31) == sq.tiled_name("float16", False, True)
    declared = set(sq.SOURCE.names) | set(sq.SOURCE90.names)
    assert planned[80] | planned[90] == declared, (declared - planned[80] - planned[90])
    assert planned[80] == set(sq.SOURCE.names) and planned[90] >= set(sq.SOURCE90.names)
