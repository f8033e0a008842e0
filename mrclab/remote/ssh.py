"""One SSH connection to a target (paramiko), with the rules a lab machine's root login deserves.

- The host key must be in known_hosts. An unknown key is refused, with its fingerprint, unless
  the user passed --accept-new-host-key (then it is added to that file, as OpenSSH's
  `StrictHostKeyChecking accept-new` does); a changed key is always refused.
- Keys and the SSH agent only: no password is ever asked for or sent.
- Keepalives, so a dead link is noticed rather than waited on.
- A command's stdout and stderr are both read while waiting for its exit status: a command
  that fills one pipe while we wait on the other would otherwise never finish.
- Every remote shell string is built from `shlex.quote`d words (`sh()`).

Every failure to reach or log in is one line and exit 3 (EnvironmentNotReady).
"""
from __future__ import annotations

import logging
import select
import shlex
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..errors import EnvironmentNotReady
from .target import Target

KEEPALIVE_S = 15
CONNECT_TIMEOUT_S = 15


def sh(*words) -> str:
    """A shell command line from words, each quoted."""
    return " ".join(shlex.quote(str(w)) for w in words)


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str

    def last_line(self) -> str:
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[-1] if lines else f"exit code {self.code}"


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, target: Target, known_hosts: Path):
        self.target, self.known_hosts = target, known_hosts

    def missing_host_key(self, client, hostname, key):
        raise EnvironmentNotReady(
            f"{self.target.spec}: host key {key.get_name()} {key.fingerprint} of {self.target.address} is not in "
            f"{self.known_hosts}: check that fingerprint on the machine (ssh-keygen -lf /etc/ssh/ssh_host_*.pub), "
            "then pass --accept-new-host-key once")


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Accept an unknown key and remember it; a key that differs from a remembered one never gets here."""

    def __init__(self, known_hosts: Path, say):
        self.known_hosts, self.say = known_hosts, say

    def missing_host_key(self, client, hostname, key):
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.say(f"added host key {key.get_name()} {key.fingerprint} of {hostname} to {self.known_hosts}")


def _quiet_paramiko() -> None:
    """paramiko logs a reset connection as an error, which Python prints on stderr next to mrclab's own line
    saying what it means; and Mininet, once imported (a lab over servers imports it), gives every logger created
    afterwards a console handler of its own that writes without a newline, onto the start of that line. paramiko's
    loggers (made with its first transport) are plain ones, and what they log goes nowhere."""
    logging.setLoggerClass(logging.Logger)
    top = logging.getLogger("paramiko")
    for handler in top.handlers[:]:
        top.removeHandler(handler)
    top.addHandler(logging.NullHandler())


class Connection:
    """An open, authenticated connection; use as a context manager."""

    def __init__(self, target: Target, *, identity: str | None = None, known_hosts: str | None = None,
                 accept_new_host_key: bool = False, say=print):
        self.target = target
        self.known_hosts = Path(known_hosts or target.known_hosts or "~/.ssh/known_hosts").expanduser()
        _quiet_paramiko()
        self.client = paramiko.SSHClient()
        if self.known_hosts.exists():
            try:
                self.client.load_host_keys(str(self.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise EnvironmentNotReady(f"{self.known_hosts}: cannot read it as known_hosts ({exc})") from None
        self.client.set_missing_host_key_policy(_AcceptNew(self.known_hosts, say) if accept_new_host_key
                                                else _RefuseUnknown(target, self.known_hosts))
        keys = [identity] if identity else list(target.identities)
        missing = [k for k in keys if not Path(k).expanduser().is_file()]
        if identity and missing:
            raise EnvironmentNotReady(f"--identity {identity}: no such key file")
        keys = [str(Path(k).expanduser()) for k in keys if k not in missing]
        self._connect(keys)
        transport = self.client.get_transport()
        transport.set_keepalive(KEEPALIVE_S)
        self._sftp: paramiko.SFTPClient | None = None
        try:  # before anything is run or written there: mrclab copies every file over SFTP
            self._sftp = self.client.open_sftp()
        except (paramiko.SSHException, EOFError, OSError):
            self.client.close()
            raise EnvironmentNotReady(
                f"target {target.spec}: its sshd offers no SFTP subsystem, which mrclab needs to copy files: add "
                "`Subsystem sftp internal-sftp` to /etc/ssh/sshd_config there and reload sshd") from None

    def _connect(self, keys: list[str]) -> None:
        t = self.target
        where = f"target {t.spec}"
        try:
            self.client.connect(t.host, port=t.port, username=t.user, key_filename=keys or None,
                                allow_agent=True, look_for_keys=not keys, password=None,
                                timeout=CONNECT_TIMEOUT_S, banner_timeout=CONNECT_TIMEOUT_S,
                                auth_timeout=CONNECT_TIMEOUT_S)
        except EnvironmentNotReady:
            self.client.close()
            raise
        except socket.gaierror:
            self.client.close()
            raise EnvironmentNotReady(f"{where}: cannot resolve host name {t.host!r}") from None
        except paramiko.BadHostKeyException as exc:
            self.client.close()
            raise EnvironmentNotReady(
                f"{where}: host key {exc.key.fingerprint} does not match the one in {self.known_hosts} (a reinstalled "
                f"machine, or someone in between): if you trust the new key, remove the old one with "
                f"`ssh-keygen -R {shlex.quote(t.address)} -f {shlex.quote(str(self.known_hosts))}`") from None
        except paramiko.PasswordRequiredException:
            self.client.close()
            raise EnvironmentNotReady(f"{where}: the key is protected by a passphrase: load it into ssh-agent "
                                      "(ssh-add) instead") from None
        except paramiko.AuthenticationException:
            self.client.close()
            raise EnvironmentNotReady(f"{where}: authentication as {t.user} failed (keys and the SSH agent only: "
                                      "pass --identity FILE, or ssh-add the key)") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.client.close()
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
                why = "connection refused"
            raise EnvironmentNotReady(f"{where}: cannot connect to {t.host} port {t.port}: {why}") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self.client.close()

    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def run(self, command: str, timeout: float = 60.0) -> Result:
        """Run a shell command line there; both output streams are read as they come."""
        channel = self.client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
        channel.exec_command(command)
        channel.shutdown_write()
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        try:
            while True:
                select.select([channel], [], [], 0.2)
                while channel.recv_ready():
                    out += channel.recv(1 << 16)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(1 << 16)
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    raise EnvironmentNotReady(f"{self.target.spec}: `{command}` did not finish in {timeout:g} s")
            return Result(channel.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace"))
        finally:
            channel.close()

    def read_from(self, path: str, offset: int) -> bytes:
        """What a remote file holds from `offset` on (b"" when it does not exist yet)."""
        try:
            with self.sftp.open(path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(path)
            return True
        except FileNotFoundError:
            return False

    def download_tree(self, remote: str, local: Path) -> int:
        """Copy a remote directory into `local` (made if missing); returns the number of files."""
        local.mkdir(parents=True, exist_ok=True)
        count = 0
        for entry in self.sftp.listdir_attr(remote):
            source, dest = f"{remote}/{entry.filename}", local / entry.filename
            if stat.S_ISDIR(entry.st_mode):
                count += self.download_tree(source, dest)
            elif stat.S_ISREG(entry.st_mode):
                self.sftp.get(source, str(dest))
                count += 1
        return count
