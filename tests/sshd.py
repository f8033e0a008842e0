"""A real sshd (Debian's openssh-server) for tests: started on 127.0.0.1 and a free port, with its own
config, a throwaway host key and one authorized key, and stopped by its PID; and `mrclab` run against it,
with this checkout as the "remote" mrclab (MRCLAB_REMOTE_COMMAND) and the remote run directories and run
records in the sshd's temporary directory (MRCLAB_REMOTE_DIR, MRCLAB_STATE_DIR)."""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from mrclab.netns import entered
from tests.conftest import REPO

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mrclab-test", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text()


class Sshd:
    """`address` and `netns`: listen on that address inside that named network namespace (a test's "server")."""

    def __init__(self, root: Path, sftp: bool = True, *, address: str = "127.0.0.1", netns: str | None = None):
        self.root, self.port, self.address = root, free_port(), address
        host_pub = keygen(root / "host")
        keygen(root / "client")
        keygen(root / "stranger")
        (root / "authorized_keys").write_text((root / "client.pub").read_text())
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(f"[{address}]:{self.port} {' '.join(host_pub.split()[:2])}\n")
        (root / "sshd_config").write_text("\n".join([
            f"Port {self.port}", f"ListenAddress {address}", f"HostKey {root}/host", f"PidFile {root}/sshd.pid",
            f"AuthorizedKeysFile {root}/authorized_keys", "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "AllowUsers root", "UsePAM no",
            "StrictModes no", *(["Subsystem sftp internal-sftp"] if sftp else []), "MaxStartups 64",
            "LogLevel VERBOSE", ""]))
        self.made_privsep = not Path("/run/sshd").exists()
        if self.made_privsep:
            os.mkdir("/run/sshd", 0o755)
        enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
        self.proc = subprocess.Popen([*enter, str(SSHD), "-D", "-E", str(root / "sshd.log"), "-f",
                                      str(root / "sshd_config")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            assert self.proc.poll() is None, (root / "sshd.log").read_text()
            try:
                if netns:
                    with entered(self.proc.pid):
                        socket.create_connection((address, self.port), timeout=1).close()
                else:
                    socket.create_connection((address, self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "sshd did not start listening"
                time.sleep(0.05)

    @property
    def target(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"root@{host}:{self.port}"

    def sessions(self) -> list[int]:
        """Its children: one process per SSH connection."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True, check=False)
        return [int(pid) for pid in out.stdout.split()]

    def stop(self) -> None:
        """The listener and its sessions: a session whose client vanished behind a partition would otherwise wait
        minutes for TCP to give up."""
        sessions = self.sessions()
        self.proc.terminate()
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.made_privsep:
            os.rmdir("/run/sshd")


def remote_env(sshd: Sshd, command: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "MRCLAB_TARGET")}
    env.update(HOME=str(sshd.root / "home"), MRCLAB_REMOTE_DIR=str(sshd.root / "remote"),
               MRCLAB_REMOTE_COMMAND=command or shlex.join(
                   ["env", f"MRCLAB_STATE_DIR={sshd.root}/state", sys.executable, "-m", "mrclab"]))
    return env


def mrclab(sshd: Sshd, *args, command: str | None = None, identity: str = "client", known_hosts: Path | None = None,
           **kwargs):
    ssh = ["--identity", str(sshd.root / identity), "--known-hosts", str(known_hosts or sshd.known_hosts)]
    return subprocess.Popen([sys.executable, "-m", "mrclab", *args, *ssh], cwd=REPO, env=remote_env(sshd, command),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def one_line_exit_3(proc, fragment: str) -> str:
    _, stderr = proc.communicate(timeout=60)
    lines = stderr.strip().splitlines()
    assert proc.returncode == 3, stderr
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in stderr, stderr
    return lines[0]
