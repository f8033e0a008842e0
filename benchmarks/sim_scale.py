"""How the simulator engine scales: a permutation with a spine failure mid-run, from 16 x 4 to 1024 x 8.

    .venv/bin/python benchmarks/sim_scale.py [--shapes 16x4,64x4,256x8,1024x8] [--builds compiled,pure]
                                             [--rate 400Gbit] [--message 1MiB] [--steps 4]

Each shape (hosts x planes) is a two-tier Clos with as many spines per plane as hosts per leaf (no
oversubscription), every link at ``--rate``, 1 MiB switch queues; every host sends ``--message`` to its
permutation peer per step, and spine p0s0 goes down at step 2 and stays down. Each run is `mrclab run
--engine sim` in a fresh process, with the transport compiled or pure (MRCLAB_PURE=1). Printed per run:
the simulator's own CPU seconds, simulated seconds, packet-hops (DATA and control packets, summed over
link directions), events, CPU microseconds per packet-hop and CPU seconds per simulated millisecond. The
reference is the smallest shape of the same build, measured in the same run: its CPU per packet-hop, and
each shape's ratio to it.

First, the discrete-event network alone (``--des``, in this process): CPU per packet-hop of datagrams sent
down a 4-link path with no transport at either end, and CPU per scheduled-and-run event with 10^3 to 10^7
events pending in the queue (the reference: 10^3 pending).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mrclab.transport.sim import Link, Network  # noqa: E402


def des_hop_us(datagrams: int = 200_000) -> float:
    """CPU microseconds per packet-hop of the network alone: 9000-byte datagrams down four 400 Gbit links."""
    path = [Link(f"l{i}", 400e9, 1e-6, queue=1 << 30) for i in range(4)]
    net = Network(lambda a, b, ev: path, seed=1)
    datagram = bytes(9000)
    start = time.process_time()
    for i in range(datagrams):
        net._hop(datagram, path, 0, ("nobody", 0))
        if i % 1000 == 999:
            net.run()
    net.run()
    return (time.process_time() - start) / (datagrams * 4) * 1e6


def queue_us(pending: int, ops: int = 200_000) -> float:
    """CPU microseconds to schedule and run one event with ``pending`` events waiting in the queue."""
    net = Network(lambda a, b, ev: [], seed=1)
    for i in range(pending):
        net.at(1.0 + i * 1e-9, int)
    start = time.process_time()
    for i in range(ops):
        net.at(i * 1e-12, int)
    net.run(until=0.5)
    return (time.process_time() - start) / ops * 1e6


def shape(text: str) -> tuple[int, int, int, int]:
    """hosts x planes -> (planes, leaves, spines, hosts per leaf): leaves and hosts per leaf near the root."""
    hosts, planes = (int(n) for n in text.split("x"))
    per_leaf = 1 << ((hosts.bit_length() - 1 + 1) // 2)
    return planes, hosts // per_leaf, per_leaf, per_leaf


def scenario(text: str, rate: str, message: str, steps: int) -> dict:
    planes, leaves, spines, per_leaf = shape(text)
    return {"name": f"scale-{text}", "engine": "sim", "duration_limit": "60s", "seed": 1,
            "topology": {"name": f"clos-{text}", "planes": planes, "leaves": leaves, "spines": spines,
                         "hosts_per_leaf": per_leaf,
                         "links": {"host_rate": rate, "fabric_rate": rate, "queue": "1MiB", "mtu": 9000}},
            "workload": {"pattern": "permutation", "hosts": "all", "message": message, "steps": steps},
            "events": [{"at_step": min(2, steps - 1), "action": "switch_down", "target": "p0s0"}],
            "expect": {"failed_messages": 0}}


def run(text: str, build: str, args: argparse.Namespace, folder: Path) -> dict:
    spec = folder / f"scale-{text}.yaml"
    spec.write_text(yaml.safe_dump(scenario(text, args.rate, args.message, args.steps)))
    out = folder / f"{text}-{build}"
    env = {**os.environ, **({"MRCLAB_PURE": "1"} if build == "pure" else {})}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mrclab", "run", str(spec), "--out", str(out), "--json"], cwd=REPO,
                          env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if not (out / "results.json").is_file():
        raise SystemExit(f"sim_scale.py: {text} ({build}) left no results: {done.stderr.strip()[-300:]}")
    doc = json.loads((out / "results.json").read_text())
    fid = doc["fidelity"]
    if fid["build"] != build:
        raise SystemExit(f"sim_scale.py: the {build} run ran the {fid['build']} build")
    hops = sum(row["tx_packets"] for row in doc["links"])
    return {"shape": text, "build": build, "status": doc["status"], "failed": doc["summary"]["messages"]["failed"],
            "passed": all(c["ok"] for c in doc["expectations"]), "goodput_fraction": doc["summary"]["goodput_fraction"],
            "cpu_s": fid["cpu_s"], "wall_s": round(wall, 1), "simulated_s": fid["simulated_s"], "hops": hops,
            "events": fid["events"], "us_per_hop": round(fid["cpu_s"] / hops * 1e6, 2),
            "cpu_s_per_simulated_ms": round(fid["cpu_s"] / fid["simulated_s"] / 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16x4,64x4,256x8,1024x8")
    parser.add_argument("--builds", default="compiled,pure")
    parser.add_argument("--rate", default="400Gbit")
    parser.add_argument("--message", default="1MiB")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--des", action="store_true", help="Also measure the discrete-event network alone.")
    args = parser.parse_args()
    if args.des:
        print(f"network alone: {des_hop_us():.2f} CPU us per packet-hop", flush=True)
        reference = queue_us(1000)
        for pending in (1000, 100_000, 10_000_000):
            cost = reference if pending == 1000 else queue_us(pending)
            print(f"event queue with {pending:,} pending: {cost:.2f} CPU us per event ({cost / reference:.2f}x)",
                  flush=True)
    folder = Path(tempfile.mkdtemp(prefix="sim-scale-"))
    rows = []
    for build in args.builds.split(","):
        for text in args.shapes.split(","):
            row = run(text, build, args, folder)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| hosts x planes | build | passed | goodput fraction | simulated | CPU | packet-hops | events | "
          "CPU us/hop (x smallest) | CPU s per simulated ms |\n|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        ref = next(r for r in rows if r["build"] == row["build"])
        print(f"| {row['shape']} | {row['build']} | {'yes' if row['passed'] else 'NO'} | {row['goodput_fraction']} | "
              f"{row['simulated_s'] * 1000:.2f} ms | {row['cpu_s']:.1f} s | {row['hops']:,} | {row['events']:,} | "
              f"{row['us_per_hop']} ({row['us_per_hop'] / ref['us_per_hop']:.2f}) | {row['cpu_s_per_simulated_ms']} |")
    print(f"\nruns in {folder}")


if __name__ == "__main__":
    main()
