"""CPU: every declared kernel compiles offline (NVRTC, no GPU) for sm_80 and sm_90 without spills."""
import pytest

from cupy_kernels.__main__ import ARCHS, load_ops

pytest.importorskip("cuda.core", reason="offline compile needs cuda-core + nvidia-cuda-nvrtc")
SOURCES = load_ops()


def test_every_cu_file_is_declared():
    from cupy_kernels._runtime import all_sources

    assert set(all_sources()) <= set(SOURCES), "a cu_src file that no ops module declares"


# Spills we accept, with the most bytes allowed: (file, arch, kernel) -> bytes.
# - norm_bwd's two-pack half-type form (PACKS = 2) keeps dweight / dbias accumulators in local memory
#   (L1): measured faster than the spill-free one-pack form on the long rows the host gives it
#   (norm.TWO_PACK_FROM; benchmarks/notes.md). Every other half-type row takes the spill-free form.
# - The others keep one value of the row loop in local memory: a store before the loop and one load per
#   row (~1% of the loop's instructions): norm_bwd<float, 0, *> on sm_80 only, softmax_bwd<float, *,
#   false> 8 bytes (sm_90 under NVRTC 13.0, the GPU machine's; sm_80 since its rows loop by whole warps,
#   measured 1-2% faster on sm_90), and the wide half softmax backward (softmax_bwd<half type, 0, true, 4>)
#   8-16 bytes on sm_90.
KNOWN_SPILLS = {
    **{("norm.cu", a, f"norm_bwd<{t}, {m}, {f}, false, 2>"): 800 if m == 0 else 160
       for a in ARCHS for t in ("half", "bfloat16") for m in (0, 1) for f in (0, 1)},
    **{("norm.cu", a, f"norm_bwd<{t}, 0, {f}, false, 2, false>"): 256  # the same without dbias sums
       for a in ARCHS for t in ("half", "bfloat16") for f in (0, 1)},
    **{("norm.cu", "sm_80", f"norm_bwd<float, 0, {f}, false, 2>"): 32 for f in (0, 1)},
    **{("softmax.cu", a, f"softmax_bwd<float, {m}, false, 4>"): 8 for a in ARCHS for m in (0, 1)},
    **{("softmax.cu", "sm_90", f"softmax_bwd<{t}, 0, true, 4>"): 16 for t in ("half", "bfloat16")},
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_offline_compile(name, arch):
    from cupy_kernels._runtime import compile_offline

    source = SOURCES[name]
    assert source.names, f"{name} declares no kernels"
    reports = compile_offline(source, arch)
    assert [r.kernel for r in reports] == source.names
    spilled = [(r.kernel, r.spill_bytes) for r in reports
               if r.spill_bytes > KNOWN_SPILLS.get((name, arch, r.kernel), 0)]
    assert not spilled, f"register spills: {spilled}"


def test_ptxas_log_spills_stay_with_their_kernel():
    from cupy_kernels._runtime.kernels import parse_ptxas_log

    log = """ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'
ptxas info    : Function properties for _Z1kv
ptxas         .     144 bytes stack frame, 308 bytes spill stores, 316 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 144 bytes cumulative stack size, 2304 bytes smem
ptxas info    : Function properties for _Z6helperv
ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z1jv' for 'sm_90'
ptxas info    : Function properties for _Z1jv
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers, 16 bytes smem
"""
    r = parse_ptxas_log(log, {"_Z1kv": "k", "_Z1jv": "j"}, "x.cu", "sm_90")
    assert (r["k"].spill_bytes, r["k"].stack_bytes, r["k"].registers, r["k"].shared_bytes) == (624, 144, 64, 2304)
    assert (r["j"].spill_bytes, r["j"].registers) == (0, 30)


def test_compile_error_names_file_and_log(tmp_path, monkeypatch):
    from cupy_kernels._runtime import KernelCompileError, KernelSource, compile_offline, sources

    bad = tmp_path / "cu_src"
    (bad / "common").mkdir(parents=True)
    (bad / "broken.cu").write_text("__global__ void k(float* x) { x[0] = undefined_thing; }\n")
    monkeypatch.setattr(sources, "cu_src_dir", lambda: bad)
    sources.read_source.cache_clear()
    try:
        src = KernelSource("broken.cu")
        src.declare(["k"])
        with pytest.raises(KernelCompileError, match=r"(?s)broken\.cu.*undefined_thing"):
            compile_offline(src, "sm_90")
    finally:
        KernelSource.registry.pop("broken.cu", None)
        sources.read_source.cache_clear()


def test_bench_without_gpu_runs_the_offline_check(monkeypatch, capsys):
    import cupy_kernels.__main__ as cli

    if cli.gpu_count():
        pytest.skip("a GPU is present: bench would benchmark")
    ran = []
    monkeypatch.setattr(cli, "check", lambda: ran.append(True) or 0)
    assert cli.main(["bench"]) == 0
    assert ran == [True]
    assert "No CUDA device here" in capsys.readouterr().out
