"""CPU: every declared kernel compiles offline (NVRTC, no GPU) for sm_80 and sm_90 without spills (but the
accepted ones, cupy_kernels.__main__.KNOWN_SPILLS)."""
import pytest

from cupy_kernels.__main__ import ARCHS, KNOWN_SPILLS, load_ops

pytest.importorskip("cuda.core", reason="offline compile needs cuda-core + nvidia-cuda-nvrtc")
SOURCES = load_ops()


def test_every_cu_file_is_declared():
    from cupy_kernels._runtime import all_sources

    assert set(all_sources()) <= set(SOURCES), "a cu_src file that no ops module declares"


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
    from cupy_kernels._runtime.offline import parse_ptxas_log

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
