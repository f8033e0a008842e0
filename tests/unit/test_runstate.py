import subprocess
import sys

import pytest

from mrclab import runstate


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "STATE_DIR", tmp_path)
    return tmp_path


def test_names_must_carry_the_prefix(state_dir):
    run = runstate.RunState.create("test")
    assert run.prefix == f"m{run.run_id}" and len(run.run_id) == runstate.ID_LEN
    run.add_bridge(run.prefix + "p0l0")
    with pytest.raises(ValueError):
        run.add_interface("eth0")
    assert runstate.RunState.load(run.path).bridges == [run.prefix + "p0l0"]
    run.path.unlink()


def test_live_runs_are_not_stale_and_dead_ones_are(state_dir):
    live = runstate.RunState.create("live")
    assert not live.is_stale()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = runstate.RunState(live.run_id + "x", child.pid, 12345)
    assert dead.is_stale()
    live.path.unlink()


def test_teardown_kills_only_recorded_processes_with_matching_start_time(state_dir):
    mine = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        run = runstate.RunState.create("kill")
        run.add_process(mine.pid, "sleep")
        # a recorded PID whose start time no longer matches (a recycled PID) is left alone
        run.processes.append([other.pid, 1, "recycled"])
        run.owner_pid, run.owner_start = other.pid, 1
        run.save()
        assert [r.run_id for r in runstate.all_runs()] == [run.run_id]
        removed = runstate.clean_stale()
        assert any("sleep" in item for item in removed)
        assert mine.wait(timeout=5) is not None
        assert other.poll() is None
        assert not run.path.exists()
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()
                p.wait()
