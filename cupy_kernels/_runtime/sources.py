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


@functools.lru_cache(maxsize=None)
def cuda_include_dir() -> str | None:
    """A CUDA include directory holding cuda_fp16.h / cuda_bf16.h (NVRTC finds none by itself)."""
    candidates = []
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        if found:
            candidates.append(Path(found))
    except Exception:  # cuda-pathfinder is optional
        pass
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda_bf16.h").exists():
            return str(c)
    return None
