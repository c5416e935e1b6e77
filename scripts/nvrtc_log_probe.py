"""Print what NVRTC's log holds after an offline compile of one source (the ptxas -v reports that
`python -m cupy_kernels check` parses): its size, its first lines, and how many kernels it reports.
Usage: nvrtc_log_probe.py norm.cu sm_90"""
import io
import sys

from cuda.core import Program, ProgramOptions

from cupy_kernels.__main__ import load_ops
from cupy_kernels._runtime.sources import cuda_include_dir, read_source

name, arch = sys.argv[1], sys.argv[2]
source = load_ops()[name]
inc = cuda_include_dir()
opts = ProgramOptions(name=name, arch=arch, std="c++17", include_path=[inc] if inc else None, ptxas_options="-v")
log = io.StringIO()
code = Program(read_source(name), "c++", opts).compile("cubin", name_expressions=tuple(source.names), logs=log)
text = log.getvalue()
import cuda.bindings, cuda.core  # noqa: E401
print(f"cuda.core {cuda.core.__version__}, cuda.bindings {cuda.bindings.__version__}, {len(source.names)} kernels")
print(f"log: {len(text)} characters, {text.count('Function properties for')} function reports, "
      f"{text.count('Used ')} 'Used' lines")
print(text[:1500])
print("...")
print(text[-800:])
