"""CPU tests of the per-call (host) and first-call benchmark suites' machinery: the timing loop, the row
format, the tables, the merge into benchmarks/<device>.json, the fresh-process runner, and a dry run of
every host case on CPU tensors with stand-in ops (the real ops need a GPU)."""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from cupy_kernels.bench import EXPLICIT_ONLY, ROW_SUITES, load_suites
from cupy_kernels.bench import first_call, host, report, tables


# ---- the timing loop and the rows

def test_calls_for_stays_within_bounds():
    assert host.calls_for(1e-6, 7, 0.2) == host.MAX_CALLS
    assert host.calls_for(1e-2, 7, 0.2) == host.MIN_CALLS
    assert host.MIN_CALLS < host.calls_for(1e-4, 7, 0.2) < host.MAX_CALLS
    assert host.calls_for(0.0, 7, 0.2) == host.MAX_CALLS


def test_measure_times_each_impl_and_records_failures():
    syncs = []
    counts = {"fast": 0, "slow": 0}

    def fast():
        counts["fast"] += 1

    def slow():
        counts["slow"] += 1
        t = time.perf_counter()
        while time.perf_counter() - t < 2e-4:
            pass

    def broken():
        raise RuntimeError("no kernel for this")

    calls = {"n": 0}

    def breaks_later():
        calls["n"] += 1
        if calls["n"] > 40:
            raise ValueError("went wrong mid-run")

    out = host.measure({"slow": slow, "broken": broken, "fast": fast, "later": breaks_later},
                       lambda: syncs.append(1), repeats=3, target_s=0.05, warmup=2, probe=5)
    assert list(out) == ["slow", "broken", "fast", "later"]  # the impls' order
    assert isinstance(out["broken"], RuntimeError) and isinstance(out["later"], ValueError)
    for label in ("slow", "fast"):
        r = out[label]
        assert set(r) == {"us_per_call", "us_min", "us_max", "calls", "repeats"}
        assert r["repeats"] == 3 and host.MIN_CALLS <= r["calls"] <= host.MAX_CALLS
        assert r["us_min"] <= r["us_per_call"] <= r["us_max"]
    assert out["slow"]["us_per_call"] >= 150 > out["fast"]["us_per_call"]
    assert counts["fast"] == 2 + 5 + 3 * out["fast"]["calls"]  # warm-up, probe, rounds: no call lost or added
    assert syncs


def test_host_row_format():
    ok = host.host_row("softmax", "ours-torch", {"us_per_call": 12.5, "calls": 1000}, "32x1024", "float32", "forward")
    assert ok == {"suite": "host", "op": "softmax", "impl": "ours-torch", "us_per_call": 12.5, "shape": "32x1024",
                  "dtype": "float32", "kind": "forward", "calls": 1000}
    bad = host.host_row("pad reflect", "cupy", ValueError("x" * 500), "32x1024", "float32", "forward", note="n")
    assert bad["us_per_call"] is None and bad["error"].startswith("ValueError: x") and len(bad["error"]) < 250
    assert bad["note"] == "n"


def test_suites_are_registered():
    suites = load_suites()
    assert {"host", "first_call"} <= ROW_SUITES and {"host", "first_call"} <= set(suites)
    assert "first_call" in EXPLICIT_ONLY and "host" not in EXPLICIT_ONLY
    default = report.suite_names(suites)
    assert "host" in default and "first_call" not in default
    assert report.suite_names(suites, ["first_call", "host", "first_call"]) == ["first_call", "host"]
    with pytest.raises(SystemExit):
        report.suite_names(suites, ["no_such_suite"])


# ---- a dry run of every host case: CPU tensors, NumPy for CuPy, stand-ins for our ops

def _softmax(x, log=False):
    if isinstance(x, np.ndarray):
        s = x - x.max(axis=-1, keepdims=True)
        return s - np.log(np.exp(s).sum(-1, keepdims=True)) if log else np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    import torch

    return torch.log_softmax(x, -1) if log else torch.softmax(x, -1)


def _layer_norm(x, w=None, b=None, eps=1e-5):
    if isinstance(x, np.ndarray):
        d = x - x.mean(-1, keepdims=True)
        return d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * w + b
    import torch.nn.functional as F

    return F.layer_norm(x, x.shape[-1:], w, b, eps)


def _rms_norm(x, w=None, eps=1e-6):
    if isinstance(x, np.ndarray):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    import torch.nn.functional as F

    return F.rms_norm(x, x.shape[-1:], w, eps)


def _reduce(op):
    def run(x, axis=None, keepdims=False):
        if isinstance(x, np.ndarray):
            return getattr(np, op)(x, axis=axis, keepdims=keepdims)
        return getattr(x, "amax" if op == "max" else op)(axis, keepdim=keepdims)
    return run


def _timex(w, k, eps=0.0):
    if isinstance(k, np.ndarray):
        import torch

        return _timex(torch.from_numpy(w), torch.from_numpy(k)).numpy()
    return host.torch_timex(w, k) + eps


def _pad(x, pad_width, mode="constant"):
    if isinstance(x, np.ndarray):
        return np.pad(x, pad_width, mode=mode)
    import torch.nn.functional as F

    flat = [p for pair in reversed(pad_width) for p in pair]
    while flat and flat[-1] == 0 and len(flat) > 2:
        flat = flat[:-2]
    return F.pad(x, flat, mode=mode)


def _inplace(fn):
    def run(x, *args):
        y = fn(x, *args)
        if isinstance(x, np.ndarray):
            x[...] = y
        else:
            x.copy_(y)
        return x
    return run


def _square_matmul_(a, w, transpose=False):
    a[...] = a @ (w.T if transpose else w)
    return a


def _linear_(x, weight, bias=None):
    x[...] = x @ weight.T + (0 if bias is None else bias)
    return x


@pytest.fixture
def stand_ins(monkeypatch):
    torch = pytest.importorskip("torch")
    import cupy_kernels as ck
    from cupy_kernels import torch_ops

    monkeypatch.setitem(sys.modules, "cupy", np)
    monkeypatch.setattr(host, "DEVICE", "cpu")
    monkeypatch.setattr(host, "MIN_CALLS", 2)
    monkeypatch.setattr(host, "MAX_CALLS", 3)
    fakes = {"softmax": lambda x, axis=-1: _softmax(x), "log_softmax": lambda x, axis=-1: _softmax(x, True),
             "layer_norm": _layer_norm, "rms_norm": _rms_norm, "sum": _reduce("sum"), "mean": _reduce("mean"),
             "max": _reduce("max"), "timex": _timex, "pad": _pad, "square_matmul_": _square_matmul_,
             "softmax_": _inplace(lambda x: _softmax(x)), "layer_norm_": _inplace(_layer_norm),
             "rms_norm_": _inplace(_rms_norm)}
    for name, fn in fakes.items():
        monkeypatch.setattr(ck, name, fn)
    for name in ("layer_norm", "rms_norm", "layer_norm_", "rms_norm_"):
        monkeypatch.setattr(torch_ops, name, fakes[name])
    monkeypatch.setattr(torch_ops, "linear_", _linear_)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny CPU ops: threads only contend
    yield torch
    torch.set_num_threads(threads)


def test_every_host_case_runs_with_stand_in_ops(stand_ins):
    torch = stand_ins
    inputs = host.SmallInputs()
    rows = []
    for family in host.FAMILIES:
        cases = family.build(inputs)  # builds without error
        assert cases and all(c.kind in host.KINDS for c in cases)
        rows += list(host.run_cases(cases, lambda: None, 1, 0.001, torch.no_grad))
    failed = [(r["op"], r["kind"], r["impl"], r["error"]) for r in rows if r.get("error")]
    assert not failed
    assert all(r["impl"] in host.IMPLS and r["us_per_call"] > 0 for r in rows)
    have = {(r["kind"], r["op"], r["impl"]) for r in rows}
    for op in ("softmax", "log_softmax", "layer_norm", "rms_norm", "sum(axis=-1)", "mean(axis=-1)", "max(axis=-1)",
               "pad constant", "pad reflect", "square_matmul_"):
        assert {("forward", op, i) for i in ("ours-torch", "ours-cupy", "torch", "cupy")} <= have, op
    assert {("forward", "timex", i) for i in ("ours-torch", "ours-cupy", "torch")} <= have
    for op in ("softmax", "log_softmax", "layer_norm", "rms_norm", "timex", "pad constant", "sum(axis=-1)"):
        assert {("autograd", op, "ours-torch"), ("autograd", op, "torch")} <= have, op
    assert sum(1 for k, _, i in have if k == "module" and i == "ours-torch") == 7
    # the in-place buffers, square_matmul_'s and InplaceLinear's after thousands of products, stay finite
    assert inputs._keep and all(torch.isfinite(t).all() for t in inputs._keep)


def test_a_family_that_cannot_build_is_one_error_row(stand_ins, monkeypatch):
    def broken(inputs):
        raise AttributeError("module 'cupy_kernels' has no attribute 'softmax'")

    monkeypatch.setattr(host, "FAMILIES", [host.Family("row ops", "forward", broken),
                                           host.Family("in-place row ops", "forward", host._inplace_forward)])
    monkeypatch.setattr(stand_ins.cuda, "synchronize", lambda: None)
    rows = list(host.host_suite(True))
    assert rows[0]["op"] == "row ops" and rows[0]["error"].startswith("AttributeError")
    assert len(rows) > 1 and not any(r.get("error") for r in rows[1:])


# ---- first call: the programs and the fresh-process runner

def test_first_call_programs_compile_for_every_op_impl_and_dtype():
    for op in first_call.OPS:
        for impl, calls in first_call.CALLS.items():
            if op in calls:
                for dtype in first_call.DTYPES:
                    program = first_call.script(op, dtype, impl)
                    compile(program, f"<{op} {impl} {dtype}>", "exec")
                    assert calls[op] in program and repr(dtype) in program
    assert set(first_call.OPS) <= set(first_call.CALLS["ours"]) and set(first_call.OPS) <= set(first_call.CALLS["torch"])


def test_first_call_plan():
    quick = first_call.plan(True, with_liger=False)
    assert {c[1] for c in quick} == {"float32"}
    assert [c[0] for c in quick if c[2] == "ours"] == list(first_call.OPS)
    assert all(c[3] == ("empty", "warm") for c in quick if c[2] == "ours")
    full = first_call.plan(False, with_liger=True)
    assert len([c for c in full if c[2] == "ours"]) == len(first_call.OPS) * 3
    assert {c[0] for c in full if c[2] == "liger"} == set(first_call.LIGER_OPS)


def test_run_fresh_points_every_cache_into_the_directory(tmp_path):
    program = ("import json, os, cupy_kernels\n"
               f"print({first_call.MARKER!r} + json.dumps({{v: os.environ[v] for v in {list(first_call.CACHE_VARS)!r}}}"
               " | {'package': os.path.dirname(cupy_kernels.__file__), 'seconds': 0.5}))")
    out = first_call.run_fresh(program, tmp_path, timeout_s=120)
    assert out.pop("seconds") == 0.5
    assert out.pop("package").startswith(first_call.package_root())
    for var, sub in first_call.CACHE_VARS.items():
        assert out[var] == str(tmp_path / sub) and (tmp_path / sub).is_dir()


def test_run_fresh_reports_failures(tmp_path):
    out = first_call.run_fresh("raise RuntimeError('kernel compile failed')", tmp_path, timeout_s=120)
    assert "exit status 1" in out["error"] and "kernel compile failed" in out["error"]
    out = first_call.run_fresh("import time; time.sleep(30)", tmp_path, timeout_s=0.5)
    assert out == {"error": "timed out after 0.5 s"}


def test_chain_skips_warm_after_a_failed_empty_run(monkeypatch):
    seen = []

    def fake(program, cache_dir, timeout_s):
        seen.append(cache_dir)
        return {"error": "exit status 1: boom"} if len(seen) == 1 else {"seconds": 1.0}

    monkeypatch.setattr(first_call, "run_fresh", fake)
    rows = first_call.chain("softmax", "float32", "ours", ("empty", "warm"), 10)
    assert [r["cache"] for r in rows] == ["empty", "warm"] and len(seen) == 1
    assert rows[1]["error"].startswith("not run") and rows[1]["seconds"] is None
    seen.clear()
    monkeypatch.setattr(first_call, "run_fresh", lambda p, d, t: seen.append(d) or {"seconds": 2.0, "import_seconds": 3.0})
    rows = first_call.chain("pad", "float16", "ours", ("empty", "warm"), 10)
    assert seen[0] == seen[1]  # the warm process reuses the empty one's directory
    assert rows[0] == {"suite": "first_call", "op": "pad", "dtype": "float16", "impl": "ours", "cache": "empty",
                       "seconds": 2.0, "import_seconds": 3.0}


def test_first_call_suite_runs_chains_in_parallel_in_order(monkeypatch):
    monkeypatch.setenv("CUPY_KERNELS_FIRST_CALL_JOBS", "4")
    monkeypatch.setattr(first_call.liger, "functions", lambda: None)
    monkeypatch.setattr(first_call, "run_fresh", lambda p, d, t: {"seconds": 0.1})
    rows = list(first_call.first_call_suite(True))
    expected = [(op, impl, cache) for op in first_call.OPS for impl, caches in (("ours", ("empty", "warm")),
                                                                                 ("torch", ("empty",)))
                for cache in caches]
    assert [(r["op"], r["impl"], r["cache"]) for r in rows] == expected


# ---- tables and the merge

def _device_rows(suite="softmax"):
    return [
        {"suite": suite, "op": "softmax", "shape": "4096x4096", "dtype": "float32", "impl": "cupy_kernels", "ours": True,
         "ms": 0.03, "copy_frac": 0.9},
        {"suite": suite, "op": "softmax", "shape": "4096x4096", "dtype": "float32", "impl": "torch.softmax",
         "ours": False, "ms": 0.06},
        {"suite": suite, "op": "softmax", "shape": "4096x4096", "dtype": "float32", "impl": "liger (Triton)",
         "ours": False, "ms": 0.045},
        {"suite": suite, "op": "softmax", "shape": "4096x4096", "dtype": "float32", "impl": "floor: copy",
         "ours": False, "ms": 0.02},
    ]


def _host_rows():
    def row(op, impl, us, kind="forward", **kw):
        return {"suite": "host", "op": op, "impl": impl, "us_per_call": us, "shape": "32x1024", "dtype": "float32",
                "kind": kind, **kw}
    return [row("softmax", "ours-torch", 30.0), row("softmax", "ours-cupy", 20.0), row("softmax", "torch", 10.0),
            row("softmax", "cupy", 40.0), row("softmax", "liger", 35.0),
            row("softmax_ (in place)", "ours-torch", 25.0, note=host.TORCH_OUT_OF_PLACE),
            row("softmax_ (in place)", "torch", 10.0, note=host.TORCH_OUT_OF_PLACE),
            row("pad reflect", "ours-torch", None, error="ValueError: bad"), row("pad reflect", "torch", 20.0),
            row("softmax", "ours-torch", 200.0, "autograd"), row("softmax", "torch", 100.0, "autograd")]


def _first_call_rows():
    def row(op, impl, cache, s, **kw):
        return {"suite": "first_call", "op": op, "dtype": "float32", "impl": impl, "cache": cache, "seconds": s, **kw}
    return [row("softmax", "ours", "empty", 12.5, import_seconds=2.0), row("softmax", "ours", "warm", 0.25),
            row("softmax", "torch", "empty", 0.01), row("softmax", "liger", "empty", 1.5),
            row("softmax", "liger", "warm", 0.3), row("pad", "ours", "empty", None, error="timed out after 300 s"),
            row("pad", "ours", "warm", None, error="not run"),
            {**row("pad", "ours", "empty", 3.0), "dtype": "float16"}]


def test_peer_kind():
    assert tables.peer_kind("liger (Triton)") == "liger" and tables.peer_kind("torch F.pad") == "torch"
    assert tables.peer_kind("torch fill_ (output size)") is None and tables.peer_kind("cupy.pad") == "cupy"
    assert tables.peer_kind("floor: the same bytes copied (torch copy_)") is None


def test_host_tables():
    lines = tables.host_tables(_host_rows())
    text = "\n".join(lines)
    assert "| op | shape | ours (torch) | ours (CuPy) | torch | CuPy | Liger | ours/torch |" in text
    assert "| softmax | 32x1024 | 30.0 | 20.0 | 10.0 | 40.0 | 35.0 | 3.00 |" in text
    assert "| pad reflect | 32x1024 | error |  | 20.0 |  |  |  |" in text
    assert "| softmax | 32x1024 | 200.0 |  | 100.0 |  |  | 2.00 |" in text
    assert f"- softmax_ (in place): {host.TORCH_OUT_OF_PLACE}" in text and "- pad reflect, ours-torch: ValueError: bad" in text
    assert text.index(tables.KIND_TITLES["forward"]) < text.index(tables.KIND_TITLES["autograd"])


def test_first_call_table():
    text = "\n".join(tables.first_call_table(_first_call_rows()))
    assert ("| op | dtype | ours, empty cache | ours, warm cache | torch | Liger, empty cache | Liger, warm cache |"
            in text)
    assert "| softmax | float32 | 12.50 | 0.250 | 0.010 | 1.50 | 0.300 |" in text
    assert "| pad | float32 | error | error |  |  |  |" in text and "timed out after 300 s" in text
    assert "median 2.00 s" in text
    only32 = "\n".join(tables.first_call_table(_first_call_rows(), ("float32",)))
    assert "float16" not in only32 and "float16" in text
    assert tables.first_call_table(_device_rows()) == []


def test_readme_summary_and_fallback_cases():
    rows = _device_rows() + _host_rows() + [
        {"suite": "pad", "op": "pad constant", "shape": "odd", "dtype": "uint8", "impl": "cupy_kernels", "ours": True,
         "ms": 0.1},
        {"suite": "pad", "op": "pad constant", "shape": "odd", "dtype": "uint8", "impl": "cupy.pad", "ours": False,
         "ms": 0.3}]
    text = "\n".join(tables.readme_summary(rows))
    # x torch = 0.06 / 0.03, x Liger = 0.045 / 0.03; the floor row is no peer; per call from the host rows
    assert "| softmax | 4096x4096 | float32 | 0.0300 | 2.00 |  | 1.50 | 30.0 / 10.0 (32x1024) |" in text
    assert "| pad constant | odd | uint8 | 0.1000 |  | 3.00 |  |  |" in text  # no preferred shape: the fallback


def test_merge_replaces_the_suites_run_and_keeps_the_others():
    old = {"device": "GPU", "date": "d0", "commit": "c0", "copy_TBps": 3.0, "cupy": "14",
           "runs": {"softmax": {"commit": "c0"}, "host": {"commit": "c0"}},
           "rows": _device_rows() + _device_rows("norm") + [dict(r, us_per_call=1.0) for r in _host_rows()]}
    new = {"device": "GPU", "date": "d1", "commit": "c1", "copy_TBps": None, "torch": "2.13",
           "runs": {"host": {"commit": "c1"}}, "rows": _host_rows()[:3]}
    merged = report.merge(old, new, {"host"})
    suites = [r["suite"] for r in merged["rows"]]
    assert suites == ["softmax"] * 4 + ["norm"] * 4 + ["host"] * 3  # order kept, host replaced
    assert all(r["commit"] == "c0" and r["date"] == "d0" for r in merged["rows"] if r["suite"] != "host")
    assert all(r["commit"] == "c1" for r in merged["rows"] if r["suite"] == "host")
    assert merged["copy_TBps"] == 3.0 and merged["commit"] == "c1" and merged["torch"] == "2.13"
    assert merged["runs"] == {"softmax": {"commit": "c0"}, "host": {"commit": "c1"}}
    # a row that carries its own commit keeps it; a new suite goes last; no old file: new stamped
    old["rows"][0]["commit"] = "older"
    merged = report.merge(old, dict(new, rows=_first_call_rows()), None)
    assert merged["rows"][0]["commit"] == "older" and merged["rows"][-1]["suite"] == "first_call"
    assert len(merged["rows"]) == len(old["rows"]) + len(_first_call_rows())
    alone = report.merge(None, new)
    assert [r["commit"] for r in alone["rows"]] == ["c1"] * 3


def test_write_keeps_device_rows_and_renders_every_table(tmp_path):
    device = report._result({"device": "Test GPU 1", "date": "d0", "commit": "c0", "copy_TBps": 3.0, "cupy": "14"},
                            _device_rows(), ["softmax"])
    report.write(device, tmp_path, {"softmax"})
    host_run = report._result({"device": "Test GPU 1", "date": "d1", "commit": "c1", "copy_TBps": None,
                               "torch": "2.13"}, _host_rows(), ["host"])
    report.write(host_run, tmp_path, {"host"})
    report.write(report._result(dict(host_run, date="d2"), _first_call_rows(), ["first_call"]), tmp_path)
    data = json.loads((tmp_path / "Test_GPU_1.json").read_text())
    assert [r["suite"] for r in data["rows"]] == ["softmax"] * 4 + ["host"] * 11 + ["first_call"] * 8
    assert data["copy_TBps"] == 3.0 and set(data["runs"]) == {"softmax", "host", "first_call"}
    md = (tmp_path / "Test_GPU_1.md").read_text()
    assert "## softmax (commit c0, d0)" in md and "| softmax | 4096x4096 | float32 | **cupy_kernels** |" in md
    assert "## host: per-call time (commit c1, d1)" in md and "| softmax | 32x1024 | 30.0 |" in md
    assert "## first_call: the first call of a fresh process (commit c1, d2)" in md
    assert "3.00 TB/s" in md
    # a host-only run over the merged file leaves the device and first_call rows alone
    report.write(report._result(dict(host_run, date="d3"), _host_rows()[:2], ["host"]), tmp_path, {"host"})
    data = json.loads((tmp_path / "Test_GPU_1.json").read_text())
    assert [r["suite"] for r in data["rows"]] == ["softmax"] * 4 + ["host"] * 2 + ["first_call"] * 8


def test_row_line():
    assert report.row_line(_host_rows()[0]) == "  host forward softmax 32x1024 float32 ours-torch: 30.0 us per call"
    assert report.row_line(_first_call_rows()[0]) == "  first_call softmax float32 ours empty: 12.500 s"
    assert report.row_line(_host_rows()[7]).endswith(": ValueError: bad")


def test_readme_tables_script_prints_the_blocks(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "readme_tables.py"
    spec = importlib.util.spec_from_file_location("readme_tables", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    result = {"device": "Test GPU", "rows": _device_rows() + _host_rows() + _first_call_rows()}
    (tmp_path / "Test_GPU.json").write_text(json.dumps(result))
    assert mod.main([str(tmp_path / "Test_GPU.json")]) == 0
    out = capsys.readouterr().out
    assert "<!-- bench:start -->" in out and "<!-- first_call:start -->" in out and "<!-- ladder:start -->" not in out
    assert "| softmax | float32 | 12.50 | 0.250 |" in out and "float16" not in out


def test_run_writes_row_suites_and_survives_a_broken_one(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    import cupy_kernels._runtime as runtime

    def good(quick):
        yield from _host_rows()[:3]

    def broken(quick):
        yield _first_call_rows()[0]
        raise RuntimeError("the machine went away")

    monkeypatch.setattr(runtime, "current", lambda: SimpleNamespace(name="Fake GPU"))
    monkeypatch.setattr(report, "load_suites", lambda: {"host": good, "first_call": broken})
    monkeypatch.setattr(report, "ROW_SUITES", {"host", "first_call"})
    monkeypatch.setattr(report, "EXPLICIT_ONLY", {"first_call"})
    monkeypatch.setattr(report, "Timer", None)  # no device suite: no device timing at all
    (tmp_path / "Fake_GPU.json").write_text(json.dumps({"device": "Fake GPU", "date": "d0", "commit": "c0",
                                                        "copy_TBps": 3.0, "rows": _device_rows()}))
    result = report.run(["host", "first_call"], quick=True, out_dir=str(tmp_path))
    assert [r["suite"] for r in result["rows"]] == ["host"] * 3 + ["first_call"]
    out = capsys.readouterr().out
    assert "first_call: stopped by RuntimeError: the machine went away" in out
    data = json.loads((tmp_path / "Fake_GPU.json").read_text())
    assert [r["suite"] for r in data["rows"]] == ["softmax"] * 4 + ["host"] * 3 + ["first_call"]
    assert data["copy_TBps"] == 3.0 and data["quick"] is True and data["runs"]["host"]["quick"] is True
    assert "## host: per-call time" in (tmp_path / "Fake_GPU.md").read_text()


def test_a_busy_host_is_named_in_the_output_and_the_run(monkeypatch, capsys):
    monkeypatch.setattr(report, "load_average", lambda: 64.0)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    host.warn_if_busy("host")
    assert "load average is 64.0 on 16 cores" in capsys.readouterr().out
    monkeypatch.setattr(report, "load_average", lambda: 0.5)
    host.warn_if_busy("host")
    assert capsys.readouterr().out == ""
    meta = report.metadata("cpu")
    assert meta["load_average"] == 0.5 and "load_average" in report.RUN_KEYS
