"""CPU: every declared kernel compiles offline (NVRTC, no GPU) for sm_80 and sm_90 without spills (but the
accepted ones, cupy_kernels.__main__.KNOWN_SPILLS). The programs compile once for the module, on every core, and
their reports are cached on disk like `python -m cupy_kernels check`'s, so a run after `check` reads them back."""
import contextlib
import os
import types

import pytest

from cupy_kernels.__main__ import ARCHS, KNOWN_SPILLS, load_ops

pytest.importorskip("cuda.core", reason="offline compile needs cuda-core + nvidia-cuda-nvrtc")
SOURCES = load_ops()


def test_every_cu_file_is_declared():
    from cupy_kernels._runtime import all_sources

    assert set(all_sources()) <= set(SOURCES), "a cu_src file that no ops module declares"


@pytest.fixture(scope="module")
def offline_results(request):
    """(file, arch) -> SourceResult for the files and archs of the selected test_offline_compile cases, compiled
    in one parallel, cached run whose progress shows on the terminal (pytest's capture is off meanwhile)."""
    from cupy_kernels._runtime.offline import compile_all

    selected = [item.callspec.params for item in request.session.items
                if getattr(item, "originalname", "") == "test_offline_compile" and hasattr(item, "callspec")]
    names = sorted({p["name"] for p in selected}) or sorted(SOURCES)
    archs = [a for a in ARCHS if any(p["arch"] == a for p in selected)] or list(ARCHS)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print()  # the progress on lines of its own
        return compile_all([SOURCES[n] for n in names], archs)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_offline_compile(name, arch, offline_results):
    source = SOURCES[name]
    assert source.names, f"{name} declares no kernels"
    result = offline_results[name, arch]
    assert not result.errors, "\n".join(result.errors)
    assert [r.kernel for r in result.reports] == source.names
    spilled = [(r.kernel, r.spill_bytes) for r in result.reports
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


@pytest.fixture
def tiny_cu_src(tmp_path, monkeypatch):
    """A cu_src/ of our own in tmp_path (returned), read in place of the package's."""
    from cupy_kernels._runtime import sources

    cu = tmp_path / "cu_src"
    (cu / "common").mkdir(parents=True)
    monkeypatch.setattr(sources, "cu_src_dir", lambda: cu)
    sources.read_source.cache_clear()
    yield cu
    sources.read_source.cache_clear()


def test_compile_error_names_file_and_log(tiny_cu_src):
    from cupy_kernels._runtime import KernelCompileError, KernelSource, compile_offline

    (tiny_cu_src / "broken.cu").write_text("__global__ void k(float* x) { x[0] = undefined_thing; }\n")
    try:
        src = KernelSource("broken.cu")
        src.declare(["k"])
        with pytest.raises(KernelCompileError, match=r"(?s)broken\.cu.*undefined_thing"):
            compile_offline(src, "sm_90")
    finally:
        KernelSource.registry.pop("broken.cu", None)


def test_reports_are_cached_and_failures_are_not(tiny_cu_src, tmp_path, monkeypatch):
    from cupy_kernels._runtime import offline, sources

    monkeypatch.setenv("CUPY_KERNELS_CACHE_DIR", str(tmp_path / "cache"))
    (tiny_cu_src / "tiny.cu").write_text("template <int N> __global__ void k(float* x) { x[threadIdx.x] *= N; }\n")
    src = types.SimpleNamespace(filename="tiny.cu", options=(), names=["k<1>", "k<2>"])
    first = offline.compile_all([src], ["sm_80"], jobs=1, progress=False)["tiny.cu", "sm_80"]
    assert not first.errors and [r.kernel for r in first.reports] == src.names and first.from_cache == 0
    entries = list((tmp_path / "cache" / "offline").glob("*.json"))
    assert len(entries) == 1

    compile_job = offline.compile_job
    monkeypatch.setattr(offline, "compile_job", lambda job: pytest.fail(f"compiled {job} again"))
    again = offline.compile_all([src], ["sm_80"], jobs=1, progress=False)["tiny.cu", "sm_80"]
    assert again.reports == first.reports and again.from_cache == 2
    entries[0].write_text("{not json")  # a damaged entry is compiled again, not trusted
    monkeypatch.setattr(offline, "compile_job", compile_job)
    assert offline.compile_all([src], ["sm_80"], jobs=1, progress=False)["tiny.cu", "sm_80"].reports == first.reports

    # the key holds the expanded text: an edit compiles again, and a failing compile leaves no entry behind
    (tiny_cu_src / "tiny.cu").write_text("template <int N> __global__ void k(float* x) { x[0] = undefined_thing; }\n")
    sources.read_source.cache_clear()
    failed = offline.compile_all([src], ["sm_80"], jobs=1, progress=False)["tiny.cu", "sm_80"]
    assert failed.errors and "undefined_thing" in failed.errors[0] and not failed.reports
    assert len(list((tmp_path / "cache" / "offline").glob("*.json"))) == 1


def test_plan_splits_each_file_and_arch_into_even_chunks():
    from cupy_kernels._runtime.offline import plan

    big = types.SimpleNamespace(filename="big.cu", options=(), names=[f"k<{i}>" for i in range(130)])
    wgmma = types.SimpleNamespace(filename="mma.cu", options=("-arch=sm_90a",), names=["m"])
    jobs = plan([big, wgmma], ["sm_80", "sm_90"], chunk=64)
    assert [(j.filename, j.arch, len(j.names)) for j in jobs] == [
        ("big.cu", "sm_80", 44), ("big.cu", "sm_80", 44), ("big.cu", "sm_80", 42),
        ("big.cu", "sm_90", 44), ("big.cu", "sm_90", 44), ("big.cu", "sm_90", 42),
        ("mma.cu", "sm_80", 1), ("mma.cu", "sm_90", 1)]
    assert sum((j.names for j in jobs[:3]), ()) == tuple(big.names)
    assert [j.target for j in jobs[-2:]] == ["sm_80", "sm_90a"]


def test_check_table(monkeypatch, capsys):
    """check's table: a long file name keeps its row in line, sm_90a where the file builds for it, accepted and
    other spills apart, the totals and the legend; exit code 1 for a spill KNOWN_SPILLS does not accept."""
    import cupy_kernels._runtime as runtime
    import cupy_kernels.__main__ as cli
    from cupy_kernels._runtime import offline

    long_name = "a_rather_long_kernel_file_name.cu"
    # an accepted spill: the first KNOWN_SPILLS entry for sm_80 (file, kernel), allowing at least 800 bytes
    (spill_file, _, spill_kernel), _ = next(item for item in KNOWN_SPILLS.items()
                                            if item[0][1] == "sm_80" and item[1] >= 800)
    registry = {spill_file: types.SimpleNamespace(filename=spill_file, options=(), names=[spill_kernel, "n"]),
                long_name: types.SimpleNamespace(filename=long_name, options=("-arch=sm_90a",), names=["m"])}

    def fake_compile_all(sources, archs, **kwargs):
        out = {}
        for s in sources:
            for a in archs:
                r = out[s.filename, a] = offline.SourceResult(s.filename, a, offline.target_arch(s.options, a))
                r.reports = [offline.KernelReport(s.filename, r.target, k, 40, 0, 0, 1024) for k in s.names]
        out[spill_file, "sm_80"].reports[0].spill_bytes = 800  # accepted
        out[spill_file, "sm_90"].reports[1].spill_bytes = 8  # not accepted
        return out

    monkeypatch.setattr(cli, "load_ops", lambda: registry)
    monkeypatch.setattr(runtime, "all_sources", lambda: sorted(registry))
    monkeypatch.setattr(offline, "compile_all", fake_compile_all)
    assert cli.check() == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("source"))
    rows = [line for line in lines if line.startswith((long_name, spill_file))]
    assert len(rows) == 4 and all(len(row) == len(header) for row in rows), "\n".join([header] + rows)
    assert rows[1].split()[:2] == [long_name, "sm_90a"]
    norm80, norm90 = (r.split() for r in rows[2:])
    assert norm80[:2] == [spill_file, "sm_80"] and norm80[4:6] == ["800", "0"]
    assert norm90[4:6] == ["0", "8"]
    assert "3 kernel instances compiled for sm_80, sm_90" in out
    assert "KNOWN_SPILLS" in lines[-2] and "reason" in lines[-2]
    assert f"{spill_file} sm_90 n: 8 bytes spilled" in err


def test_headers_from_wheels_without_a_system_toolkit(monkeypatch):
    """A machine with no CUDA toolkit: the headers come from the wheels the install pulls (nvidia-cuda-runtime,
    through cuda-toolkit[cudart]), and one instance compiles with them."""
    from cupy_kernels._runtime import offline, sources

    for var in ("CUDA_PATH", "CUDA_HOME", "CUPY_KERNELS_CUDA_INCLUDE"):
        monkeypatch.delenv(var, raising=False)
    system = [os.path.realpath(r) for r in sources.SYSTEM_CUDA_ROOTS]
    monkeypatch.setattr(sources, "SYSTEM_CUDA_ROOTS", ())
    sources.cuda_include_dir.cache_clear()
    try:
        include, origin = sources.cuda_include_origin()
        if include is None or any(os.path.realpath(include).startswith(s) for s in system):
            pytest.skip(f"no CUDA header wheel installed ({origin}): pip install 'cuda-toolkit[nvrtc,cudart]==13.*'")
        pad = SOURCES["pad.cu"]
        job = offline.CompileJob("pad.cu", pad.options, "sm_80", tuple(pad.names[:1]), include)
        [report] = offline.compile_job(job)
        assert report.kernel == pad.names[0] and report.registers > 0
    finally:
        sources.cuda_include_dir.cache_clear()


def test_bench_without_gpu_runs_the_offline_check(monkeypatch, capsys):
    import cupy_kernels.__main__ as cli

    if cli.gpu_count():
        pytest.skip("a GPU is present: bench would benchmark")
    ran = []
    monkeypatch.setattr(cli, "check", lambda: ran.append(True) or 0)
    assert cli.main(["bench"]) == 0
    assert ran == [True]
    assert "No CUDA device here" in capsys.readouterr().out
