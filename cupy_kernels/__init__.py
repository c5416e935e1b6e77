"""cupy-kernels: hand-written CUDA C kernels for CuPy arrays and PyTorch tensors.

Every op takes a cupy.ndarray or a CUDA torch.Tensor and returns the same kind (zero-copy), launched on the
caller's current stream. A kernel instance compiles the first time a call needs it (NVRTC) and is cached on
disk; `python -m cupy_kernels check` compiles all of them offline, without a GPU, and
`python -m cupy_kernels warmup` fills the cache ahead of time.
"""
from ._runtime import KernelCompileError
from .api import (layer_norm, layer_norm_, layer_norm_backward, layer_norm_forward, linear_, log_softmax,
                  log_softmax_backward, max, mean, min, pad, rms_norm, rms_norm_, rms_norm_backward, rms_norm_forward,
                  softmax, softmax_, softmax_backward, square_matmul_, sum, sum_ladder, timex, timex_backward)

import sys as _sys

if "torch" in _sys.modules:  # torch's side registers its custom ops now, not in a torch caller's first call
    from . import torch_ops as _torch_ops  # noqa: F401

__version__ = "0.1.0"
__all__ = ["KernelCompileError", "pad", "sum", "mean", "max", "min", "sum_ladder",
           "softmax", "log_softmax", "softmax_", "softmax_backward", "log_softmax_backward",
           "layer_norm", "rms_norm", "layer_norm_", "rms_norm_", "layer_norm_forward", "layer_norm_backward",
           "rms_norm_forward", "rms_norm_backward", "timex", "timex_backward",
           "square_matmul_", "linear_"]


def load_all_kernels() -> None:
    """Compile and load every declared kernel instance on the current device (slow: thousands of instances).
    Before a CUDA graph capture a warm-up call of each op on the capturing stream is enough."""
    import cupy

    from ._runtime import KernelSource

    device = cupy.cuda.runtime.getDevice()
    for source in KernelSource.registry.values():
        for name in source.names:
            source.kernel(name).function(device)
