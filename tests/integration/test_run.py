"""`mrclab run` end to end on a real fabric: the smoke scenario, its results against docs/spec.md's
schema, an expectation that cannot hold (exit 1), and runs stopped midway leave nothing behind."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrclab.runstate import STATE_DIR, RunState

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]
NUMBER = (int, float)


def mrclab(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "mrclab", *args], cwd=REPO, **kwargs)


def check_schema(doc: dict) -> None:
    """Every key and type docs/spec.md promises in results.json."""
    assert doc["schema"] == "mrclab.results/v1"
    assert set(doc["scenario"]) >= {"name", "file"}
    assert set(doc["topology"]) >= {"name", "planes", "leaves", "spines", "hosts"}
    for key in ("transport", "routing", "started_at"):
        assert isinstance(doc[key], str)
    assert isinstance(doc["seed"], int) and isinstance(doc["duration_s"], NUMBER)
    assert time.strptime(doc["started_at"], "%Y-%m-%dT%H:%M:%SZ")
    for step in doc["steps"]:
        assert set(step) == {"index", "start_s", "duration_s", "ideal_s"} and step["duration_s"] > step["ideal_s"] > 0
    s = doc["summary"]
    assert set(s["step_time_s"]) >= {"p50", "p99", "p100", "mean"}
    assert s["step_time_s"]["p50"] <= s["step_time_s"]["p99"] <= s["step_time_s"]["p100"]
    assert isinstance(s["goodput_bps"], NUMBER)
    assert set(s["messages"]) >= {"sent", "completed", "failed"}
    assert set(s["bytes"]) >= {"sent", "delivered", "verified"}
    assert set(s["packets"]) >= {"data_sent", "retransmitted", "trimmed", "timeouts", "nacks", "probes"}
    for event in doc["events"]:
        assert set(event) >= {"t_s", "action", "target"}
    for link in doc["links"]:
        assert set(link) >= {"link", "from", "to", "tx_packets", "tx_bytes", "drops", "trims"}
    assert set(doc["controller"]) >= {"flow_mods_boot", "flow_mods_after_boot"}
    assert set(doc["fidelity"]) >= {"cpu_busy_pct", "ok", "notes"}
    for check in doc["expectations"]:
        assert set(check) >= {"name", "expected", "actual", "ok"}


@pytest.mark.parametrize("datapath", ["ovs", "linux"])
def test_smoke_runs_end_to_end(tmp_path, leftovers, datapath):
    out = tmp_path / "smoke"  # given relative to a folder that is not the checkout: agents must find it
    proc = subprocess.Popen([sys.executable, "-m", "mrclab", "run", str(REPO / "scenarios/smoke.yaml"),
                             "--out", "smoke", "--json", "--set", f"datapath={datapath}",
                             "--set", "expect.fidelity_ok=false", "--set", "expect.max_avoid_s=10s",
                             "--set", "expect.max_step_time_ratio=100"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert stdout, stderr
    doc = json.loads(stdout)  # --json: one document on stdout and nothing else
    check_schema(doc)
    assert doc["datapath"] == datapath
    s = doc["summary"]
    # every message posted was delivered and checked end to end
    assert s["messages"]["failed"] == 0 and s["messages"]["completed"] == s["messages"]["sent"] == 24 * 4
    assert s["bytes"]["sent"] == s["bytes"]["delivered"] == s["bytes"]["verified"] == 24 * 4 * 256 * 1024
    assert len(doc["steps"]) == 24
    # the cut link carried traffic before the cut, and the controller never touched a flow
    [down] = [e for e in doc["events"] if e["action"] == "link_down"]
    assert down["target"] == "p0l0-p0s1" and down["avoid_s"] is not None
    # the repaired link carries traffic again within a bounded time: the probe back-off ceiling
    # (0.1 s) plus a few probe round trips
    [up] = [e for e in doc["events"] if e["action"] == "link_up"]
    assert up["revive_s"] is not None and 0 <= up["revive_s"] < 0.5
    assert doc["controller"]["flow_mods_after_boot"] == 0 and doc["controller"]["flow_mods_boot"] > 0
    cut = [link for link in doc["links"] if link["link"] == "p0l0-p0s1"]
    assert sum(link["tx_packets"] for link in cut) > 0
    # what was sent into the downed cable is the fault's loss, never blamed on the emulator
    assert sum(link["emulator_drops"] for link in cut) == 0
    # what senders put into the cut while it was down is counted on the cut link (on Linux routers the egress
    # program counts every packet sent into it, SACKs and probes too)
    down_drops = sum(link["down_drops"] for link in cut)
    assert down_drops == down["sent_into_fault"] if datapath == "ovs" else down_drops >= down["sent_into_fault"]
    assert down["sent_into_fault"] > 0 or down["avoid_s"] == 0
    # fidelity_ok was overridden to false, so that one expectation fails and the run exits 1
    assert [c["name"] for c in doc["expectations"] if not c["ok"]] == (["fidelity_ok"] if doc["fidelity"]["ok"] else [])
    assert proc.returncode == (1 if doc["fidelity"]["ok"] else 0), stderr
    for name in ("scenario.yaml", "steps.csv", "events.csv", "messages.csv", "runner.log", "controller.log",
                 "agent-h0.jsonl"):
        assert (out / name).exists(), name
    # the folder explains itself: no empty files, hosts and spines by name, units, what was overridden
    assert not [f.name for f in out.iterdir() if f.stat().st_size == 0]
    assert doc["status"] == "completed" and doc["overrides"]["expect.max_avoid_s"] == "10s"
    change = doc["ev_changes"][0]
    assert change["host"].startswith("h") and change["peer"].startswith("h")
    assert change["spine"] == f"p{change['plane']}s{(change['ev'] // 2) % 2}"
    assert {c["name"]: c["unit"] for c in doc["expectations"]}["max_avoid_s"] == "s"
    assert set(s["link_drops"]) == {"queue_drops", "loss_drops", "blackhole_drops", "down_drops"}
    # every retransmission has its time, within the workload
    marks = doc["recovery"].get("retransmitted", [])
    assert sum(n for _, n in marks) == s["packets"]["retransmitted"]
    assert all(-1.0 < t <= doc["duration_s"] + 0.5 for t, _ in marks)
    with open(out / "steps.csv") as f:
        assert len(list(csv.DictReader(f))) == 24
    assert leftovers(f"m{doc['run_id']}") == [] and not (STATE_DIR / f"{doc['run_id']}.json").exists()


def test_a_run_past_its_duration_limit_says_so(tmp_path):
    proc = mrclab("run", "scenarios/smoke.yaml", "--out", str(tmp_path / "r"), "--set", "workload.steps=5000",
                  "--set", "events=[]", "--set", "duration_limit=1s", "--set", "expect={}",
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["status"] == "duration_limit" and doc["expectations"][0]["name"] == "duration_limit"
    assert not doc["expectations"][0]["ok"] and len(doc["steps"]) < 5000


def test_impossible_expectation_exits_1(tmp_path):
    proc = mrclab("run", "scenarios/smoke.yaml", "--out", str(tmp_path / "r"), "--set", "workload.steps=3",
                  "--set", "events=[]", "--set", "expect={max_step_time_s: 1us}",
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert "max_step_time_s" in stdout and "FAILED" in stdout
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["status"] == "completed" and doc["unfired_events"] == [] and doc["events"] == []
    [check] = doc["expectations"]
    assert check == {"name": "max_step_time_s", "expected": 1e-6, "actual": doc["summary"]["step_time_s"]["p100"],
                     "unit": "s", "ok": False}


def test_an_event_after_the_workload_is_refused_before_any_lab(tmp_path):
    proc = mrclab("run", "scenarios/smoke.yaml", "--out", str(tmp_path / "r"), "--set", "workload.steps=3",
                  "--set", "events=[{at: 15s, action: link_down, target: p0l0-p0s1}]",
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "events[0].at: 15s is after the workload ends" in stderr, stderr
    assert not (tmp_path / "r").exists()


def _wait_for_agents(proc, timeout=60.0) -> RunState:
    """The run's state once its agents are up (the middle of a run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it got going"
        for path in STATE_DIR.glob("*.json"):
            try:
                state = RunState.load(path)
            except (OSError, ValueError):
                continue
            if state.owner_pid == proc.pid and any(label.startswith("agent") for _, _, label in state.processes):
                return state
        time.sleep(0.05)
    raise AssertionError("no agents started")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_run_stopped_midway_leaves_nothing(tmp_path, leftovers, how):
    decoy = subprocess.Popen(["bash", "-c", "exec -a controller sleep 60"])
    proc = mrclab("run", "scenarios/smoke.yaml", "--out", str(tmp_path / "r"), "--set", "workload.steps=500",
                  "--set", "duration_limit=60s", "--capture", "h0-p0l0,p0l0-p0s1",  # capture processes too
                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        state = _wait_for_agents(proc)
        assert sum(label.startswith("capture") for _, _, label in state.processes) == 2
        time.sleep(0.5)
        os.kill(proc.pid, getattr(signal, how))
        proc.wait(timeout=30)
        if how == "SIGKILL":
            clean = subprocess.run([sys.executable, "-m", "mrclab", "clean"], cwd=REPO, capture_output=True, text=True)
            assert clean.returncode == 0 and state.run_id in clean.stdout
        else:
            assert proc.returncode != 0 and "Traceback" not in proc.stderr.read()
            # the interrupted run says so, in results.json (so `mrclab report` can) and in runner.log
            doc = json.loads((tmp_path / "r" / "results.json").read_text())
            assert doc["status"] == "interrupted" and doc["error"] == "interrupted (SIGTERM)"
            assert "run stopped: interrupted (SIGTERM)" in (tmp_path / "r" / "runner.log").read_text()
        assert leftovers(state.prefix, state.processes) == []
        assert not state.path.exists()
        assert decoy.poll() is None, "an unrelated process named `controller` was killed"
    finally:
        for p in (proc, decoy):
            if p.poll() is None:
                p.kill()
                p.wait()
