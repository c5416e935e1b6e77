"""Shared test helpers: GPU detection, fresh random inputs, float64 references, error measures."""
from __future__ import annotations

import numpy as np
import pytest


def _gpu_count() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


HAS_GPU = _gpu_count() > 0
try:
    import torch

    HAS_TORCH_CUDA = HAS_GPU and torch.cuda.is_available()
except ImportError:
    torch = None
    HAS_TORCH_CUDA = False

gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device (none found: cupy reports no GPU)")
torch_gpu = pytest.mark.skipif(not HAS_TORCH_CUDA, reason="needs torch with a CUDA device")

FLOATS = ("float32", "float16", "bfloat16")
ODD_SIZES = (1, 3, 127, 1000, 4097)


def group_lengths(V: int, P: int, block_row: int) -> list[tuple[int, int]]:
    """(G, n) rows for the row kernels compiled for their group (ops/_rowwise.py: SHORT_GROUPS, ROW_BLOCK), for
    a kernel holding P packs of V elements a thread: for each sub-warp group G a row filling it and one just past
    the next smaller group (fewer packs a thread than it holds); then a block a row, just past the longest
    sub-warp row (64 * P * V + V) and `block_row`."""
    from cupy_kernels.ops import _rowwise as rw

    sub = [(G, n) for G in rw.SHORT_GROUPS for n in sorted({G * P * V, (G // 2) * P * V + V})]
    return sub + [(rw.ROW_BLOCK, 64 * P * V + V), (rw.ROW_BLOCK, block_row)]


def many_rows(G: int, sms: int = 132) -> int:
    """Rows that give every group of G threads of a full chip (sms SMs x 2048 threads) three or four rows, the last
    step taken by only some groups of a warp: staged short rows' next-row copies run (a few thousand rows give each
    group at most one)."""
    return 3 * sms * 2048 // G + 7


def rng():
    """A fresh generator per call: every test draws new inputs."""
    return np.random.default_rng()


def cupy_array(a: np.ndarray, dtype: str):
    """Host float64 data on the GPU in `dtype` (bfloat16 through torch when CuPy lacks it)."""
    import cupy

    from cupy_kernels._runtime import numpy_dtype

    return cupy.asarray(a.astype(numpy_dtype(dtype)))


def to_f64(x) -> np.ndarray:
    """Any device array (CuPy, torch, bfloat16 included) as a host float64 array."""
    from cupy_kernels._runtime import is_torch

    if is_torch(x):
        return x.detach().to(torch.float64).cpu().numpy()
    import cupy

    return cupy.asnumpy(x).astype(np.float64)


def rel_err(got, ref) -> float:
    """||got - ref|| / ||ref|| in float64; NaN in got where ref has none counts as infinite."""
    got = np.asarray(to_f64(got) if not isinstance(got, np.ndarray) else got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"shape {got.shape} != reference {ref.shape}"
    if np.isnan(got).any() != np.isnan(ref).any() or (np.isnan(got) != np.isnan(ref)).any():
        return float("inf")
    got, ref = np.nan_to_num(got, nan=0.0), np.nan_to_num(ref, nan=0.0)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (denom if denom else 1.0))


def rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values as the device will see them after rounding to `dtype` (references use these inputs)."""
    from cupy_kernels._runtime import numpy_dtype

    return a.astype(numpy_dtype(dtype)).astype(np.float64)


TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}


def kernels_of(sources, call):
    """(call's result, the names of the kernels it asked `sources` (a KernelSource, or several) for): the plan caches
    are emptied first, so that the call plans (a cached plan asks for no kernel)."""
    from cupy_kernels._runtime.tuning import clear_plans

    sources = tuple(sources) if isinstance(sources, (tuple, list)) else (sources,)
    clear_plans()
    names = set()
    for source in sources:
        def spy(name, *args, _real=source.kernel, **kwargs):
            names.add(name)
            return _real(name, *args, **kwargs)

        source.kernel = spy  # an instance attribute over the method, removed below
    try:
        return call(), names
    finally:
        for source in sources:
            del source.kernel


def close_everywhere(got, want, dtype, k=1, scale=0.0):
    """Every element within k * TOL of its reference (relative, or of the largest one, plus `scale`: an array that
    broadcasts against want gives rows their own room): a row's end element that is missed or taken from the next
    row cannot hide in a norm."""
    got = to_f64(got)
    return bool(np.allclose(got, want, rtol=4 * k * TOL[dtype], atol=4 * k * TOL[dtype] * (np.abs(want).max() + scale)))
