"""Launch geometry from the device's properties: computed in one place."""
from __future__ import annotations

import functools
from dataclasses import dataclass

DEFAULT_SHARED_LIMIT = 48 * 1024  # a block gets more only after opting in per kernel


@dataclass(frozen=True)
class DeviceProps:
    id: int
    name: str
    cc: int  # 90 for sm_90
    sm_count: int
    max_threads_per_block: int
    max_threads_per_sm: int
    shared_per_block_optin: int
    l2_bytes: int

    def resident_blocks(self, threads_per_block: int, per_sm_cap: int = 32) -> int:
        """How many blocks of this size fill the chip once (thread-limited)."""
        per_sm = max(1, min(per_sm_cap, self.max_threads_per_sm // threads_per_block))
        return per_sm * self.sm_count


@functools.lru_cache(maxsize=None)
def properties(device_id: int) -> DeviceProps:
    import cupy

    p = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = p["name"]
    return DeviceProps(
        id=device_id,
        name=name.decode() if isinstance(name, bytes) else str(name),
        cc=10 * p["major"] + p["minor"],
        sm_count=p["multiProcessorCount"],
        max_threads_per_block=p["maxThreadsPerBlock"],
        max_threads_per_sm=p["maxThreadsPerMultiProcessor"],
        shared_per_block_optin=p.get("sharedMemPerBlockOptin", DEFAULT_SHARED_LIMIT),
        l2_bytes=p["l2CacheSize"],
    )


def current() -> DeviceProps:
    """The properties of CuPy's current device (a plan is built with its device current)."""
    import cupy

    return properties(cupy.cuda.runtime.getDevice())


_occupancy: dict = {}


def resident_blocks(kernel, threads: int, dynamic_smem: int = 0) -> int:
    """Blocks of `kernel` that fit on the whole chip at once (the driver's occupancy calculator:
    registers, shared memory and thread limits), i.e. one full wave."""
    props = current()
    key = (kernel.ptr, props.id, threads, dynamic_smem)  # the CUfunction: id(kernel) is recycled
    n = _occupancy.get(key)
    if n is None:
        from cupy_backends.cuda.api import driver

        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, dynamic_smem)
        n = _occupancy[key] = max(1, per_sm) * props.sm_count
    return n


_shared_optin: dict = {}  # CUfunction -> the dynamic shared memory it is opted in to


def use_shared_memory(kernel, nbytes: int, what: str = "kernel") -> None:
    """Opt `kernel` in to `nbytes` of dynamic shared memory (above 48 KB with its static shared memory needs
    the attribute). Called on every launch: the attribute is read and set once per CUfunction, not asked
    of the driver each time."""
    if nbytes <= 0:
        return
    fn = kernel.ptr
    if fn is not None and _shared_optin.get(fn, 0) >= nbytes:
        return
    total = nbytes + getattr(kernel, "shared_size_bytes", 0)  # the default window holds static + dynamic
    if total > DEFAULT_SHARED_LIMIT:
        props = current()
        if total > props.shared_per_block_optin:
            raise ValueError(f"{what} needs {total} bytes of shared memory per block; "
                             f"{props.name} allows at most {props.shared_per_block_optin}")
        if getattr(kernel, "max_dynamic_shared_size_bytes", 0) < nbytes:
            kernel.max_dynamic_shared_size_bytes = nbytes
    if fn is not None:
        _shared_optin[fn] = nbytes


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
