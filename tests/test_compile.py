"""CPU: every declared kernel compiles offline (NVRTC, no GPU) for sm_80 and sm_90 without spills."""
import pytest

from cupy_kernels.__main__ import ARCHS, load_ops

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
    spilled = [(r.kernel, r.spill_bytes) for r in reports if r.spill_bytes]
    assert not spilled, f"register spills: {spilled}"


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
