"""Run suites, print the table, write benchmarks/<device>.{json,md,png}."""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from pathlib import Path

from . import load_suites
from .timing import Timer, copy_bandwidth


def _commit() -> str:
    if os.environ.get("CUPY_KERNELS_COMMIT"):
        return os.environ["CUPY_KERNELS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:
        return "unknown"


def run(ops=None, quick=False, out_dir="benchmarks", progress=True) -> dict:
    import cupy

    from .._runtime import current

    suites = load_suites()
    names = list(suites) if not ops else ops
    unknown = [n for n in names if n not in suites]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown}; known: {', '.join(suites)}")
    timer = Timer()
    props = current()
    copy_bw = copy_bandwidth(timer)
    print(f"{props.name}: device-to-device copy {copy_bw / 1e12:.2f} TB/s (read + written)")
    rows = []
    for name in names:
        groups = suites[name](quick)
        try:
            from tqdm import tqdm

            groups = tqdm(groups, desc=name, disable=not progress, leave=False)
        except ImportError:
            pass
        for g in groups:
            times, host = {}, {}
            for label, fn in g.impls.items():
                try:
                    times[label] = timer(fn)
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
        if out_dir:  # after each suite, so a run cut short keeps what it measured
            write(_result(props, copy_bw, [r for r in rows if r["suite"] == name]), Path(out_dir))
    result = _result(props, copy_bw, rows)
    print(markdown(result))
    return result


def _result(props, copy_bw, rows) -> dict:
    import cupy

    return dict(device=props.name, date=datetime.datetime.now().isoformat(timespec="seconds"), commit=_commit(),
                copy_TBps=copy_bw / 1e12, cupy=cupy.__version__, rows=rows)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def write(result: dict, out_dir: Path) -> None:
    """Merge into benchmarks/<device>.json (rows of the suites run replace their old rows), then
    rewrite the .md and .png from the merged set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{_slug(result['device'])}.json"
    stamp = lambda rows, res: [{"commit": res["commit"], "date": res["date"], **r} for r in rows]  # noqa: E731
    result = dict(result, rows=stamp(result["rows"], result))
    if path.exists():
        old = json.loads(path.read_text())
        ran = {r["suite"] for r in result["rows"]}
        kept = stamp([r for r in old.get("rows", []) if r["suite"] not in ran], old)
        result = dict(result, rows=kept + result["rows"])
    path.write_text(json.dumps(result, indent=1))
    path.with_suffix(".md").write_text(markdown(result))
    try:
        plot(result, path.with_suffix(".png"))
    except ImportError:
        pass


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def markdown(result: dict) -> str:
    lines = [f"# {result['device']}", "",
             f"Last run {result['date']}, commit {result['commit']} (each suite names its own), CuPy {result.get('cupy', '?')}; device-to-device copy "
             f"{result['copy_TBps']:.2f} TB/s (read + written). Times are medians of device events after an "
             "L2 flush and a 0.5 ms device-side wait (the host's enqueue time stays out; the JSON keeps it per "
             "row as host_ms); `x ours` > 1 means ours is that many times faster.", ""]
    suite = None
    for r in result["rows"]:
        if r["suite"] != suite:
            suite = r["suite"]
            when = f" (commit {r['commit']}, {r['date']})" if "commit" in r else ""
            lines += ["", f"## {suite}{when}", "", "| op | shape | dtype | impl | ms | GB/s | of copy | TFLOP/s | x ours |",
                      "|---|---|---|---|---:|---:|---:|---:|---:|"]
        impl = f"**{r['impl']}**" if r["ours"] else r["impl"]
        lines.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {impl} | {_fmt(r['ms'], '.4f')} | "
                     f"{_fmt(r.get('GB/s'), '.0f')} | {_fmt(r.get('copy_frac'), '.1%')} | "
                     f"{_fmt(r.get('TFLOP/s'), '.1f')} | {_fmt(None if r['ours'] else r.get('ours_speedup'), '.2f')} |")
    return "\n".join(lines) + "\n"


def _peer_kind(name: str):
    """'torch' (torch's op or a torch formulation), 'cupy' (CuPy's op), or None (ours, our variants, floors)."""
    if name.startswith(("torch", "F.")) and "fill_" not in name:
        return "torch"
    if name == "cupy" or name.startswith("cupy."):
        return "cupy"
    return None


def plot(result: dict, path: Path) -> None:
    """One panel per suite: how many times faster ours is than the fastest torch formulation and than
    CuPy's op, per case (log scale; above 1 = ours faster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(dict.fromkeys(r["suite"] for r in result["rows"]))
    fig, axes = plt.subplots(len(suites), 1, figsize=(12, 3.2 * len(suites)), squeeze=False)
    for ax, suite in zip(axes[:, 0], suites):
        rows = [r for r in result["rows"] if r["suite"] == suite and r["ms"]]
        cases = list(dict.fromkeys((r["op"], r["shape"], r["dtype"]) for r in rows if r["ours"]))
        for i, kind in enumerate(("torch", "cupy")):
            xs, ys = [], []
            for j, case in enumerate(cases):
                same = [r for r in rows if (r["op"], r["shape"], r["dtype"]) == case]
                ours = next(r["ms"] for r in same if r["ours"])
                peers = [r["ms"] for r in same if _peer_kind(r["impl"]) == kind]
                if peers:
                    xs.append(j + (i - 0.5) * 0.4)
                    ys.append(min(peers) / ours)
            if xs:
                ax.bar(xs, ys, 0.4, label=f"vs fastest {kind}")
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
