"""How large a lab this machine emulates faithfully: quickstart's workload and link cut stepped over hosts x planes.

    sudo .venv/bin/python benchmarks/lab_scale.py [--shapes 8x4,16x4,16x8,24x4,32x4] [--rate 25Mbit]
        [--reference /path/to/other/checkout] [--rounds 1]

Each shape is quickstart (ring all-reduce of 1 MiB messages over every host, 30 steps, a plane-0 leaf-spine
link cut at step 8 and mended at step 20) on a Clos of 4 leaves and 4 spines per plane, with H/4 hosts per
leaf, P planes and every link at ``--rate`` (64 KiB queues, MTU 9000), on Linux routers. Shapes run in the
order given, each under the lab lock; with ``--reference``, each shape also runs on that checkout right
after this one's (its own ``.venv``), so the two are compared on a machine in the same state. Printed per run:
goodput (of ideal), step p50, the emulator's share of the RTT, machine CPU, agents' CPU s per MiB, wake-ups
per MiB, failed messages and the fidelity verdict; last, the largest shape whose every run had fidelity ok.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkouts import run_in  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
BUSY_RETRIES = 60  # shapes that take long: a lab beside it may keep the machine longer


def topology(hosts: int, planes: int, rate: str) -> str:
    if hosts % 4:
        raise SystemExit(f"lab_scale: {hosts} hosts do not spread over 4 leaves")
    return (f"topology={{name: clos-{planes}p-{hosts}h, planes: {planes}, leaves: 4, spines: 4, "
            f"hosts_per_leaf: {hosts // 4}, links: {{host_rate: {rate}, fabric_rate: {rate}, queue: 64KiB, "
            f"mtu: 9000}}}}")


def run(checkout: Path, hosts: int, planes: int, rate: str) -> dict:
    d = run_in(checkout, "scenarios/quickstart.yaml", [topology(hosts, planes, rate)], retries=BUSY_RETRIES,
               what=f"lab_scale: {hosts}x{planes}")
    s, f = d["summary"], d["fidelity"]
    latency = f.get("latency") or {}
    share = latency["emulator_s"] / latency["rtt_mean_s"] if latency.get("rtt_mean_s") else None
    return {"goodput": s["goodput_fraction"], "step_p50_ms": 1000 * (s["step_time_s"] or {}).get("p50", 0.0),
            "emulator_share": share, "cpu_pct": f["cpu_busy_pct"], "agents_s_per_mib": s["cpu_s_per_mib"]["agents"],
            "wakeups_per_mib": s["cpu_s_per_mib"]["wakeups_per_mib"], "failed": s["messages"]["failed"],
            "ok": bool(f["ok"]), "why": "; ".join(f.get("notes") or [])[:160], "build": d["build"]["transport"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8x4,16x4,16x8,24x4,32x4", help="HOSTSxPLANES, comma-separated")
    parser.add_argument("--rate", default="25Mbit")
    parser.add_argument("--reference", type=Path, help="another checkout to run each shape on too")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    sides = {"this": HERE} | ({"reference": args.reference.resolve()} if args.reference else {})
    shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
    load = os.getloadavg()[0]
    rows = []
    print(f"quickstart's workload and cut at {args.rate}, shapes {args.shapes} (load average {load:.2f} before)")
    print(f"{'shape':7s} {'side':9s} {'build':8s} {'goodput':>8s} {'step p50':>9s} {'emu share':>9s} {'CPU':>5s} "
          f"{'agents s/MiB':>12s} {'wake/MiB':>8s} {'failed':>6s}  fidelity")
    for hosts, planes in shapes:
        for _ in range(args.rounds):
            for side, checkout in sides.items():
                r = run(checkout, hosts, planes, args.rate)
                rows.append((hosts, planes, side, r))
                share = f"{r['emulator_share']:.0%}" if r["emulator_share"] is not None else "-"
                print(f"{hosts}x{planes:<5d} {side:9s} {r['build']:8s} {r['goodput']:8.0%} {r['step_p50_ms']:7.0f}ms "
                      f"{share:>9s} {r['cpu_pct']:4.0f}% {r['agents_s_per_mib']:12.4f} {r['wakeups_per_mib']:8.1f} "
                      f"{r['failed']:6d}  {'ok' if r['ok'] else 'not ok: ' + r['why']}", flush=True)
    for side in sides:
        ok = [(h * p, f"{h}x{p}") for h, p, s, r in rows if s == side
              and all(r2["ok"] for h2, p2, s2, r2 in rows if (h2, p2, s2) == (h, p, s))]
        print(f"largest with fidelity ok ({side}): {max(ok)[1] if ok else 'none'}")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
