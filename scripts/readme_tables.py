"""Rewrite the README's benchmark tables from benchmarks/<device>.json (between the bench markers)."""
import json
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))
from cupy_kernels.bench.report import _peer_kind  # noqa: E402

result = json.loads((root / "benchmarks" / (sys.argv[1] if len(sys.argv) > 1 else "NVIDIA_H200.json")).read_text())
rows = result["rows"]


def peers(group):
    return {r["impl"]: r for r in rows if (r["suite"], r["op"], r["shape"], r["dtype"]) == group}


def fastest(p, is_peer):
    times = [(r["ms"], name) for name, r in p.items() if r["ms"] and not r["ours"] and is_peer(name)]
    return min(times) if times else None


def torch_peer(name):
    return _peer_kind(name) == "torch"


def cupy_peer(name):
    return _peer_kind(name) == "cupy"


lines = ["| suite | op | shape | dtype | ours ms | of copy | TFLOP/s | x fastest torch | x cupy |",
         "|---|---|---|---|---:|---:|---:|---:|---:|"]
for r in rows:
    if not r["ours"] or r["ms"] is None:
        continue
    p = peers((r["suite"], r["op"], r["shape"], r["dtype"]))
    cells = []
    for is_peer in (torch_peer, cupy_peer):
        best = fastest(p, is_peer)
        cells.append(f"{best[0] / r['ms']:.2f}" if best else "")
    frac = f"{r['copy_frac']:.0%}" if r.get("copy_frac") and not r.get("TFLOP/s") else ""
    tflops = f"{r['TFLOP/s']:.1f}" if r.get("TFLOP/s") else ""
    lines.append(f"| {r['suite']} | {r['op']} | {r['shape']} | {r['dtype']} | {r['ms']:.4f} | {frac} | {tflops} | "
                 f"{cells[0]} | {cells[1]} |")
lines.append("")
lines.append(f"({result['device']}; each suite's commit and date are in benchmarks/{result['device'].replace(' ', '_')}.md; "
             "x ... > 1: ours is that many times faster than the fastest torch formulation / CuPy's op.)")
table = "\n".join(lines)

ladder = ["| rung | ms | GB/s | of copy |", "|---|---:|---:|---:|"]
for r in rows:
    if r["suite"] == "reduce" and r["op"] == "sum" and r["shape"] == str(1 << 26) and (r["ours"] or r["impl"].startswith("ladder")):
        name = "vectorized (default)" if r["ours"] else r["impl"].removeprefix("ladder ")
        ladder.append(f"| {name} | {r['ms']:.4f} | {r['GB/s']:.0f} | {r['copy_frac']:.0%} |")
readme = (root / "README.md").read_text()
for marker, body in (("bench", table), ("ladder", "\n".join(ladder))):
    readme = re.sub(rf"<!-- {marker}:start -->.*?<!-- {marker}:end -->", f"<!-- {marker}:start -->\n{body}\n<!-- {marker}:end -->",
                    readme, flags=re.S)
(root / "README.md").write_text(readme)
