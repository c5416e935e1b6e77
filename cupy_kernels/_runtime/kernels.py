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
    """One template instance of a cu_src file: compiled on first use (disk-cached), loaded once per device through
    the driver. A cache hit needs neither NVRTC nor CuPy's array module: a torch caller's first call stays short."""

    def __init__(self, source: KernelSource, name: str):
        self.source = source
        self.name = name
        self._functions: dict[int, int] = {}  # device -> CUfunction (its module is never unloaded)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Kernel({self.source.filename}: {self.name})"

    def function(self, device: int | None = None) -> int:
        """The CUfunction on `device` (default: the current context's), compiling and loading it if needed."""
        from .device import current_device

        if device is None:
            device = current_device()
        f = self._functions.get(device)
        if f is None:
            with self._lock:
                f = self._functions.get(device)
                if f is None:
                    f = self._functions[device] = _load(self, device)
        return f

    @property
    def ptr(self) -> int:
        """The CUfunction on the current device."""
        return self.function()

    def attribute(self, attr: int) -> int:
        from .driver import function_attribute

        return function_attribute(self.ptr, attr)

    @property
    def shared_size_bytes(self) -> int:
        return self.attribute(_ATTR_SHARED_SIZE_BYTES)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.attribute(_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        from .driver import set_function_attribute

        set_function_attribute(self.ptr, _ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)


_ATTR_SHARED_SIZE_BYTES = 1              # CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def _load(kernel: Kernel, device: int) -> int:
    from .device import on_context, properties
    from .driver import CudaError, load_function

    arch = str(properties(device).cc)
    cubin, mangled = compiled(kernel.source, kernel.name, arch)
    with on_context(device):
        try:
            return load_function(cubin, mangled)
        except CudaError:  # a damaged or foreign cache entry: compile it again
            cubin, mangled = compiled(kernel.source, kernel.name, arch, fresh=True)
            return load_function(cubin, mangled)


# ---- the disk cache --------------------------------------------------------------------------------------
# One file per instance: <key>.cubin holding the mangled name and the cubin. The key covers what decides the
# code: the expanded source, the options and the architecture. Not the NVRTC version: asking it loads NVRTC
# (tens of ms a process), and a cubin stays valid for its architecture across compiler upgrades; empty the
# cache (`python -m cupy_kernels warmup --clear`) to rebuild with a new compiler.

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
    digest = _digests.get(source.filename)
    if digest is None:
        digest = _digests[source.filename] = hashlib.sha256(read_source(source.filename).encode()).hexdigest()
    material = "\0".join((_FORMAT, digest, name, arch, " ".join(options)))
    return hashlib.sha256(material.encode()).hexdigest()[:40]


_FORMAT = "1"  # bump when the file layout or the compile path changes


def compiled(source: KernelSource, name: str, arch: str, fresh: bool = False) -> tuple[bytes, str]:
    """(cubin, mangled name) of one instance for `arch` ("90"), from the disk cache (unless `fresh`) or compiled
    now."""
    # the key leaves out where the CUDA headers are: finding them costs a large part of a second
    path = cache_dir() / f"{_key(source, name, arch, ('-std=c++17',) + source.options)}.cubin"
    try:
        data = b"" if fresh else path.read_bytes()
        if data[:8] == _MAGIC:
            (n,) = struct.unpack_from("<I", data, 8)
            return data[12 + n:], data[12:12 + n].decode()
    except OSError:
        pass
    cubin, mangled = _nvrtc(source, name, arch, source.runtime_options() + ("-ftz=true",))  # ftz: as RawModule
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
    """Compile one instance with NVRTC (cupy_backends' bindings, as cupy.RawModule does, without importing CuPy's
    array module): CuPy's options (the device's architecture capped at NVRTC's newest, device code by default,
    automatic precompiled headers from NVRTC 12.8)."""
    from cupy_backends.cuda.libs import nvrtc

    if not any(o.startswith("-arch") for o in options):
        options += (f"-arch=sm_{min(int(arch), max(int(a) for a in nvrtc.getSupportedArchs()))}",)
    options += ("--device-as-default-execution-space",) + (("--pch",) if nvrtc.getVersion() >= (12, 8) else ())
    prog = nvrtc.createProgram(read_source(source.filename), source.filename, (), ())
    try:
        nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as e:
            raise KernelCompileError(f"cu_src/{source.filename}: NVRTC failed compiling {name} ({e}), options "
                                     f"{' '.join(options)}:\n{nvrtc.getProgramLog(prog)}") from None
        return nvrtc.getCUBIN(prog), nvrtc.getLoweredName(prog, name)
    finally:
        nvrtc.destroyProgram(prog)


def warm_instance(filename: str, name: str, arch: str) -> str:
    """Compile one instance into the disk cache (a worker of `python -m cupy_kernels warmup`)."""
    compiled(KernelSource.registry[filename], name, arch)
    return name
