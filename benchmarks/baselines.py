"""MRC against the baselines on one permutation, as the MRC paper's Fig. 16 compares them: RoCE with 1 and
16 QPs per pair, MRC's selective repeat on one hashed path per QP, and MRC itself as the reference.

    sudo .venv/bin/python benchmarks/baselines.py [--scenario permutation] [--topology clos-1p-4l-4s]
                                                  [--seeds 1 2 3 4 5] [--steps 10]

On a multi-plane fabric one RoCE QP reaches one plane's share of the NIC at most; ``--topology
clos-1p-4l-4s`` gives every QP the whole NIC, as in the paper, so that hash collisions are what it measures.

Every row is a real lab run (``mrclab run --json``, one after another, never two at once); its figure is
the share of ideal goodput and the ratio to MRC's share with the same seed, measured in the same
invocation. A row that fails a message, or whose fidelity is not ok, says so: its ratio is then no result.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MRCLAB = [sys.executable, "-m", "mrclab"]
ROWS = (  # label, --set overrides
    ("mrc", ["transport=mrc"]),
    ("single-path 1 QP", ["transport=single-path", "workload.connections=1"]),
    ("roce 1 QP", ["transport=roce", "workload.connections=1"]),
    ("roce 16 QP", ["transport=roce", "workload.connections=16"]),
)


def run(scenario: str, seed: int, steps: int, overrides: list[str], topology: str | None) -> dict:
    sets = [f"seed={seed}", f"workload.steps={steps}", *overrides] + ([f"topology={topology}"] if topology else [])
    out = subprocess.run([*MRCLAB, "run", scenario, "--json", *(a for s in sets for a in ("--set", s))],
                         cwd=REPO, capture_output=True, text=True, check=False)
    if not out.stdout.strip():
        raise SystemExit(f"mrclab run {' '.join(sets)} printed nothing (exit {out.returncode}): {out.stderr[-400:]}")
    doc = json.loads(out.stdout)
    s = doc["summary"]
    return {"fraction": s["goodput_fraction"], "failed": s["messages"]["failed"], "fidelity": doc["fidelity"]["ok"],
            "timeouts": s["packets"]["timeouts"], "dir": doc.get("results_dir", "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="permutation")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--topology", help="a shipped topology in place of the scenario's")
    args = parser.parse_args()
    table: dict[str, list[dict]] = {label: [] for label, _ in ROWS}
    for seed in args.seeds:
        for label, overrides in ROWS:
            row = run(args.scenario, seed, args.steps, overrides, args.topology)
            table[label].append(row)
            print(f"seed {seed} {label:18} {row['fraction'] * 100:5.1f}% of ideal, failed {row['failed']}, "
                  f"timeouts {row['timeouts']}, fidelity {'ok' if row['fidelity'] else 'NOT ok'}", flush=True)
    reference = table["mrc"]
    print(f"\n{args.scenario} on {args.topology or 'its topology'}, {args.steps} steps, seeds "
          f"{' '.join(map(str, args.seeds))}")
    print(f"{'transport':18} {'share of ideal':>16} {'x mrc':>7} {'failed':>7} {'fidelity ok':>12}")
    for label, rows in table.items():
        ratios = [r["fraction"] / m["fraction"] for r, m in zip(rows, reference, strict=True) if m["fraction"]]
        print(f"{label:18} {statistics.mean(r['fraction'] for r in rows) * 100:15.1f}% "
              f"{statistics.mean(ratios):7.2f} {sum(r['failed'] for r in rows):7d} "
              f"{sum(r['fidelity'] for r in rows):>8d}/{len(rows)}")


if __name__ == "__main__":
    main()
