"""What packet capture costs a run: quickstart with and without `--capture hosts`, alternated.

    sudo .venv/bin/python benchmarks/capture_cost.py [--scenario quickstart] [--rounds 3] [--capture hosts]
        [--json]

Each round runs the scenario once without capture (the reference) and once with it, one right
after the other (which goes first alternates), so both see the same load from whatever else
runs on the machine. Printed per
round and as medians: step time p50 and p100, goodput fraction, the machine's CPU and fidelity.ok,
and the ratio of each captured figure to the reference of its own round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(scenario: str, out: Path, capture: str | None) -> dict:
    argv = [sys.executable, "-m", "mrclab", "run", scenario, "--out", str(out), "--json"]
    if capture:
        argv += ["--capture", capture]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mrclab run failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    doc = json.loads(done.stdout)
    s = doc["summary"]
    return {"step_p50_s": s["step_time_s"]["p50"], "step_p100_s": s["step_time_s"]["p100"],
            "goodput_fraction": s["goodput_fraction"], "cpu_busy_pct": doc["fidelity"]["cpu_busy_pct"],
            "fidelity_ok": doc["fidelity"]["ok"], "capture": doc.get("capture"), "duration_s": doc["duration_s"],
            "capture_bytes": sum(p.stat().st_size for p in (out / "capture").glob("*.pcapng")
                                 if p.name != "all.pcapng") if capture else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="scenarios/quickstart.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--capture", default="hosts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            if i % 2:  # alternate which goes first, so that a trend in the machine's load favours neither
                cap = run(args.scenario, Path(tmp) / f"cap{i}", args.capture)
                ref = run(args.scenario, Path(tmp) / f"ref{i}", None)
            else:
                ref = run(args.scenario, Path(tmp) / f"ref{i}", None)
                cap = run(args.scenario, Path(tmp) / f"cap{i}", args.capture)
            rounds.append({"reference": ref, "captured": cap,
                           "ratio": {k: cap[k] / ref[k] for k in ("step_p50_s", "step_p100_s", "goodput_fraction")}})
            if not args.json:
                print(f"round {i}: step p50 {ref['step_p50_s'] * 1e3:.0f} -> {cap['step_p50_s'] * 1e3:.0f} ms "
                      f"(x{rounds[-1]['ratio']['step_p50_s']:.2f}), p100 {ref['step_p100_s'] * 1e3:.0f} -> "
                      f"{cap['step_p100_s'] * 1e3:.0f} ms, goodput {ref['goodput_fraction']:.0%} -> "
                      f"{cap['goodput_fraction']:.0%}, CPU {ref['cpu_busy_pct']:.0f}% -> {cap['cpu_busy_pct']:.0f}%, "
                      f"fidelity ok {ref['fidelity_ok']} -> {cap['fidelity_ok']}; captured "
                      f"{cap['capture']['packets']} packets ({cap['capture_bytes'] / 2**20:.1f} MiB), "
                      f"{cap['capture']['dropped']} missed, capture CPU {cap['capture']['cpu_s']:.2f} s over "
                      f"{cap['duration_s']:.1f} s", flush=True)
    medians = {k: statistics.median(r["ratio"][k] for r in rounds) for k in rounds[0]["ratio"]}
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"rounds": rounds, "median_ratio": medians, "loadavg": load}, indent=2))
    else:
        print(f"median ratio captured/reference: step p50 x{medians['step_p50_s']:.2f}, "
              f"p100 x{medians['step_p100_s']:.2f}, goodput x{medians['goodput_fraction']:.2f} "
              f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")


if __name__ == "__main__":
    main()
