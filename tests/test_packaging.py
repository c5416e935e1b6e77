"""CPU: the wheel is pure Python, carries cu_src, and an installed copy finds and reads its kernels."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
                        str(ROOT)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return next(out.glob("cupy_kernels-*.whl"))


def test_wheel_is_pure_and_carries_sources(wheel):
    assert wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for cu in (ROOT / "cu_src").rglob("*.cu*"):
        rel = "cupy_kernels/cu_src/" + cu.relative_to(ROOT / "cu_src").as_posix()
        assert rel in names, f"{rel} missing from the wheel"
    assert not [n for n in names if n.endswith((".so", ".cubin", ".ptx"))]


def test_installed_wheel_finds_and_compiles_its_kernels(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    code = ("import cupy_kernels, cupy_kernels._runtime as r; "
            "d = r.cu_src_dir(); assert 'site' in str(d), d; "
            "src = r.read_source('reduce.cu'); assert 'reduce_rows' in src and 'block_reduce' in src; print(d)")
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    try:
        import cuda.core  # noqa: F401
    except ImportError:
        pytest.skip("cuda-core not installed: skipping the installed copy's offline compile")
    code = ("import cupy_kernels._runtime as r, cupy_kernels.ops.reduce as red; "  # a few instances: test_compile has all
            "from cupy_kernels._runtime.offline import CompileJob, compile_job; "
            "assert 'site' in str(r.cu_src_dir()); "
            "print(len(compile_job(CompileJob('reduce.cu', red.SOURCE.options, 'sm_90', tuple(red.SOURCE.names[:3]), "
            "r.cuda_include_dir()))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**env, "PYTHONPATH": f"{target}:{':'.join(p for p in sys.path[1:] if p)}"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
