"""Issue 4's cells from a bench JSON (`bench --op softmax --op norm`): for each shape and op, ours as a fraction
of the 1 GB copy (the issue's measure: forward >= 90%, backward >= 85%), as a fraction of the floor row (a torch
op that moves the same bytes, computing nothing), and x the fastest torch row. Usage: issue4_table.py RUN.json"""
import json
import sys

from cupy_kernels.bench.report import _peer_kind
from cupy_kernels.bench.softmax import SHAPES

result = json.load(open(sys.argv[1]))
OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm")
cells = {}
for r in result["rows"]:
    cells.setdefault((r["op"], r["shape"], r["dtype"]), []).append(r)


def cell(op, shape, dtype):
    rows = cells.get((op, shape, dtype), [])
    ours = next((r for r in rows if r["ours"] and r["ms"]), None)
    if ours is None:
        return "–", None
    floor = min((r["ms"] for r in rows if r["impl"].startswith("floor") and r["ms"]), default=None)
    torch = min((r["ms"] for r in rows if _peer_kind(r["impl"]) == "torch" and r["ms"]), default=None)
    target = 0.85 if op.endswith("backward") else 0.90
    text = f"{ours['copy_frac']:.1%}{'' if ours['copy_frac'] >= target else '*'}"
    text += f" / {floor / ours['ms']:.1%}" if floor else ""
    text += f" ({torch / ours['ms']:.2f}x)" if torch else ""
    return text, ours["copy_frac"] >= target


print(f"{result['device']}, copy {result['copy_TBps']:.2f} TB/s, commit {result['commit']}, {result['date'][:16]}")
print("Each cell: of copy (* below the issue's target) / of the floor (same bytes, torch) (x fastest torch)")
print()
print("| shape | dtype | " + " | ".join(f"{op} fwd | {op} bwd" for op in OPS) + " |")
print("|---|---|" + "---|---|" * len(OPS))
met = total = 0
for shape, dtype in SHAPES:
    label = "x".join(map(str, shape))
    row = []
    for op in OPS:
        for name in (op, f"{op} backward"):
            text, ok = cell(name, label, dtype)
            row.append(text)
            if ok is not None and not name.startswith("log_softmax"):  # the issue names softmax, layer, rms
                met, total = met + ok, total + 1
    print(f"| {label} | {dtype} | " + " | ".join(row) + " |")
print()
print(f"Cells of softmax, layer_norm and rms_norm at the issue's target: {met} of {total}")
