"""The torch -> CuPy bridge (`to_cupy` builds a view from the tensor's pointer and strides, not DLPack):
values, shared memory, strides and offsets, every dtype, empty tensors, lifetime; and a torch call on a
side stream."""
import gc

import numpy as np
import pytest

from conftest import rng, torch, torch_gpu
from cupy_kernels._runtime import to_cupy

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8", "int8", "bool")


def _tensor(shape, dtype):
    g = torch.Generator(device="cuda")
    g.manual_seed(int(rng().integers(2 ** 62)))
    t = torch.randn(*shape, device="cuda", generator=g) * 50
    return t > 0 if dtype == "bool" else t.to(getattr(torch, dtype))


@torch_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_share_memory_and_values(dtype):
    base = _tensor((7, 9, 11), dtype)
    for view in (base, base[2:, 1::2, 3:], base.transpose(0, 2), base[1, :, 5], base[3:4, 2:2]):
        arr = to_cupy(view)
        assert arr.shape == tuple(view.shape) and arr.data.ptr == view.data_ptr()
        assert arr.strides == tuple(s * view.element_size() for s in view.stride())
        want = view.cpu()
        want = want.view(torch.int16).numpy() if dtype == "bfloat16" else want.numpy()
        got = arr.get()
        np.testing.assert_array_equal(got.view(np.int16) if dtype == "bfloat16" else got, want)
    if dtype != "bool":
        before = base[1, 0, 0].clone()
        arr = to_cupy(base[1])
        arr[0, 0] += 1  # the write lands in the tensor
        assert bool((base[1, 0, 0] == before + 1).item())


@torch_gpu
def test_view_keeps_the_tensor_alive():
    t = _tensor((1 << 20,), "float32")
    ref = t.cpu().numpy()
    arr = to_cupy(t[10:])
    del t
    gc.collect()
    torch.cuda.empty_cache()
    filler = torch.full((1 << 22,), 7.0, device="cuda")  # would reuse freed memory
    np.testing.assert_array_equal(arr.get(), ref[10:])
    del filler


@torch_gpu
def test_requires_grad_tensor_and_side_stream():
    import cupy_kernels as ck

    x = _tensor((300, 257), "float32").requires_grad_()
    assert to_cupy(x).shape == (300, 257)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.softmax(x.detach() * 2, dim=-1)  # produced on s
        out = ck.softmax(x.detach() * 2)           # our kernel runs on s too
    s.synchronize()
    assert float((out - y).abs().max()) < 1e-6
