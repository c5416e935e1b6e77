"""cupy-kernels: hand-written CUDA C kernels for CuPy arrays and PyTorch tensors.

Every op takes a cupy.ndarray or a CUDA torch.Tensor and returns the same kind (zero-copy through
DLPack), launched on the caller's current stream. Kernels compile at first use (NVRTC, cached on
disk by CuPy); `python -m cupy_kernels check` compiles all of them offline, without a GPU.
"""
from ._runtime import KernelCompileError
from .ops.reduce import max, mean, min, sum, sum_ladder
from .ops.pad import pad
from .ops.softmax import log_softmax, log_softmax_backward, softmax, softmax_, softmax_backward
from .ops.norm import (layer_norm, layer_norm_, layer_norm_backward, layer_norm_forward, rms_norm, rms_norm_,
                       rms_norm_backward, rms_norm_forward)
from .ops.timex import timex, timex_backward
from .ops.square_matmul import linear_, square_matmul_

__version__ = "0.1.0"
__all__ = ["KernelCompileError", "pad", "sum", "mean", "max", "min", "sum_ladder",
           "softmax", "log_softmax", "softmax_", "softmax_backward", "log_softmax_backward",
           "layer_norm", "rms_norm", "layer_norm_", "rms_norm_", "layer_norm_forward", "layer_norm_backward",
           "rms_norm_forward", "rms_norm_backward", "timex", "timex_backward",
           "square_matmul_", "linear_"]


def load_all_kernels() -> None:
    """Compile and load every kernel on the current device now (do this before CUDA graph capture)."""
    from ._runtime import KernelSource

    for source in KernelSource.registry.values():
        source.load_all()
