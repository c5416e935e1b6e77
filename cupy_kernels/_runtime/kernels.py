"""Compiling cu_src files at run time through cupy.RawModule (NVRTC); offline compilation is in offline.py."""
from __future__ import annotations

import threading

from .device import use_shared_memory
from .sources import cuda_include_dir, read_source


class KernelCompileError(RuntimeError):
    """NVRTC rejected a cu_src file; the message names the file, the kernels and the compiler log."""


class KernelSource:
    """One cu_src file and the template instances the host code launches from it.

    Each ops module declares the name expressions it may launch; every declared instance is built in
    one module per (file, options, device), so `check` compiles offline exactly what runs.
    """

    registry: dict[str, "KernelSource"] = {}

    def __init__(self, filename: str, options: tuple[str, ...] = ()):
        self.filename = filename
        self.options = tuple(options)
        self.names: list[str] = []
        self._modules: dict[int, object] = {}
        self._kernels: dict[tuple, object] = {}
        self._lock = threading.Lock()
        KernelSource.registry[filename] = self

    def declare(self, names) -> None:
        for n in names:
            if n not in self.names:
                self.names.append(n)

    def runtime_options(self) -> tuple[str, ...]:
        inc = cuda_include_dir()
        return ("-std=c++17",) + ((f"-I{inc}",) if inc else ()) + self.options

    def module(self):
        """The compiled module for the current CuPy device (compiled once per process and device)."""
        import cupy

        dev = cupy.cuda.Device().id
        mod = self._modules.get(dev)
        if mod is None:
            with self._lock:
                mod = self._modules.get(dev)
                if mod is None:
                    mod = cupy.RawModule(code=read_source(self.filename), options=self.runtime_options(),
                                         name_expressions=tuple(self.names))
                    try:
                        mod.compile()
                    except Exception as e:  # cupy's CompileException carries the NVRTC log
                        raise KernelCompileError(
                            f"cu_src/{self.filename}: NVRTC failed compiling {len(self.names)} kernels "
                            f"({', '.join(self.names[:4])}{', ...' if len(self.names) > 4 else ''}):\n{e}"
                        ) from e
                    self._modules[dev] = mod
        return mod

    def kernel(self, name: str, shared_mem: int = 0):
        """The loaded kernel, one object per (device, name): get_function makes a new one each call. shared_mem:
        opted in to that many bytes of dynamic shared memory (use_shared_memory: once per kernel)."""
        import cupy

        key = (cupy.cuda.Device().id, name)
        k = self._kernels.get(key)
        if k is None:
            if name not in self.names:
                raise KeyError(f"cu_src/{self.filename}: kernel {name!r} was not declared by its ops module")
            k = self._kernels[key] = self.module().get_function(name)
        if shared_mem:
            use_shared_memory(k, shared_mem, name)
        return k

    def load_all(self) -> None:
        """Compile and load every declared kernel now (before a CUDA graph capture, say)."""
        for n in self.names:
            self.kernel(n)
