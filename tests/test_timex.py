"""timex (RWKV causal depthwise long convolution): forward, backward, ladder, torch op, errors.

References are float64 on the host (FFT, checked against the loop definition), on fresh random inputs
rounded to the tested dtype; every output and workspace the op allocates is NaN-poisoned first (the `poison`
fixture). On the CPU: the references, the kernels' index arithmetic (emulated), the dispatch rules, every
declared instance reachable by a variant, and the host path (plans, copies, autograd) with the driver stubbed."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import cupy_kernels as ck
from conftest import TOL, cupy_array, gpu, rel_err, rng, rounded, to_f64, torch_gpu
from cupy_kernels._runtime.device import DeviceProps
from cupy_kernels._runtime.launch import Buffer, PlanBuilder, _Launch
from cupy_kernels.ops import timex as tx
from planning import Recorder as CallRecorder
from planning import check_launch, fake_device

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

DTYPES = ("float32", "float16", "bfloat16", "float64")
TF32X3_TOL = 5e-5  # the opt-in split-precision TF32 variant (float32 default: 1e-5)
SHAPES = [(1, 1, 1), (2, 3, 5), (3, 2, 127), (4, 3, 1000), (1, 2, 4097), (33, 5, 257), (9, 4, 300), (5, 1, 2)]
TILES = dict(tx.TUNING.tiled_tiles)


# ---- host references (CPU) ----------------------------------------------------------------------


def loops_backward(w, k, g):
    B, C, T = k.shape
    gk = np.zeros((B, C, T))
    gw = np.zeros((C, T))
    for t in range(T):
        for u in range(t + 1):
            gk[:, :, u] += g[:, :, t] * w[None, :, T - 1 - t + u]
            gw[:, T - 1 - t + u] += (g[:, :, t] * k[:, :, u]).sum(0)
    return gw, gk


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 17), (1, 1, 64)])
def test_fft_reference_matches_the_definition(shape):
    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    eps = float(r.standard_normal())
    assert rel_err(tx.reference(w, k, eps), tx.reference_loops(w, k, eps)) < 1e-13
    gw, gk = tx.reference_backward(w, k, g)
    lw, lk = loops_backward(w, k, g)
    assert rel_err(gw, lw) < 1e-13 and rel_err(gk, lk) < 1e-13
    # the torch formulation the op replaces
    if torch is not None:
        tw, tk = torch.tensor(w), torch.tensor(k)
        ref = eps + torch.nn.functional.conv1d(torch.nn.functional.pad(tk, (T - 1, 0)), tw.unsqueeze(1), groups=C)
        assert rel_err(ref.numpy(), tx.reference(w, k, eps)) < 1e-13


def test_backward_reference_is_the_gradient():
    """<g, out(w, k)> differentiated numerically in a random direction matches the reference grads."""
    r = rng()
    B, C, T = 3, 2, 9
    w, k, g = r.standard_normal((C, T)), r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
    dw, dk = r.standard_normal((C, T)), r.standard_normal((B, C, T))
    h = 1e-6
    f = lambda w_, k_: float((g * tx.reference(w_, k_)).sum())
    num = (f(w + h * dw, k + h * dk) - f(w - h * dw, k - h * dk)) / (2 * h)
    gw, gk = tx.reference_backward(w, k, g)
    assert abs(num - ((gw * dw).sum() + (gk * dk).sum())) < 1e-6 * max(1.0, abs(num))


# ---- the kernels' index arithmetic, emulated (CPU) ------------------------------------------------


@pytest.mark.parametrize("cfg,shape", [(TILES["b32"], (9, 1, 300)), (TILES["b32"], (4, 1, 64)),
                                       (TILES["b8"], (5, 2, 41)), (TILES["b2"], (3, 2, 37)),
                                       (tx.TUNING.tiled_f64, (17, 1, 130))])
def test_tiled_index_math_emulated(cfg, shape):
    """The forward / grad_k tiling (tap windows, zero fill, warp skips, reversal) emulated on the host."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k = r.standard_normal((C, T)), r.standard_normal(shape)
    assert rel_err(emu.tiled(w, k, 0.5, *cfg, False), tx.reference(w, k, 0.5)) < 1e-13
    _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
    assert rel_err(emu.tiled(w, k, 0.0, *cfg, True), rgk) < 1e-13


@pytest.mark.parametrize("cfg,shape", [(tx.TUNING.grad_w_tile, (3, 2, 37)), (tx.TUNING.grad_w_tile, (11, 1, 150)),
                                       (tx.TUNING.grad_w_tile_f64, (9, 1, 70)),
                                       (tx.TUNING.grad_w_tile, (2, 17, 20))])
def test_grad_w_index_math_emulated(cfg, shape):
    """grad_w's lag tiles, rows per warp and channel groups (C = 17: a second, one-channel group)."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    assert rel_err(emu.grad_w(k, g, *cfg), tx.reference_backward(w, k, g)[0]) < 1e-13


@pytest.mark.parametrize("shape", [(3, 1, 37), (33, 1, 300), (2, 1, 64), (1, 3, 1), (2, 2, 513), (3, 1, 600)])
def test_tf32x3_fragment_maps_emulated(shape):
    """The three Toeplitz tensor-core kernels (tf32x3_scalar, tf32x3_full, tf32x3) and tf32x3's folded rows (long
    T), both directions: odd B, rows of one tile from several time blocks, a partial last block."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k = r.standard_normal((C, T)), r.standard_normal(shape)
    _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
    for kern in (emu.tf32x3, emu.tf32x3f, lambda *a: emu.tf32x3f(*a, TRI=True),
                 lambda *a: emu.tf32x3f(*a, TRI=True, FOLD=True)):
        assert rel_err(kern(w, k, 0.25, False), tx.reference(w, k, 0.25)) < 1e-13
        assert rel_err(kern(w, k, 0.0, True), rgk) < 1e-13


def test_tf32x3_folded_rows_emulated():
    """tf32x3's folded rows where m-tile 0's rows start blocks before the tile's last (its zero chunks skipped),
    both directions. (A last tile with m-tile 1 empty: the GPU test's 3 x 8200.)"""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape = (2, 1, 2600)
    w, k = r.standard_normal((C, T)), r.standard_normal(shape)
    _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
    assert rel_err(emu.tf32x3f(w, k, 0.25, False, TRI=True, FOLD=True), tx.reference(w, k, 0.25)) < 1e-13
    assert rel_err(emu.tf32x3f(w, k, 0.0, True, TRI=True, FOLD=True), rgk) < 1e-13


@pytest.mark.parametrize("shape", [(3, 1, 37), (33, 1, 300), (2, 1, 64), (1, 2, 1), (35, 1, 136), (2, 1, 520)])
def test_mma16_fragment_maps_emulated(shape):
    """timex_mma16, both directions, scalar and (T % 8 == 0) 16-byte loads: the [b][u] tile and ldmatrix rows,
    the tap-pair window, the m16n8k16 fragment maps (two 16-bit values a register), the diagonal chunk's skips;
    odd T, T past a 256 tile and not a multiple of 64, B past a 32-row tile and not a multiple of it."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k = r.standard_normal((C, T)), r.standard_normal(shape)
    _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
    for vec in (False, True) if T % 8 == 0 else (False,):
        assert rel_err(emu.mma16(w, k, 0.25, False, vec), tx.reference(w, k, 0.25)) < 1e-13
        assert rel_err(emu.mma16(w, k, 0.0, True, vec), rgk) < 1e-13


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 37), (5, 2, 130), (2, 1, 64), (3, 17, 65), (1, 1, 200),
                                   (40, 1, 200), (33, 1, 72), (70, 1, 3), (4, 1, 257)])
def test_grad_w_mma16_emulated(shape):
    """timex_grad_w_mma16, scalar and (T % 8 == 0) 16-byte loads: row staging and (b, p) counters (fewer rows than
    a chunk, several chunks, np < 32 and wrapping by more than one row b), ldmatrix.trans fragments of both bands,
    the m16n8k16 maps, an odd number of bands, the diagonal sums and the two-band combine."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    ref = tx.reference_backward(w, k, g)[0]
    for vec in (False, True) if T % 8 == 0 else (False,):
        assert rel_err(emu.grad_w_mma16(k, g, vec), ref) < 1e-13


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 37), (5, 2, 130), (2, 1, 64), (3, 17, 65), (1, 1, 200),
                                   (4, 1, 257)])
def test_grad_w_frag_emulated(shape):
    """The tensor-core grad_w (timex_grad_w_frag, two bands a block): row-pair staging, (b, p) counters (np < 16
    and B*np not a multiple of 16), both bands' fragment maps and diagonal sums, an odd number of bands, the
    two-band combine."""
    import timex_emulate as emu

    r = rng()
    B, C, T = shape
    w, k, g = r.standard_normal((C, T)), r.standard_normal(shape), r.standard_normal(shape)
    assert rel_err(emu.grad_w_frag(k, g, tx.GRAD_W_BANDS), tx.reference_backward(w, k, g)[0]) < 1e-13


# ---- dispatch rules (CPU) -----------------------------------------------------------------------------


def test_auto_takes_the_tensor_cores_where_measured_faster_and_accurate():
    assert tx.tf32x3_auto("float32", 32, 768) and tx.tf32x3_auto("float32", 16, 256)
    assert tx.tf32x3_auto("float32", 33, 1024) and tx.tf32x3_auto("float32", 384, 64, "grad_w")
    assert tx.tf32x3_auto("float32", 1, 1, "grad_w") and not tx.tf32x3_auto("float32", 384, 64)
    assert tx.tf32x3_auto("float32", 15, 768, "grad_w") and tx.tf32x3_auto("float32", 32, 2048, "grad_w")
    assert tx.tf32x3_auto("float32", 12, 768) and tx.tf32x3_auto("float32", 192, 128)
    assert not tx.tf32x3_auto("float32", 11, 768) and not tx.tf32x3_auto("float32", 192, 127)
    # beyond T = 1024 float32 folds (B, time block) pairs into the rows: any B whose padded work stays small
    assert tx.tf32x3_auto("float32", 32, 1025) and tx.tf32x3_auto("float32", 3, 8192)
    assert tx.tf32x3_auto("float32", 1, 8192) and not tx.tf32x3_auto("float32", 1, 2048)
    assert tx.tf32x3_auto("float32", 3, 2048) and not tx.tf32x3_auto("float32", 2, 2048)
    assert tx.fold_waste(32, 2048) == 1.0 and 1.3 < tx.fold_waste(3, 8192) < 1.32
    # float32 grad_w while B * T <= 65536 (its error grows with the length of the band sums)
    assert not tx.tf32x3_auto("float32", 33, 2048, "grad_w") and tx.tf32x3_auto("float32", 3, 8192, "grad_w")
    assert tx.tf32x3_auto("float32", 2, 32768, "grad_w") and not tx.tf32x3_auto("float32", 1, 65537, "grad_w")
    # float16 / bfloat16 (exact products): float32's B and T thresholds, none of its upper bounds on T and B*T
    for dt in ("float16", "bfloat16"):
        assert tx.tf32x3_auto(dt, 32, 768) and tx.tf32x3_auto(dt, 12, 128) and tx.tf32x3_auto(dt, 12, 4096)
        assert tx.tf32x3_auto(dt, 33, 16384) and tx.tf32x3_auto(dt, 1000, 1025)
        assert not tx.tf32x3_auto(dt, 11, 768) and not tx.tf32x3_auto(dt, 384, 127)
        assert not tx.tf32x3_auto(dt, 12, 256 * 65535 + 1)  # past the tensor-core grid: the SIMT kernels
        assert tx.tf32x3_auto(dt, 1, 1, "grad_w") and tx.tf32x3_auto(dt, 33, 2048, "grad_w")
        assert tx.tf32x3_auto(dt, 2, 2049, "grad_w") and tx.tf32x3_auto(dt, 64, 65536, "grad_w")
    assert not any(tx.tf32x3_auto("float64", 64, 768, kern) for kern in ("toeplitz", "grad_w"))
    for dt in ("float16", "bfloat16"):  # the half types' forward and grad_k: mma16 where the tensor cores apply
        assert tx._toeplitz_auto(dt, 32, 768) == "mma16" and tx._toeplitz_auto(dt, 12, 4097) == "mma16"
        assert tx._toeplitz_auto(dt, 11, 768) == "tiled" and tx._toeplitz_auto(dt, 384, 64) == "tiled"
    assert tx._toeplitz_auto("float32", 32, 768) == "tf32x3" and tx._toeplitz_auto("float64", 32, 768) == "tiled"
    assert tx.backward_variant("mma16") == "mma16"
    assert tx.backward_variant("auto") == "auto" and tx.backward_variant("tf32x3") == "tf32x3"
    assert tx.backward_variant("tf32x3_full") == "tf32x3" and tx.backward_variant("tf32x3_scalar") == "tf32x3"
    assert tx.backward_variant("balanced") == "tiled" and tx.backward_variant("tiled_b8") == "tiled"
    assert all(tx.BACKWARD_OF[v] in tx.BACKWARD_VARIANTS for v in tx.VARIANTS)


def test_tuning_overrides_the_rules():
    from cupy_kernels._runtime.tuning import tuned

    with tuned(tx, tf32x3_min_b=64, tf32x3_grad_w_max_bt=512, tf32x3_fold_max_waste=1.0):
        assert not tx.tf32x3_auto("float32", 32, 768) and tx.tf32x3_auto("float32", 64, 768)
        assert not tx.tf32x3_auto("float32", 1, 1024, "grad_w")
        assert not tx.tf32x3_auto("float32", 3, 8192) and tx.tf32x3_auto("float32", 32, 8192)
        assert not tx.tf32x3_auto("bfloat16", 32, 768) and tx.tf32x3_auto("float16", 64, 768)
    with tuned(tx, half_toeplitz="tf32x3"):
        assert tx._toeplitz_auto("bfloat16", 32, 768) == "tf32x3"
    with tuned(tx, tiled_cost=(("b32", 1.0), ("b8", 0.5), ("b2", 1.2))):
        assert tx.choose_tiled("float32", 8) == "b8"
    assert tx.tf32x3_auto("float32", 32, 768) and tx.choose_tiled("float32", 8) == "b2"


def test_ladder_preconditions_and_tiled_choice():
    assert tx.LADDER == ("naive", "shared", "float4", "batch8", "balanced")
    assert set(tx.LADDER) <= set(tx.VARIANTS) and set(tx.LADDER_KERNELS) == set(tx.LADDER[1:])
    assert tx.ladder_preconditions("batch8", "float32", 32, 768) is None
    assert tx.ladder_preconditions("balanced", "float32", 32, 768) is None
    assert "B % 8" in tx.ladder_preconditions("batch8", "float32", 12, 768)
    assert "T % 8" in tx.ladder_preconditions("balanced", "float32", 8, 772)
    assert "T <= 1024" in tx.ladder_preconditions("shared", "float32", 1, 1025)
    assert "T % 4" in tx.ladder_preconditions("float4", "float32", 1, 5)
    assert "float32 only" in tx.ladder_preconditions("float4", "float16", 1, 8)
    assert tx.choose_tiled("float32", 32) == "b32"
    assert tx.choose_tiled("float32", 1) == "b2"
    assert tx.choose_tiled("float32", 8) == "b2"  # b8 is a named variant only
    assert tx.choose_tiled("float64", 32) == "f64"
    for name, cfg in TILES.items():
        bm, tn = tx.tiled_shape(cfg)
        assert bm == cfg[2] * cfg[0] and tn == (32 // cfg[2]) * cfg[1] * 4


def test_rejects_host_arrays_and_bad_variants():
    w, k = np.ones((2, 3), np.float32), np.ones((1, 2, 3), np.float32)
    with pytest.raises(TypeError, match="k must be a cupy.ndarray or a CUDA torch.Tensor"):
        ck.timex(w, k)
    with pytest.raises(TypeError, match="k must be"):
        ck.timex_backward(w, k, k)
    with pytest.raises(ValueError, match="variant must be one of"):
        ck.timex(w, k, variant="fastest")
    with pytest.raises(ValueError, match="variant must be one of"):
        ck.timex_backward(w, k, k, variant="float4")


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_eager_calls_skip_the_custom_op_only_when_nothing_traces():
    """torch_ops.untraced / plain_eager (CPU: the dispatch decision only): eager plain tensors may skip
    the custom op; autograd needs it or the autograd.Function; torch.compile always sees the op."""
    from cupy_kernels import torch_ops as tops

    x = torch.ones(3)
    assert tops.plain_eager(x) and tops.untraced(x)
    x.requires_grad_()
    assert not tops.plain_eager(x) and tops.untraced(x)
    with torch.no_grad():
        assert tops.plain_eager(x)
    traced = torch.compile(lambda t: t * 2 if tops.untraced(t) else t * 3, fullgraph=True, backend="eager")
    assert traced(torch.ones(2)).tolist() == [3.0, 3.0]


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_rejects_cpu_tensors():
    w, k = torch.ones(2, 3), torch.ones(1, 2, 3)
    with pytest.raises(TypeError, match="CUDA tensor"):
        ck.timex(w, k)


# ---- planning, with a recording builder (CPU) -------------------------------------------------------


class Recorder(PlanBuilder):
    """A PlanBuilder that records launches (kernel name, grid, block, args, shared memory) without a device."""

    def launch(self, kernel, grid, block, args, shared_mem=0, cluster=1, after_previous=False):
        self.launches.append((kernel.name, grid, block, tuple(args), shared_mem))


@pytest.fixture
def offline(monkeypatch):
    """Planning without a device: SOURCE.kernel without the shared-memory opt-in, a 132-SM H100's properties."""
    real = tx.SOURCE.kernel
    monkeypatch.setattr(tx.SOURCE, "kernel", lambda name, shared_mem=0: real(name))
    props = DeviceProps(0, "offline", 90, 132, 1024, 2048, 227 * 1024, 50 << 20)
    monkeypatch.setattr(tx, "current", lambda: props)
    return props


def record_forward(variant, dtype, shape, align=256, strides=None):
    B, C, T = shape
    b = Recorder(0, (256, align, 256))
    w, k, out = b.buffers
    tx.plan_forward(b, variant, dtype, w, T, k, strides or (C * T, T), out, 0.5, B, C, T)
    return b


def record_backward(variant, dtype, shape, align=256, need_w=True, need_k=True):
    B, C, T = shape
    b = Recorder(0, (256, align, align, 256, 256))
    w, k, g, gw, gk = b.buffers
    st = (C * T, T)
    tx.plan_backward(b, variant, dtype, w, T, k, st, g, st, gw, gk, B, C, T, need_w, need_k)
    return b


def test_every_declared_instance_is_launched_by_a_variant(offline):
    """The declared instances are exactly those some variant plans (aligned and unaligned, both directions):
    none is compiled for nothing, none a variant needs is missing."""
    planned = set()
    for dtype in tx.FLOAT_DTYPES:
        for align in (256, 2):
            for shape in [(32, 4, 768), (1, 4, 4096), (8, 2, 64)]:
                for v in tx.VARIANTS:
                    try:
                        planned |= {name for name, *_ in record_forward(v, dtype, shape, align).launches}
                    except ValueError:  # a variant outside its limits
                        pass
                for v in tx.BACKWARD_VARIANTS:
                    try:
                        planned |= {name for name, *_ in record_backward(v, dtype, shape, align).launches}
                    except ValueError:
                        pass
    assert planned == set(tx.SOURCE.names)
    assert len(tx.SOURCE.names) == 93


def test_planned_launches(offline):
    """Which kernels a call takes, in what geometry, with which arguments."""
    names = lambda b: [name for name, *_ in b.launches]  # noqa: E731
    # small float32 (B=1 C=64 T=64): the small-batch tile forward; grad_k the same, grad_w on the tensor cores
    f = record_forward("auto", "float32", (1, 64, 64))
    assert names(f) == ["timex_tiled<float, TiledTile<2, 8, 1>, Product::forward, Loads::vec4>"]
    (_, grid, block, args, smem), = f.launches
    assert grid == (64, 1, 1) and block == 128 and smem == 0
    assert [type(a) for a in args] == [Buffer, np.int64, Buffer, np.int64, np.int64, Buffer, np.float64, np.int32,
                                       np.int32, np.int32]
    assert (args[1], args[3], args[4], args[6], args[7:]) == (64, 4096, 64, 0.5, (1, 64, 64))
    bw = record_backward("auto", "float32", (1, 64, 64))
    assert names(bw) == ["timex_tiled<float, TiledTile<2, 8, 1>, Product::grad_k, Loads::vec4>",
                         "timex_grad_w_frag<2, Loads::vec2>", "timex_grad_w_bands<float>"]
    assert len(bw.workspaces) == 1 and bw.workspaces[0].nbytes == 64 * 1 * 128 * 4
    assert bw.launches[1][3][6] is bw.workspaces[0] and bw.launches[2][3][0] is bw.workspaces[0]
    # only the gradient asked for
    assert names(record_backward("auto", "float32", (1, 64, 64), need_w=False)) == names(bw)[:1]
    only_w = record_backward("auto", "float32", (1, 64, 64), need_k=False)
    assert names(only_w) == names(bw)[1:]
    # the large-batch shapes: tensor cores, float32's names without an element type, the half types' with theirs
    assert names(record_forward("auto", "float32", (32, 4, 768))) == [
        "timex_tf32x3f<Product::forward, Diagonal::skip_zero_tiles>"]
    assert names(record_backward("auto", "float32", (32, 4, 768)))[0] == (
        "timex_tf32x3f<Product::grad_k, Diagonal::skip_zero_tiles>")
    # long T, small B: float32 folds (time block, b) pairs into the tile's rows: 3 x 32 rows of 32 a block,
    # with the flushed sums in dynamic shared memory; grad_w's bands (B * T <= 65536)
    (name, grid, block, args, smem), = record_forward("auto", "float32", (3, 4, 8192)).launches
    assert name == "timex_tf32x3f<Product::forward, Diagonal::skip_zero_tiles, float, true>"
    assert grid == (4, 1, 3) and block == 128 and smem == tx.FOLD_TOTAL_BYTES == 32768
    assert names(record_backward("auto", "float32", (3, 4, 8192))) == [
        "timex_tf32x3f<Product::grad_k, Diagonal::skip_zero_tiles, float, true>", "timex_grad_w_frag<2, Loads::vec2>",
        "timex_grad_w_bands<float>"]
    assert names(record_forward("auto", "float32", (2, 4, 2048))) == [
        "timex_tiled<float, TiledTile<2, 8, 1>, Product::forward, Loads::vec4>"]  # fold: 3.6x the work
    half_fwd = record_forward("auto", "bfloat16", (32, 4, 768))
    (name, grid, block, args, smem), = half_fwd.launches
    assert name == "timex_mma16<Product::forward, bfloat16, Loads::vec8>"
    assert grid == (4, 3, 1) and block == 128 and smem == 0 and args[6] == 0.5
    half_bw = record_backward("auto", "float16", (32, 4, 768))
    assert names(half_bw) == ["timex_mma16<Product::grad_k, half, Loads::vec8>",
                              "timex_grad_w_mma16<half, Loads::vec8>", "timex_grad_w_bands<half>"]
    assert len(half_bw.workspaces) == 1 and half_bw.workspaces[0].nbytes == 4 * 12 * 128 * 4  # float32 bands
    assert half_bw.launches[1][1] == 4 * 6 and half_bw.launches[1][3][6] is half_bw.workspaces[0]
    # past float32's T bound and on odd rows: still the tensor cores (scalar loads)
    assert names(record_backward("auto", "bfloat16", (12, 2, 4097), align=2)) == [
        "timex_mma16<Product::grad_k, bfloat16, Loads::scalar>",
        "timex_grad_w_mma16<bfloat16, Loads::scalar>", "timex_grad_w_bands<bfloat16>"]
    # the one-pass TF32 backward stays a variant; tuning sends auto's half types back to it
    assert names(record_backward("tf32x3", "float16", (32, 4, 768))) == [
        "timex_tf32x3f<Product::grad_k, Diagonal::skip_zero_tiles, half>",
        "timex_grad_w_frag<2, Loads::vec2, half>", "timex_grad_w_bands<half>"]
    from cupy_kernels._runtime.tuning import tuned

    with tuned(tx, half_toeplitz="tf32x3", half_grad_w="tf32x3"):
        assert names(record_backward("auto", "float16", (32, 4, 768))) == names(
            record_backward("tf32x3", "float16", (32, 4, 768)))
    # 16-byte loads need T, the strides and the pointer on 8-element boundaries
    assert names(record_forward("mma16", "float16", (32, 4, 772)))[0].endswith("Loads::scalar>")
    assert names(record_forward("mma16", "float16", (32, 4, 768), align=8))[0].endswith("Loads::scalar>")
    assert names(record_forward("mma16", "float16", (32, 4, 768), align=16))[0].endswith("Loads::vec8>")
    assert names(record_forward("mma16", "float16", (32, 4, 768), strides=(4 * 768 + 4, 768)))[0].endswith(
        "Loads::scalar>")
    # the one-pass TF32 kernel stays a variant of the half types
    assert names(record_forward("tf32x3", "bfloat16", (32, 4, 768))) == [
        "timex_tf32x3f<Product::forward, Diagonal::skip_zero_tiles, bfloat16>"]
    # below the batch threshold: the SIMT tile for forward and grad_k, grad_w on the tensor cores at any B
    assert names(record_backward("auto", "float16", (8, 4, 768))) == [
        "timex_tiled<half, TiledTile<2, 8, 1>, Product::grad_k, Loads::vec4>",
        "timex_grad_w_mma16<half, Loads::vec8>", "timex_grad_w_bands<half>"]
    assert names(record_forward("tf32x3_scalar", "float16", (2, 1, 8))) == ["timex_tf32x3<Product::forward, half>"]
    # rows not on 4-element boundaries: scalar loads (pointer, or a batch stride)
    assert names(record_forward("auto", "float32", (1, 64, 64), align=4))[0].endswith("Loads::scalar>")
    assert names(record_forward("auto", "float32", (1, 64, 64), strides=(4098, 64)))[0].endswith("Loads::scalar>")
    assert names(record_forward("auto", "float64", (3, 2, 64), align=16))[0].endswith("Loads::scalar>")
    # the ladder: its kernels, geometry and dynamic shared memory
    (name, grid, block, _, smem), = record_forward("balanced", "float32", (16, 3, 1000)).launches
    assert (name, grid, block, smem) == ("timex_balanced", (3, 2), 125, 9 * 1000 * 4)
    (name, grid, block, _, smem), = record_forward("shared", "float32", (2, 3, 100)).launches
    assert (name, grid, block, smem) == ("timex_shared", 6, 100, 2 * 100 * 4)
    (name, grid, *_), = record_forward("naive", "float16", (2, 3, 5)).launches
    assert name == "timex_naive<half>" and grid == 1


def test_variants_outside_their_limits_raise(offline):
    for variant, dtype, shape in [("shared", "float32", (1, 1, 1025)), ("float4", "float32", (1, 1, 6)),
                                  ("batch8", "float32", (12, 1, 64)), ("balanced", "float32", (8, 1, 36)),
                                  ("batch8", "float16", (8, 1, 64)), ("tiled_b32", "float64", (1, 1, 8)),
                                  ("tf32x3", "float64", (2, 1, 8)), ("tf32x3_full", "float64", (2, 1, 8))]:
        with pytest.raises(ValueError, match="variant|ladder rung"):
            record_forward(variant, dtype, shape)
    with pytest.raises(ValueError, match="variant 'tf32x3' .* takes float32, float16, bfloat16; got float64"):
        record_backward("tf32x3", "float64", (2, 1, 8))
    for dtype in ("float32", "float64"):
        with pytest.raises(ValueError, match="variant 'mma16' .* takes float16, bfloat16; got " + dtype):
            record_forward("mma16", dtype, (2, 1, 8))
        with pytest.raises(ValueError, match="variant 'mma16' .* takes float16, bfloat16; got " + dtype):
            record_backward("mma16", dtype, (2, 1, 8))
    with pytest.raises(ValueError, match="beyond this kernel's grid"):
        record_forward("tiled_b2", "float32", (65536 * 2 + 1, 1, 8))


def test_every_launch_matches_its_kernel_signature(monkeypatch):
    """plan_forward / plan_backward over every variant, dtype, alignment (vector and scalar loads), batch stride and
    shape class, both gradients or one, on sm_80 and sm_90: each launch passes its kernel's parameters
    (check_launch), with the call's B, C, T, eps (0 for grad_k) and strides; every declared instance is planned, and
    every variant plans some call."""
    calls, planned, variants = [], set(), set()
    monkeypatch.setattr(CallRecorder, "calls", calls)
    shapes = [(32, 4, 768), (1, 4, 4096), (8, 2, 64), (16, 3, 1000), (12, 2, 2048), (3, 2, 5)]
    cases = [(shape, align, sb) for shape in shapes for align in (256, 2) for sb in (0, 2)]
    for cc in (80, 90):
        with fake_device(monkeypatch, cc, tx):
            for dtype, ((B, C, T), align, sb) in ((d, c) for d in tx.FLOAT_DTYPES for c in cases):
                ks = (C * T + sb, T)
                for v, need in [(v, None) for v in tx.VARIANTS] + [
                        (v, n) for v in tx.BACKWARD_VARIANTS for n in ((1, 1), (1, 0), (0, 1))]:
                    calls.clear()
                    b = CallRecorder(0, (256, align, align, 256, 256))
                    w, k, g, gw, gk = b.buffers
                    try:
                        if need is None:
                            tx.plan_forward(b, v, dtype, w, T + 3, k, ks, gk, 0.5, B, C, T)
                        else:
                            tx.plan_backward(b, v, dtype, w, T + 3, k, ks, g, ks, gw, gk, B, C, T, *need)
                    except ValueError:  # a variant outside its limits
                        continue
                    variants.add((v, need is None))
                    for kernel, args, _ in calls:
                        case = (kernel.name, v, need, dtype, (B, C, T), align, sb)
                        a = dict(check_launch("timex.cu", kernel.name, args))
                        assert a.get("B", B) == B and a["C"] == C and a["T"] == T, case
                        eps = 0.5 if need is None else 0.0  # grad_k: the forward kernels with eps 0
                        assert a.get("eps", eps) == eps, case
                        assert a.get("ldw", T + 3) == T + 3, case
                        assert {a.get(s, ks[0]) for s in ("sb", "ksb", "gsb")} == {ks[0]}, case
                        assert {a.get(s, ks[1]) for s in ("sc", "ksc", "gsc")} == {ks[1]}, case
                        planned.add(kernel.name)
    assert planned == set(tx.SOURCE.names), (set(tx.SOURCE.names) - planned, planned - set(tx.SOURCE.names))
    assert variants == {(v, True) for v in tx.VARIANTS} | {(v, False) for v in tx.BACKWARD_VARIANTS}


# ---- the host path with the driver stubbed (CPU torch tensors stand in for CUDA ones) ----------------


@pytest.fixture
def stub_driver(monkeypatch, offline):
    """timex_impl / timex_backward_impl / torch_ops.timex on CPU tensors: every check but the device's, plans
    built and replayed, each launch recorded as (kernel, pointers) instead of reaching the driver."""
    if torch is None:
        pytest.skip("needs torch")
    from cupy_kernels._runtime import bridge, kernels

    class _Function:
        ptr = 0

    monkeypatch.setattr(kernels.Kernel, "function", lambda self, device=None: _Function())
    calls, allocs = [], []
    monkeypatch.setattr(_Launch, "__call__", lambda self, ptrs, stream: calls.append((self.name, list(ptrs))))
    monkeypatch.setattr(tx, "kind_of", lambda x, op, name="x": bridge.TORCH if bridge.is_torch(x) else
                        bridge.kind_of(x, op, name))

    def check_like(kind, x, op, name, device, dtypes=None):
        if not bridge.is_torch(x):
            raise TypeError(f"{op}: {name} must be a torch.Tensor like the other inputs")
        dt = bridge.dtype_name(x)
        if dtypes is not None and dt not in dtypes:
            raise TypeError(f"{op}: {name} has dtype {dt}; expected one of {', '.join(dtypes)}")
        return dt

    monkeypatch.setattr(tx, "check_like", check_like)
    monkeypatch.setattr(bridge._Torch, "device", staticmethod(lambda x: -1))  # CPU tensors' get_device()
    monkeypatch.setattr(bridge._Torch, "current_device", staticmethod(lambda: -1))
    monkeypatch.setattr(bridge._Torch, "stream", staticmethod(lambda device: 0))

    def alloc(device):
        def one(nbytes):
            a = torch.empty(nbytes, dtype=torch.uint8)
            allocs.append(a.data_ptr())
            return a.data_ptr(), a
        return one

    monkeypatch.setattr(bridge._Torch, "alloc", staticmethod(alloc))
    tx.PLANS.clear()
    yield SimpleNamespace(calls=calls, allocs=allocs)
    tx.PLANS.clear()


def test_host_path_plans_once_and_replays(stub_driver, monkeypatch):
    calls = stub_driver.calls
    builds = []
    real = tx._build_forward
    monkeypatch.setattr(tx, "_build_forward", lambda *a: builds.append(a[1]) or real(*a))
    w, k = torch.randn(64, 64), torch.randn(1, 64, 64)
    out = tx.timex_impl(w, k, 0.5)
    out2 = tx.timex_impl(w, k, 0.5)
    assert out.shape == (1, 64, 64) and out.is_contiguous() and out.data_ptr() != out2.data_ptr()
    assert builds == ["auto"] and len(calls) == 2  # one plan, two replays of its one launch
    assert calls[0] == ("timex_tiled<float, TiledTile<2, 8, 1>, Product::forward, Loads::vec4>",
                        [w.data_ptr(), k.data_ptr(), out.data_ptr()])
    tx.timex_impl(w, k, 0.25)  # eps is a launch argument: a new plan
    tx.timex_impl(w, torch.randn(1, 64, 64), 0.25)  # new data, the same plan
    assert builds == ["auto", "auto"]
    # a k whose t axis is strided is copied once; a row-strided w (a longer filter's view) is not
    full = torch.randn(64, 100)
    kt = torch.randn(1, 64, 128)[:, :, ::2]
    calls.clear()
    tx.timex_impl(full[:, -64:], kt)
    (name, ptrs), = calls
    assert ptrs[0] == full[:, -64:].data_ptr() and ptrs[1] != kt.data_ptr()
    # the ladder rungs take a C-contiguous k: a channel-major view is copied
    calls.clear()
    kc = torch.randn(64, 8, 64).transpose(0, 1)
    tx.timex_impl(w, kc, 0.0, "batch8")
    (name, ptrs), = calls
    assert name == "timex_batch8" and ptrs[1] != kc.data_ptr()
    calls.clear()
    tx.timex_impl(w, kc, 0.0, "tiled")  # the tiled kernels take its strides
    assert calls[0][1][1] == kc.data_ptr()


def test_host_path_errors_and_empty_shapes(stub_driver):
    calls = stub_driver.calls
    k = torch.ones(2, 3, 5)
    with pytest.raises(ValueError, match=r"w must have shape \(C, T\) = \(3, 5\)"):
        tx.timex_impl(torch.ones(3, 6), k)
    with pytest.raises(TypeError, match="w has dtype float16 but k has float32"):
        tx.timex_impl(torch.ones(3, 5, dtype=torch.float16), k)
    with pytest.raises(TypeError, match="w has dtype int32; expected one of"):
        tx.timex_impl(torch.ones(3, 5, dtype=torch.int32), torch.ones(2, 3, 5, dtype=torch.int32))
    with pytest.raises(ValueError, match="k must have 3 dimensions"):
        tx.timex_impl(torch.ones(3, 5), torch.ones(3, 5))
    with pytest.raises(ValueError, match="grad_out must have the shape of k"):
        tx.timex_backward_impl(torch.ones(3, 5), k, torch.ones(2, 3, 4))
    with pytest.raises(TypeError, match="w must be a torch.Tensor"):
        tx.timex_impl(np.ones((3, 5), np.float32), k)
    with pytest.raises(ValueError, match="variant must be one of"):
        tx.timex_impl(torch.ones(3, 5), k, 0.0, "fastest")
    for shape in [(0, 3, 5), (2, 0, 5), (2, 3, 0)]:
        kk, ww = torch.ones(shape), torch.ones(shape[1:])
        assert tx.timex_impl(ww, kk).shape == shape
        gw, gk = tx.timex_backward_impl(ww, kk, kk)
        assert gw.shape == shape[1:] and gk.shape == shape
        if shape[0] == 0:
            assert float(gw.abs().sum()) == 0.0
    assert calls == []


def test_host_path_backward(stub_driver):
    calls = stub_driver.calls
    w, k, g = torch.randn(64, 64), torch.randn(1, 64, 64), torch.randn(1, 64, 64)
    gw, gk = tx.timex_backward_impl(w, k, g)
    assert gw.shape == (64, 64) and gk.shape == (1, 64, 64)
    grad_k, bands, combine = calls
    assert grad_k[0] == "timex_tiled<float, TiledTile<2, 8, 1>, Product::grad_k, Loads::vec4>"
    assert grad_k[1][:5] == [w.data_ptr(), k.data_ptr(), g.data_ptr(), gw.data_ptr(), gk.data_ptr()]
    assert bands[0] == "timex_grad_w_frag<2, Loads::vec2>" and combine[0] == "timex_grad_w_bands<float>"
    assert bands[1][5] == combine[1][5] == stub_driver.allocs[-1]  # the workspace, from the caller's allocator
    calls.clear()
    gw, gk = tx.timex_backward_impl(w, k, g, "auto", need_w=False)
    assert gw is None and [c[0] for c in calls] == [grad_k[0]]


def test_torch_autograd_wiring(stub_driver):
    """Eager autograd runs the impls through _Timex: one forward launch; backward launches only for the inputs
    that need a gradient; a Parameter counts as a plain tensor (no custom op)."""
    calls = stub_driver.calls
    w = torch.nn.Parameter(torch.randn(64, 64))
    k = torch.randn(1, 64, 64)
    out = ck.timex(w, k)
    assert out.grad_fn is not None and type(out.grad_fn).__name__.startswith("_TimexBackward")
    assert [c[0] for c in calls] == ["timex_tiled<float, TiledTile<2, 8, 1>, Product::forward, Loads::vec4>"]
    calls.clear()
    out.backward(torch.ones_like(out))  # grad_w only: the bands and their combine, no grad_k
    assert [c[0] for c in calls] == ["timex_grad_w_frag<2, Loads::vec2>", "timex_grad_w_bands<float>"]
    assert w.grad.shape == (64, 64) and k.grad is None
    calls.clear()
    with torch.no_grad():
        ck.timex(w, k, variant="tiled")
    assert len(calls) == 1


def test_custom_ops_schema_and_fake(stub_driver):
    """The traced path's custom ops (CPU, stubbed driver): outputs new tensors (no alias of an input, no
    mutation) with the fake implementations' shapes, dtypes and strides."""
    import cupy_kernels.torch_ops  # noqa: F401  (registers the ops)

    w, k, g = torch.randn(3, 9)[:, -7:], torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    utils = ("test_schema", "test_faketensor")
    torch.library.opcheck(torch.ops.cupy_kernels.timex.default, (w, k, 0.5, "auto"), test_utils=utils)
    torch.library.opcheck(torch.ops.cupy_kernels.timex_backward.default, (w, k, g, "auto"), test_utils=utils)
    torch.library.opcheck(torch.ops.cupy_kernels.timex_backward.default, (w, k[:0], g[:0], "naive"),
                          test_utils=utils)


# ---- GPU ----------------------------------------------------------------------------------------


@pytest.fixture
def poison(monkeypatch):
    """Every output the op allocates starts as NaN, every workspace as 0xff bytes (NaN floats), so an element
    a kernel forgets fails the test."""
    import cupy

    from cupy_kernels._runtime import bridge

    real_new = tx._new

    def new(kind, like, shape):
        out = real_new(kind, like, shape)
        kind.fill(out, float("nan"))
        return out

    def alloc(device):
        def one(nbytes):
            a = cupy.full(nbytes, 0xFF, dtype=cupy.uint8)
            return a.data.ptr, a
        return one

    monkeypatch.setattr(tx, "_new", new)
    monkeypatch.setattr(bridge._Cupy, "alloc", staticmethod(alloc))


def make(shape, dtype, r, tmax=None):
    """w (C, T) (a view w_full[:, -T:] when tmax is given), k and g (B, C, T); host float64 copies."""
    B, C, T = shape
    wf = r.standard_normal((C, tmax or T)) / np.sqrt(T)
    k, g = r.standard_normal(shape), r.standard_normal(shape)
    wd_full = cupy_array(wf, dtype)
    wd = wd_full[:, -T:] if tmax else wd_full
    return (wd, cupy_array(k, dtype), cupy_array(g, dtype),
            rounded(wf, dtype)[:, -T:], rounded(k, dtype), rounded(g, dtype))


def check_forward(shape, dtype, variant="auto", tmax=None, tol=None):
    r = rng()
    wd, kd, _, w, k, _ = make(shape, dtype, r, tmax)
    eps = float(r.standard_normal())
    out = ck.timex(wd, kd, eps, variant=variant)
    assert out.shape == shape and str(out.dtype) == dtype and out.flags.c_contiguous
    err = rel_err(out, tx.reference(w, k, eps))
    assert err <= (tol or TOL[dtype]), f"{variant} {shape} {dtype}: rel err {err:.3g}"


def check_backward(shape, dtype, variant="auto", tmax=None, tol=None):
    r = rng()
    wd, kd, gd, w, k, g = make(shape, dtype, r, tmax)
    gw, gk = ck.timex_backward(wd, kd, gd, variant=variant)
    assert gw.shape == shape[1:] and gk.shape == shape and str(gw.dtype) == dtype and str(gk.dtype) == dtype
    rgw, rgk = tx.reference_backward(w, k, g)
    tol = tol or TOL[dtype]
    e_w, e_k = grad_err(gw, rgw, w, k, g, 0), grad_err(gk, rgk, w, k, g, 1)
    assert e_w <= tol and e_k <= tol, f"{variant} {shape} {dtype}: grad_w {e_w:.3g}, grad_k {e_k:.3g}"


def grad_err(got, want, w, k, g, i):
    """||got - want|| relative to the larger of ||want|| and the size of its terms: every gradient entry is
    a sum of products, sqrt(sum of their squares) = reference_backward of the squared inputs. A sum of few
    terms (grad_w of T = 1 over 64 rows) can cancel to far below its terms, where a plain relative error
    measures only the float rounding of those terms (a float32 test failed that way at 2.2e-5)."""
    scale = np.sqrt(np.maximum(tx.reference_backward(w * w, k * k, g * g)[i], 0.0))
    diff = np.linalg.norm(to_f64(got) - want)
    return diff / max(np.linalg.norm(want), np.linalg.norm(scale))


# float16 / bfloat16 on the tensor cores: every value is exact in TF32, so each product is exact and the sums are
# float32; the one rounding to the dtype at the end bounds the error by the dtype's unit roundoff (2^-11, 2^-8),
# the float32 sums add ~1e-5 at most.
HALF_TC_TOL = {"float16": 2.0**-11 + 2e-5, "bfloat16": 2.0**-8 + 2e-5}
# ... and that rounding is the reference's own but next to a rounding boundary: the share of elements that differ
# from the float64 reference rounded to the dtype (a few percent from the float32 sums, float16's finer grid more;
# a partial sum rounded to the dtype first, or TF32-sized errors, move over a quarter).
HALF_TC_MOVED = {"float16": 0.2, "bfloat16": 0.1}


def check_half_exact(got, want, dtype, err, what):
    """A half-type tensor-core result against its float64 reference: `err` (its relative error) within one rounding
    to the dtype, and almost every element the reference rounded to the dtype."""
    assert err <= HALF_TC_TOL[dtype], f"{what} {dtype}: rel err {err:.3g}"
    got = to_f64(got)
    moved = np.count_nonzero(got != rounded(want, dtype))
    assert moved <= HALF_TC_MOVED[dtype] * got.size + 2, (
        f"{what} {dtype}: {moved} of {got.size} elements off the rounded reference")


def run_plan(plan_fn, arrays, poison_workspaces=True):
    """Plan `plan_fn(builder, *buffers)` over CuPy arrays (in order) and run it once on the current stream."""
    import cupy

    from cupy_kernels._runtime.launch import alignment

    device = cupy.cuda.runtime.getDevice()
    b = PlanBuilder(device, [alignment(a.data.ptr) for a in arrays])
    plan_fn(b, *b.buffers)
    plan = b.plan()

    def alloc(nbytes):
        a = cupy.full(nbytes, 0xFF if poison_workspaces else 0, dtype=cupy.uint8)
        return a.data.ptr, a

    owners = plan.run([a.data.ptr for a in arrays], cupy.cuda.get_current_stream().ptr, alloc)
    cupy.cuda.get_current_stream().synchronize()
    del owners
    return plan


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, dtype, poison):
    check_forward(shape, dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_backward(shape, dtype, poison):
    check_backward(shape, dtype)


@gpu
@pytest.mark.parametrize("variant", ["tiled_b32", "tiled_b8", "tiled_b2"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 2, 127), (33, 3, 1000), (7, 2, 1031), (40, 2, 64)])
def test_each_tiled_shape(shape, dtype, variant, poison):
    check_forward(shape, dtype, variant)


@gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 127), (2, 3, 1000), (1, 1, 4097)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_naive(shape, dtype, poison):
    check_forward(shape, dtype, "naive")
    check_backward(shape, dtype, "naive")


@gpu
@pytest.mark.parametrize("variant,shapes", [
    ("shared", [(1, 1, 1), (3, 2, 127), (2, 3, 1000), (2, 1, 1024)]),
    ("float4", [(1, 1, 4), (3, 2, 128), (2, 3, 1000), (1, 2, 4096)]),
    ("batch8", [(8, 1, 4), (16, 3, 1000), (8, 2, 1024), (32, 2, 768)]),
    ("balanced", [(8, 1, 8), (16, 3, 1000), (8, 2, 1024), (32, 2, 768)]),
])
def test_article_ladder(variant, shapes, poison):
    for shape in shapes:
        check_forward(shape, "float32", variant)


@gpu
@pytest.mark.parametrize("variant,shape,dtype", [
    ("shared", (1, 1, 1025), "float32"), ("float4", (1, 1, 6), "float32"), ("batch8", (12, 1, 64), "float32"),
    ("balanced", (8, 1, 36), "float32"), ("batch8", (8, 1, 64), "float16"), ("tiled_b32", (1, 1, 8), "float64"),
    ("tf32x3", (2, 1, 8), "float64"),
])
def test_ladder_preconditions_raise(variant, shape, dtype):
    r = rng()
    wd, kd, *_ = make(shape, dtype, r)
    with pytest.raises(ValueError, match="variant"):
        ck.timex(wd, kd, variant=variant)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_row_strided_w_is_used_without_a_copy(dtype, poison):
    from cupy_kernels._runtime import CUPY

    r = rng()
    wd, *_ = make((3, 4, 300), dtype, r, tmax=1000)
    copy, strides, _ = tx._row_layout(CUPY, wd, dtype)
    assert not copy and strides == (1000, 1)
    check_forward((3, 4, 300), dtype, tmax=1000)
    check_backward((3, 4, 300), dtype, tmax=1000)


@gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 127), (33, 3, 1000), (2, 1, 4097), (32, 2, 768),
                                   (65, 1, 300), (32, 19, 129), (2, 1, 5000)])
def test_tf32x3_split_precision_accuracy(shape, poison):
    # The tensor-core path's stated error (docs/timex.md): float32's 1e-5 at every T, the sums flushed beyond T =
    # 1024 (unflushed they grew with T: 2.0e-5 at 4097, H200); grad_w's bands within TF32X3_TOL at B * T > 65536.
    # TF32 alone would give ~1e-3.
    check_forward(shape, "float32", "tf32x3", tol=1e-5)
    check_backward(shape, "float32", "tf32x3", tol=1e-5 if shape[0] * shape[2] <= 65536 else TF32X3_TOL)


@gpu
@pytest.mark.parametrize("dtype", tx.TENSOR_CORE_DTYPES)
@pytest.mark.parametrize("variant", list(tx.TOEPLITZ_TF32X3))
def test_toeplitz_tf32x3_kernels_both_directions(variant, dtype):
    """Each compiled Toeplitz tf32x3 kernel (tf32x3: both directions; tf32x3_full, tf32x3_scalar: forward), on
    fresh inputs against float64; outputs NaN-poisoned; bit-identical on a second run. float16 / bfloat16: the
    single exact TF32 pass, at any T within one rounding to the dtype."""
    kernel = tx.TOEPLITZ_TF32X3[variant]
    r = rng()
    for B, C, T in [(1, 1, 1), (2, 3, 5), (33, 5, 127), (32, 19, 768), (17, 2, 1000), (64, 1, 257), (3, 2, 2047),
                    (35, 4, 513), (3, 2, 8200), (40, 1, 1500)]:
        w, k = r.standard_normal((C, T)) / np.sqrt(T), r.standard_normal((B, C, T))
        wd, kd = cupy_array(w, dtype), cupy_array(k, dtype)
        w, k = rounded(w, dtype), rounded(k, dtype)
        refs = (tx.reference(w, k, 0.5), tx.reference_backward(w, np.zeros_like(k), k)[1])
        for rev, ref in zip((False, True), refs):
            if rev and variant != "tf32x3":
                continue  # the backward of every tf32x3 variant is tf32x3's
            eps = 0.0 if rev else 0.5
            runs = []
            for _ in range(2):
                out = cupy_array(np.full((B, C, T), np.nan), dtype)
                run_plan(lambda b, wb, kb, ob: tx.plan_toeplitz_tf32x3(b, dtype, kernel, rev, wb, T, kb, (C * T, T), ob,
                                                                       eps, B, C, T), (wd, kd, out))
                runs.append(to_f64(out))
            err = rel_err(runs[0], ref)
            if dtype == "float32":
                # (tf32x3 beyond T = 1024: the folded kernel, its sums flushed)
                assert err <= (1e-5 if T <= 1024 or variant == "tf32x3" else TF32X3_TOL), (variant, rev, B, C, T, err)
            else:
                check_half_exact(runs[0], ref, dtype, err, f"{variant} rev={rev} {(B, C, T)}")
            assert np.array_equal(runs[0], runs[1]), (variant, rev, B, C, T, "not deterministic")
    check_forward((33, 3, 300), dtype, variant)


@gpu
@pytest.mark.parametrize("dtype", tx.MMA16_DTYPES)
@pytest.mark.parametrize("vec", [False, True])
def test_mma16_kernel_both_directions(vec, dtype):
    """timex_mma16 (forward and grad_k), scalar and 16-byte loads, on fresh inputs against float64: odd B and T,
    B past the 32-row tile and not a multiple of it, T past the 256 tile, T under one 64-u chunk, a batch stride
    past C * T; outputs NaN-poisoned; within one rounding to the dtype; bit-identical on a second run."""
    r = rng()
    shapes = [(32, 3, 768), (33, 2, 1000), (64, 1, 256), (35, 4, 512), (2, 3, 8), (40, 2, 2048), (17, 2, 136)]
    if not vec:  # odd T, T = 1, T not a multiple of 8
        shapes += [(1, 1, 1), (2, 3, 5), (33, 5, 127), (17, 2, 1001), (3, 2, 2047), (35, 4, 513), (32, 1, 770)]
    for B, C, T in shapes:
        pad = 8 * (B % 2)  # a batch stride of C*T + 8 (still 16-byte rows) on odd B
        w, k = r.standard_normal((C, T)) / np.sqrt(T), r.standard_normal((B, C * T + pad))
        wd, kd = cupy_array(w, dtype), cupy_array(k, dtype)
        w = rounded(w, dtype)
        k = rounded(k, dtype)[:, :C * T].reshape(B, C, T)
        refs = (tx.reference(w, k, 0.5), tx.reference_backward(w, np.zeros_like(k), k)[1])
        for rev, ref in zip((False, True), refs):
            eps = 0.0 if rev else 0.5
            runs = []
            for _ in range(2):
                out = cupy_array(np.full((B, C, T), np.nan), dtype)
                plan = run_plan(lambda b, wb, kb, ob: tx.plan_toeplitz_mma16(b, dtype, rev, wb, T, kb, (C * T + pad, T),
                                                                             ob, eps, B, C, T, vec=vec), (wd, kd, out))
                runs.append(to_f64(out))
            assert plan.kernels == (tx._mma16_name(rev, dtype, vec),)
            check_half_exact(runs[0], ref, dtype, rel_err(runs[0], ref), f"mma16 vec={vec} rev={rev} {(B, C, T)}")
            assert np.array_equal(runs[0], runs[1]), (vec, rev, B, C, T, "not deterministic")


@gpu
@pytest.mark.parametrize("dtype", tx.MMA16_DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5), (33, 3, 300), (12, 2, 768), (3, 2, 1025)])
def test_mma16_variant(shape, dtype, poison):
    """variant='mma16' through the public calls (below auto's batch threshold too): forward and backward."""
    from conftest import kernels_of

    B, C, T = shape
    r = rng()
    wd, kd, gd, w, k, g = make(shape, dtype, r)
    out, used = kernels_of(tx.SOURCE, lambda: ck.timex(wd, kd, 0.75, variant="mma16"))
    assert used == {tx._mma16_name(False, dtype, T % 8 == 0)}, used
    ref = tx.reference(w, k, 0.75)
    check_half_exact(out, ref, dtype, rel_err(out, ref), f"mma16 out {shape}")
    gw, gk = ck.timex_backward(wd, kd, gd, variant="mma16")
    rgw, rgk = tx.reference_backward(w, k, g)
    check_half_exact(gw, rgw, dtype, grad_err(gw, rgw, w, k, g, 0), f"mma16 grad_w {shape}")
    check_half_exact(gk, rgk, dtype, grad_err(gk, rgk, w, k, g, 1), f"mma16 grad_k {shape}")


@gpu
@pytest.mark.parametrize("shape", [(32, 2, 768), (33, 3, 1000), (40, 17, 1024), (16, 3, 257), (32, 2, 1023),
                                   (64, 1, 1), (35, 3, 65), (16, 2, 7), (1, 1, 1), (3, 2, 2047), (31, 2, 2048),
                                   (12, 3, 768), (13, 2, 129), (70, 2, 192), (3, 2, 8192), (1, 1, 8192),
                                   (12, 2, 4100), (5, 1, 3000)])
def test_auto_tf32x3_keeps_float32_accuracy(shape, poison):
    """Where 'auto' takes a tensor-core kernel it must hold float32's 1e-5 (not the opt-in's 5e-5)."""
    assert tx.tf32x3_auto("float32", shape[0], shape[2], "grad_w")
    check_forward(shape, "float32")
    check_backward(shape, "float32")


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(32, 2, 768), (33, 3, 1000), (13, 2, 129), (35, 2, 257), (40, 3, 128),
                                   (12, 2, 2048), (16, 1, 4096)])
def test_half_types_take_the_tensor_cores_exactly(shape, dtype, poison):
    """float16 / bfloat16 where 'auto' takes the tensor cores (odd B and T, T not a multiple of 256, T past
    float32's bound): the mma16 kernels (forward, grad_k, grad_w's bands), and out, grad_k and grad_w are the float64
    reference's up to the one rounding to the dtype."""
    from conftest import kernels_of

    B, C, T = shape
    assert tx.tf32x3_auto(dtype, B, T) and tx.tf32x3_auto(dtype, B, T, "grad_w")
    r = rng()
    wd, kd, gd, w, k, g = make(shape, dtype, r)
    eps = float(r.standard_normal())
    out, used = kernels_of(tx.SOURCE, lambda: ck.timex(wd, kd, eps))
    assert used == {tx._mma16_name(False, dtype, T % 8 == 0)}, used
    ref = tx.reference(w, k, eps)
    check_half_exact(out, ref, dtype, rel_err(out, ref), f"out {shape}")
    (gw, gk), used = kernels_of(tx.SOURCE, lambda: ck.timex_backward(wd, kd, gd))
    assert used == {tx._mma16_name(True, dtype, T % 8 == 0), tx._grad_w_mma16_name(dtype, T % 8 == 0),
                    tx._band_combine_name(dtype)}, used
    rgw, rgk = tx.reference_backward(w, k, g)
    check_half_exact(gw, rgw, dtype, grad_err(gw, rgw, w, k, g, 0), f"grad_w {shape}")
    check_half_exact(gk, rgk, dtype, grad_err(gk, rgk, w, k, g, 1), f"grad_k {shape}")


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_tensor_cores_on_strided_inputs(dtype, poison):
    """A row-strided w (a longer filter's view), a channel-major k (batch and channel strides) and a grad_out with odd
    row strides (grad_w's scalar loads): read in place by the tensor-core kernels, exact up to the rounding."""
    from conftest import kernels_of

    from cupy_kernels._runtime import CUPY

    r = rng()
    B, C, T = 17, 3, 700
    wf, k, g = r.standard_normal((C, 1000)) / np.sqrt(T), r.standard_normal((C, B, T)), r.standard_normal((B, C, T + 5))
    wd = cupy_array(wf, dtype)[:, -T:]
    kd = cupy_array(k, dtype).transpose(1, 0, 2)
    gd = cupy_array(g, dtype)[:, :, :T]
    w, k, g = rounded(wf, dtype)[:, -T:], rounded(k, dtype).transpose(1, 0, 2), rounded(g, dtype)[:, :, :T]
    assert [tx._row_layout(CUPY, x, dtype)[:2] for x in (wd, kd, gd)] == [
        (False, (1000, 1)), (False, (T, B * T, 1)), (False, (C * (T + 5), T + 5, 1))]
    out, used = kernels_of(tx.SOURCE, lambda: ck.timex(wd, kd, 0.25))
    assert used == {tx._mma16_name(False, dtype, False)}, used  # T = 700: scalar loads
    ref = tx.reference(w, k, 0.25)
    check_half_exact(out, ref, dtype, rel_err(out, ref), "strided out")
    (gw, gk), used = kernels_of(tx.SOURCE, lambda: ck.timex_backward(wd, kd, gd))
    assert used == {tx._mma16_name(True, dtype, False), tx._grad_w_mma16_name(dtype, False),
                    tx._band_combine_name(dtype)}, used
    rgw, rgk = tx.reference_backward(w, k, g)
    check_half_exact(gw, rgw, dtype, grad_err(gw, rgw, w, k, g, 0), "strided grad_w")
    check_half_exact(gk, rgk, dtype, grad_err(gk, rgk, w, k, g, 1), "strided grad_k")


@gpu
@pytest.mark.parametrize("dtype", tx.TENSOR_CORE_DTYPES)
@pytest.mark.parametrize("vec", [False, True])
def test_grad_w_tf32x3_loads(vec, dtype):
    """The tensor-core grad_w (bands, then their combine), scalar and 2-wide loads; workspace (0xff bytes) and
    output NaN-poisoned; the result bit-identical on a second run (no atomics). float16 / bfloat16: one exact TF32
    pass, float32 bands, one rounding to the dtype in the combine."""
    r = rng()
    shapes = [(1, 1, 4), (9, 2, 132), (17, 3, 1000), (32, 2, 768), (3, 1, 5000), (2, 18, 64), (64, 2, 256)]
    if not vec:  # odd T, T = 1, fewer K rows than a chunk
        shapes += [(5, 2, 131), (1, 3, 1), (40, 1, 3), (2, 17, 701)]
    for B, C, T in shapes:
        k, g = r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
        kd, gd = cupy_array(k, dtype), cupy_array(g, dtype)
        k, g = rounded(k, dtype), rounded(g, dtype)
        runs = []
        for _ in range(2):
            gw = cupy_array(np.full((C, T), np.nan), dtype)
            st = (C * T, T)
            plan = run_plan(lambda b, kb, gb, gwb: tx.plan_grad_w_bands(b, dtype, kb, st, gb, st, gwb, B, C, T,
                                                                         vec=vec), (kd, gd, gw))
            runs.append(to_f64(gw))
        assert plan.kernels == (tx._grad_w_bands_name(vec, dtype), tx._band_combine_name(dtype))
        ref = tx.reference_backward(np.zeros((C, T)), k, g)[0]
        err = rel_err(runs[0], ref)
        if dtype == "float32":
            assert err <= TF32X3_TOL, (vec, B, C, T, err)
        else:
            check_half_exact(runs[0], ref, dtype, err, f"grad_w vec={vec} {(B, C, T)}")
        assert np.array_equal(runs[0], runs[1]), (vec, B, C, T, "not deterministic")


@gpu
@pytest.mark.parametrize("dtype", tx.MMA16_DTYPES)
@pytest.mark.parametrize("vec", [False, True])
def test_grad_w_mma16_loads(vec, dtype):
    """timex_grad_w_mma16 (bands, then their combine), scalar and 16-byte loads, batch strides past C * T; workspace
    (0xff bytes) and output NaN-poisoned; within one rounding to the dtype; bit-identical on a second run."""
    r = rng()
    shapes = [(1, 1, 8), (9, 2, 136), (17, 3, 1000), (32, 2, 768), (3, 1, 5000), (2, 18, 64), (64, 2, 256),
              (40, 1, 200), (33, 2, 72)]
    if not vec:  # odd T, T = 1, fewer K rows than a chunk
        shapes += [(5, 2, 131), (1, 3, 1), (40, 1, 3), (2, 17, 701), (35, 2, 129)]
    for B, C, T in shapes:
        pad = 8 * (B % 2)
        k, g = r.standard_normal((B, C * T + pad)), r.standard_normal((B, C * T + pad))
        kd, gd = cupy_array(k, dtype), cupy_array(g, dtype)
        k, g = (rounded(x, dtype)[:, :C * T].reshape(B, C, T) for x in (k, g))
        runs = []
        for _ in range(2):
            gw = cupy_array(np.full((C, T), np.nan), dtype)
            st = (C * T + pad, T)
            plan = run_plan(lambda b, kb, gb, gwb: tx.plan_grad_w_bands(b, dtype, kb, st, gb, st, gwb, B, C, T,
                                                                        vec=vec, kernel="mma16"), (kd, gd, gw))
            runs.append(to_f64(gw))
        assert plan.kernels == (tx._grad_w_mma16_name(dtype, vec), tx._band_combine_name(dtype))
        ref = tx.reference_backward(np.zeros((C, T)), k, g)[0]
        check_half_exact(runs[0], ref, dtype, rel_err(runs[0], ref), f"grad_w mma16 vec={vec} {(B, C, T)}")
        assert np.array_equal(runs[0], runs[1]), (vec, B, C, T, "not deterministic")


@gpu
@pytest.mark.parametrize("tile", ["b32", "b8", "b2"])
@pytest.mark.parametrize("vec", [False, True])
def test_tile_shapes_both_directions(tile, vec):
    """Every compiled float32 tile shape, scalar and 4-wide loads, forward and (but b8, a forward variant only)
    the time-reversed product that gives grad_k."""
    import cupy

    r = rng()
    for B, C, T in [(1, 1, 4), (5, 2, 132), (33, 3, 1000), (32, 2, 768)]:
        w, k = r.standard_normal((C, T)) / np.sqrt(T), r.standard_normal((B, C, T))
        wd, kd = cupy_array(w, "float32"), cupy_array(k, "float32")
        _, rgk = tx.reference_backward(w, np.zeros_like(k), k)
        for rev, eps, ref in ((False, 0.5, tx.reference(w, k, 0.5)), (True, 0.0, rgk)):
            if rev and tile == "b8":
                continue
            out = cupy.full((B, C, T), np.nan, np.float32)
            run_plan(lambda b, wb, kb, ob: tx.plan_tiled(b, "float32", tile, rev, wb, T, kb, (C * T, T), ob, eps, B, C,
                                                         T, vec=vec), (wd, kd, out))
            assert rel_err(out, ref) <= 1e-5, (tile, vec, rev, B, C, T)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vec", [False, True])
def test_grad_w_tile(dtype, vec):
    """The SIMT grad_w, scalar and 4-wide loads, NaN-poisoned output."""
    import cupy

    r = rng()
    for B, C, T in [(1, 1, 4), (9, 2, 132), (17, 3, 1000), (32, 2, 768), (2, 17, 64)]:
        w, k, g = r.standard_normal((C, T)), r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
        kd, gd = cupy_array(k, dtype), cupy_array(g, dtype)
        gw = cupy_array(np.full((C, T), np.nan), dtype)
        st = (C * T, T)
        run_plan(lambda b, kb, gb, gwb: tx.plan_grad_w(b, dtype, kb, st, gb, st, gwb, B, C, T, vec=vec), (kd, gd, gw))
        assert rel_err(gw, tx.reference_backward(w, k, g)[0]) <= TOL[dtype], (dtype, vec, B, C, T)


@gpu
def test_strided_k_and_grad_out(poison):
    import cupy

    from cupy_kernels._runtime import CUPY

    r = rng()
    B, C, T = 5, 3, 130
    w = r.standard_normal((C, T)) / np.sqrt(T)
    k, g = r.standard_normal((C, B, T)), r.standard_normal((B, C, 2 * T))
    wd, kd = cupy.asarray(w, np.float32), cupy.asarray(k, np.float32).transpose(1, 0, 2)  # batch/channel strides
    gd = cupy.asarray(g, np.float32)[:, :, ::2]  # t stride 2: copied once
    kh, gh = rounded(k, "float32").transpose(1, 0, 2), rounded(g, "float32")[:, :, ::2]
    assert tx._row_layout(CUPY, kd, "float32")[0] is False and tx._row_layout(CUPY, gd, "float32")[0] is True
    assert rel_err(ck.timex(wd, kd), tx.reference(rounded(w, "float32"), kh)) <= 1e-5
    gw, gk = ck.timex_backward(wd, kd, gd)
    rgw, rgk = tx.reference_backward(rounded(w, "float32"), kh, gh)
    assert rel_err(gw, rgw) <= 1e-5 and rel_err(gk, rgk) <= 1e-5


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_replayed_plans_and_alignment(dtype, poison):
    """A plan replayed on new data, and inputs off the 4-element boundary (a new plan with scalar loads), give
    the reference's results."""
    r = rng()
    B, C, T = 3, 2, 256
    for offset in (0, 1, 0, 2):
        w = r.standard_normal((C, T)) / np.sqrt(T)
        k, g = r.standard_normal((B, C, T)), r.standard_normal((B, C, T))
        flat_k = cupy_array(np.concatenate([np.zeros(offset), k.ravel()]), dtype)
        flat_g = cupy_array(np.concatenate([np.zeros(offset), g.ravel()]), dtype)
        kd, gd = flat_k[offset:].reshape(B, C, T), flat_g[offset:].reshape(B, C, T)
        wd = cupy_array(w, dtype)
        wh, kh, gh = (rounded(x, dtype) for x in (w, k, g))
        assert rel_err(ck.timex(wd, kd, 0.5), tx.reference(wh, kh, 0.5)) <= TOL[dtype], offset
        gw, gk = ck.timex_backward(wd, kd, gd)
        rgw, rgk = tx.reference_backward(wh, kh, gh)
        assert rel_err(gw, rgw) <= TOL[dtype] and rel_err(gk, rgk) <= TOL[dtype], offset


@gpu
@pytest.mark.parametrize("shape", [(2, 2, 5000), (2, 1, 16384)])
def test_long_t_float32(shape, poison):
    check_forward(shape, "float32")
    check_backward(shape, "float32")


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_grad_w_at_t4096(dtype, poison):
    check_backward((8, 3, 4096), dtype)


@gpu
def test_empty_shapes():
    import cupy

    for shape in [(0, 3, 5), (2, 0, 5), (2, 3, 0)]:
        k = cupy.ones(shape, np.float32)
        w = cupy.ones(shape[1:], np.float32)
        assert ck.timex(w, k).shape == shape
        gw, gk = ck.timex_backward(w, k, k)
        assert gw.shape == shape[1:] and gk.shape == shape
        if shape[0] == 0:
            assert float(abs(gw).sum()) == 0.0


@gpu
def test_errors_name_the_argument():
    import cupy

    k = cupy.ones((2, 3, 5), np.float32)
    with pytest.raises(ValueError, match=r"w must have shape \(C, T\) = \(3, 5\)"):
        ck.timex(cupy.ones((3, 6), np.float32), k)
    with pytest.raises(TypeError, match="w has dtype float16 but k has float32"):
        ck.timex(cupy.ones((3, 5), np.float16), k)
    with pytest.raises(TypeError, match="w has dtype int32; expected one of"):
        ck.timex(cupy.ones((3, 5), np.int32), cupy.ones((2, 3, 5), np.int32))
    with pytest.raises(ValueError, match="k must have 3 dimensions"):
        ck.timex(cupy.ones((3, 5), np.float32), cupy.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="grad_out must have the shape of k"):
        ck.timex_backward(cupy.ones((3, 5), np.float32), k, cupy.ones((2, 3, 4), np.float32))
    with pytest.raises(TypeError, match="w must be a cupy.ndarray"):
        ck.timex(np.ones((3, 5), np.float32), k)


# ---- torch --------------------------------------------------------------------------------------


def torch_inputs(shape, dtype, tmax=None, requires_grad=True):
    B, C, T = shape
    full = torch.randn(C, tmax or T, device="cuda", dtype=torch.float64) / T ** 0.5
    full = full.to(getattr(torch, dtype)).requires_grad_(requires_grad)
    w = full[:, -T:]
    k = torch.randn(shape, device="cuda", dtype=torch.float64).to(getattr(torch, dtype)).requires_grad_(requires_grad)
    return full, w, k


@torch_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_autograd(dtype):
    B, C, T = 3, 4, 200
    full, w, k = torch_inputs((B, C, T), dtype, tmax=256)
    out = ck.timex(w, k, 0.25)
    assert isinstance(out, torch.Tensor) and out.dtype == k.dtype and out.shape == (B, C, T)
    g = torch.randn_like(out)
    out.backward(g)
    wh, kh, gh = (to_f64(x) for x in (w, k, g))
    assert rel_err(out, tx.reference(wh, kh, 0.25)) <= TOL[dtype]
    rgw, rgk = tx.reference_backward(wh, kh, gh)
    assert full.grad.shape == (C, 256) and float(full.grad[:, :-T].abs().sum()) == 0.0
    assert rel_err(full.grad[:, -T:], rgw) <= TOL[dtype] and rel_err(k.grad, rgk) <= TOL[dtype]


@torch_gpu
@pytest.mark.parametrize("variant", ["tf32x3", "balanced", "naive"])
def test_torch_autograd_other_variants(variant):
    B, C, T = 8, 3, 256
    _, w, k = torch_inputs((B, C, T), "float32")
    out = ck.timex(w, k, 0.0, variant=variant)
    g = torch.randn_like(out)
    gw, gk = torch.autograd.grad(out, (w, k), g)
    wh, kh, gh = (to_f64(x) for x in (w, k, g))
    rgw, rgk = tx.reference_backward(wh, kh, gh)
    tol = TF32X3_TOL if variant == "tf32x3" else 1e-5
    assert rel_err(out, tx.reference(wh, kh)) <= tol
    assert rel_err(gw, rgw) <= tol and rel_err(gk, rgk) <= tol


@torch_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_autograd_half_types_on_the_tensor_cores(dtype):
    """Forward and backward of a half-type model shape (B=32 T=768, w a longer filter's view) through autograd: the
    tensor-core kernels only, exact up to the rounding to the dtype."""
    from conftest import kernels_of

    B, C, T = 32, 4, 768
    full, w, k = torch_inputs((B, C, T), dtype, tmax=1024)
    g = torch.randn(B, C, T, device="cuda", dtype=torch.float64).to(getattr(torch, dtype))

    def step():
        out = ck.timex(w, k, 0.25)
        return (out,) + torch.autograd.grad(out, (w, k), g)

    (out, gw, gk), used = kernels_of(tx.SOURCE, step)
    assert used == {tx._mma16_name(rev, dtype, True) for rev in (False, True)} | {
        tx._grad_w_mma16_name(dtype, True), tx._band_combine_name(dtype)}, used
    wh, kh, gh = (to_f64(x) for x in (w, k, g))
    ref = tx.reference(wh, kh, 0.25)
    check_half_exact(out, ref, dtype, rel_err(out, ref), "torch out")
    rgw, rgk = tx.reference_backward(wh, kh, gh)
    check_half_exact(gw, rgw, dtype, grad_err(gw, rgw, wh, kh, gh, 0), "torch grad_w")
    check_half_exact(gk, rgk, dtype, grad_err(gk, rgk, wh, kh, gh, 1), "torch grad_k")


@torch_gpu
def test_torch_backward_computes_only_the_gradients_asked_for():
    """A frozen filter (w without grad): the backward launches grad_k's kernel only; a strided output gradient
    (a sum's expanded ones) is copied once."""
    from conftest import kernels_of

    B, C, T = 4, 3, 300
    w = (torch.randn(C, T, device="cuda") / T ** 0.5)
    k = torch.randn(B, C, T, device="cuda", requires_grad=True)
    out = ck.timex(w, k)
    tx.PLANS.clear()
    _, used = kernels_of(tx.SOURCE, lambda: out.sum().backward())
    assert all("grad_w" not in name for name in used) and len(used) == 1, used
    _, rgk = tx.reference_backward(to_f64(w), to_f64(k), np.ones((B, C, T)))
    assert rel_err(k.grad, rgk) <= 1e-5


@torch_gpu
def test_torch_cuda_graph_capture():
    """Forward and backward captured in a CUDA graph (the workspace from torch's allocator) and replayed on new
    inputs."""
    B, C, T = 16, 4, 512
    w = torch.randn(C, T, device="cuda") / T ** 0.5
    k, g = torch.randn(B, C, T, device="cuda"), torch.randn(B, C, T, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # plans built outside the capture
            ck.timex(w, k, 0.5)
            ck.timex_backward(w, k, g)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ck.timex(w, k, 0.5)
        gw, gk = ck.timex_backward(w, k, g)
    k.copy_(torch.randn_like(k))
    g.copy_(torch.randn_like(g))
    graph.replay()
    torch.cuda.synchronize()
    wh, kh, gh = (to_f64(x) for x in (w, k, g))
    assert rel_err(out, tx.reference(wh, kh, 0.5)) <= 1e-5
    rgw, rgk = tx.reference_backward(wh, kh, gh)
    assert rel_err(gw, rgw) <= 1e-5 and rel_err(gk, rgk) <= 1e-5


@torch_gpu
def test_torch_gradcheck_float64():
    full, _, k = torch_inputs((2, 3, 7), "float64", tmax=9, requires_grad=False)
    w = full[:, -7:].detach().requires_grad_()  # a leaf that is a row-strided view
    k.requires_grad_()
    assert w.stride() == (9, 1)
    assert torch.autograd.gradcheck(lambda w_, k_: ck.timex(w_, k_, 0.5), (w, k), eps=1e-6, atol=1e-7)
    torch.library.opcheck(torch.ops.cupy_kernels.timex.default, (w.detach(), k.detach(), 0.5, "auto"))
    g = torch.randn_like(k)
    torch.library.opcheck(torch.ops.cupy_kernels.timex_backward.default, (w.detach(), k.detach(), g, "auto"))


@torch_gpu
def test_torch_matches_conv1d_formulation():
    import torch.nn.functional as F

    B, C, T = 4, 8, 96
    _, w, k = torch_inputs((B, C, T), "float32")
    ref = 0.1 + F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=C)
    g = torch.randn_like(ref)
    rw, rk = torch.autograd.grad(ref, (w, k), g)
    ow, ok = torch.autograd.grad(ck.timex(w, k, 0.1), (w, k), g)
    assert rel_err(ck.timex(w, k, 0.1), to_f64(ref)) < 1e-5
    assert rel_err(ow, to_f64(rw)) < 1e-5 and rel_err(ok, to_f64(rk)) < 1e-5


@torch_gpu
def test_torch_compile_and_training_step():
    class Mix(torch.nn.Module):
        def __init__(self, C, Tmax):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(C, Tmax) / Tmax ** 0.5)
            self.proj = torch.nn.Linear(C, C)

        def forward(self, x):  # x (B, T, C)
            T = x.shape[1]
            k = self.proj(x).transpose(1, 2)  # (B, C, T), channel stride 1 -> t stride C: copied by the op
            return ck.timex(self.w[:, -T:], k.contiguous(), 0.0).transpose(1, 2)

    torch.manual_seed(0)
    model = Mix(16, 64).cuda()
    x = torch.randn(2, 48, 16, device="cuda")
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    assert rel_err(out, to_f64(eager)) < 1e-6
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = compiled(x).square().mean()
    loss.backward()
    gw = model.w.grad.clone()
    assert torch.isfinite(gw).all() and float(gw[:, -48:].abs().sum()) > 0 and float(gw[:, :-48].abs().sum()) == 0
    w_before = model.w.detach().clone()
    opt.step()
    assert not torch.equal(w_before, model.w.detach())
