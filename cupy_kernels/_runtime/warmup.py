"""`python -m cupy_kernels warmup`: compile declared kernel instances into the disk cache ahead of time, on every core.
Optional: an instance compiles by itself the first time a call needs it."""
from __future__ import annotations

import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from .kernels import KernelSource, cache_dir, warm_instance


def _load_ops() -> dict:
    import importlib
    import pkgutil

    from .. import ops

    for m in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{m.name}")
    return KernelSource.registry


def _worker(filename: str, names: list[str], arch: str) -> int:
    _load_ops()
    for name in names:
        warm_instance(filename, name, arch)
    return len(names)


def device_arch() -> str:
    """The current device's architecture ("90"), for a machine with a GPU."""
    from .device import current

    return str(current().cc)


def warmup(sources=None, arch: str | None = None, workers: int | None = None, clear: bool = False,
           out=sys.stderr) -> int:
    """Compile every declared instance of `sources` (cu_src file names; default all) for `arch` ("90"; default the
    current device's) into the cache; returns the number of instances. clear: empty the cache first."""
    registry = _load_ops()
    if clear and cache_dir().exists():
        shutil.rmtree(cache_dir())
    arch = arch or device_arch()
    files = sorted(sources or registry)
    unknown = [f for f in files if f not in registry]
    if unknown:
        raise ValueError(f"warmup: unknown sources {unknown}; expected some of {sorted(registry)}")
    jobs = [(f, registry[f].names[i:i + 16]) for f in files for i in range(0, len(registry[f].names), 16)]
    total = sum(len(n) for _, n in jobs)
    done, start = 0, time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        for fut in as_completed([pool.submit(_worker, f, n, arch) for f, n in jobs]):
            done += fut.result()
            print(f"\rwarmup: {done}/{total} instances for sm_{arch} ({time.perf_counter() - start:.0f} s)", end="",
                  file=out, flush=True)
    print(file=out)
    return total
