"""cupy-kernels: hand-written CUDA C kernels for CuPy arrays and PyTorch tensors.

Every op takes a cupy.ndarray or a CUDA torch.Tensor and returns the same kind (zero-copy through
DLPack), launched on the caller's current stream. Kernels compile at first use (NVRTC, cached on
disk by CuPy); `python -m cupy_kernels check` compiles all of them offline, without a GPU.
"""
from ._runtime import KernelCompileError
from .ops.reduce import max, mean, min, sum, sum_ladder

__version__ = "0.1.0"
__all__ = ["KernelCompileError", "sum", "mean", "max", "min", "sum_ladder"]


def load_all_kernels() -> None:
    """Compile and load every kernel on the current device now (do this before CUDA graph capture)."""
    from ._runtime import KernelSource

    for source in KernelSource.registry.values():
        source.load_all()
