"""Liger-Kernel (Triton) as a peer, where it is importable: its autograd Functions for softmax, layer_norm
and rms_norm, and its nn modules. Every accessor returns None when Liger (or Triton) is missing, so the
suites simply leave out the Liger rows."""
from __future__ import annotations

import functools
import importlib.util
from types import SimpleNamespace


def installed() -> bool:
    """Whether liger_kernel can be found (without importing it, nor Triton)."""
    return importlib.util.find_spec("liger_kernel") is not None


@functools.cache
def functions():
    """SimpleNamespace(softmax, layer_norm, rms_norm, version) of callables on torch tensors, or None.
    softmax(x) over the last axis; layer_norm(x, w, b, eps); rms_norm(x, w, eps) with Liger's defaults
    (offset 0, "llama" casting) except in_place=False: Liger's default writes dx into the incoming dy,
    which the benchmarks reuse across calls."""
    if not installed():
        return None
    try:
        try:  # the package namespace (it may swap in another implementation for the device)
            from liger_kernel.ops import LigerLayerNormFunction, LigerRMSNormFunction, LigerSoftmaxFunction
        except ImportError:
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except Exception as e:  # Triton missing or broken
        print(f"  Liger-Kernel is installed but does not import: {type(e).__name__}: {str(e)[:200]}")
        return None
    return SimpleNamespace(
        softmax=LigerSoftmaxFunction.apply,
        layer_norm=lambda x, w, b, eps=1e-5: LigerLayerNormFunction.apply(x, w, b, eps),
        rms_norm=lambda x, w, eps=1e-6: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False),
        version=version())


@functools.cache
def modules():
    """SimpleNamespace(LayerNorm, RMSNorm) of Liger's nn modules, or None."""
    if functions() is None:
        return None
    try:
        from liger_kernel.transformers.layer_norm import LigerLayerNorm
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except Exception as e:
        print(f"  Liger-Kernel's nn modules do not import: {type(e).__name__}: {str(e)[:200]}")
        return None
    return SimpleNamespace(LayerNorm=LigerLayerNorm, RMSNorm=LigerRMSNorm)


def version() -> str | None:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("liger-kernel")
    except Exception:
        return None
