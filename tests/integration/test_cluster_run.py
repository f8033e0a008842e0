"""`mrclab run SCENARIO --servers local,root@[fdcc::2]:PORT`, for real: the runner in server 0's namespace (this
machine, "local"), server 1 another namespace whose own sshd listens on its underlay address only. Each server
builds its share and starts its hosts' agents; the runner speaks to server 1's agents through SSH relays and to
its own through their sockets, cuts a cable between the servers and brings a spine of server 1 down, and the
results have the schema of a run on one machine plus each server's share and clock. `mrclab clean --servers`
cleans each server by its records. A runner with no local server reaches both over SSH (both with their own
sshd). A server whose sshd and agents are killed mid-run, or cut off by a partition of the underlay, stops the run
in one line naming it (exit 3, within 15 s), its partial results written and nothing left on the other server;
the server cut off tears its own share down once its runner falls silent."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from mrclab.cluster.server import SILENCE_S
from mrclab.runstate import STATE_DIR
from mrclab.spec import topology
from tests.cluster_servers import NamespaceServers, records, sh
from tests.conftest import REPO
from tests.integration.test_run import check_schema
from tests.sshd import one_line_exit_3

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

TOPO = topology.load("clos-2p-2l-2s")
# results.json of smoke on one machine has exactly these keys; over servers, `cluster` too
LOCAL_KEYS = {"build", "connections", "controller", "datapath", "datapath_detail", "duration_s", "engine",
              "ev_changes", "events", "expectations", "fidelity", "links", "nic_changes", "overrides", "recovery",
              "routing", "run_id", "scenario", "schema", "seed", "series", "started_at", "status", "steps", "summary",
              "topology", "transport", "transport_options", "unfired_events", "workloads"}


@contextlib.contextmanager
def namespace_servers(tmp_path: Path, leftovers, *with_sshd: int) -> Iterator[tuple[NamespaceServers, dict]]:
    """Two namespace servers, those named with their own sshd, and the environment of a runner that reaches them;
    nothing of them is left after."""
    servers = NamespaceServers(TOPO.mtu)
    try:
        for i in with_sshd:
            servers.sshd(i, tmp_path / f"sshd{i}")
        yield servers, servers.runner_env(tmp_path / "home")
    finally:
        servers.close()
    assert leftovers(servers.state.prefix, servers.state.processes) == []


@pytest.fixture
def cluster(tmp_path, leftovers):
    """Server 0 is this machine (local, the runner's), server 1 is reached over SSH."""
    with namespace_servers(tmp_path, leftovers, 1) as (servers, env):
        yield servers, servers.sshds[0], env


def run_over(servers: NamespaceServers, env: dict, scenario: Path | str, out: Path, *args: str,
             names: list[str] | None = None) -> subprocess.Popen:
    """`mrclab run` in server 0's namespace over `names` (default: local and server 1's sshd)."""
    names = names or ["local", servers.sshds[-1].target]
    return subprocess.Popen([*servers.enter(0), sys.executable, "-m", "mrclab", "run", str(scenario), "--servers",
                             ",".join(names), "--out", str(out), *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def smoke_over(servers: NamespaceServers, env: dict, scenario: Path | str, out: Path, *args: str,
               names: list[str] | None = None) -> dict:
    """A smoke (24 steps of 4 hosts) run to its end over the servers: exit 0, its expectations met, results.json
    with the schema of a run on one machine plus `cluster`, and every byte delivered and verified; that document."""
    proc = run_over(servers, env, scenario, out, "--json", *args, names=names)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-2000:]
    doc = json.loads(stdout)
    check_schema(doc)
    assert set(doc) - {"dir"} == LOCAL_KEYS | {"cluster"}
    assert all(check["ok"] for check in doc["expectations"]), doc["expectations"]
    s = doc["summary"]
    assert s["messages"]["failed"] == 0 and s["messages"]["completed"] == s["messages"]["sent"] == 24 * 4
    assert s["bytes"]["sent"] == s["bytes"]["delivered"] == s["bytes"]["verified"] == 24 * 4 * 256 * 1024
    return doc


def test_a_scenario_runs_over_two_servers_with_faults_on_both(cluster, tmp_path, leftovers):
    servers, sshd, env = cluster
    smoke = yaml.safe_load((REPO / "scenarios/smoke.yaml").read_text())
    smoke["events"] += [{"at_step": 18, "action": "switch_down", "target": "p1s1"},  # a spine of server 1
                        {"at_step": 21, "action": "switch_up", "target": "p1s1"}]
    smoke["expect"].update(max_avoid_s="10s", max_step_time_ratio=100)  # a loaded CI machine: the run, not its pace
    scenario = tmp_path / "smoke.yaml"
    scenario.write_text(yaml.safe_dump(smoke))
    doc = smoke_over(servers, env, scenario, tmp_path / "out")
    placed = {node: i for i, server in enumerate(doc["cluster"]["servers"])
              for node in (*server["hosts"], *server["switches"])}
    assert [server["server"] for server in doc["cluster"]["servers"]] == ["local", sshd.target]
    assert placed["p0l0"] != placed["p0s1"] and placed["p1s1"] == 1  # the cut crosses; the spine is server 1's
    down, up, spine_down, spine_up = doc["events"]
    assert down["target"] == "p0l0-p0s1" and down["avoid_s"] is not None and 0 <= down["avoid_s"] < 1
    assert up["revive_s"] is not None and 0 <= up["revive_s"] < 1
    assert spine_down["action"] == "switch_down" and spine_down["avoid_s"] is not None
    cut = [row for row in doc["links"] if row["link"] == "p0l0-p0s1"]
    assert len(cut) == 2 and {row["from"] for row in cut} == {"p0l0", "p0s1"}  # each server's direction
    assert all(row["tx_packets"] > 0 for row in doc["links"] if row["link"] != "p0l0-p0s1")
    # every server judged its own CPU; server 1's times are on the runner's clock to within their uncertainty
    assert [v["server"] for v in doc["fidelity"]["servers"]] == ["local", sshd.target]
    remote = doc["cluster"]["servers"][1]
    assert 0 < remote["time_uncertainty_s"] < 1e-3 and abs(remote["clock"]["start"]["offset_s"]) < 1e-3
    assert doc["fidelity"]["clock"]["time_uncertainty_s"] == {"local": 0.0, sshd.target: remote["time_uncertainty_s"]}
    assert {p.name for p in (tmp_path / "out").glob("agent-*.jsonl")} == {f"agent-h{i}.jsonl" for i in range(4)}
    for server in doc["cluster"]["servers"]:
        assert leftovers(f"m{server['run_id']}") == []
    assert doc["run_id"] not in records(STATE_DIR, "run")  # the runner's own record is gone too

    # `mrclab clean --servers`: server 1 removes what a dead run of its own recorded (a namespace), by its record (its
    # owner, that python, is gone)
    stale = ("from mrclab.runstate import RunState; import subprocess; s = RunState.create('run dead'); "
             "s.add_namespace(s.prefix + 'x'); "
             "subprocess.run(['ip', 'netns', 'add', s.prefix + 'x'], check=True); print(s.prefix)")
    prefix = subprocess.run([*servers.enter(1), sys.executable, "-c", stale], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    cleaned = subprocess.run([*servers.enter(0), sys.executable, "-m", "mrclab", "clean", "--servers", sshd.target,
                              "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"server {sshd.target}: " in "".join(json.loads(cleaned.stdout)["removed"])
    assert f"namespace {prefix}x" in "".join(json.loads(cleaned.stdout)["removed"])
    assert leftovers(prefix) == []


def test_a_runner_with_no_local_server_reaches_both_over_ssh(tmp_path, leftovers):
    """Both servers have their own sshd and the runner (in server 0's namespace) reaches each over SSH: server 0's
    agents through relays too, its clock read over its channel (not the runner's own), server 1's through it."""
    with namespace_servers(tmp_path, leftovers, 0, 1) as (servers, env):
        names = [sshd.target for sshd in servers.sshds]
        doc = smoke_over(servers, env, "smoke", tmp_path / "out", "--set", "expect.max_avoid_s=10s", "--set",
                         "expect.max_step_time_ratio=100", names=names)  # a loaded CI machine: the run, not its pace
        first, second = doc["cluster"]["servers"]
        assert [first["server"], second["server"]] == names and first["hosts"] and second["hosts"]
        for when in ("start", "end"):  # read over SSH: a round trip of its own, never the exact 0 of local's
            assert 0 < first["clock"][when]["uncertainty_s"] < 0.1, first
            assert second["clock"][when]["uncertainty_s"] > first["clock"][when]["uncertainty_s"], second
        assert doc["fidelity"]["clock"]["time_uncertainty_s"] == {d["server"]: d["time_uncertainty_s"]
                                                                  for d in (first, second)}
        assert {p.name for p in (tmp_path / "out").glob("agent-*.jsonl")} == {f"agent-h{i}.jsonl" for i in range(4)}
        for server in (first, second):
            assert leftovers(f"m{server['run_id']}") == []
        assert doc["run_id"] not in records(STATE_DIR, "run")


@dataclass
class LongRun:
    """A long smoke over local and server 1, at its step 3: the runner, and each server's share's run record."""

    proc: subprocess.Popen
    out: Path
    local: dict
    remote: dict

    @property
    def remote_processes(self) -> list[int]:
        [share] = self.remote.values()
        return [pid for pid, _start, label in share["processes"] if label.startswith("agent ")]


@pytest.fixture
def long_run(cluster, tmp_path) -> LongRun:
    servers, _sshd, env = cluster
    progress = tmp_path / "progress.jsonl"
    since = time.time()
    proc = run_over(servers, env, "smoke", tmp_path / "out", "--set", "workload.steps=4000", "--set",
                    "duration_limit=300s", "--progress-jsonl", str(progress))
    local: dict[str, dict] = {}
    remote: dict[str, dict] = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        local.update(records(STATE_DIR, "run smoke (server 0", since))
        remote.update(records(STATE_DIR, "run smoke (server 1", since))
        lines = progress.read_text().splitlines() if progress.exists() else []
        if local and remote and any(json.loads(line).get("step", 0) >= 3 for line in lines):
            break
        time.sleep(0.1)
    assert proc.poll() is None and len(local) == len(remote) == 1, proc.stderr.read() if proc.stderr else ""
    return LongRun(proc, tmp_path / "out", local, remote)


def stops_in_one_line(run: LongRun, hit: float, target: str, leftovers) -> str:
    """The runner names `target` in one line, exits 3 within 15 s of `hit`, writes what it measured, and server 0
    keeps nothing; its line."""
    line = one_line_exit_3(run.proc, f"server {target}")
    assert line.startswith(f"mrclab: run failed: server {target}: "), line  # nothing else on it (a library's log)
    took = time.monotonic() - hit
    assert took < 15, f"the run took {took:.1f} s to stop"
    print(f"stopped {took:.1f} s after the hit: {line}")
    doc = json.loads((run.out / "results.json").read_text())
    assert doc["status"] == "failed" and target in doc["error"] and doc["steps"]
    [(run_id, record)] = run.local.items()
    assert leftovers(f"m{run_id}", record["processes"]) == []  # nothing of server 0's share
    assert not (STATE_DIR / f"{run_id}.json").exists()
    return line


def share_gone(run: LongRun, hit: float, within: float, leftovers) -> float:
    """Server 1's share tears itself down within `within` s of `hit`, leaving nothing; how long it took."""
    [(remote_id, share)] = run.remote.items()
    while time.monotonic() - hit < within and (STATE_DIR / f"{remote_id}.json").exists():
        time.sleep(0.2)
    took = time.monotonic() - hit
    assert not (STATE_DIR / f"{remote_id}.json").exists(), f"server 1's share is still there after {took:.1f} s"
    assert leftovers(f"m{remote_id}", share["processes"]) == []
    print(f"server 1's share gone {took:.1f} s after the hit")
    return took


def test_a_server_killed_mid_run_stops_the_run_in_one_line(cluster, long_run, leftovers):
    """Server 1's sshd (its listener and the session carrying the run) and its agents are killed while the workload
    runs: the runner names server 1, exits 3 within 15 s, writes what it measured, and server 0 keeps nothing."""
    _servers, sshd, _env = cluster
    hit = time.monotonic()
    for pid in [sshd.proc.pid, *sshd.sessions(), *long_run.remote_processes]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stops_in_one_line(long_run, hit, sshd.target, leftovers)
    share_gone(long_run, hit, 15, leftovers)  # it saw its session end (EOF)


def test_a_partition_mid_run_stops_the_run_and_both_shares(cluster, long_run, leftovers):
    """The underlay between the servers goes down while the workload runs (a partition: no connection closes,
    nothing answers): the runner names server 1 in one line and exits 3 within 15 s; server 1's share, whose
    runner falls silent, tears itself down after SILENCE_S."""
    servers, sshd, _env = cluster
    hit = time.monotonic()
    for i in (0, 1):
        sh("ip", "-n", servers.names[i], "link", "set", servers.underlays[i].device, "down")
    stops_in_one_line(long_run, hit, sshd.target, leftovers)  # it did not answer, or its connection gave up
    share_gone(long_run, hit, SILENCE_S + 10, leftovers)
