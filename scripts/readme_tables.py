"""Print the README's performance tables from benchmarks/<device>.json as markdown, each between the
README's markers (paste a block over the one of the same name):
  bench       device time of ours against the fastest torch / CuPy / Liger row, 2-3 cases an op, with the
              per-call wall time (host suite) of ours and torch beside each op's first case;
  first_call  the first call of a fresh process, empty and warm cache (float32 by default);
  ladder      the original articles' full-sum ladder (reduce suite).

  python scripts/readme_tables.py [benchmarks/NVIDIA_H200.json] [--dtype float32]
A bare file name is looked up in benchmarks/."""
import argparse
import json
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root))
from cupy_kernels.bench.tables import first_call_table, readme_summary, reduce_ladder  # noqa: E402


def block(marker: str, lines: list, footer: str = "") -> str:
    body = "\n".join(lines + ([footer] if footer else []))
    return f"<!-- {marker}:start -->\n{body}\n<!-- {marker}:end -->"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", default="NVIDIA_H200.json")
    parser.add_argument("--dtype", action="append", help="first_call dtypes shown (default float32)")
    args = parser.parse_args(argv)
    path = Path(args.json)
    if not path.exists():
        path = root / "benchmarks" / args.json
    result = json.loads(path.read_text())
    rows = result["rows"]
    device = result["device"]
    blocks = []
    summary = readme_summary(rows)
    if len(summary) > 2:
        blocks.append(block("bench", summary, "\n" + (
            f"({device}; each suite's commit and date are in benchmarks/{path.name.removesuffix('.json')}.md. "
            "x torch / x CuPy / x Liger > 1: ours takes that many times less device time than the fastest torch "
            "formulation / CuPy's op / Liger-Kernel. Per call: wall time of eager calls back to back on the small "
            "input named, ours on torch tensors against torch's op; beside a backward row, forward + backward "
            "through torch.autograd.grad.)")))
    first = first_call_table(rows, tuple(args.dtype or ("float32",)))
    if first:
        blocks.append(block("first_call", first, "\n" + (
            f"({device}; seconds from the first call to its result in a fresh process, after the imports and "
            "the input; empty: new kernel cache directories; warm: a second process on the same directories.)")))
    ladder = reduce_ladder(rows)
    if ladder:
        blocks.append(block("ladder", ladder))
    if not blocks:
        print(f"{path}: no rows for the README's tables", file=sys.stderr)
        return 1
    print("\n\n".join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
