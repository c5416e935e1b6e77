"""The one launch path: an op plans its launches once per (dtype, shape, strides, alignment, device) into a
`Plan`, and every call replays that plan with its own pointers through the driver (cuLaunchKernel over
ctypes: no wrapper objects per call).

Planning (`PlanBuilder`) names the call's arrays as `Buffer`s, asks for workspaces, and records each launch's
kernel, geometry and arguments. Replaying (`Plan.run`) allocates the workspaces from the caller's allocator,
packs the pointers into each launch's prepared parameter block and launches on the caller's stream. Kernel
arguments are Buffers, NumPy scalars of the kernel's parameter types, None (a null pointer), bytes (a struct
passed by value) or a `Deferred` (bytes computed from the call's pointers, e.g. a TMA descriptor)."""
from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np

from . import driver


class Buffer:
    """A pointer argument of a planned launch: the call's `index`-th array, or a workspace. `alignment`: the
    largest power of two (up to 256) dividing its address, as the plan's key promised."""

    __slots__ = ("index", "alignment", "nbytes", "zero", "persistent")

    def __init__(self, index: int, alignment: int = 256, nbytes: int = 0, zero: bool = False,
                 persistent: str | None = None):
        self.index, self.alignment, self.nbytes, self.zero = index, alignment, nbytes, zero
        self.persistent = persistent

    def __repr__(self) -> str:
        return f"Buffer({self.index}, align {self.alignment})"


class Deferred:
    """A by-value argument computed per call from the call's pointers: fn(*(pointers[i] for i in indices))."""

    __slots__ = ("fn", "indices", "nbytes")

    def __init__(self, fn, indices: tuple[int, ...], nbytes: int):
        self.fn, self.indices, self.nbytes = fn, tuple(indices), nbytes


def alignment(ptr: int) -> int:
    """The largest power of two up to 256 dividing a device address (256 for 0)."""
    return min(ptr & -ptr, 256) if ptr else 256


def aligned(a, nbytes: int = 16) -> bool:
    """Whether a Buffer or an array (CuPy or torch) starts on an `nbytes` boundary (None: absent, aligned)."""
    if a is None:
        return True
    if isinstance(a, Buffer):
        return a.alignment >= nbytes
    ptr = a.data_ptr() if hasattr(a, "data_ptr") else a.data.ptr
    return ptr % nbytes == 0


class PlanBuilder:
    """Records the launches of one call's plan. `alignments`: of the call's arrays, in the order the call will
    pass their pointers."""

    def __init__(self, device: int, alignments=()):
        self.device = device
        self.buffers = [Buffer(i, a) for i, a in enumerate(alignments)]
        self.workspaces: list[Buffer] = []
        self.launches: list[_Launch] = []

    def workspace(self, nbytes: int, zero: bool = False, persistent: str | None = None) -> Buffer:
        """Scratch memory of `nbytes` for this call (zeroed before the first launch when `zero`), from the
        caller's allocator: CUDA-graph capturable for torch callers. persistent="name": instead one buffer of
        that name per (device, stream), made (and zeroed) at its first use and kept; the kernels must leave it
        as they found it. Make it before a CUDA graph capture: a warm-up call on the capturing stream does."""
        b = Buffer(len(self.buffers) + len(self.workspaces), 256, max(int(nbytes), 1), zero, persistent)
        self.workspaces.append(b)
        return b

    def launch(self, kernel, grid, block, args, shared_mem: int = 0, cluster: int = 1,
               after_previous: bool = False) -> None:
        """Record a launch of `kernel` (a Kernel); grid / block: an int or up to 3 dimensions. cluster > 1: in
        thread-block clusters of that many blocks along x; after_previous: a programmatic dependent launch
        (sm_90: its blocks may start while the previous kernel ends; it must wait_prerequisites() first)."""
        self.launches.append(_Launch(kernel.function(self.device), _dims(grid), _dims(block), int(shared_mem),
                                     tuple(args), int(cluster), bool(after_previous), kernel.name))

    def plan(self) -> "Plan":
        return Plan(self.launches, self.workspaces, len(self.buffers), self.device)


def _dims(d) -> tuple[int, int, int]:
    d = (int(d),) if isinstance(d, (int, np.integer)) else tuple(int(v) for v in d)
    if len(d) > 3 or any(v < 1 for v in d):
        raise ValueError(f"launch dimensions must be 1 to 3 positive ints; got {d}")
    return d + (1,) * (3 - len(d))


# ---- launching ------------------------------------------------------------------------------------------

class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, 4 bytes of padding, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_ubyte * 4), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_CLUSTER_DIMENSION = 4                  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def launch_config(grid, block, shared_mem: int, stream: int, cluster: int = 1, after_previous: bool = False):
    """(CUlaunchConfig, its attribute array) for cuLaunchKernelEx / cuOccupancyMaxActiveClusters; the caller
    keeps both alive."""
    attrs = (_LaunchAttribute * 2)()
    k = 0
    if cluster > 1:
        attrs[k].id = _CLUSTER_DIMENSION
        attrs[k].value[0], attrs[k].value[1], attrs[k].value[2] = cluster, 1, 1
        k += 1
    if after_previous:
        attrs[k].id = _PROGRAMMATIC_STREAM_SERIALIZATION
        attrs[k].value[0] = 1
        k += 1
    cfg = _LaunchConfig(*_dims(grid), *_dims(block), shared_mem, ctypes.c_void_p(stream), attrs, k)
    return cfg, attrs


class _Launch:
    """One recorded launch with its parameter block: the call's pointers first (8 bytes each, packed per call),
    then the constant arguments (packed once), then by-value arguments computed per call."""

    def __init__(self, fn: int, grid, block, smem, args, cluster, after_previous, name):
        self.name = name
        self.grid, self.block, self.smem = grid, block, smem
        self.fn = fn
        pointers, constants, deferred = [], [], []
        for i, a in enumerate(args):
            if isinstance(a, Buffer):
                pointers.append((i, a.index))
            elif isinstance(a, Deferred):
                deferred.append((i, a))
            elif a is None:
                constants.append((i, b"\0" * 8))
            elif isinstance(a, bytes):
                constants.append((i, a))
            elif isinstance(a, np.generic):
                constants.append((i, a.tobytes()))
            else:
                raise TypeError(f"{name}: kernel argument {i} is a {type(a).__name__}; expected a Buffer, a NumPy "
                                f"scalar of the parameter's type, None, bytes or a Deferred")
        size = 8 * len(pointers)
        offsets = {}
        for i, _ in pointers:
            offsets[i] = 8 * len(offsets)
        blob = bytearray(size)
        for i, raw in constants:
            size = -(-size // 8) * 8
            offsets[i] = size
            blob += b"\0" * (size - len(blob)) + raw
            size += len(raw)
        self.deferred = []
        for i, d in deferred:
            size = -(-size // 64) * 64  # structs by value (CUtensorMap): 64-byte aligned like the driver's
            offsets[i] = size
            self.deferred.append((size, d))
            size += d.nbytes
        blob += b"\0" * (size - len(blob) + 64)
        self.buffer = (ctypes.c_char * len(blob)).from_buffer(blob)
        self._blob = blob
        base = ctypes.addressof(self.buffer)
        self.params = (ctypes.c_void_p * max(len(args), 1))(*[base + offsets[i] for i in range(len(args))])
        self.params_ptr = ctypes.addressof(self.params)
        self.params_c = ctypes.c_void_p(self.params_ptr)
        self.fn_c = ctypes.c_void_p(fn) if isinstance(fn, int) else None  # (tests record launches with stand-ins)
        self.pointer_indices = tuple(j for _, j in pointers)
        self.identity = False  # the plan sets it: whether the call's pointers are exactly these, in order
        self.pack = struct.Struct(f"<{len(pointers)}Q").pack_into
        self.lock = threading.Lock()
        self.config = None
        if cluster > 1 or after_previous:
            self.config = launch_config(grid, block, smem, 0, cluster, after_previous)
        self.go = None  # (stream) -> None, bound at the first launch (driver.launcher)

    def __call__(self, pointers, stream: int) -> None:
        with self.lock:  # the parameter block is shared: the driver copies it during the call
            if self.identity:
                self.pack(self._blob, 0, *pointers)
            else:
                self.pack(self._blob, 0, *[pointers[j] for j in self.pointer_indices])
            for off, d in self.deferred:
                raw = d.fn(*[pointers[j] for j in d.indices])
                self._blob[off:off + len(raw)] = raw
            (self.go or self._bind())(stream)

    def _bind(self):
        if self.config is None:
            self.go = driver.launcher(self)
            return self.go
        cfg = self.config[0]
        launch_ex = driver.lib().cuLaunchKernelEx
        args = (ctypes.byref(cfg), ctypes.c_void_p(self.fn), self.params, None)
        what = (f"launching {self.name} (grid {self.grid}, block {self.block}, {self.smem} bytes of shared memory, "
                f"clusters or a programmatic dependency)")

        def go(stream):
            cfg.hStream = stream
            rc = launch_ex(*args)
            if rc:
                driver.check(rc, what)

        self.go = go
        return go


_persistents: dict = {}  # (device, stream, name) -> (nbytes, pointer, owner)
_retired: list = []


def _persistent(device: int, stream: int, w: Buffer, alloc) -> int:
    key = (device, stream, w.persistent)
    hit = _persistents.get(key)
    if hit is None or hit[0] < w.nbytes:
        if hit is not None:
            _retired.append(hit[2])  # kernels enqueued on the stream may still use it: never handed back
        nbytes = max(w.nbytes, 0 if hit is None else 2 * hit[0])
        ptr, owner = alloc(nbytes)
        if w.zero:
            driver.memset_zero(ptr, nbytes, stream)  # on the stream that will use it
        hit = _persistents[key] = (nbytes, ptr, owner)
    return hit[1]


class Plan:
    """The launches of one call, replayed with the call's pointers (`run`). The call's workspaces (all but the
    persistent ones) are one allocation: the zeroed ones first, so that one memset clears them."""

    __slots__ = ("launches", "workspaces", "nbuffers", "device", "single", "arena", "zeroed", "offsets")

    def __init__(self, launches, workspaces, nbuffers: int, device: int):
        self.launches = tuple(launches)
        self.workspaces = tuple(workspaces)
        self.nbuffers = nbuffers
        self.device = device
        for launch in self.launches:  # a launch may pack the call's pointers as they come
            launch.identity = launch.pointer_indices == tuple(range(nbuffers + len(self.workspaces)))
        self.single = self.launches[0] if len(self.launches) == 1 and not self.workspaces else None
        offsets, size = {}, 0
        for zero in (True, False):
            for i, w in enumerate(self.workspaces):
                if not w.persistent and w.zero == zero:
                    offsets[i] = size
                    size += -(-w.nbytes // 256) * 256  # each 256-byte aligned, as Buffer promises
            if zero:
                self.zeroed = size
        self.arena = size
        # per workspace: its offset in the arena, or its Buffer where persistent
        self.offsets = tuple(offsets.get(i, w) for i, w in enumerate(self.workspaces))

    def run(self, pointers, stream: int, alloc=None):
        """Launch on `stream` with `pointers` (ints, one per Buffer of the builder, in order). alloc(nbytes) ->
        (pointer, owner) serves the workspaces; the owners are returned, to be kept until the launches are
        enqueued (the caching allocators order reuse on the stream)."""
        try:
            if self.single is not None:
                self.single(pointers, stream)
                return ()
            return self._run(pointers, stream, alloc)
        except Exception as e:
            if getattr(e, "status", None) != driver.INVALID_CONTEXT:
                raise
        from .device import on_context

        with on_context(self.device):  # a thread with no context current yet (the runtime makes it lazily)
            return self._run(pointers, stream, alloc)

    def _run(self, pointers, stream, alloc):
        owners = ()
        if self.workspaces:
            pointers = list(pointers)
            base = 0
            if self.arena:
                base, owner = alloc(self.arena)
                owners = (owner,)
                if self.zeroed:
                    driver.memset_zero(base, self.zeroed, stream)
            for off in self.offsets:
                pointers.append(base + off if type(off) is int else _persistent(self.device, stream, off, alloc))
        for launch in self.launches:
            launch(pointers, stream)
        return owners

    @property
    def kernels(self) -> tuple[str, ...]:
        """The launched kernels' names, in order (tests and probes read which kernel a shape takes)."""
        return tuple(launch.name for launch in self.launches)
