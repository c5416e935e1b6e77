"""Where the CUDA sources live, and how they are read for compilation."""
from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


@functools.lru_cache(maxsize=None)
def cu_src_dir() -> Path:
    """cu_src/ of a source checkout, else the copy an installed wheel carries as cupy_kernels/cu_src."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "cu_src", package / "cu_src"):
        if (candidate / "common").is_dir():
            return candidate
    raise FileNotFoundError(f"cupy_kernels: no cu_src/ beside {package} nor inside it; the installation is broken")


def all_sources() -> list[str]:
    return sorted(p.name for p in cu_src_dir().glob("*.cu"))


@functools.lru_cache(maxsize=None)
def read_source(name: str) -> str:
    """The file with its local "..." includes pasted in (once each), so that CuPy's disk cache,
    which keys on the code text, sees every header change."""
    seen: set[Path] = set()

    def expand(path: Path) -> str:
        path = path.resolve()
        if path in seen:
            return ""
        seen.add(path)
        text = path.read_text()
        text = text.replace("#pragma once", "")

        def paste(match):
            for base in (path.parent, cu_src_dir()):
                target = base / match.group(1)
                if target.exists():
                    return f'// begin {match.group(1)}\n{expand(target)}\n// end {match.group(1)}'
            raise FileNotFoundError(f"{path.name}: #include \"{match.group(1)}\" not found in cu_src/")

        return _INCLUDE.sub(paste, text)

    return expand(cu_src_dir() / name)


def source_digest(name: str) -> str:
    return hashlib.sha1(read_source(name).encode()).hexdigest()[:12]


# A system CUDA toolkit, the last place looked in (a test empties it to stand for a machine without one).
SYSTEM_CUDA_ROOTS: tuple[str, ...] = ("/usr/local/cuda",)
_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")  # what cu_src/common/types.cuh includes; NVRTC provides the rest


def cuda_include_dir() -> str | None:
    """A CUDA include directory holding cuda_fp16.h / cuda_bf16.h (NVRTC finds none by itself), for the
    offline and the run-time compile; None where there is none (cuda_include_origin says where it looked)."""
    return cuda_include_origin()[0]


@functools.lru_cache(maxsize=None)
def cuda_include_origin() -> tuple[str | None, str]:
    """(the include directory or None, where it came from). The first of _include_candidates() that holds the
    headers wins: the headers of the CUDA release whose NVRTC compiles (a header's code depends on the
    compiler's version), then any header wheel, then a system toolkit."""
    tried = []
    for origin, path in _include_candidates():
        if all((path / h).is_file() for h in _HEADERS):
            return str(path), origin
        tried.append(str(path))
    return None, "none of " + ", ".join(dict.fromkeys(tried)) if tried else "nowhere to look"


cuda_include_dir.cache_clear = cuda_include_origin.cache_clear  # for callers that clear the lookup


def _include_candidates():
    override = os.environ.get("CUPY_KERNELS_CUDA_INCLUDE")
    if override:
        yield "CUPY_KERNELS_CUDA_INCLUDE", Path(override)
    # 1. beside the NVRTC library this process compiles with (cuda.core and CuPy 14 both load it through
    # cuda-pathfinder): its wheel's include/ (CUDA 13: nvidia/cu13/include, the nvidia-cuda-runtime wheel's
    # headers land there too; CUDA 12: nvidia/cuda_runtime/include beside nvidia/cuda_nvrtc), or its toolkit's
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        root = Path(os.path.realpath(load_nvidia_dynamic_lib("nvrtc").abs_path)).parent.parent
        yield "beside NVRTC", root / "include"
        yield "beside NVRTC", root.parent / "cuda_runtime" / "include"
    except Exception:  # no cuda-pathfinder, or no NVRTC it can find
        pass
    # 2. a header wheel (or conda package) that cuda-pathfinder finds; its system fallbacks come later
    try:
        from cuda.pathfinder import locate_nvidia_header_directory

        found = locate_nvidia_header_directory("cudart")
        if found and found.found_via in ("site-packages", "conda"):
            yield f"cuda-pathfinder ({found.found_via})", Path(found.abs_path)
    except Exception:
        pass
    # 3. a toolkit named by the environment, then CuPy's own idea of the CUDA root, then the system's
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            yield var, Path(os.environ[var]) / "include"
    try:
        from cupy.cuda import get_cuda_path

        if get_cuda_path():
            yield "cupy.cuda.get_cuda_path()", Path(get_cuda_path()) / "include"
    except Exception:
        pass
    for root in SYSTEM_CUDA_ROOTS:
        yield "system toolkit", Path(root) / "include"
