"""Run suites, print the table, write benchmarks/<device>.{json,md,png}.

benchmarks/<device>.json: the last run's metadata (device, date, commit, versions, copy bandwidth), "runs"
(per suite: the commit, date and versions of its latest run) and "rows"; each row carries its run's commit
and date. Writing merges: the rows of the suites just run replace theirs, the other suites' rows stay."""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import time
from pathlib import Path

from . import EXPLICIT_ONLY, ROW_SUITES, load_suites
from .tables import FIRST_CALL, HOST, first_call_table, host_tables, is_device_row, peer_kind
from .timing import Timer, copy_bandwidth

ROW_WRITE_EVERY_S = 20.0  # a row suite's partial results reach the disk this often (a run cut short keeps them)


def _commit() -> str:
    if os.environ.get("CUPY_KERNELS_COMMIT"):
        return os.environ["CUPY_KERNELS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:
        return "unknown"


def versions() -> dict:
    """Versions of Python and of the libraries timed (None where not importable)."""
    out = {"python": platform.python_version()}
    for name in ("cupy", "torch"):
        try:
            out[name] = __import__(name).__version__
        except Exception:
            out[name] = None
    from . import liger

    out["liger"] = liger.version() if liger.installed() else None
    try:
        import cupy

        out["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        out["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:
        pass
    return out


def load_average():
    """The host's 1-minute load average at the run's start (None where the OS has none): other processes inflate
    per-call and first-call times, so a run keeps it beside its rows."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def metadata(device: str, copy_bw=None, quick=False) -> dict:
    return dict(device=device, date=datetime.datetime.now().isoformat(timespec="seconds"), commit=_commit(),
                copy_TBps=None if copy_bw is None else copy_bw / 1e12, quick=quick, load_average=load_average(),
                **versions())


RUN_KEYS = ("commit", "date", "quick", "load_average", "python", "cupy", "torch", "liger", "cuda_runtime",
            "cuda_driver")


def _result(meta: dict, rows: list, suites) -> dict:
    run_info = {k: meta.get(k) for k in RUN_KEYS}
    return dict(meta, runs={name: run_info for name in suites}, rows=rows)


def suite_names(suites: dict, ops=None) -> list[str]:
    """The suites `bench` runs: those named, else every suite but the explicit-only ones."""
    if ops:
        names = list(dict.fromkeys(ops))
        unknown = [n for n in names if n not in suites]
        if unknown:
            raise SystemExit(f"unknown benchmark {unknown}; known: {', '.join(suites)}")
        return names
    return [n for n in suites if n not in EXPLICIT_ONLY]


def run(ops=None, quick=False, out_dir="benchmarks", progress=True) -> dict:
    from .._runtime import current

    suites = load_suites()
    names = suite_names(suites, ops)
    if not ops and EXPLICIT_ONLY:
        print(f"(run only when named with --op: {', '.join(sorted(EXPLICIT_ONLY))})")
    props = current()
    timer = copy_bw = None
    if any(n not in ROW_SUITES for n in names):  # the device-time suites: the flush buffer, the copy bandwidth
        timer = Timer()
        copy_bw = copy_bandwidth(timer)
        print(f"{props.name}: device-to-device copy {copy_bw / 1e12:.2f} TB/s (read + written)")
    rows = []
    for name in names:
        meta = metadata(props.name, copy_bw, quick)
        if name in ROW_SUITES:
            suite_rows = _run_row_suite(name, suites[name], quick, meta, out_dir)
        else:
            suite_rows = _run_device_suite(name, suites[name], quick, timer, copy_bw, progress)
        rows += suite_rows
        if out_dir and suite_rows:  # after each suite, so a run cut short keeps what it measured
            write(_result(meta, suite_rows, [name]), Path(out_dir), {name})
    result = _result(metadata(props.name, copy_bw, quick), rows, names)
    print(markdown(result))
    return result


def row_line(row: dict) -> str:
    """One progress line for a row suite's row."""
    what = " ".join(str(row[k]) for k in ("kind", "op", "shape", "dtype", "impl", "cache") if row.get(k))
    if row.get("error"):
        return f"  {row['suite']} {what}: {row['error']}"
    if row.get("us_per_call") is not None:
        return f"  {row['suite']} {what}: {row['us_per_call']:.1f} us per call"
    if row.get("seconds") is not None:
        return f"  {row['suite']} {what}: {row['seconds']:.3f} s"
    return f"  {row['suite']} {what}"


def _run_row_suite(name, fn, quick, meta, out_dir) -> list:
    """Collect a row suite's rows; write the partial set every ROW_WRITE_EVERY_S seconds."""
    rows = []
    last = time.monotonic()
    try:
        for row in fn(quick):
            row = {"suite": name, **row}
            rows.append(row)
            print(row_line(row), flush=True)
            if out_dir and time.monotonic() - last > ROW_WRITE_EVERY_S:
                write(_result(meta, rows, [name]), Path(out_dir), {name})
                last = time.monotonic()
    except Exception as e:  # the suite itself broke (its ops' failures are rows): keep what it yielded
        print(f"  {name}: stopped by {type(e).__name__}: {str(e)[:300]}")
    return rows


def _run_device_suite(name, fn, quick, timer, copy_bw, progress) -> list:
    rows = []
    try:
        _time_groups(name, fn(quick), timer, copy_bw, progress, rows)
    except Exception as e:  # the suite itself broke (making its inputs, say): keep the groups it timed
        print(f"  {name}: stopped by {type(e).__name__}: {str(e)[:300]}")
    return rows


def _time_groups(name, groups, timer, copy_bw, progress, rows) -> None:
    import cupy

    try:
        from tqdm import tqdm

        groups = tqdm(groups, desc=name, disable=not progress, leave=False)
    except ImportError:
        pass
    for g in groups:
        times, host = {}, {}
        for label, call in g.impls.items():
            try:
                times[label] = timer(call)
                host[label] = timer.host_ms
            except Exception as e:  # a peer that cannot run this case (too large, unsupported)
                times[label] = None
                print(f"  {g.op} {g.shape} {g.dtype} {label}: {type(e).__name__}: {str(e)[:120]}")
        ours = times[g.ours]
        for label, ms in times.items():
            row = dict(suite=name, op=g.op, shape=g.shape, dtype=g.dtype, impl=label, ours=label == g.ours,
                       ms=ms, host_ms=host.get(label), note=g.note)
            if ms:
                if g.bytes:
                    row["GB/s"] = g.bytes / (ms * 1e-3) / 1e9
                    row["copy_frac"] = g.bytes / (ms * 1e-3) / copy_bw
                if g.flops:
                    row["TFLOP/s"] = g.flops / (ms * 1e-3) / 1e12
                if ours:
                    row["ours_speedup"] = ms / ours  # > 1: ours is faster than this impl
            rows.append(row)
        cupy.get_default_memory_pool().free_all_blocks()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def _stamp(rows, res):
    return [{"commit": res.get("commit"), "date": res.get("date"), **r} for r in rows]


def merge(old: dict | None, new: dict, ran=None) -> dict:
    """new's rows (stamped with its commit and date) replace old's rows of the suites in `ran` (default: the
    suites new has rows of); old's other rows stay, stamped with old's commit and date where they carry none.
    Suites keep their order in old; new suites follow. The metadata is new's, but a copy bandwidth new did
    not measure stays old's, and "runs" keeps old's entries of the suites kept."""
    ran = set(ran) if ran is not None else {r["suite"] for r in new["rows"]}
    fresh = _stamp(new["rows"], new)
    if not old:
        return dict(new, rows=fresh)
    kept = _stamp([r for r in old.get("rows", []) if r["suite"] not in ran], old)
    order = list(dict.fromkeys([r["suite"] for r in old.get("rows", [])] + [r["suite"] for r in fresh]))
    by_suite: dict[str, list] = {s: [] for s in order}
    for r in kept + fresh:
        by_suite[r["suite"]].append(r)
    merged = dict(new, rows=[r for s in order for r in by_suite[s]])
    if merged.get("copy_TBps") is None and old.get("copy_TBps") is not None:
        merged["copy_TBps"] = old["copy_TBps"]
    merged["runs"] = {**{s: v for s, v in old.get("runs", {}).items() if s not in ran}, **new.get("runs", {})}
    return merged


def write(result: dict, out_dir: Path, ran=None) -> None:
    """Merge into benchmarks/<device>.json (rows of the suites run replace their old rows), then
    rewrite the .md and .png from the merged set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{_slug(result['device'])}.json"
    old = json.loads(path.read_text()) if path.exists() else None
    result = merge(old, result, ran)
    path.write_text(json.dumps(result, indent=1))
    path.with_suffix(".md").write_text(markdown(result))
    if any(is_device_row(r) for r in result["rows"]):
        try:
            plot(result, path.with_suffix(".png"))
        except ImportError:
            pass


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


HOST_TEXT = ("Per-call wall time in microseconds: eager calls on small inputs, back to back with no "
             "synchronisation between them, after warm-up; (wall time of N calls + one final synchronize) / N, the "
             "median of several rounds (N = 200-1000). Host work (Python, dispatch, allocation, launch) is most of "
             "it. ours (torch) / ours (CuPy): our op on torch tensors / on CuPy arrays; CuPy: CuPy's op, or for an op "
             "CuPy lacks its formulation in CuPy ops; ours/torch > 1: ours takes that many times longer per call.")
FIRST_CALL_TEXT = ("Seconds from an op's first call to its result (torch.cuda.synchronize) in a new process, after "
                   "the imports and the input (not counted): empty, new cache directories (CuPy, cupy_kernels, "
                   "Triton, the CUDA JIT cache); warm, a second process on the same directories; torch's op has "
                   "nothing to compile. Inputs: 32x1024 rows, timex B=1 C=64 T=64, square_matmul_ 256x64.")


def _when(result: dict, suite: str, rows) -> str:
    info = result.get("runs", {}).get(suite) or (rows[0] if rows else {})
    return f" (commit {info['commit']}, {info['date']})" if info.get("commit") else ""


def markdown(result: dict) -> str:
    rows = result["rows"]
    libs = ", ".join(f"{title} {result[k]}" for k, title in (("cupy", "CuPy"), ("torch", "torch"),
                                                              ("liger", "Liger-Kernel")) if result.get(k))
    copy = (f"; device-to-device copy {result['copy_TBps']:.2f} TB/s (read + written)"
            if result.get("copy_TBps") else "")
    lines = [f"# {result['device']}", "",
             f"Last run {result['date']}, commit {result['commit']} (each suite names its own)"
             f"{'; ' + libs if libs else ''}{copy}.", ""]
    device = [r for r in rows if is_device_row(r)]
    if device:
        lines += ["Device-time suites: medians of device events after an L2 flush and a 0.5 ms device-side wait "
                  "(the host's enqueue time stays out; the JSON keeps it per row as host_ms); `x ours` > 1 means "
                  "ours is that many times faster.", ""]
    suite = None
    for r in device:
        if r["suite"] != suite:
            suite = r["suite"]
            when = f" (commit {r['commit']}, {r['date']})" if r.get("commit") else ""
            lines += ["", f"## {suite}{when}", "", "| op | shape | dtype | impl | ms | GB/s | of copy | TFLOP/s | x ours |",
                      "|---|---|---|---|---:|---:|---:|---:|---:|"]
        impl = f"**{r['impl']}**" if r.get("ours") else r["impl"]
        lines.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {impl} | {_fmt(r.get('ms'), '.4f')} | "
                     f"{_fmt(r.get('GB/s'), '.0f')} | {_fmt(r.get('copy_frac'), '.1%')} | "
                     f"{_fmt(r.get('TFLOP/s'), '.1f')} | {_fmt(None if r.get('ours') else r.get('ours_speedup'), '.2f')} |")
    host = [r for r in rows if r["suite"] == HOST]
    if host:
        lines += ["", f"## {HOST}: per-call time{_when(result, HOST, host)}", "", HOST_TEXT] + host_tables(host)
    first = [r for r in rows if r["suite"] == FIRST_CALL]
    if first:
        lines += ["", f"## {FIRST_CALL}: the first call of a fresh process{_when(result, FIRST_CALL, first)}", "",
                  FIRST_CALL_TEXT, ""] + first_call_table(first)
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """One panel per device-time suite: how many times faster ours is than the fastest torch formulation,
    than CuPy's op and than Liger-Kernel's, per case (log scale; above 1 = ours faster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    device = [r for r in result["rows"] if is_device_row(r)]
    suites = list(dict.fromkeys(r["suite"] for r in device))
    fig, axes = plt.subplots(len(suites), 1, figsize=(12, 3.2 * len(suites)), squeeze=False)
    for ax, suite in zip(axes[:, 0], suites):
        rows = [r for r in device if r["suite"] == suite and r.get("ms")]
        cases = list(dict.fromkeys((r["op"], r["shape"], r["dtype"]) for r in rows if r["ours"]))
        kinds = ("torch", "cupy", "liger")
        width = 0.8 / len(kinds)
        for i, kind in enumerate(kinds):
            xs, ys = [], []
            for j, case in enumerate(cases):
                same = [r for r in rows if (r["op"], r["shape"], r["dtype"]) == case]
                ours = next(r["ms"] for r in same if r["ours"])
                peers = [r["ms"] for r in same if peer_kind(r["impl"]) == kind]
                if peers:
                    xs.append(j + (i - (len(kinds) - 1) / 2) * width)
                    ys.append(min(peers) / ours)
            if xs:
                ax.bar(xs, ys, width, label=f"vs fastest {kind}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"{o} {s} {d}" for o, s, d in cases], rotation=30, ha="right", fontsize=6)
        ax.set_ylabel("x faster")
        ax.set_title(suite, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"{result['device']}: ours vs peers ({result['date'][:10]})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
