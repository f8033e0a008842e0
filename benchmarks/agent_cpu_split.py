"""Where the agents' CPU goes on a real lab: their Python, their own system calls, and the kernel forwarding
the emulated network's packets, which the scheduler charges to them.

    sudo .venv/bin/python benchmarks/agent_cpu_split.py [--scenario scenarios/quickstart.yaml] [--seconds 4]

Runs the scenario with a long workload and no faults, and samples every agent with ``perf record -g``
(Debian's linux-perf) for ``--seconds`` in the middle of it. Each sample is sorted by its stack: user space
(the Python interpreter and its libraries), softirq (any frame of the kernel's softirq handling: forwarding
through the fabric's hops, qdiscs, delivery to the receiving socket), or the agent's own system calls
(everything else in the kernel: sendto/recvfrom up to the first device, epoll, scheduling).

The reference, from the same run's results.json: ``cpu_s_per_mib.agents`` (what /proc charged the agents)
and ``agents_less_softirq`` (the bound the product reports); the perf split gives the agents' own share
exactly, so the two can be compared.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE_DIR = Path("/run/mrclab")
SOFTIRQ_FRAMES = ("handle_softirqs", "__do_softirq", "do_softirq", "net_rx_action", "net_tx_action")


def agent_pids(runner: subprocess.Popen) -> list[int]:
    """The agents of the run that ``runner`` owns, from its recorded run state."""
    for path in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if state.get("owner_pid") == runner.pid:
            return [pid for pid, _start, label in state["processes"] if label.startswith("agent ")]
    return []


def running_agents(runner: subprocess.Popen, settle: float = 3.0, timeout: float = 60.0) -> list[int]:
    """The run's agents once the first is up and ``settle`` seconds more have passed (boot, warm-up, the
    first steps), so that every agent is up and the workload is under way."""
    deadline = time.monotonic() + timeout
    while not agent_pids(runner):
        if time.monotonic() > deadline or runner.poll() is not None:
            raise SystemExit("agent_cpu_split: the run's agents did not come up")
        time.sleep(0.2)
    time.sleep(settle)
    return agent_pids(runner)


def classify(script: str) -> Counter:
    """perf script output (one stack per sample, blank-line separated) -> samples per category."""
    counts: Counter = Counter()
    for sample in script.split("\n\n"):
        frames = [line.split(None, 1)[-1] for line in sample.strip().splitlines()[1:]]
        if not frames:
            continue
        if "[kernel.kallsyms]" not in frames[0] and "bpf_prog" not in frames[0]:
            counts["user (Python)"] += 1
        elif any(name in frame for frame in frames for name in SOFTIRQ_FRAMES):
            counts["softirq (the emulated network)"] += 1
        else:
            counts["own system calls"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(REPO / "scenarios/quickstart.yaml"))
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("agent_cpu_split: needs perf (apt install linux-perf)")
    with tempfile.TemporaryDirectory(prefix="mrclab-split-") as tmp:
        out = Path(tmp) / "run"
        runner = subprocess.Popen([str(REPO / ".venv/bin/mrclab"), "run", args.scenario, "--out", str(out),
                                   "--set", f"workload.steps={args.steps}", "--set", "events=[]"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            pids = running_agents(runner)
            data = Path(tmp) / "perf.data"
            subprocess.run(["perf", "record", "-q", "-g", "-o", str(data), "-p", ",".join(map(str, pids)),
                            "--", "sleep", str(args.seconds)], check=True, capture_output=True)
            script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym,dso"], check=True,
                                    capture_output=True, text=True).stdout
        finally:
            runner.wait()
        results = json.loads((out / "results.json").read_text())
    counts = classify(script)
    total = sum(counts.values())
    cost = results["summary"]["cpu_s_per_mib"]
    print(f"{Path(args.scenario).stem} on {results['datapath']}, {len(pids)} agents, {total} perf samples "
          f"over {args.seconds:g} s")
    for name, n in counts.most_common():
        print(f"  {name:32} {100 * n / total:5.1f}%")
    own = 1 - counts["softirq (the emulated network)"] / total
    print(f"CPU s per delivered MiB (whole run, from /proc): agents {cost['agents']:.4f}, "
          f"agents less softirq (the reported bound) {cost['agents_less_softirq']:.4f}")
    print(f"agents' own work by perf: {own:.2f} x agents = {own * cost['agents']:.4f}; "
          f"bound / perf: {cost['agents_less_softirq'] / (own * cost['agents']):.2f}")
    if results["status"] != "completed":
        sys.exit(1)


if __name__ == "__main__":
    main()
