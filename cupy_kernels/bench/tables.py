"""Markdown tables from benchmark rows, pure functions of the JSON (no GPU, no torch): the host and
first_call tables of benchmarks/<device>.md, and the README's summary (scripts/readme_tables.py)."""
from __future__ import annotations

import statistics

HOST = "host"
FIRST_CALL = "first_call"
ROW_SUITE_NAMES = (HOST, FIRST_CALL)

HOST_COLUMNS = (("ours-torch", "ours (torch)"), ("ours-cupy", "ours (CuPy)"), ("torch", "torch"), ("cupy", "CuPy"),
                ("liger", "Liger"))
KIND_TITLES = {
    "forward": "forward (eager calls; the inputs need no grad)",
    "autograd": "forward + backward through torch.autograd.grad (x, weight and bias require grad)",
    "module": "nn modules (no_grad: inference; forward+backward: grads of the input and the parameters)",
}


def peer_kind(name: str):
    """'torch' (torch's op or a torch formulation), 'cupy' (CuPy's op), 'liger' (Liger-Kernel), or None
    (ours, our variants, floors) for a device-suite impl label."""
    if name.startswith(("torch", "F.")) and "fill_" not in name:
        return "torch"
    if name == "cupy" or name.startswith("cupy."):
        return "cupy"
    if name.lower().startswith("liger"):
        return "liger"
    return None


def is_device_row(row: dict) -> bool:
    return row.get("suite") not in ROW_SUITE_NAMES


def _us(row) -> str:
    if row is None:
        return ""
    if row.get("us_per_call") is None:
        return "error" if row.get("error") else ""
    return f"{row['us_per_call']:.1f}"


def seconds(v) -> str:
    if v is None:
        return ""
    return f"{v:.3f}" if v < 1 else f"{v:.2f}"


def ratio(a, b, spec=".2f") -> str:
    return format(a / b, spec) if a and b else ""


def host_cases(rows) -> list[tuple[tuple, dict]]:
    """((kind, op, shape, dtype), {impl: row}) in order of first appearance, host rows only."""
    cases: dict[tuple, dict] = {}
    for r in rows:
        if r.get("suite") != HOST:
            continue
        key = (r.get("kind", "forward"), r["op"], r.get("shape", ""), r.get("dtype", ""))
        cases.setdefault(key, {})[r.get("impl")] = r
    return list(cases.items())


def host_tables(rows) -> list[str]:
    """One table per kind: op, shape, the per-call microseconds of each implementation, ours/torch."""
    cases = host_cases(rows)
    lines = []
    for kind in list(KIND_TITLES) + sorted({k[0] for k, _ in cases} - set(KIND_TITLES)):
        mine = [(key, impls) for key, impls in cases if key[0] == kind]
        if not mine:
            continue
        lines += ["", f"### {KIND_TITLES.get(kind, kind)}", "",
                  "| op | shape | " + " | ".join(title for _, title in HOST_COLUMNS) + " | ours/torch |",
                  "|---|---|" + "---:|" * (len(HOST_COLUMNS) + 1)]
        notes, errors = [], []
        for (_, op, shape, dtype), impls in mine:
            label = op if dtype in ("float32", "") else f"{op} {dtype}"
            ours, peer = impls.get("ours-torch"), impls.get("torch")
            cells = [_us(impls.get(impl)) for impl, _ in HOST_COLUMNS]
            r = ratio(ours and ours.get("us_per_call"), peer and peer.get("us_per_call"))
            lines.append(f"| {label} | {shape} | " + " | ".join(cells) + f" | {r} |")
            note = next((row["note"] for row in impls.values() if row.get("note")), "")
            if note:
                notes.append(f"- {label}: {note}")
            errors += [f"- {label}, {impl}: {row['error']}" for impl, row in impls.items() if row.get("error")]
        lines += ([""] + notes if notes else []) + (["", "Errors:"] + errors if errors else [])
    return lines


def first_call_cases(rows, dtypes=None) -> list[tuple[tuple, dict]]:
    """((op, dtype), {(impl, cache): row}) in order of first appearance, first_call rows only."""
    cases: dict[tuple, dict] = {}
    for r in rows:
        if r.get("suite") != FIRST_CALL or (dtypes and r.get("dtype") not in dtypes):
            continue
        cases.setdefault((r["op"], r.get("dtype", "")), {})[(r.get("impl", "ours"), r.get("cache"))] = r
    return list(cases.items())


FIRST_CALL_COLUMNS = ((("ours", "empty"), "ours, empty cache"), (("ours", "warm"), "ours, warm cache"),
                      (("torch", "empty"), "torch"), (("liger", "empty"), "Liger, empty cache"),
                      (("liger", "warm"), "Liger, warm cache"))


def first_call_table(rows, dtypes=None) -> list[str]:
    """op, dtype and the first call's seconds: ours with an empty and a warm cache, torch, Liger."""
    cases = first_call_cases(rows, dtypes)
    if not cases:
        return []
    show = [c for c in FIRST_CALL_COLUMNS if any(c[0] in found for _, found in cases)]
    lines = ["| op | dtype | " + " | ".join(title for _, title in show) + " |", "|---|---|" + "---:|" * len(show)]
    errors = []
    for (op, dtype), found in cases:
        cells = []
        for key, _ in show:
            row = found.get(key)
            cells.append("" if row is None else "error" if row.get("seconds") is None else seconds(row["seconds"]))
            if row is not None and row.get("error"):
                errors.append(f"- {op} {dtype}, {key[0]} ({key[1]} cache): {row['error']}")
        lines.append(f"| {op} | {dtype} | " + " | ".join(cells) + " |")
    imports = [r["import_seconds"] for _, found in cases for (impl, _), r in found.items()
               if impl == "ours" and r.get("import_seconds") is not None]
    if imports:
        median = seconds(statistics.median(imports))
        lines += ["", f"(import torch + cupy_kernels before the call, not counted: median {median} s)"]
    return lines + (["", "Errors:"] + errors if errors else [])


# ---- the README's summary

# (device suite, device op, preferred (shape, dtype) cases, the host case beside it: (op, kind) or None)
README_OPS = [
    ("reduce", "sum", [("268435456", "float32"), ("67108864", "float32")], None),
    ("reduce", "sum(axis=-1)", [("4096x4096", "float32"), ("32768x1024", "float16"), ("65536x128", "float32")],
     ("sum(axis=-1)", "forward")),
    ("reduce", "max(axis=-1)", [("4096x4096", "float32")], ("max(axis=-1)", "forward")),
    ("softmax", "softmax", [("4096x4096", "float32"), ("32768x1024", "float16"), ("1024x32768", "bfloat16")],
     ("softmax", "forward")),
    ("softmax", "log_softmax", [("4096x4096", "float32"), ("32768x1024", "float16")], ("log_softmax", "forward")),
    ("softmax", "softmax backward", [("4096x4096", "float32"), ("32768x1024", "float16")], ("softmax", "autograd")),
    ("norm", "layer_norm", [("4096x4096", "float32"), ("32768x1024", "float16"), ("8192x8192", "bfloat16")],
     ("layer_norm", "forward")),
    ("norm", "layer_norm backward", [("4096x4096", "float32"), ("32768x1024", "float16")], ("layer_norm", "autograd")),
    ("norm", "rms_norm", [("4096x4096", "float32"), ("32768x1024", "float16"), ("8192x8192", "bfloat16")],
     ("rms_norm", "forward")),
    ("norm", "rms_norm backward", [("4096x4096", "float32"), ("32768x1024", "float16")], ("rms_norm", "autograd")),
    ("timex", "timex forward", [("B=32 C=768 T=768", "float32"), ("B=32 C=768 T=768", "bfloat16"),
                                ("B=3 C=768 T=8192", "float32")], ("timex", "forward")),
    ("timex", "timex forward+backward", [("B=32 C=768 T=768", "float32"), ("B=32 C=768 T=768", "bfloat16")],
     ("timex", "autograd")),
    ("pad", "pad constant", [("32x3x1024x1024 +64 (H, W)", "float32"), ("32x1024x1024x3 (NHWC) +64 (H, W)", "float32")],
     ("pad constant", "forward")),
    ("pad", "pad reflect", [("32x3x1024x1024 +64 (H, W)", "float32")], ("pad reflect", "forward")),
    ("pad", "pad brick", [("48x32 -> 4144x8224", "float32")], None),
    ("square_matmul", "square_matmul_", [("65536x4096 @ 4096x4096", "bfloat16"), ("65536x1024 @ 1024x1024", "float32"),
                                         ("65536x4096 @ 4096x4096", "float16")], ("square_matmul_", "forward")),
]
FALLBACK_CASES = 2


def device_groups(rows) -> dict[tuple, dict]:
    """(suite, op, shape, dtype) -> {impl: row} over the device rows."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        if is_device_row(r):
            groups.setdefault((r["suite"], r["op"], r["shape"], r["dtype"]), {})[r["impl"]] = r
    return groups


def pick_cases(groups, suite: str, op: str, preferred) -> list[tuple]:
    """The preferred (shape, dtype) cases the JSON has; else its first FALLBACK_CASES cases of the op."""
    found = [(suite, op, s, d) for s, d in preferred if (suite, op, s, d) in groups]
    if found:
        return found
    return [k for k in groups if k[:2] == (suite, op)][:FALLBACK_CASES]


def fastest(group: dict, kind: str):
    times = [r["ms"] for name, r in group.items() if r.get("ms") and not r.get("ours") and peer_kind(name) == kind]
    return min(times) if times else None


def readme_summary(rows) -> list[str]:
    """Device time of ours against the fastest torch / CuPy / Liger row (2-3 cases an op), and beside the
    first case of each op the per-call wall time of ours and torch's op on the host suite's small input."""
    groups = device_groups(rows)
    host = {(key[1], key[0]): impls for key, impls in host_cases(rows)}
    lines = ["| op | shape | dtype | ours ms | x torch | x CuPy | x Liger | per call: ours / torch us (small input) |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for suite, op, preferred, host_key in README_OPS:
        for i, key in enumerate(pick_cases(groups, suite, op, preferred)):
            group = groups[key]
            ours = next((r for r in group.values() if r.get("ours")), None)
            if ours is None or not ours.get("ms"):
                continue
            cells = [ratio(fastest(group, kind), ours["ms"]) for kind in ("torch", "cupy", "liger")]
            per_call = ""
            if i == 0 and host_key in host:
                h = host[host_key]
                ours_h, torch_h = h.get("ours-torch"), h.get("torch")
                if ours_h and ours_h.get("us_per_call") is not None:
                    per_call = (f"{_us(ours_h)} / {_us(torch_h) or '-'}"
                                f"{' fwd+bwd' if host_key[1] == 'autograd' else ''} ({ours_h.get('shape', '')})")
            lines.append(f"| {op} | {key[2]} | {key[3]} | {ours['ms']:.4f} | " + " | ".join(cells) + f" | {per_call} |")
    return lines


def reduce_ladder(rows) -> list[str]:
    """The original articles' full-sum ladder at 2^26 float32 (the README's ladder table)."""
    lines = ["| rung | ms | GB/s | of copy |", "|---|---:|---:|---:|"]
    for r in rows:
        if (r.get("suite"), r.get("op"), r.get("shape")) == ("reduce", "sum", str(1 << 26)) and r.get("ms") and (
                r.get("ours") or r["impl"].startswith("ladder")):
            name = "vectorized (default)" if r["ours"] else r["impl"].removeprefix("ladder ")
            lines.append(f"| {name} | {r['ms']:.4f} | {r.get('GB/s', 0):.0f} | {r.get('copy_frac', 0):.0%} |")
    return lines if len(lines) > 2 else []
