"""Compare benchmark runs: ours against the fastest torch row, case by case, across JSON results.

Prints ours ms in each run, the spread between runs, the best run's fraction of copy and x torch (worst run).
Usage: python scripts/bench_spread.py A.json B.json ...   (JSON files from `python -m cupy_kernels bench --out DIR`)"""
import json
import sys

runs = [json.load(open(p)) for p in sys.argv[1:]]
cases = {}
for i, res in enumerate(runs):
    for r in res["rows"]:
        c = cases.setdefault((r["suite"], r["op"], r["shape"], r["dtype"]), {"ours": [None] * len(runs), "torch": [None] * len(runs)})
        if r["ours"]:
            c["ours"][i] = (r["ms"], r.get("copy_frac"), r.get("host_ms"))
        elif r["impl"].startswith("torch") and r["ms"] and "formulation" not in r["impl"]:
            c["torch"][i] = min(r["ms"], c["torch"][i] or 1e9)
print("| op | shape | dtype | ours ms per run | spread | of copy (best) | torch ms | x torch (worst run) | host ms |")
print("|---|---|---|---|---:|---:|---:|---:|---:|")
for (suite, op, shape, dtype), c in cases.items():
    ours = [o for o in c["ours"] if o and o[0]]
    if not ours:
        continue
    ms = [o[0] for o in ours]
    best = min(ours)
    torch_ms = [t for t in c["torch"] if t]
    xt = f"{min(t / m for t, m in zip(c['torch'], [o and o[0] for o in c['ours']]) if t and m):.2f}" if torch_ms else ""
    print(f"| {op} | {shape} | {dtype} | {' / '.join(f'{m:.4f}' for m in ms)} | {max(ms) / min(ms) - 1:.1%} | "
          f"{best[1]:.0%} | {min(torch_ms) if torch_ms else float('nan'):.4f} | {xt} | {best[2] or 0:.3f} |")
