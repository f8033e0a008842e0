"""`mrclab run --target` through a real sshd on 127.0.0.1 (tests/sshd.py): the "remote" machine is this
one, its mrclab this checkout."""
from __future__ import annotations

import json
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mrclab import __version__, build
from tests.conftest import REPO
from tests.integration.test_run import check_schema
from tests.sshd import SSHD, Sshd, free_port, keygen, mrclab, one_line_exit_3

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

SMOKE_SETS = ("--set", "duration_limit=120s", "--set", "expect.fidelity_ok=false", "--set", "expect.max_avoid_s=10s",
              "--set", "expect.max_step_time_ratio=100")


@pytest.fixture(scope="module")
def sshd():
    if not SSHD.exists():
        pytest.skip("openssh-server is not installed (vagrant/provision.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="mrs"))  # short: run sockets live under MRCLAB_STATE_DIR
    server = Sshd(root)
    try:
        yield server
    finally:
        server.stop()
        with socket.socket() as s:  # nothing of ours listens any more
            assert s.connect_ex(("127.0.0.1", server.port)) != 0
        shutil.rmtree(root, ignore_errors=True)


def test_smoke_runs_remotely_and_results_come_back(sshd, tmp_path, leftovers):
    local = tmp_path / "fetched"
    proc = mrclab(sshd, "run", "scenarios/smoke.yaml", "--target", sshd.target, "--out", str(local), *SMOKE_SETS)
    stdout, stderr = proc.communicate(timeout=180)
    doc = json.loads((local / "results.json").read_text())
    check_schema(doc)
    s = doc["summary"]
    assert s["bytes"]["sent"] == s["bytes"]["delivered"] == s["bytes"]["verified"] == 24 * 4 * 256 * 1024
    assert proc.returncode == (1 if doc["fidelity"]["ok"] else 0), stderr
    # the summary is drawn here, from the run's progress stream
    assert "results in" in stdout and "after boot" in stdout and "expectations" in stdout
    for name in ("scenario.yaml", "steps.csv", "events.csv", "messages.csv", "runner.log", "agent-h0.jsonl"):
        assert (local / name).is_file(), name
    [job] = (sshd.root / "remote" / "runs").iterdir()
    assert f"run {job.name} on {sshd.target}" in stderr
    assert (job / "exit_code").read_text().strip() == str(proc.returncode)
    records = [json.loads(line) for line in (job / "progress.jsonl").read_text().splitlines()]
    assert records[0]["event"] == "start" and records[-1]["event"] == "done"
    assert [r for r in records if r["event"] == "progress"][-1]["step"] == 23
    assert records[-1]["results"]["summary"] == s
    assert leftovers(f"m{doc['run_id']}") == [] and not list((sshd.root / "state").glob("*.json"))
    # fetched results are results: report works on them as on local ones
    report = subprocess.run([sys.executable, "-m", "mrclab", "report", str(local)], capture_output=True, text=True,
                            cwd=REPO, check=False)
    assert report.returncode == 0 and (local / "report.html").is_file(), report.stderr
    # and so does fetching them again, by run id
    again = mrclab(sshd, "remote", "fetch", sshd.target, job.name, "--out", str(tmp_path / "again"), "--json")
    out, err = again.communicate(timeout=60)
    assert again.returncode == proc.returncode, err
    assert json.loads(out)["run_id"] == doc["run_id"]


def started_job(sshd: Sshd, proc) -> Path:
    """The run directory of the run `proc` started there, once its steps are under way."""
    runs = sshd.root / "remote" / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        for job in set(runs.iterdir()) - before if runs.exists() else ():
            progress = job / "progress.jsonl"
            if progress.exists() and '"event": "progress"' in progress.read_text():
                return job
        time.sleep(0.1)


def pure_there(sshd: Sshd) -> str:
    """The remote mrclab on the pure build, whatever this one runs."""
    return shlex.join(["env", "MRCLAB_PURE=1", f"MRCLAB_STATE_DIR={sshd.root}/state", sys.executable, "-m", "mrclab"])


def test_a_dropped_session_does_not_stop_the_run(sshd, tmp_path, leftovers):
    """The target runs the pure build: a difference from this one's is named in a line, and the run goes on."""
    proc = mrclab(sshd, "run", "scenarios/smoke.yaml", "--target", sshd.target, "--out", str(tmp_path / "r"),
                  "--set", "workload.steps=300", "--set", "events=[]", "--set", "expect={}", command=pure_there(sshd))
    job = started_job(sshd, proc)
    proc.kill()  # the client dies, and its SSH connection with it
    _, stderr = proc.communicate()
    if build.running()["build"] == "compiled":
        assert f"note: target {sshd.target} runs the pure transport build (MRCLAB_PURE=1), this mrclab the " \
               "compiled one" in stderr, stderr
    assert not (job / "exit_code").exists()
    fetch = mrclab(sshd, "remote", "fetch", sshd.target, job.name, "--out", str(tmp_path / "later"), "--json")
    stdout, stderr = fetch.communicate(timeout=120)
    assert fetch.returncode == 0, stderr
    doc = json.loads(stdout)
    assert doc["summary"]["messages"]["completed"] == 300 * 4 and (tmp_path / "later" / "results.json").is_file()
    assert leftovers(f"m{doc['run_id']}") == []


def test_ctrl_c_stops_the_remote_run_and_leaves_nothing(sshd, tmp_path, leftovers):
    proc = mrclab(sshd, "run", "scenarios/smoke.yaml", "--target", sshd.target, "--out", str(tmp_path / "r"),
                  "--set", "workload.steps=400")
    started = started_job(sshd, proc)
    header = json.loads((started / "progress.jsonl").read_text().splitlines()[0])
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert f"run {started.name} was stopped and torn down" in stderr
    assert (started / "exit_code").read_text().strip() == str(128 + signal.SIGTERM)
    # the run's own teardown ran there: no bridge, interface, namespace, process or record is left
    assert leftovers(f"m{header['run_id']}") == []
    assert not (sshd.root / "state" / f"{header['run_id']}.json").exists()
    run_pid = int((started / "run.pid").read_text())
    assert not Path(f"/proc/{run_pid}").exists() and not Path(f"/proc/{header['pid']}").exists()


def test_unknown_host_key_is_refused_unless_accepted(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    line = one_line_exit_3(mrclab(sshd, "remote", "clean", sshd.target, known_hosts=empty), "is not in")
    assert "SHA256:" in line and "--accept-new-host-key" in line
    assert empty.read_text() == ""
    accepted = mrclab(sshd, "remote", "clean", sshd.target, "--accept-new-host-key", known_hosts=empty)
    stdout, stderr = accepted.communicate(timeout=60)
    assert accepted.returncode == 0, stderr
    assert "nothing to clean" in stdout and "added host key" in stderr
    assert empty.read_text().split()[1:] == sshd.known_hosts.read_text().split()[1:]


def test_wrong_host_key_is_refused(sshd, tmp_path):
    wrong = tmp_path / "known_hosts"
    other = keygen(tmp_path / "impostor")
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(other.split()[:2])}\n")
    for accept in ((), ("--accept-new-host-key",)):  # a changed key is never accepted
        line = one_line_exit_3(mrclab(sshd, "remote", "clean", sshd.target, *accept, known_hosts=wrong),
                               "does not match")
        assert "ssh-keygen -R" in line


def test_version_mismatch_names_the_fix(sshd, tmp_path):
    old = tmp_path / "old-mrclab"
    old.write_text("#!/bin/sh\necho 'mrclab, version 0.0.1'\n")
    old.chmod(0o755)
    line = one_line_exit_3(mrclab(sshd, "run", "scenarios/smoke.yaml", "--target", sshd.target, command=str(old)),
                           "has mrclab 0.0.1")
    assert f"this is {__version__}" in line and f"mrclab remote setup {sshd.target}" in line


@pytest.mark.parametrize("case", ["unresolvable", "refused", "auth", "no-mrclab"])
def test_bad_targets_give_one_line_and_exit_3(sshd, tmp_path, case):
    target, identity, command, fragment = sshd.target, "client", None, ""
    if case == "unresolvable":
        target, fragment = "root@no-such-host.invalid", "cannot resolve host name"
    elif case == "refused":
        target, fragment = f"root@127.0.0.1:{free_port()}", "connection refused"
    elif case == "auth":
        identity, fragment = "stranger", "authentication as root failed"
    else:
        command, fragment = str(tmp_path / "absent" / "mrclab"), "no mrclab there"
    proc = mrclab(sshd, "run", "scenarios/smoke.yaml", "--target", target, identity=identity, command=command)
    line = one_line_exit_3(proc, fragment)
    if case == "no-mrclab":
        assert f"mrclab remote setup {target}" in line

