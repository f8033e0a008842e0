"""A run that fails midway keeps what it measured, and a runner killed outright takes its processes with it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrclab.errors import MrclabError
from mrclab.runstate import STATE_DIR, RunState

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]


def test_a_failed_event_keeps_the_results_measured_until_then(tmp_path, monkeypatch, leftovers):
    from mrclab import runner
    from mrclab.fabric.net import Fabric
    from mrclab.spec import scenario as scenario_mod

    real_apply = Fabric.apply

    def apply(self, action, target, **setting):
        if action == "rate":
            raise MrclabError(f"tc refused rate {setting['rate_bps']:g} on {target}")
        return real_apply(self, action, target, **setting)
    monkeypatch.setattr(Fabric, "apply", apply)
    spec = scenario_mod.load("smoke", ["workload.steps=6", "expect={}",
                                       "events=[{at_step: 3, action: rate, target: p0l0-p0s1, rate: 1Mbit}]"])
    out = tmp_path / "r"
    with pytest.raises(runner.RunFailed, match="tc refused rate 1e\\+06 on p0l0-p0s1") as info:
        runner.run_scenario(spec, out)
    assert info.value.exit_code == 1
    doc = json.loads((out / "results.json").read_text())
    assert doc["status"] == "failed" and "tc refused" in doc["error"]
    assert len(doc["steps"]) == 3 and doc["summary"]["messages"]["completed"] > 0
    assert doc["expectations"][0] == {"name": "run", "expected": "completed", "actual": doc["error"], "ok": False}
    assert "run stopped: tc refused" in (out / "runner.log").read_text()
    assert (out / "messages.csv").exists()
    from mrclab.report import write_report
    assert write_report(str(out)).html.exists()  # a failed run's results still make a report
    assert leftovers(f"m{doc['run_id']}") == []


def _alive(processes: list[list]) -> list[str]:
    from mrclab.runstate import proc_start_time
    out = []
    for pid, start, label in processes:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if start is not None and proc_start_time(pid) == start and state not in ("Z", "X"):
            out.append(f"{pid} ({label})")
    return out


def test_no_process_of_a_sigkilled_run_survives_5_seconds(tmp_path, leftovers):
    proc = subprocess.Popen([sys.executable, "-m", "mrclab", "run", "scenarios/smoke.yaml", "--out",
                             str(tmp_path / "r"), "--set", "workload.steps=500", "--set", "duration_limit=60s"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, state = time.monotonic() + 60, None
        while state is None:
            assert proc.poll() is None and time.monotonic() < deadline, "the run never started its agents"
            for path in STATE_DIR.glob("*.json"):
                try:
                    candidate = RunState.load(path)
                except (OSError, ValueError):
                    continue
                if candidate.owner_pid == proc.pid and any(p[2].startswith("agent") for p in candidate.processes):
                    state = candidate
            time.sleep(0.05)
        time.sleep(0.5)
        state = RunState.load(state.path)
        assert any(label.startswith("controller") for _, _, label in state.processes)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = time.monotonic()
        while _alive(state.processes) and time.monotonic() - killed_at < 5:
            time.sleep(0.1)
        survivors = _alive(state.processes)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        clean = subprocess.run([sys.executable, "-m", "mrclab", "clean"], cwd=REPO, capture_output=True, text=True,
                               check=False)
    assert survivors == [], f"alive 5 s after the runner's SIGKILL: {survivors}"
    assert clean.returncode == 0, clean.stderr
    assert leftovers(state.prefix, state.processes) == []
