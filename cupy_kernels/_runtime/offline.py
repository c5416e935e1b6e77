"""Compiling cu_src files offline, without a GPU, through cuda.core (NVRTC): `check` builds every declared
instance this way and reads ptxas's resource report of each."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass

from .kernels import KernelCompileError, KernelSource
from .sources import cuda_include_dir, read_source


@dataclass
class KernelReport:
    source: str
    arch: str
    kernel: str
    registers: int
    spill_bytes: int
    stack_bytes: int
    shared_bytes: int


_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def compile_cubin(source: KernelSource, arch: str):
    """(object code, NVRTC's log with the ptxas -v reports, the arch compiled for) of every declared kernel of
    `source` for `arch` (e.g. "sm_90"), without a GPU. Raises KernelCompileError."""
    from cuda.core import Program, ProgramOptions

    inc = cuda_include_dir()
    defines = [o[2:] for o in source.options if o.startswith("-D")]
    # a source that asks for an architecture-specific target (sm_90a: wgmma) gets it on that architecture,
    # as at run time; elsewhere its bodies compile empty
    arch = next((o[6:] for o in source.options if o.startswith("-arch=") and o[6:].rstrip("a") == arch), arch)
    opts = ProgramOptions(name=source.filename, arch=arch, std="c++17", include_path=[inc] if inc else None,
                          ptxas_options="-v", define_macro=defines or None)
    log = io.StringIO()
    try:
        program = Program(read_source(source.filename), "c++", opts)
        code = program.compile("cubin", name_expressions=tuple(source.names), logs=log)
    except Exception as e:
        raise KernelCompileError(f"cu_src/{source.filename} for {arch}: {e}\n{log.getvalue()}") from e
    return code, log.getvalue(), arch


def compile_offline(source: KernelSource, arch: str) -> list[KernelReport]:
    """Compile every declared kernel of `source` for `arch` (e.g. "sm_90") without a GPU; one report
    per kernel (registers, spills, stack, static shared memory). Raises KernelCompileError."""
    code, text, arch = compile_cubin(source, arch)
    mangled_to_name = {(v.decode() if isinstance(v, bytes) else v): k for k, v in code.symbol_mapping.items()}
    reports = parse_ptxas_log(text, mangled_to_name, source.filename, arch)
    missing = [n for n in source.names if n not in reports]
    if missing:  # what the log held, to tell an empty log from one the parser misread (benchmarks/notes.md, session 16)
        raise KernelCompileError(f"cu_src/{source.filename} for {arch}: no ptxas report for {len(missing)} of "
                                 f"{len(source.names)} kernels (the log: {len(text)} characters, "
                                 f"{text.count('Compiling entry function')} entries; begins {text[:300]!r}): {missing}")
    return [reports[n] for n in source.names]


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
