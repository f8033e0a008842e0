"""Runs over two servers against runs on one machine, with `mrclab run --servers`:

    sudo .venv/bin/python benchmarks/cluster_run.py [scenarios|avoid|bringup|kill|projection|all] [--repeat N]

The two servers are network namespaces of this machine joined by a veth underlay, the second reached over SSH
through its own sshd (tests/cluster_servers.py), the runner in the first ("local"). They share this machine's
CPUs and kernel: CPU figures, fidelity included, are the whole machine's, and a lab over them costs this machine
what both servers would. Each section alternates one machine and two servers in the same invocation and prints
its table with ratios:

- scenarios: every shipped scenario (scenarios/*.yaml) on one machine, then over 2 servers: its expectations, its
  fidelity, and whether results.json has the same keys (plus `cluster`);
- avoid: avoid_s of quickstart's cut (p0l1-p0s2) when the cable runs between the servers (pods) and when it runs
  within server 0 (a map: pods with p0s1 and p0s2 swapped), and on one machine;
- bringup: from `mrclab run quickstart` starting to its workload's first progress record, and from its last one
  to the command's end (teardown);
- kill: a long smoke over 2 servers; at step 3 server 1's sshd (listener and sessions) and its agents are killed,
  or its underlay taken down (a partition): exit code, seconds to stop, results.json, what is left on server 0;
- projection: a 16 x 4 lab (quickstart's shape with 4 hosts per leaf) on one machine and over 2 servers: the CPU
  seconds per delivered MiB of the lab's processes (agents, shares, SSH sessions, relays, the kernel's forwarding)
  and of the runner, and from them the largest lab N machines of this kind hold below the fidelity limit.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from mrclab.cluster.placement import assign  # noqa: E402
from mrclab.runstate import STATE_DIR  # noqa: E402
from mrclab.spec import topology as topology_mod  # noqa: E402
from tests.cluster_servers import NamespaceServers, records, sh  # noqa: E402
from tests.integration.conftest import find_leftovers  # noqa: E402

CORES = os.cpu_count() or 1
SIXTEEN = ("topology={name: clos-4p-4l-4s-16h, planes: 4, leaves: 4, spines: 4, hosts_per_leaf: 4, "
           "links: {host_rate: 25Mbit, fabric_rate: 25Mbit, queue: 64KiB, mtu: 9000}}")


class Harness:
    """Two namespace servers, server 1 with its own sshd, and `mrclab run` from server 0 (alone or over both)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.servers = NamespaceServers(9000)
        self.sshd = self.servers.sshd(1, tmp / "sshd")
        self.env = self.servers.runner_env(tmp / "home")
        self.count = 0

    @property
    def target(self) -> str:
        return self.sshd.target

    def start(self, scenario: str, over: bool, *args: str) -> tuple[subprocess.Popen, Path, Path, float]:
        self.count += 1
        out = self.tmp / f"run{self.count}"
        progress = self.tmp / f"progress{self.count}.jsonl"
        servers = ["--servers", f"local,{self.target}"] if over else []
        with open(self.tmp / f"stderr{self.count}", "w") as stderr:  # results.json is read from --out
            proc = subprocess.Popen([*self.servers.enter(0), sys.executable, "-m", "mrclab", "run", scenario,
                                     *servers, "--out", str(out), "--progress-jsonl", str(progress), *args], cwd=REPO,
                                    env=self.env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        return proc, out, progress, time.monotonic()

    def stderr(self) -> str:
        return (self.tmp / f"stderr{self.count}").read_text().strip()

    def run(self, scenario: str, over: bool, *args: str) -> dict:
        """One run: its exit, results.json, and bring-up (start to the first progress record) and teardown (last
        progress record to its end) in seconds."""
        proc, out, progress, started = self.start(scenario, over, *args)
        first = last = None
        seen = 0
        while proc.poll() is None:
            lines = progress.read_text().splitlines() if progress.exists() else []
            if len(lines) > seen:
                if first is None and any('"progress"' in line for line in lines[seen:]):
                    first = time.monotonic()
                if any('"progress"' in line for line in lines[seen:]):
                    last = time.monotonic()
                seen = len(lines)
            time.sleep(0.01)
        ended = time.monotonic()
        doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
        return {"exit": proc.returncode, "stderr": self.stderr(), "doc": doc,
                "bringup_s": None if first is None else first - started,
                "teardown_s": None if last is None else ended - last, "wall_s": ended - started}

    def close(self) -> None:
        self.servers.close()


def met(doc: dict) -> str:
    failed = [c["name"] for c in doc.get("expectations", []) if not c["ok"]]
    return "all met" if doc.get("expectations") and not failed else ("not met: " + ", ".join(failed) if failed
                                                                        else "-")


def fidelity(doc: dict) -> str:
    f = doc.get("fidelity", {})
    if f.get("ok"):
        return "ok"
    if "servers" in f:
        bad = [s["server"].split("@")[0] for s in f["servers"] if not s.get("ok")]
        return "not ok (" + ", ".join(bad or ["clock"]) + ")"
    return "not ok"


def scenarios(h: Harness, _repeat: int) -> None:
    print(f"{'scenario':<20} {'one machine':<34} {'2 servers':<44} {'same keys':<9} {'time uncert.':>12} "
          f"{'wall 1/2':>10}")
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        one = h.run(str(path), False)
        two = h.run(str(path), True)
        d1, d2 = one["doc"], two["doc"]
        if two["exit"] == 2:
            print(f"{path.stem:<20} {met(d1) + ', ' + fidelity(d1):<34} refused: {two['stderr'][8:90]}")
            continue
        same = set(d2) - {"cluster"} == set(d1) if d1 and d2 else False
        uncertainty = max((u or 0.0 for u in d2.get("fidelity", {}).get("clock", {})
                           .get("time_uncertainty_s", {}).values()), default=0.0)
        print(f"{path.stem:<20} {met(d1) + ', fidelity ' + fidelity(d1):<34} "
              f"{'exit ' + str(two['exit']) + ': ' + met(d2) + ', fidelity ' + fidelity(d2):<44} "
              f"{'yes' if same else 'NO':<9} {uncertainty * 1e6:>9.1f} us {one['wall_s']:>4.0f}/{two['wall_s']:<4.0f}s")
        for label, d in (("one machine", d1), ("2 servers", d2)):
            if not d.get("fidelity", {}).get("ok", True):
                print(f"    {label} fidelity: {'; '.join(d['fidelity']['notes'])[:400]}")


def avoid(h: Harness, repeat: int) -> None:
    """The same cut (quickstart's, p0l1-p0s2) between the servers (pods: p0s2 is server 1's) and within server 0
    (a map: pods with p0s1 and p0s2 swapped), and on one machine."""
    topo = topology_mod.load("clos-4p-4l-4s")
    where = assign(topo, ["local", h.target], "pods", source="benchmark").server_of()
    assert where["p0l1"] == 0 and where["p0s2"] == 1 and where["p0s1"] == 0
    where["p0s1"], where["p0s2"] = 1, 0
    swapped = h.tmp / "swapped.yaml"
    swapped.write_text(yaml.safe_dump({"servers": ["local", h.target], "placement": where}))
    runs = {"crossing, 2 servers": (True, ()), "within server 0, 2 servers": (False, ("--cluster", str(swapped))),
            "one machine": (False, ())}
    rows: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(repeat):
        for label, (over, args) in runs.items():
            r = h.run("quickstart", over, *args)
            [down] = [e for e in r["doc"]["events"] if e["action"] == "link_down"]
            rows[label].append(down["avoid_s"])
            print(f"  {label:<28} avoid_s {down['avoid_s'] * 1e3:6.1f} ms, fidelity {fidelity(r['doc'])}")
    medians = {label: statistics.median(values) for label, values in rows.items()}
    for label, value in medians.items():
        print(f"{label:<28} median avoid_s {value * 1e3:6.1f} ms of {len(rows[label])} runs "
              f"(min {min(rows[label]) * 1e3:.1f}, max {max(rows[label]) * 1e3:.1f})")
    ratio = medians["crossing, 2 servers"] / medians["within server 0, 2 servers"]
    print(f"the cut between servers / within one, over 2 servers: x{ratio:.2f} (aim: <= 1.5)")


def bringup(h: Harness, repeat: int) -> None:
    rows: dict[str, list[dict]] = {"one machine": [], "2 servers": []}
    for _ in range(repeat):
        for label, over in (("one machine", False), ("2 servers", True)):
            r = h.run("quickstart", over)
            rows[label].append(r)
            print(f"  {label:<12} bring-up {r['bringup_s']:6.2f} s, teardown {r['teardown_s']:5.2f} s, "
                  f"exit {r['exit']}")
    one = statistics.median(r["bringup_s"] for r in rows["one machine"])
    two = statistics.median(r["bringup_s"] for r in rows["2 servers"])
    down1 = statistics.median(r["teardown_s"] for r in rows["one machine"])
    down2 = statistics.median(r["teardown_s"] for r in rows["2 servers"])
    print(f"bring-up: one machine {one:.2f} s, 2 servers {two:.2f} s: x{two / one:.2f} (aim: <= 2 x {one:.2f} + 5 = "
          f"{2 * one + 5:.2f} s)")
    print(f"teardown: one machine {down1:.2f} s, 2 servers {down2:.2f} s")


def kill(h: Harness, repeat: int) -> None:
    print(f"{'how':<36} {'exit':>4} {'stopped after':>13} {'results.json':<24} {'left on server 0':<16} "
          f"{'server 1 share gone after':>25}")
    for how in ["sshd and agents killed"] * repeat + ["underlay down (a partition)"]:
        since = time.time()
        proc, out, progress, _ = h.start("smoke", True, "--set", "workload.steps=4000", "--set",
                                         "duration_limit=300s")
        local: dict[str, dict] = {}
        remote: dict[str, dict] = {}
        while proc.poll() is None:
            local.update(records(STATE_DIR, "run smoke (server 0", since))
            remote.update(records(STATE_DIR, "run smoke (server 1", since))
            lines = progress.read_text().splitlines() if progress.exists() else []
            if local and remote and any(json.loads(line).get("step", 0) >= 3 for line in lines):
                break
            time.sleep(0.05)
        hit = time.monotonic()
        if how.startswith("sshd"):
            [share] = remote.values()
            agents = [pid for pid, _start, label in share["processes"] if label.startswith("agent ")]
            for pid in [h.sshd.proc.pid, *h.sshd.sessions(), *agents]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        else:
            sh("ip", "-n", h.servers.names[1], "link", "set", h.servers.underlays[1].device, "down")
        proc.wait(timeout=120)
        stopped = time.monotonic() - hit
        stderr = h.stderr()
        doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
        [(run_id, record)] = local.items()
        left = find_leftovers(f"m{run_id}", record["processes"]) + (
            [f"record {run_id}"] if (STATE_DIR / f"{run_id}.json").exists() else [])
        [(remote_id, _)] = remote.items()
        while (STATE_DIR / f"{remote_id}.json").exists() and time.monotonic() - hit < 60:
            time.sleep(0.1)
        gone = time.monotonic() - hit
        written = f"{doc.get('status', '-')}, {len(doc.get('steps', []))} steps"
        print(f"{how:<36} {proc.returncode:>4} {stopped:>11.1f} s {written:<24} {len(left):<16} {gone:>23.1f} s")
        print(f"    {stderr[:200]}")
        if how.startswith("sshd"):  # a new sshd for server 1, as the harness had
            h.servers.sshds.remove(h.sshd)
            h.sshd = h.servers.sshd(1, h.tmp / f"sshd{time.monotonic_ns()}")
            h.env = h.servers.runner_env(h.tmp / f"home{time.monotonic_ns()}")
        else:
            sh("ip", "-n", h.servers.names[1], "link", "set", h.servers.underlays[1].device, "up")


def per_mib(doc: dict) -> tuple[float, float]:
    """(CPU seconds per delivered MiB of the lab's processes but the runner: agents, the softirq charged to them,
    the kernel's forwarding threads, shares, SSH sessions, relays; the runner's), from results.json."""
    cost = doc["summary"]["cpu_s_per_mib"]
    runner = cost["cpu_s"].get("runner", 0.0) / cost["delivered_mib"]
    return cost["lab"] - runner, runner


EDGE_HOSTS = 16  # the largest lab one machine of this kind runs faithful at 25 Mbit (docs/performance.md: 16 x 4)


def projection(h: Harness, repeat: int) -> None:
    """Each host costs its server the CPU its delivered bytes cost (per MiB, measured on a 16 x 4 lab on one
    machine and over 2 servers, alternated); the runner costs its server its per-MiB share of every host's bytes.
    A machine holds a lab up to where its CPU would pass the fidelity limit; one machine holds EDGE_HOSTS. Over N
    such machines, server 0 (the runner's) has H/N hosts and the runner: H * (c2 / N + r2) <= EDGE_HOSTS * (c1 +
    r1), so H = EDGE_HOSTS * (c1 + r1) / (c2 / N + r2)."""
    rows: dict[str, list[tuple[float, float]]] = {"one machine": [], "2 servers": []}
    for _ in range(repeat):
        for label, over in (("one machine", False), ("2 servers", True)):
            r = h.run("quickstart", over, "--set", SIXTEEN)
            d = r["doc"]
            lab, runner = per_mib(d)
            rows[label].append((lab, runner))
            print(f"  {label:<12} exit {r['exit']}, {met(d)}, fidelity {fidelity(d)}, goodput "
                  f"{d['summary'].get('goodput_fraction') or 0:.0%}, machine CPU {d['fidelity'].get('cpu_busy_pct')}%,"
                  f" CPU s per MiB: lab {lab:.4f}, runner {runner:.4f}")
    c1, r1 = (statistics.median(v[i] for v in rows["one machine"]) for i in (0, 1))
    c2, r2 = (statistics.median(v[i] for v in rows["2 servers"]) for i in (0, 1))
    print(f"CPU s per delivered MiB, medians: one machine lab {c1:.4f} + runner {r1:.4f}; over 2 servers lab {c2:.4f}"
          f" (x{c2 / c1:.2f}) + runner {r2:.4f}")
    print(f"{'machines':>8} {'hosts (fidelity-ok, projected)':>32}")
    print(f"{1:>8} {EDGE_HOSTS:>32}  (measured: docs/performance.md)")
    for n in (2, 4, 8, 16):
        print(f"{n:>8} {int(EDGE_HOSTS * (c1 + r1) / (c2 / n + r2)):>32}")
    print(f"{'any':>8} {int(EDGE_HOSTS * (c1 + r1) / r2):>32}  (the runner's server: every host's messages pass "
          "through the runner)")


SECTIONS = {"scenarios": scenarios, "avoid": avoid, "bringup": bringup, "kill": kill, "projection": projection}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", choices=[*SECTIONS, "all"], nargs="?", default="all")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"{time.strftime('%Y-%m-%d')}, {CORES} cores, load average {load:.1f} at the start")
    with tempfile.TemporaryDirectory(prefix="mrclab-bench-") as tmp:
        h = Harness(Path(tmp))
        try:
            for name, section in SECTIONS.items():
                if args.section in (name, "all"):
                    print(f"-- {name}")
                    section(h, args.repeat)
        finally:
            h.close()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
