"""Where a remote run goes: `[user@]host[:port]`, `vagrant` or `vm`, resolved to host, port, user and keys.

A plain target is looked up in `~/.ssh/config` (HostName, User, Port, IdentityFile), as
ssh itself would. `vagrant` reads `vagrant ssh-config` run in the current directory, and
`vm` the ssh-config file `mrclab vm up` writes for the lab VM: the same format, parsed
the same way. Syntax errors are bad input (exit 2); a target that cannot be reached is
the environment (exit 3), found when connecting.
"""
from __future__ import annotations

import getpass
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..errors import EnvironmentNotReady, UsageError
from ..spec import address as address_mod

VM_SSH_CONFIG = Path(__file__).resolve().parents[2] / ".vm" / "ssh-config"   # written by `mrclab vm up`


@dataclass(frozen=True)
class Target:
    spec: str                 # as the user wrote it: used in messages and in the commands we suggest
    host: str
    port: int = 22
    user: str = "root"
    identities: tuple[str, ...] = ()
    known_hosts: str | None = None  # a file the target's own configuration names (vm, vagrant)

    @property
    def address(self) -> str:
        """How known_hosts names it: `host`, or `[host]:port` off port 22."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.address}"


def parse(spec: str, *, ssh_config: Path | None = None) -> Target:
    """`[user@]host[:port]`, `vagrant` or `vm`."""
    if spec == "vagrant":
        return from_ssh_config(_vagrant_ssh_config(), spec)
    if spec == "vm":
        if not VM_SSH_CONFIG.exists():
            raise EnvironmentNotReady(f"target vm: no {VM_SSH_CONFIG}: start the lab VM with `mrclab vm up`")
        return from_ssh_config(VM_SSH_CONFIG.read_text(), spec)
    try:
        address = address_mod.parse(spec, forms=f"{address_mod.FORM}, vagrant or vm")
    except ValueError as exc:
        raise UsageError(f"--target {spec!r}: {exc}") from None
    found = _user_ssh_config(ssh_config).lookup(address.host)
    return Target(spec=spec, host=found.get("hostname", address.host),
                  port=address.port or int(found.get("port", 22)),
                  user=address.user or found.get("user") or getpass.getuser(),
                  identities=tuple(os.path.expanduser(p) for p in found.get("identityfile", [])))


def from_ssh_config(text: str, spec: str) -> Target:
    """The first Host block of an ssh-config text (what `vagrant ssh-config` prints for one machine)."""
    config = paramiko.SSHConfig.from_text(text)
    names = [h for h in config.get_hostnames() if h != "*"]
    if not names:
        raise EnvironmentNotReady(f"target {spec}: its ssh-config names no host")
    found = config.lookup(names[0])
    known = found.get("userknownhostsfile", "").split()
    return Target(spec=spec, host=found.get("hostname", names[0]), port=int(found.get("port", 22)),
                  user=found.get("user", "root"),
                  identities=tuple(os.path.expanduser(p) for p in found.get("identityfile", [])),
                  known_hosts=known[0] if known and known[0] != "/dev/null" else None)


def _vagrant_ssh_config() -> str:
    try:
        result = subprocess.run(["vagrant", "ssh-config"], capture_output=True, text=True, timeout=120,
                                check=False)
    except FileNotFoundError:
        raise EnvironmentNotReady("target vagrant: the vagrant command is not installed here") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentNotReady("target vagrant: `vagrant ssh-config` did not answer in 120 s") from None
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise EnvironmentNotReady(f"target vagrant: `vagrant ssh-config` failed ({why}): run `vagrant up` in "
                                  "the directory holding the Vagrantfile")
    return result.stdout


def _user_ssh_config(path: Path | None) -> paramiko.SSHConfig:
    path = path or Path("~/.ssh/config").expanduser()
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except FileNotFoundError:
        return paramiko.SSHConfig()
    except (OSError, paramiko.ssh_exception.ConfigParseError) as exc:
        raise UsageError(f"{path}: cannot read it as ssh config ({exc})") from None
