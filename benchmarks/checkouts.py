"""A scenario on two checkouts of mrclab, interleaved: what a change does to the agents' cost and the run's figures.

    sudo .venv/bin/python benchmarks/checkouts.py --reference /path/to/other/checkout [--rounds 5]
        [--scenario scenarios/quickstart.yaml] [--set KEY=VALUE ...] [--reference-set KEY=VALUE ...] [--pure]

Each round runs the scenario once with the reference checkout's own ``.venv/bin/mrclab`` and once with this
one's, in turn (reference first in odd rounds, this checkout first in even ones), under the lab lock
(``/tmp/mrclab-lab.lock``) for each run, so a machine that slows down in the middle slows both. Each checkout
runs its own build (``--pure``: both pure); ``--reference-set`` overrides apply to the reference's runs alone
(the reference may then be this checkout: an option against its default). Printed per figure: each side's
median and range, and the median of this / reference taken round by round. Figures: the agents' CPU s per
delivered MiB from /proc (all of it, and less the softirq charged to them), the machine's softirq per MiB, the
agents' wake-ups and SACKs per MiB, goodput, avoid_s (the worst of the run's cuts), RTT p99, failed messages,
and whether fidelity was ok.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
LOCK = "/tmp/mrclab-lab.lock"
BUSY_RETRIES, BUSY_WAIT_S = 30, 10.0
FIGURES = {
    "agents CPU s/MiB": lambda d: d["summary"]["cpu_s_per_mib"]["agents"],
    "... less softirq": lambda d: d["summary"]["cpu_s_per_mib"]["agents_less_softirq"],
    "softirq s/MiB": lambda d: d["summary"]["cpu_s_per_mib"]["softirq"],
    "wake-ups/MiB": lambda d: d["summary"]["cpu_s_per_mib"]["wakeups_per_mib"],
    "SACKs/MiB": lambda d: d["summary"]["packets"]["sacks"] / d["summary"]["cpu_s_per_mib"]["delivered_mib"],
    "goodput fraction": lambda d: d["summary"]["goodput_fraction"],
    "avoid_s": lambda d: max((e.get("avoid_s") or 0.0 for e in d["events"]), default=0.0),
    "RTT p99 s": lambda d: d["summary"]["rtt_p99_s"],
    "failed messages": lambda d: d["summary"]["messages"]["failed"],
    "fidelity ok": lambda d: float(bool(d["fidelity"]["ok"])),
}


def run_in(checkout: Path, scenario: str, overrides: list[str], *, pure: bool = False, retries: int = BUSY_RETRIES,
           what: str = "checkouts.py") -> dict:
    """results.json of `scenario` run by the checkout's own ``.venv/bin/mrclab`` under the lab lock, waiting out a
    lab that did not take the lock."""
    out = Path(tempfile.mkdtemp(prefix="checkouts-")) / "run"
    env = {k: v for k, v in os.environ.items() if k != "MRCLAB_PURE"} | ({"MRCLAB_PURE": "1"} if pure else {})
    argv = ["flock", LOCK, str(checkout / ".venv/bin/mrclab"), "run", scenario, "--out", str(out)]
    for item in overrides:
        argv += ["--set", item]
    results = out / "results.json"
    for _ in range(retries):
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
        if results.exists() or "another mrclab run is live" not in done.stderr:
            break
        time.sleep(BUSY_WAIT_S)  # a lab that did not take the lock: wait for it rather than share the CPU
    if not results.exists():
        raise SystemExit(f"{what}: {checkout} did not run: {done.stderr.strip()[-500:]}")
    return json.loads(results.read_text())


def run(checkout: Path, scenario: str, overrides: list[str], pure: bool) -> dict:
    doc = run_in(checkout, scenario, overrides, pure=pure)
    return {name: figure(doc) for name, figure in FIGURES.items()} | {"build": doc["build"]["transport"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="the other checkout (with its own .venv)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scenario", default="scenarios/quickstart.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--reference-set", dest="reference_overrides", action="append", default=[])
    parser.add_argument("--pure", action="store_true", help="both checkouts on their pure-Python build")
    args = parser.parse_args()
    sides = {"reference": args.reference.resolve(), "this": HERE}
    for path in sides.values():
        if not (path / ".venv/bin/mrclab").exists():
            raise SystemExit(f"checkouts.py: {path} has no .venv/bin/mrclab (run vagrant/provision.sh there)")
    load = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            scenario = str((sides[side] / args.scenario) if not Path(args.scenario).is_absolute() else args.scenario)
            extra = args.reference_overrides if side == "reference" else []
            runs[side].append(run(sides[side], scenario, args.overrides + extra, args.pure))
            print(f"round {r + 1} {side}: " + ", ".join(f"{k} {v}" for k, v in runs[side][-1].items()),
                  file=sys.stderr)
    print(f"{args.scenario} {' '.join(args.overrides)}: {args.rounds} interleaved rounds, reference "
          f"{sides['reference']} {' '.join(args.reference_overrides)} ({runs['reference'][0]['build']}), this {HERE} "
          f"({runs['this'][0]['build']}); "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'figure':20s} {'reference: median (range)':>30s} {'this: median (range)':>30s} {'this/ref':>9s}")
    for name in FIGURES:
        cells = []
        for side in sides:
            values = [run_[name] for run_ in runs[side]]
            cells.append(f"{_f(statistics.median(values))} ({_f(min(values))}-{_f(max(values))})")
        ratios = [t[name] / ref[name] for t, ref in zip(runs["this"], runs["reference"], strict=True) if ref[name]]
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(f"{name:20s} {cells[0]:>30s} {cells[1]:>30s} {ratio:>9s}")


def _f(value: float) -> str:
    return f"{value:.4g}"


if __name__ == "__main__":
    main()
