"""Rewrite the README's benchmark tables from benchmarks/<device>.json (between the bench markers)."""
import json
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
result = json.loads((root / "benchmarks" / (sys.argv[1] if len(sys.argv) > 1 else "NVIDIA_H200.json")).read_text())
rows = result["rows"]


def peers(group):
    return {r["impl"]: r for r in rows if (r["suite"], r["op"], r["shape"], r["dtype"]) == group}


lines = ["| suite | op | shape | dtype | ours ms | of copy | TFLOP/s | x torch | x cupy |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
for r in rows:
    if not r["ours"] or r["ms"] is None:
        continue
    p = peers((r["suite"], r["op"], r["shape"], r["dtype"]))
    speed = {name: f"{p[name]['ours_speedup']:.2f}" for name in ("torch", "cupy") if p.get(name, {}).get("ours_speedup")}
    lines.append(f"| {r['suite']} | {r['op']} | {r['shape']} | {r['dtype']} | {r['ms']:.4f} | "
                 f"{r['copy_frac']:.0%} | {r.get('TFLOP/s', 0) or '':{''}} | {speed.get('torch', '')} | {speed.get('cupy', '')} |"
                 if r.get("copy_frac") else
                 f"| {r['suite']} | {r['op']} | {r['shape']} | {r['dtype']} | {r['ms']:.4f} |  | "
                 f"{r.get('TFLOP/s', 0):.1f} | {speed.get('torch', '')} | {speed.get('cupy', '')} |")
lines.append("")
lines.append(f"({result['device']}, {result['date'][:10]}, commit {result['commit']}, copy {result['copy_TBps']:.2f} TB/s; "
             "x torch / x cupy > 1: ours is faster.)")
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
