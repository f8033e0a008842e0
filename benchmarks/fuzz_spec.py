"""Benchmark: hostile input and interrupted runs, the figures of the hardening work.

    .venv/bin/python benchmarks/fuzz_spec.py [--mutations 1000] [--seed 1] [--runs 0] [--json]

Part 1 writes `--mutations` mutated copies of the shipped scenario and topology files
(tests/mutations.py) and loads each as `mrclab run --dry-run` would (scenario, timeline
check, plan): accepted, rejected cleanly (mrclab's UsageError, one line), or crashed
(anything else). It reports the slowest and the most memory-hungry rejected input as a
ratio of loading the unmodified shipped files, measured in the same run.

Part 2 (`--runs N`, root and a lab needed) starts N smoke runs, interrupts each mid-run with
SIGKILL, SIGINT or SIGTERM in turn, counts the run's recorded processes still alive 5 s later,
then runs `mrclab clean` and counts what is left (bridges, interfaces, namespaces, processes).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mrclab import preflight
from mrclab.errors import UsageError
from mrclab.runstate import STATE_DIR, RunState, proc_start_time
from mrclab.spec import scenario as scenario_mod
from mrclab.spec import topology as topology_mod
from tests.mutations import REPO, SHIPPED, kind, mutate


def load(path: Path, what: str) -> None:
    if what == "topology":
        topology_mod.load(path)
        return
    scenario = scenario_mod.load(path)
    preflight.check(scenario)
    preflight.plan(scenario)


def measured(path: Path, what: str) -> tuple[str, float, int, str]:
    """(outcome, seconds, peak bytes allocated, message) of loading one file: timed plain, then
    loaded again under tracemalloc (which slows allocation-heavy parsing many times) for its peak."""
    start = time.perf_counter()
    outcome, message = _outcome(path, what)
    elapsed = time.perf_counter() - start
    tracemalloc.start()
    _outcome(path, what)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return outcome, elapsed, peak, message


def _outcome(path: Path, what: str) -> tuple[str, str]:
    try:
        load(path, what)
    except UsageError as exc:
        message = str(exc)
        return ("rejected" if "\n" not in message and len(message) <= 700 else "crashed"), message
    except Exception as exc:  # noqa: BLE001  counting crashes is the point
        return "crashed", f"{type(exc).__name__}: {exc}"[:300]
    return "accepted", ""


def fuzz(mutations: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        reference = []
        for path in SHIPPED:
            copy = Path(tmp) / path.name
            copy.write_text(path.read_text())
            outcome, elapsed, peak, message = measured(copy, kind(path))
            assert outcome == "accepted", (path, message)
            reference.append((elapsed, peak))
        ref_s = sum(e for e, _ in reference) / len(reference)
        ref_peak = max(p for _, p in reference)
        counts = {"tried": 0, "accepted": 0, "rejected": 0, "crashed": 0}
        worst_time = worst_mem = None
        crashes = []
        for i in range(mutations):
            base = SHIPPED[i % len(SHIPPED)]
            content = mutate(base, seed * 1_000_003 + i)
            target = Path(tmp) / f"m{i}-{base.name}"
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
            outcome, elapsed, peak, message = measured(target, kind(base))
            target.unlink()
            counts["tried"] += 1
            counts[outcome] += 1
            row = {"file": base.name, "seed": seed * 1_000_003 + i, "s": elapsed, "peak_bytes": peak,
                   "message": message[:160]}
            if outcome == "crashed":
                crashes.append(row)
            elif outcome == "rejected":
                if worst_time is None or elapsed > worst_time["s"]:
                    worst_time = row
                if worst_mem is None or peak > worst_mem["peak_bytes"]:
                    worst_mem = row
    return {"counts": counts, "reference": {"mean_s": ref_s, "peak_bytes": ref_peak},
            "worst_rejected_time": worst_time, "worst_rejected_memory": worst_mem, "crashes": crashes[:10]}


def _alive(processes: list[list]) -> int:
    n = 0
    for pid, start, _ in processes:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        n += start is not None and proc_start_time(pid) == start and state not in ("Z", "X")
    return n


def _leftover_names(prefix: str) -> int:
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=False).stdout.split()
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return sum(n.startswith(prefix) for n in [*bridges, *os.listdir("/sys/class/net"), *netns])


def interrupted_runs(runs: int) -> dict:
    signals = [signal.SIGKILL, signal.SIGINT, signal.SIGTERM]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            sig = signals[i % len(signals)]
            proc = subprocess.Popen([sys.executable, "-m", "mrclab", "run", "smoke", "--out", f"{tmp}/r{i}",
                                     "--set", "workload.steps=500", "--set", "duration_limit=60s"],
                                    cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            state, deadline = None, time.monotonic() + 60
            while state is None and proc.poll() is None and time.monotonic() < deadline:
                for path in STATE_DIR.glob("*.json"):
                    try:
                        candidate = RunState.load(path)
                    except (OSError, ValueError):
                        continue
                    if candidate.owner_pid == proc.pid and any(p[2].startswith("agent")
                                                               for p in candidate.processes):
                        state = candidate
                time.sleep(0.05)
            if state is None:
                proc.kill()
                proc.wait()
                rows.append({"signal": sig.name, "started": False})
                continue
            time.sleep(0.5)
            state = RunState.load(state.path) if state.path.exists() else state
            os.kill(proc.pid, sig)
            proc.wait(timeout=60)
            time.sleep(5)
            alive_5s = _alive(state.processes)
            subprocess.run([sys.executable, "-m", "mrclab", "clean"], cwd=REPO, capture_output=True, check=False)
            rows.append({"signal": sig.name, "started": True, "exit": proc.returncode, "alive_after_5s": alive_5s,
                         "left_after_clean": _alive(state.processes) + _leftover_names(state.prefix)})
    return {"runs": rows, "interrupted": sum(r["started"] for r in rows),
            "with_processes_after_5s": sum(bool(r.get("alive_after_5s")) for r in rows),
            "with_leftovers_after_clean": sum(bool(r.get("left_after_clean")) for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=0, help="interrupted runs (root and a lab needed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = {"load": os.getloadavg(), "fuzz": fuzz(args.mutations, args.seed)}
    if args.runs:
        doc["interrupted"] = interrupted_runs(args.runs)
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    f = doc["fuzz"]
    c, ref = f["counts"], f["reference"]
    print(f"load average {doc['load'][0]:.2f}")
    print(f"mutations tried {c['tried']}: accepted {c['accepted']}, rejected cleanly {c['rejected']}, "
          f"crashed {c['crashed']}")
    print(f"reference: a shipped file loads in {ref['mean_s'] * 1e3:.2f} ms, peak {ref['peak_bytes'] / 1024:.0f} KiB")
    for label, row in (("slowest rejected", f["worst_rejected_time"]),
                       ("hungriest rejected", f["worst_rejected_memory"])):
        if row:
            print(f"{label}: {row['s'] * 1e3:.1f} ms ({row['s'] / ref['mean_s']:.1f}x reference), peak "
                  f"{row['peak_bytes'] / 1024:.0f} KiB ({row['peak_bytes'] / ref['peak_bytes']:.1f}x reference); "
                  f"{row['file']} seed {row['seed']}: {row['message'][:100]}")
    for row in f["crashes"]:
        print(f"CRASH {row['file']} seed {row['seed']}: {row['message']}")
    if "interrupted" in doc:
        r = doc["interrupted"]
        print(f"interrupted runs {r['interrupted']}: with a recorded process alive 5 s later "
              f"{r['with_processes_after_5s']}, with anything left after `mrclab clean` "
              f"{r['with_leftovers_after_clean']}")
        for row in r["runs"]:
            print("  ", row)


if __name__ == "__main__":
    main()
