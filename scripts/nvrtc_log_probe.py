"""Print what NVRTC's log holds after the offline compile of one source (the ptxas -v reports that
`python -m cupy_kernels check` parses): its size, how many kernels it reports, its first and last lines.
Usage: nvrtc_log_probe.py norm.cu sm_90"""
import sys

import cuda.bindings
import cuda.core

from cupy_kernels.__main__ import load_ops
from cupy_kernels._runtime.kernels import compile_cubin

source = load_ops()[sys.argv[1]]
_, text, arch = compile_cubin(source, sys.argv[2])
print(f"cuda.core {cuda.core.__version__}, cuda.bindings {cuda.bindings.__version__}, {len(source.names)} kernels, {arch}")
print(f"log: {len(text)} characters, {text.count('Function properties for')} function reports, "
      f"{text.count('Used ')} 'Used' lines")
print(text[:1500])
print("...")
print(text[-800:])
