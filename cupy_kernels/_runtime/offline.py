"""Compiling cu_src files offline, without a GPU, through cuda.core (NVRTC): `check` and the tests build every
declared instance this way and read ptxas's resource report of each.

compile_all splits each (file, architecture) into programs of at most CHUNK_INSTANCES instances, compiles
them in a pool of processes (one per core) and keeps each program's reports on disk, keyed by everything
that decides them, so a second run reads them back in seconds."""
from __future__ import annotations

import concurrent.futures as futures
import functools
import hashlib
import io
import json
import math
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .kernels import KernelCompileError
from .sources import cuda_include_dir, read_source

# Each program costs ~1 s besides its instances (a fresh process, NVRTC's start, the file's parse), each instance
# ~0.1-0.5 s: 80 instances keep that near 5%, and the ~44 programs of all files still balance over the pool
# and move the progress every ten seconds or so.
CHUNK_INSTANCES = 80
# Bump when KernelReport or the log parser changes what a cached report means.
CACHE_FORMAT = 1
# The CUDA headers the kernels include (cu_src/common/types.cuh); NVRTC provides the rest itself.
CUDA_HEADERS = ("cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp")


@dataclass
class KernelReport:
    source: str
    arch: str
    kernel: str
    registers: int
    spill_bytes: int
    stack_bytes: int
    shared_bytes: int


@dataclass(frozen=True)
class CompileJob:
    """One NVRTC program: some declared instances of one file, for one architecture."""
    filename: str
    options: tuple[str, ...]
    arch: str  # as asked, e.g. "sm_90"; `target` is what NVRTC builds for
    names: tuple[str, ...]
    include_dir: str | None

    @property
    def target(self) -> str:
        return target_arch(self.options, self.arch)


@dataclass
class SourceResult:
    """Every declared instance of one file for one architecture: its reports in declared order, or errors."""
    filename: str
    arch: str
    target: str
    reports: list[KernelReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    from_cache: int = 0  # how many of its instances came from the cache


def target_arch(options, arch: str) -> str:
    """A source that asks for an architecture-specific target (-arch=sm_90a: wgmma) gets it on that
    architecture, as at run time; elsewhere its bodies compile empty."""
    return next((o[6:] for o in options if o.startswith("-arch=") and o[6:].rstrip("a") == arch), arch)


_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def _compile(filename: str, options, arch: str, names, include_dir: str | None):
    from cuda.core import Program, ProgramOptions

    target = target_arch(options, arch)
    defines = [o[2:] for o in options if o.startswith("-D")]
    opts = ProgramOptions(name=filename, arch=target, std="c++17", include_path=[include_dir] if include_dir else None,
                          ptxas_options="-v", define_macro=defines or None)
    log = io.StringIO()
    program = None
    try:
        program = Program(read_source(filename), "c++", opts)
        code = program.compile("cubin", name_expressions=tuple(names), logs=log)
    except Exception as e:
        raise KernelCompileError(f"cu_src/{filename} for {target}: {e}\n{log.getvalue()}") from e
    finally:
        if program is not None:  # now, and dropped: one kept alive by the error's traceback until the
            program.close()      # interpreter exits raises in its destructor then
            program = None
    return code, log.getvalue(), target


def compile_cubin(source, arch: str):
    """(object code, NVRTC's log with the ptxas -v reports, the arch compiled for) of every declared kernel of
    `source` (a KernelSource) for `arch` (e.g. "sm_90"), without a GPU. Raises KernelCompileError."""
    return _compile(source.filename, source.options, arch, source.names, cuda_include_dir())


def compile_job(job: CompileJob) -> list[KernelReport]:
    """Compile one program and return one report per instance, in the job's order. Raises KernelCompileError."""
    code, text, target = _compile(job.filename, job.options, job.arch, job.names, job.include_dir)
    mangled_to_name = {(v.decode() if isinstance(v, bytes) else v): k for k, v in code.symbol_mapping.items()}
    reports = parse_ptxas_log(text, mangled_to_name, job.filename, target)
    missing = [n for n in job.names if n not in reports]
    if missing:  # what the log held, to tell an empty log from one the parser misread
        raise KernelCompileError(f"cu_src/{job.filename} for {target}: no ptxas report for {len(missing)} of "
                                 f"{len(job.names)} kernels (the log: {len(text)} characters, "
                                 f"{text.count('Compiling entry function')} entries; begins {text[:300]!r}): {missing}")
    return [reports[n] for n in job.names]


def compile_offline(source, arch: str) -> list[KernelReport]:
    """Compile every declared kernel of `source` for `arch` (e.g. "sm_90") without a GPU, as one program, here
    and uncached; one report per kernel (registers, spills, stack, static shared memory). Raises
    KernelCompileError. compile_all does the same for many sources, in parallel and cached."""
    return compile_job(CompileJob(source.filename, tuple(source.options), arch, tuple(source.names),
                                  cuda_include_dir()))


def parse_ptxas_log(text: str, mangled_to_name: dict, filename: str, arch: str) -> dict[str, KernelReport]:
    """Kernel name -> report from `ptxas -v` output. Each kernel's figures sit in its own "Function
    properties for <mangled>" block; a called __noinline__ function gets a block of its own after the
    kernel's, which must not overwrite the kernel's spills (that once hid 800-byte spills)."""
    reports: dict[str, KernelReport] = {}
    by_mangled: dict[str, KernelReport] = {}
    props = None  # the kernel whose block the log is in, or None (a called function's block)
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            props = KernelReport(filename, arch, mangled_to_name.get(m.group(1), m.group(1)), 0, 0, 0, 0)
            reports[props.kernel] = by_mangled[m.group(1)] = props
        elif m := _PROPS.search(line):
            props = by_mangled.get(m.group(1))
        elif props is None:
            continue
        elif m := _FRAME.search(line):
            props.stack_bytes = int(m.group(1))
            props.spill_bytes = int(m.group(2)) + int(m.group(3))
        elif m := _USED.search(line):
            props.registers = int(m.group(1))
            if s := _SMEM.search(line):
                props.shared_bytes = int(s.group(1))
    return reports


# --- the cache ---------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    root = os.environ.get("CUPY_KERNELS_CACHE_DIR") or Path.home() / ".cache" / "cupy_kernels"
    return Path(root) / "offline"


@functools.lru_cache(maxsize=None)
def nvrtc_library() -> tuple[str, str | None]:
    """(NVRTC's version, e.g. "13.5"; the library file cuda-pathfinder loads it from, or None)."""
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = os.path.realpath(load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:
        path = None
    return f"{major}.{minor}", path


@functools.lru_cache(maxsize=None)
def compiler_identity(include_dir: str | None) -> str:
    """What decides a program's reports besides its source, options, target and instances: NVRTC's version and
    library (its size tells a patch release apart), and the CUDA headers' text."""
    version, path = nvrtc_library()
    parts = [f"NVRTC {version}"]
    if path and os.path.exists(path):
        parts.append(f"{os.path.basename(path)} {os.path.getsize(path)} bytes")
    if include_dir:
        digest = hashlib.sha256()
        for name in CUDA_HEADERS:
            header = Path(include_dir) / name
            digest.update(header.read_bytes() if header.exists() else b"-")
        parts.append(f"headers {digest.hexdigest()[:16]}")
    return ", ".join(parts)


def cache_key(job: CompileJob) -> str:
    text = json.dumps([CACHE_FORMAT, compiler_identity(job.include_dir), read_source(job.filename),
                       list(job.options), job.target, list(job.names)])
    return hashlib.sha256(text.encode()).hexdigest()


def _cache_read(job: CompileJob, key: str) -> list[KernelReport] | None:
    try:
        data = json.loads((cache_dir() / f"{key}.json").read_text())
        if data["names"] != list(job.names):
            return None
        return [KernelReport(**r) for r in data["reports"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _cache_write(job: CompileJob, key: str, reports: list[KernelReport]) -> None:
    try:
        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"{key}.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"source": job.filename, "target": job.target, "names": list(job.names),
                                   "reports": [asdict(r) for r in reports]}))
        os.replace(tmp, directory / f"{key}.json")  # whole or not at all, for a run beside this one
    except OSError:
        pass  # a read-only home: compile every time


# --- many programs at once ---------------------------------------------------------------------------------

def plan(sources, archs, chunk: int = CHUNK_INSTANCES) -> list[CompileJob]:
    """The programs that compile every declared instance of `sources` (KernelSources) for each of `archs`:
    each (file, arch) split into equal chunks of at most `chunk` instances."""
    include_dir = cuda_include_dir()
    jobs = []
    for source in sources:
        names = tuple(source.names)
        if not names:
            continue
        size = math.ceil(len(names) / math.ceil(len(names) / chunk))
        for arch in archs:
            jobs += [CompileJob(source.filename, tuple(source.options), arch, names[i:i + size], include_dir)
                     for i in range(0, len(names), size)]
    return jobs


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def compile_all(sources, archs, *, jobs: int | None = None, cache: bool = True, progress: bool = True,
                chunk: int = CHUNK_INSTANCES) -> dict[tuple[str, str], SourceResult]:
    """Compile every declared instance of `sources` (KernelSources) for each of `archs`; (filename, arch) ->
    SourceResult. Programs run in `jobs` processes (default: one per core); each program's reports are kept
    on disk (cache_dir()) unless cache=False, and a failed program is not kept. `progress`: a bar on stderr."""
    sources = list(sources)
    results = {(s.filename, a): SourceResult(s.filename, a, target_arch(s.options, a)) for s in sources for a in archs}
    pieces: dict[CompileJob, list[KernelReport]] = {}
    todo: list[tuple[CompileJob, str]] = []
    for job in plan(sources, archs, chunk):
        key = cache_key(job) if cache else ""
        hit = _cache_read(job, key) if cache else None
        if hit is None:
            todo.append((job, key))
        else:
            pieces[job] = hit
            results[job.filename, job.arch].from_cache += len(job.names)
    total = sum(len(s.names) for s in sources) * len(archs)
    workers = max(1, min(jobs or cpu_count(), len(todo)))
    bar = _Progress(total, total - sum(len(j.names) for j, _ in todo), len(todo), workers, enabled=progress)

    def finish(job, key, outcome):
        if isinstance(outcome, BaseException):
            message = str(outcome) if isinstance(outcome, KernelCompileError) else \
                f"cu_src/{job.filename} for {job.target}: {type(outcome).__name__}: {outcome}"
            results[job.filename, job.arch].errors.append(message)
        else:
            pieces[job] = outcome
            if cache:
                _cache_write(job, key, outcome)
        bar.advance(len(job.names))

    def compile_here(items):
        for job, key in items:
            try:
                outcome = compile_job(job)
            except KernelCompileError as e:
                outcome = e
            finish(job, key, outcome)

    # the longest first (instances times the file's length, a rough cost), so the pool ends on short ones
    todo.sort(key=lambda t: -len(t[0].names) * len(read_source(t[0].filename)))
    try:
        if workers == 1:
            compile_here(todo)
        elif todo:
            lost = []  # programs of a pool that broke (a child died, or could not start: see below)
            # spawn, not fork: a forked child inherits the parent's threads' locks (torch's, tqdm's) mid-use.
            # A spawned child imports the caller's main script again: one without `if __name__ == "__main__"`
            # breaks the pool, and its programs compile here, one after another.
            # A fresh process for each program (~1 s of start-up), so that a report does not depend on how the
            # pool shared out the programs: timex_tiled<float, 8, 8, 4, true, 32, true> for sm_90, at its register
            # bound, compiled once to 128 registers and a 92-byte spill in a worker that had compiled other
            # programs first, and to 127 registers and none in every fresh process tried.
            fresh = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}
            with futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **fresh) as pool:
                pending = {pool.submit(compile_job, job): (job, key) for job, key in todo}
                try:
                    while pending:
                        done, _ = futures.wait(pending, timeout=1.0, return_when=futures.FIRST_COMPLETED)
                        for f in done:
                            job, key = pending.pop(f)
                            error = f.exception()
                            if isinstance(error, BrokenProcessPool):
                                lost.append((job, key))
                            else:
                                finish(job, key, error or f.result())
                        bar.tick()
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
            if lost:
                bar.note(f"the process pool broke; compiling its {len(lost)} programs in this process")
                compile_here(lost)
    finally:
        bar.close()
    for job, reports in pieces.items():
        results[job.filename, job.arch].reports += reports
    order = {s.filename: {n: i for i, n in enumerate(s.names)} for s in sources}
    for r in results.values():
        r.reports.sort(key=lambda k: order[r.filename].get(k.kernel, -1))
    return results


class _Progress:
    """Instances compiled so far, on stderr: tqdm's bar on a terminal where tqdm is installed, a counter line on
    a terminal without it, and a line every few seconds in a log (CI)."""

    LOG_EVERY_S = 15.0

    def __init__(self, total: int, cached: int, programs: int, workers: int, enabled: bool = True,
                 stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.total, self.done, self.start = total, cached, time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bar = None
        self.programs = programs
        self.last_line = time.monotonic()
        if not self.enabled:
            return
        where = f"{programs} NVRTC programs on {workers} {'processes' if workers > 1 else 'process'}" if programs \
            else "nothing to compile"
        self._line(f"offline compile: {total} kernel instances, {cached} from the cache ({cache_dir()}); "
                   f"{where}", end="\n")
        if programs and self.tty:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=cached, unit="kernel", file=self.stream,
                                desc="compiling", dynamic_ncols=True, smoothing=0.0)
            except ImportError:
                pass

    def _line(self, text: str, end: str) -> None:
        self.stream.write(text + end)
        self.stream.flush()

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            self._line(("\n" if self.tty else "") + text, end="\n")

    def _status(self) -> str:
        elapsed = time.monotonic() - self.start
        return (f"compiling: {self.done}/{self.total} kernel instances ({100 * self.done // self.total}%), "
                f"{int(elapsed) // 60}:{int(elapsed) % 60:02d} elapsed")

    def advance(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
        else:
            self.tick()

    def tick(self) -> None:
        """Called at least every second while waiting: the elapsed time moves on a terminal."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.refresh()
        elif self.tty:
            self._line("\r" + self._status(), end="")
        elif time.monotonic() - self.last_line >= self.LOG_EVERY_S:
            self.last_line = time.monotonic()
            self._line(self._status(), end="\n")

    def close(self) -> None:
        if not self.enabled or not self.programs:
            return
        if self.bar is not None:
            self.bar.close()
        else:
            self._line(("\r" if self.tty else "") + self._status(), end="\n")
