"""Compiling kernel instances at run time: one template instance at a time, the first time a call needs it,
through CuPy's NVRTC, cached on disk as a cubin per instance. Offline compilation (`check`) is offline.py."""
from __future__ import annotations

import hashlib
import os
import struct
import threading
from pathlib import Path

from .sources import cuda_include_dir, read_source


class KernelCompileError(RuntimeError):
    """NVRTC rejected a cu_src file; the message names the file, the kernels and the compiler log."""


class KernelSource:
    """One cu_src file and the template instances its ops module may launch.

    The ops module declares every instance it may launch (`declare`): `check` compiles all of them offline,
    while at run time an instance compiles only when a call first needs it (`kernel(name)`)."""

    registry: dict[str, "KernelSource"] = {}

    def __init__(self, filename: str, options: tuple[str, ...] = ()):
        self.filename = filename
        self.options = tuple(options)
        self.names: list[str] = []
        self._declared: set[str] = set()
        self._kernels: dict[str, Kernel] = {}
        KernelSource.registry[filename] = self

    def declare(self, names) -> None:
        for n in names:
            if n not in self._declared:
                self._declared.add(n)
                self.names.append(n)

    def runtime_options(self) -> tuple[str, ...]:
        inc = cuda_include_dir()
        return ("-std=c++17",) + ((f"-I{inc}",) if inc else ()) + self.options

    def kernel(self, name: str, shared_mem: int = 0) -> "Kernel":
        """The instance `name` (a declared name expression). shared_mem: opt it in to that many bytes of
        dynamic shared memory on the current device (above the default 48 KB window)."""
        k = self._kernels.get(name)
        if k is None:
            if name not in self._declared:
                raise KeyError(f"cu_src/{self.filename}: kernel {name!r} was not declared by its ops module")
            k = self._kernels.setdefault(name, Kernel(self, name))
        if shared_mem:
            from .device import use_shared_memory

            use_shared_memory(k, shared_mem, name)
        return k


class Kernel:
    """One template instance of a cu_src file: compiled on first use (disk-cached), loaded once per device."""

    def __init__(self, source: KernelSource, name: str):
        self.source = source
        self.name = name
        self._functions: dict[int, object] = {}  # device -> cupy.cuda.function.Function (keeps its module)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Kernel({self.source.filename}: {self.name})"

    def function(self, device: int | None = None):
        """The loaded function on `device` (default: CuPy's current device), compiling it if needed."""
        if device is None:
            import cupy

            device = cupy.cuda.runtime.getDevice()
        f = self._functions.get(device)
        if f is None:
            with self._lock:
                f = self._functions.get(device)
                if f is None:
                    f = self._functions[device] = _load(self, device)
        return f

    @property
    def ptr(self) -> int:
        """The CUfunction on CuPy's current device."""
        return self.function().ptr

    def attribute(self, attr: int) -> int:
        from cupy_backends.cuda.api import driver

        return driver.funcGetAttribute(attr, self.ptr)

    @property
    def shared_size_bytes(self) -> int:
        return self.attribute(_ATTR_SHARED_SIZE_BYTES)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.attribute(_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(self.ptr, _ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)


_ATTR_SHARED_SIZE_BYTES = 1              # CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def _load(kernel: Kernel, device: int):
    import cupy
    from cupy.cuda import function

    with cupy.cuda.Device(device):
        arch = _arch(device)
        cubin, mangled = compiled(kernel.source, kernel.name, arch)
        module = function.Module()
        module.load(cubin)
        return module.get_function(mangled)


def _arch(device: int) -> str:
    """The architecture NVRTC builds for on `device` (CuPy's choice: the device's, capped at NVRTC's newest)."""
    from .device import properties

    try:
        from cupy.cuda import compiler

        newest = int(compiler._get_max_compute_capability())
    except Exception:  # a CuPy without the helper: the device's own
        newest = 10_000
    return str(min(properties(device).cc, newest))


# ---- the disk cache --------------------------------------------------------------------------------------
# One file per instance: <key>.cubin holding the mangled name and the cubin. The key covers everything the
# cubin depends on: the expanded source, the options, the architecture, NVRTC's and CuPy's versions.

_MAGIC = b"CKCUBIN1"


def cache_dir() -> Path:
    """${CUPY_KERNELS_CACHE_DIR}, else cupy_kernels/ inside CuPy's kernel cache (${CUPY_CACHE_DIR} or
    ~/.cupy/kernel_cache): a fresh CUPY_CACHE_DIR empties both caches."""
    d = os.environ.get("CUPY_KERNELS_CACHE_DIR")
    if not d:
        d = os.path.join(os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache"),
                         "cupy_kernels")
    return Path(d)


_digests: dict[str, str] = {}


def _key(source: KernelSource, name: str, arch: str, options: tuple[str, ...]) -> str:
    import cupy

    digest = _digests.get(source.filename)
    if digest is None:
        digest = _digests[source.filename] = hashlib.sha256(read_source(source.filename).encode()).hexdigest()
    material = "\0".join((digest, name, arch, " ".join(options), str(cupy.cuda.nvrtc.getVersion()),
                          cupy.__version__))
    return hashlib.sha256(material.encode()).hexdigest()[:40]


def compiled(source: KernelSource, name: str, arch: str) -> tuple[bytes, str]:
    """(cubin, mangled name) of one instance for `arch` ("90"), from the disk cache or compiled now."""
    options = source.runtime_options() + ("-ftz=true",)  # -ftz=true: as cupy.RawModule compiles
    path = cache_dir() / f"{_key(source, name, arch, options)}.cubin"
    try:
        data = path.read_bytes()
        if data[:8] == _MAGIC:
            (n,) = struct.unpack_from("<I", data, 8)
            return data[12 + n:], data[12:12 + n].decode()
    except OSError:
        pass
    cubin, mangled = _nvrtc(source, name, arch, options)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        m = mangled.encode()
        tmp.write_bytes(_MAGIC + struct.pack("<I", len(m)) + m + cubin)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    except OSError:
        pass  # a read-only cache: run without it
    return cubin, mangled


def _nvrtc(source: KernelSource, name: str, arch: str, options: tuple[str, ...]) -> tuple[bytes, str]:
    from cupy.cuda import compiler

    try:
        cubin, mapping = compiler.compile_using_nvrtc(read_source(source.filename), options, arch,
                                                      filename=source.filename, name_expressions=(name,),
                                                      cache_in_memory=True)
    except Exception as e:  # cupy's CompileException carries the NVRTC log
        raise KernelCompileError(f"cu_src/{source.filename}: NVRTC failed compiling {name} for sm_{arch}:\n{e}") from e
    mangled = mapping[name] if mapping else name
    return cubin, mangled.decode() if isinstance(mangled, bytes) else mangled


def warm_instance(filename: str, name: str, arch: str) -> str:
    """Compile one instance into the disk cache (a worker of `python -m cupy_kernels warmup`)."""
    compiled(KernelSource.registry[filename], name, arch)
    return name
