"""What `--target` names, and the progress stream a remote run is followed by; no SSH needed here."""
import json
import re
import subprocess
import sys
import time

import pytest

from mrclab.errors import EnvironmentNotReady, UsageError
from mrclab.progress import JsonlWriter, Progress, done_record, view
from mrclab.remote import target
from mrclab.remote.ssh import sh
from tests.conftest import REPO

DATA = REPO / "tests" / "unit" / "data"


@pytest.mark.parametrize("spec,host,port,user", [
    ("alice@lab1:2200", "lab1", 2200, "alice"),
    ("root@10.0.0.5", "10.0.0.5", 22, "root"),
    ("bob@[::1]:2222", "::1", 2222, "bob"),
    ("[fd00::7]", "fd00::7", 22, None),
])
def test_plain_targets(spec, host, port, user, tmp_path):
    t = target.parse(spec, ssh_config=tmp_path / "none")
    assert (t.host, t.port) == (host, port)
    assert t.user == (user or __import__("getpass").getuser())


@pytest.mark.parametrize("spec,why", [
    ("lab1:0", "port '0'"), ("lab1:70000", "port '70000'"), ("lab1:ssh", "port 'ssh'"), ("lab1:\u00b2", "port"),
    ("a b", "expected [user@]host[:port], vagrant or vm"), ("user@", "expected"), ("@host", "expected"),
    ("h:1:2", "expected"), ("-oProxyCommand=x", "host '-oProxyCommand=x' starts with '-'"),
    ("-l@lab1", "user '-l' starts with '-'"),
])
def test_malformed_targets_are_bad_input(spec, why, tmp_path):
    with pytest.raises(UsageError, match=re.escape(f"--target {spec!r}: ") + ".*" + re.escape(why)):
        target.parse(spec, ssh_config=tmp_path / "none")


def test_user_ssh_config_is_honoured_and_the_command_line_wins(tmp_path):
    config = tmp_path / "config"
    config.write_text("Host lab\n  HostName lab.example.org\n  User carol\n  Port 2201\n  IdentityFile /keys/lab\n")
    t = target.parse("lab", ssh_config=config)
    assert (t.host, t.port, t.user, t.identities) == ("lab.example.org", 2201, "carol", ("/keys/lab",))
    t = target.parse("dave@lab:22", ssh_config=config)
    assert (t.host, t.port, t.user) == ("lab.example.org", 22, "dave")
    assert t.address == "lab.example.org" and target.parse("lab", ssh_config=config).address == "[lab.example.org]:2201"


@pytest.mark.parametrize("provider,host,port,key", [
    ("virtualbox", "127.0.0.1", 2222, "/home/alice/My Labs/mrclab/.vagrant/machines/default/virtualbox/private_key"),
    ("libvirt", "192.168.121.57", 22, "/home/alice/mrclab/.vagrant/machines/default/libvirt/private_key"),
])
def test_vagrant_ssh_config(provider, host, port, key):
    """Samples in the form vagrant's ssh_config template prints (a quoted key path included); vagrant's
    `UserKnownHostsFile /dev/null` is not taken as a known_hosts file: host keys are still checked."""
    t = target.from_ssh_config((DATA / f"vagrant-ssh-config-{provider}.txt").read_text(), "vagrant")
    assert (t.host, t.port, t.user, t.identities, t.known_hosts) == (host, port, "vagrant", (key,), None)


def test_vagrant_target_runs_vagrant_ssh_config(tmp_path, monkeypatch):
    fake = tmp_path / "vagrant"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = ssh-config ] && exec cat {DATA}/vagrant-ssh-config-virtualbox.txt\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert target.parse("vagrant").port == 2222
    fake.write_text("#!/bin/sh\necho 'A Vagrant environment or target machine is required' >&2\nexit 1\n")
    with pytest.raises(EnvironmentNotReady, match="vagrant up"):
        target.parse("vagrant")


def test_vm_target_reads_the_vm_ssh_config(tmp_path, monkeypatch):
    monkeypatch.setattr(target, "VM_SSH_CONFIG", tmp_path / ".vm" / "ssh-config")
    with pytest.raises(EnvironmentNotReady, match="mrclab vm up"):
        target.parse("vm")
    (tmp_path / ".vm").mkdir()
    (tmp_path / ".vm" / "ssh-config").write_text(
        f"Host mrclab-vm\n  HostName 127.0.0.1\n  Port 40022\n  User root\n  IdentityFile {tmp_path}/.vm/id_ed25519\n"
        f"  UserKnownHostsFile {tmp_path}/.vm/known_hosts\n")
    t = target.parse("vm")
    assert (t.host, t.port, t.user, t.known_hosts) == ("127.0.0.1", 40022, "root", f"{tmp_path}/.vm/known_hosts")


def test_shell_words_are_quoted():
    assert sh("mrclab", "run", "a b.yaml", "--set", "name=$(reboot)") == \
        "mrclab run 'a b.yaml' --set 'name=$(reboot)'"


def test_progress_stream_draws_the_same_view(tmp_path):
    path = tmp_path / "progress.jsonl"
    writer = JsonlWriter(path)
    header = {"event": "start", "pid": 1, "run_id": "abc", "scenario": "smoke", "transport": "mrc",
              "routing": "static-srv6", "steps_total": 3}
    writer.write(header)
    progress = Progress(3)
    writer.follow(progress)
    progress.step, progress.step_started, progress.delivered_bytes = 2, time.monotonic(), 3 << 20
    progress.active_faults["p0l0-p0s1"] = "link_down"
    time.sleep(0.3)
    writer.stop()
    doc = {"run_id": "abc", "summary": {"x": 1}, "series": [1, 2, 3], "expectations": []}
    writer.write(done_record(doc, tmp_path / "out"))
    writer.file.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0] == header and records[-1]["results"] == {"run_id": "abc", "summary": {"x": 1},
                                                               "expectations": []}
    last = [r for r in records if r["event"] == "progress"][-1]
    assert last["step"] == 2 and last["active_faults"] == {"p0l0-p0s1": "link_down"}
    from rich.console import Console
    console = Console(width=120, record=True)
    console.print(view(header, last))
    text = console.export_text()
    assert "3/3" in text and "3.0 MiB" in text and "link_down p0l0-p0s1" in text


def test_progress_file_is_not_followed_through_a_link(tmp_path):
    (tmp_path / "elsewhere").write_text("keep")
    (tmp_path / "progress.jsonl").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        JsonlWriter(tmp_path / "progress.jsonl")
    assert (tmp_path / "elsewhere").read_text() == "keep"


def mrclab(*args):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO,
                          check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(REPO / "tests")})


@pytest.mark.parametrize("args,fragment", [
    (["--target", "lab1:99999"], "port '99999'"),
    (["--target", "a b"], "expected [user@]host[:port]"),
    (["--identity", "/k"], "go with --target"),
    (["--target", "lab1", "--progress-jsonl", "/tmp/p"], "--progress-jsonl"),
    (["--target", "lab1", "--set", "workload.steps=-1"], "steps"),   # the scenario is checked before connecting
])
def test_run_target_bad_input_exits_2(args, fragment):
    result = mrclab("run", "scenarios/smoke.yaml", *args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and fragment in lines[0], result.stderr
