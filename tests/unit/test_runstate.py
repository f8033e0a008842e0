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


def test_clean_tells_the_run_folder_of_a_dead_runner_and_drops_its_empty_stderr_files(state_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "agent-h0.stderr").write_text("")
    (out / "agent-h1.stderr").write_text("Traceback: something")
    assert runstate.write_status(out, "running: run x")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = runstate.RunState("zzz", child.pid, 12345, out_dir=str(out))
    dead.save()
    removed = runstate.clean_stale()
    assert f"zzz: status of {out}: killed" in removed
    assert (out / "status").read_text().startswith(f"killed: its runner (pid {child.pid}) ended without finishing")
    assert sorted(p.name for p in out.iterdir()) == ["agent-h1.stderr", "status"]


def test_status_is_written_without_following_a_link(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / "status").symlink_to(victim)
    assert runstate.write_status(out, "completed")
    assert victim.read_text() == "precious" and (out / "status").read_text() == "completed\n"
    assert not runstate.write_status(tmp_path / "gone", "completed")
    (tmp_path / "link").symlink_to(out)
    assert not runstate.write_status(tmp_path / "link", "completed")  # the folder itself through a link: refused


def test_clean_removes_crash_logs_older_than_a_day_only(state_dir):
    import os
    import time
    old, new = state_dir / "crash-old.log", state_dir / "crash-new.log"
    old.write_text("tb")
    new.write_text("tb")
    day_ago = time.time() - runstate.CRASH_LOG_AGE_S - 60
    os.utime(old, (day_ago, day_ago))
    removed = runstate.clean_stale()
    assert removed == [f"crash log {old} (older than a day)"] and new.exists() and not old.exists()


def test_ps_lists_live_runs_with_their_folders_and_pids(state_dir, tmp_path, monkeypatch):
    import io
    import json

    from rich.console import Console

    from mrclab import cli

    folder = tmp_path / "results" / "smoke-1"
    folder.mkdir(parents=True)
    runstate.write_status(folder, "running: run abc")
    live = runstate.RunState.create("run smoke")
    live.out_dir = str(folder)
    live.save()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    runstate.RunState("zzz", child.pid, 12345, "run gone").save()  # its runner died: not live
    printed = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=printed, width=80))
    cli.cli.main(["ps"], standalone_mode=False)
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith(f"{live.run_id}  pid {live.owner_pid}  0 min ") and lines[0].endswith("run smoke")
    assert lines[1].startswith("    ") and " ".join(line.strip() for line in lines[1:]) == f"{folder}: running: run abc"
    monkeypatch.setattr(cli, "emit_json", lambda doc: printed.write(json.dumps(doc)))
    printed.seek(0)
    printed.truncate()
    cli.cli.main(["ps", "--json"], standalone_mode=False)
    [row] = json.loads(printed.getvalue())["runs"]
    assert (row["run_id"], row["pid"], row["dir"], row["what"]) == (live.run_id, live.owner_pid, str(folder),
                                                                     "run smoke")
