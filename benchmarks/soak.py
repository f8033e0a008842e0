"""Memory over a long run: the runner's and the agents' resident set, once a minute, during quickstart's
workload run for ``--minutes`` (its step count made endless, its duration limit ends it).

    sudo .venv/bin/python benchmarks/soak.py [--minutes 30] [--scenario scenarios/quickstart.yaml]

The reference is each process's own RSS at the first reading (the lab built, the workload under way); the
figures are the growth from it, in MB and per delivered message. Flat memory means the growth stops
growing: a run keeps running aggregates and bounded records, never one entry per message or sample.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE_DIR = Path("/run/mrclab")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def agents_of(runner: int) -> list[int]:
    for path in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if state.get("owner_pid") == runner:
            return [pid for pid, _start, label in state["processes"] if label.startswith("agent ")]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--scenario", default=str(REPO / "scenarios/quickstart.yaml"))
    parser.add_argument("--every", type=float, default=60.0, help="seconds between readings")
    args = parser.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="soak-")) / "run"
    runner = subprocess.Popen([sys.executable, "-m", "mrclab", "run", args.scenario, "--out", str(out_dir),
                               "--set", "workload.steps=100000", "--set", "events=[]",
                               "--set", f"duration_limit={int(args.minutes * 60)}s"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows: list[tuple[float, float, float]] = []
    start, agents = time.monotonic(), []
    while runner.poll() is None:
        if not agents:  # found once: the run record is read only until then
            agents = agents_of(runner.pid)
            time.sleep(1.0)
            continue
        time.sleep(args.every)  # the first reading a minute in: the agents' start-up is not growth
        mine, theirs = rss_mb(runner.pid), [m for m in map(rss_mb, agents) if m is not None]
        if mine is not None and len(theirs) == len(agents):  # the workload still under way
            rows.append((time.monotonic() - start, mine, max(theirs)))
            print(f"{rows[-1][0] / 60:5.1f} min  runner {mine:7.1f} MB  largest agent {max(theirs):6.1f} MB",
                  flush=True)
    results = out_dir / "results.json"
    doc = json.loads(results.read_text()) if results.exists() else {}
    messages = doc.get("summary", {}).get("messages", {}).get("sent", 0)
    if len(rows) < 2:
        raise SystemExit("soak: fewer than two readings; run longer")
    (_, r0, a0), (_, r1, a1) = rows[0], rows[-1]
    print(f"\n{args.minutes:g} min of {Path(args.scenario).stem}, {messages} messages, "
          f"{doc.get('summary', {}).get('bytes', {}).get('verified', 0) / 2**30:.1f} GiB verified")
    print(f"runner: {r0:.1f} -> {r1:.1f} MB (+{r1 - r0:.1f} MB, {(r1 - r0) * 2**20 / max(messages, 1):.0f} B "
          f"per message)")
    print(f"largest agent: {a0:.1f} -> {a1:.1f} MB (+{a1 - a0:.1f} MB)")


if __name__ == "__main__":
    main()
