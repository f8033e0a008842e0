"""Trust boundaries on a shared machine: files root writes, what `clean` may delete, where results go."""
import json
import os
import stat
import subprocess
import sys

import pytest

from mrclab import check, cli, runstate
from mrclab.errors import UsageError


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "state"
    monkeypatch.setattr(runstate, "STATE_DIR", path)
    return path


def crash(monkeypatch, capsys) -> str:
    def boom(*_a, **_k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(cli.cli, "main", boom)
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 1
    line = capsys.readouterr().err.strip()
    assert "internal error: RuntimeError: a bug" in line and "\n" not in line
    return line.rsplit("traceback in ", 1)[1].rstrip(")")


@pytest.mark.skipif(os.geteuid() != 0, reason="root's crash log lives in its run-state directory")
def test_crash_log_is_a_new_private_file_in_roots_own_directory(monkeypatch, capsys, state_dir):
    first, second = crash(monkeypatch, capsys), crash(monkeypatch, capsys)
    assert first != second, "a fixed name can be planted as a link beforehand"
    for path in (first, second):
        assert os.path.dirname(path) == str(state_dir)
        info = os.lstat(path)
        assert stat.S_ISREG(info.st_mode) and info.st_mode & 0o777 == 0o600 and info.st_uid == 0
        with open(path) as f:
            assert "RuntimeError: a bug" in f.read()
    assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700


def test_a_state_directory_others_can_write_is_refused(state_dir):
    state_dir.mkdir(mode=0o777)
    os.chmod(state_dir, 0o777)
    with pytest.raises(PermissionError):
        runstate.RunState.create("x")


def test_run_state_files_are_private(state_dir):
    run = runstate.RunState.create("test")
    run.add_bridge(run.prefix + "b")
    assert stat.S_IMODE(os.stat(run.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700
    run.path.unlink()


def test_root_takes_no_state_or_cache_directory_from_the_environment(monkeypatch):
    monkeypatch.setenv("MRCLAB_STATE_DIR", "/tmp/elsewhere")
    expected = "/run/mrclab" if os.geteuid() == 0 else "/tmp/elsewhere"
    assert str(runstate.trusted_dir("MRCLAB_STATE_DIR", "/run/mrclab")) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make an interface")
def test_clean_deletes_recorded_names_only_and_reports_what_existed(state_dir):
    run = runstate.RunState.create("test")
    run.add_bridge(run.prefix + "gone")          # recorded, never made: not reported
    run.add_interface(run.prefix + "gone0")
    bystander = run.prefix + "tap0"             # carries the prefix, not recorded: left alone
    subprocess.run(["ip", "link", "add", bystander, "type", "veth", "peer", "name", run.prefix + "tap1"],
                   check=True)
    try:
        removed = run.teardown()
        assert removed == [], removed
        assert os.path.exists(f"/sys/class/net/{bystander}")
    finally:
        subprocess.run(["ip", "link", "del", bystander], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="the qdisc probe needs root")
def test_the_checks_probe_namespace_is_recorded_before_it_is_made(state_dir, monkeypatch):
    seen = []
    real_run = check._run

    def spy(argv):
        if argv[:3] == ["ip", "netns", "add"]:
            records = [json.loads(p.read_text()) for p in state_dir.glob("*.json")]
            seen.append(any(argv[3] in r["namespaces"] for r in records))
        return real_run(argv)
    monkeypatch.setattr(check, "_run", spy)
    check._qdisc_works(["handle", "1:", "htb"])
    assert seen == [True]
    assert not list(state_dir.glob("*.json"))


def test_results_directory_stays_in_results_and_out_must_be_ours(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.results_dir("smoke", None).parent.resolve() == (tmp_path / "results").resolve()
    with pytest.raises(UsageError, match="outside results"):
        cli.results_dir("../../x", None)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UsageError, match="symbolic link"):
        cli.results_dir("smoke", str(tmp_path / "link"))


def test_a_scenario_name_cannot_escape_results(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: ../../../tmp/x\ntopology: clos-2p-2l-2s\nworkload: {pattern: ring-allreduce}\n")
    result = subprocess.run([sys.executable, "-m", "mrclab", "run", str(path)], capture_output=True, text=True,
                            cwd=tmp_path, check=False)
    assert result.returncode == 2 and "name:" in result.stderr and not (tmp_path / "results").exists()
