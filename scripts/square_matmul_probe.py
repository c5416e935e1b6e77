"""Device probe for a square_matmul_ variant (the Hopper wgmma kernel first of all): one (variant,
transpose) per process (a wrong shared-memory descriptor can fault and take the CUDA context with it).
Prints one line; exit 0 when the product matches float64 (m = 4096, n = 1024 and n = 264, bfloat16 and
float16). Usage: square_matmul_probe.py VARIANT N|T"""
import sys

import torch

from cupy_kernels.ops import square_matmul as sq

variant, trans = sys.argv[1], sys.argv[2] == "T"
worst = 0.0
for dtype in (torch.bfloat16, torch.float16):
    for m, n in ((4096, 1024), (300, 264)):
        a = torch.randn(m, n, device="cuda").to(dtype)
        w = (torch.randn(n, n, device="cuda") / n ** 0.5).to(dtype)
        ref = a.double() @ (w.double().T if trans else w.double())
        sq.square_matmul_impl(a, w, trans, variant=variant)
        torch.cuda.synchronize()
        worst = max(worst, float((a.double() - ref).norm() / ref.norm()))
ok = worst <= 1e-2
print(f"probe {variant}:{'T' if trans else 'N'} worst rel err {worst:.2e} {'OK' if ok else 'WRONG'}")
sys.exit(0 if ok else 1)
