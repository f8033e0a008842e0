"""The transport's two builds side by side (mrclab/build.py): compiled with mypyc against pure Python.

    .venv/bin/python benchmarks/builds.py [--rounds 5] [--agents] [--lab]

Each round runs every measure once per build, interleaved, each in a fresh process (MRCLAB_PURE=1 for
pure), so a machine that slows down in the middle slows both. The reference is the pure build measured in
the same run; the figure printed is the median of each build and compiled/pure.

- state machine: two Connections handing datagrams across in one process (benchmarks/transport_sim.py),
  DATA packets per second at 8192-byte MSS, a SACK every 4 packets;
- simulator: the same transfer through the discrete-event 4-plane Clos (transport/sim.py), packets/s;
- with ``--agents`` (root): eight agent pairs on veth (benchmarks/agent_pairs.py), unpaced, CPU s per
  delivered MiB (both ends, from /proc) and wake-ups per MiB;
- with ``--lab`` (root): quickstart (`mrclab run`), its agents' CPU s per delivered MiB from /proc (all,
  and less the softirq charged to them), wake-ups per MiB, goodput and avoid_s.
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

HERE = Path(__file__).resolve().parent
PY = sys.executable
IN_MEMORY = f"""
import json, sys
sys.path.insert(0, {str(HERE)!r})
from transport_sim import TransportConfig, simulated, state_machine
from mrclab import build
print(json.dumps({{"build": build.running()["build"],
                  "state machine (packets/s)": state_machine(60_000, TransportConfig(mss=8192, sack_every=4,
                                                                                          cc_init_window=1 << 20)),
                  "simulator (packets/s)": simulated(20_000, TransportConfig(mss=8192))}}))
"""


def quickstart(env: dict) -> dict:
    out_dir = Path(tempfile.mkdtemp(prefix="builds-")) / "run"
    subprocess.run([PY, "-m", "mrclab", "run", "scenarios/quickstart.yaml", "--out", str(out_dir)], env=env,
                   cwd=HERE.parent, capture_output=True, check=False)
    doc = json.loads((out_dir / "results.json").read_text())
    cost, summary = doc["summary"]["cpu_s_per_mib"], doc["summary"]
    if doc["build"]["transport"] != ("pure" if env.get("MRCLAB_PURE") == "1" else "compiled"):
        raise SystemExit(f"builds.py: quickstart's agents ran the {doc['build']['transport']} build")
    return {"quickstart agents (CPU s/MiB)": cost["agents"], "... less softirq": cost["agents_less_softirq"],
            "... wake-ups/MiB": cost["wakeups_per_mib"], "... goodput fraction": summary["goodput_fraction"],
            "... avoid_s": max((e.get("avoid_s") or 0.0 for e in doc["events"]), default=0.0)}


def measure(pure: bool, agents: bool, lab: bool) -> dict:
    env = {**os.environ, "MRCLAB_PURE": "1"} if pure else {k: v for k, v in os.environ.items() if k != "MRCLAB_PURE"}
    out = json.loads(subprocess.run([PY, "-c", IN_MEMORY], env=env, capture_output=True, text=True,
                                    check=True).stdout)
    if agents:
        pairs = json.loads(subprocess.run([PY, str(HERE / "agent_pairs.py"), "--json"], env=env, capture_output=True,
                                          text=True, check=True).stdout)
        out["agent pairs (CPU s/MiB)"] = pairs["cpu_s_per_mib"]
        out["agent pairs (wake-ups/MiB)"] = pairs["wakeups_per_mib"]
    if lab:
        out.update(quickstart(env))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--agents", action="store_true", help="also eight agent pairs on veth (root)")
    parser.add_argument("--lab", action="store_true", help="also quickstart's agents (root)")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"pure": [], "compiled": []}
    for _ in range(args.rounds):
        for kind in runs:
            result = measure(kind == "pure", args.agents, args.lab)
            if result.pop("build") != kind:
                raise SystemExit(f"builds.py: the {kind} build did not run (see `mrclab check`; `make build`)")
            runs[kind].append(result)
    print(f"{'measure':28s} {'pure':>12s} {'compiled':>12s} {'compiled/pure':>14s}   (medians of {args.rounds})")
    for key in runs["pure"][0]:
        pure, compiled = (statistics.median(r[key] for r in runs[kind]) for kind in ("pure", "compiled"))
        print(f"{key:28s} {_figure(pure):>12s} {_figure(compiled):>12s} {compiled / pure:14.2f}")


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


if __name__ == "__main__":
    main()
