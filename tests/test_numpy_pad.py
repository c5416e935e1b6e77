"""NumPy's own pad tests (numpy/lib/tests/test_arraypad.py of the installed numpy), with np.pad routed through
ck.pad: each numpy array goes to the GPU as a CuPy array in its memory order, ck.pad pads it, the result comes
back in its own. Every numpy test is a pytest case of this module.

Excluded, as the target allows: tests of dtypes the GPU has no type for (object, longdouble, clongdouble) are
expected to fail (xfail, the reason named); tests that match numpy's exact error text run with that text ignored
(ck.pad keeps its own messages), so they still check the exception's type.

Needs a GPU. With CUPY_KERNELS_PAD_EMULATE=1 the tests run without one, through test_pad.emulated_pad: ck.pad's
validation and plans, the per-axis passes' device code compiled for the host (a CPU self-check)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import HAS_GPU

EMULATE = os.environ.get("CUPY_KERNELS_PAD_EMULATE") == "1"

pytestmark = pytest.mark.skipif(not HAS_GPU and not EMULATE,
                                reason="needs a CUDA device (routes numpy's pad tests through ck.pad on the GPU)")

numpy_tests = pytest.importorskip("numpy.lib.tests.test_arraypad", reason="numpy is installed without its tests")

import cupy_kernels  # noqa: E402,F401  (before np.pad is patched: a function as mode runs numpy's own pad)


def _through_ck(array, pad_width, mode="constant", **kwargs):
    """np.pad's signature, answered by ck.pad on the GPU (NumPy in, NumPy out, memory order kept)."""
    import cupy

    import cupy_kernels as ck

    a = np.asarray(array)
    x = cupy.asarray(a, order="F" if a.flags.fnc else "C")
    return cupy.asnumpy(ck.pad(x, pad_width, mode, **kwargs), order="A")


def _emulated(array, pad_width, mode="constant", **kwargs):
    return emulated_pad(array, pad_width, mode, **kwargs)


if EMULATE:
    from test_pad import emulated_pad


# Tests whose array has a dtype the GPU lacks -> why.
GPU_LESS = {np.longdouble: "longdouble has no GPU type", np.clongdouble: "clongdouble has no GPU type"}
OBJECT_ARRAYS = ("test_object_input", "test_check_object_array", "test_object_array")

# Tests that match numpy's exact error text (pytest.raises(..., match=...)): the type still counts, the text not.
MESSAGE_TEXT = ("test_check_negative_stat_length", "test_misshaped_pad_width", "test_misshaped_pad_width_2",
                "test_negative_pad_width", "test_bad_type")

_raises = pytest.raises


def _raises_any_text(expected_exception, *args, match=None, **kwargs):
    return _raises(expected_exception, *args, **kwargs)


@pytest.fixture(autouse=True)
def _route_np_pad(request, monkeypatch):
    callspec = getattr(request.node, "callspec", None)
    dtype = callspec.params.get("dtype") if callspec else None
    reason = GPU_LESS.get(dtype) if isinstance(dtype, type) else None
    if request.node.originalname in OBJECT_ARRAYS:
        reason = "object arrays have no GPU type"
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=False))
    monkeypatch.setattr(np, "pad", _emulated if EMULATE else _through_ck)
    if request.node.originalname in MESSAGE_TEXT:
        monkeypatch.setattr(pytest, "raises", _raises_any_text)
    yield


# numpy's test classes and functions, collected here (pytest collects what this module's namespace holds).
for _name in dir(numpy_tests):
    if _name.startswith(("Test", "test_")):
        globals()[_name] = getattr(numpy_tests, _name)
