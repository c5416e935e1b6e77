"""The device: its properties, the current context, occupancy and launch geometry, computed in one place, through
the driver (driver.py): a torch caller never loads CuPy's array module, which takes a large part of a second."""
from __future__ import annotations

import contextlib
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


# CUdevice_attribute
_SM_COUNT, _CC_MAJOR, _CC_MINOR, _MAX_THREADS_PER_BLOCK, _MAX_THREADS_PER_SM, _SHARED_OPTIN, _L2 = 16, 75, 76, 1, 39, 97, 38


@functools.lru_cache(maxsize=None)
def properties(device_id: int) -> DeviceProps:
    from . import driver

    a = lambda attribute: driver.device_attribute(device_id, attribute)  # noqa: E731
    return DeviceProps(id=device_id, name=driver.device_name(device_id), cc=10 * a(_CC_MAJOR) + a(_CC_MINOR),
                       sm_count=a(_SM_COUNT), max_threads_per_block=a(_MAX_THREADS_PER_BLOCK),
                       max_threads_per_sm=a(_MAX_THREADS_PER_SM), shared_per_block_optin=a(_SHARED_OPTIN),
                       l2_bytes=a(_L2))


def current_device() -> int:
    """The device of the calling thread's current context (the one torch and CuPy launch on); a thread with none
    gets device 0's primary context (the runtime's default device)."""
    from . import driver

    if not driver.current_context():
        driver.set_context(driver.primary_context(0))
    return driver.context_device()


def current() -> DeviceProps:
    """The properties of the current device (a plan is built with its device current)."""
    return properties(current_device())


@contextlib.contextmanager
def on_context(device: int):
    """Run the block with `device`'s primary context current (the context torch and CuPy use), then restore."""
    from . import driver

    ctx = driver.current_context()
    if ctx and driver.context_device() == device:
        yield
        return
    driver.set_context(driver.primary_context(device))
    try:
        yield
    finally:
        if ctx:
            driver.set_context(ctx)


_occupancy: dict = {}


def resident_blocks(kernel, threads: int, dynamic_smem: int = 0) -> int:
    """Blocks of `kernel` that fit on the whole chip at once (the driver's occupancy calculator: registers,
    shared memory and thread limits), i.e. one full wave."""
    props = current()
    fn = kernel.ptr
    key = (fn, props.id, threads, dynamic_smem)
    n = _occupancy.get(key)
    if n is None:
        from . import driver

        n = _occupancy[key] = max(1, driver.occupancy(fn, threads, dynamic_smem)) * props.sm_count
    return n


_shared_optin: dict = {}  # CUfunction -> the dynamic shared memory it is opted in to


def use_shared_memory(kernel, nbytes: int, what: str = "kernel") -> None:
    """Opt `kernel` in to `nbytes` of dynamic shared memory on the current device (above 48 KB with its static
    shared memory needs the attribute); read and set once per CUfunction."""
    if nbytes <= 0:
        return
    fn = kernel.ptr
    if _shared_optin.get(fn, 0) >= nbytes:
        return
    total = nbytes + kernel.shared_size_bytes  # the default window holds static + dynamic
    if total > DEFAULT_SHARED_LIMIT:
        props = current()
        if total > props.shared_per_block_optin:
            raise ValueError(f"{what} needs {total} bytes of shared memory per block; "
                             f"{props.name} allows at most {props.shared_per_block_optin}")
        if kernel.max_dynamic_shared_size_bytes < nbytes:
            kernel.max_dynamic_shared_size_bytes = nbytes
    _shared_optin[fn] = nbytes


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
