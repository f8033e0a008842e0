"""`mrclab remote setup`: this exact version of mrclab, installed on a target by its own provisioning.

The source tree this mrclab runs from (a checkout: `vagrant/provision.sh` is not part of a
wheel) is packed, copied to `<base>/mrclab-<version>/` there, and provisioned with
`vagrant/provision.sh` (through `sudo -n` when the login is not root), which installs the
Debian packages and makes that directory's `.venv`. `<base>/current` then points at it,
where `mrclab run --target` looks first.
"""
from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from .. import __version__
from ..errors import EnvironmentNotReady, UsageError
from .job import Remote, check
from .ssh import sh

SOURCE = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "results", ".vm", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache",
        "build", "dist"}
PROVISION_TIMEOUT_S = 1800


def source_files() -> list[Path]:
    """The checkout's files: git's list (tracked and untracked, not ignored) when it is a git tree."""
    if not (SOURCE / "setup.cfg").is_file() or not (SOURCE / "vagrant" / "provision.sh").is_file():
        raise UsageError(f"remote setup needs mrclab run from a source checkout; {SOURCE} is not one")
    listed = subprocess.run(["git", "-C", str(SOURCE), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=False)
    if listed.returncode == 0:
        return [SOURCE / name for name in listed.stdout.decode().split("\0") if name and (SOURCE / name).is_file()]
    return [p for p in SOURCE.rglob("*") if p.is_file() and not SKIP & set(p.relative_to(SOURCE).parts)]


def pack() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in source_files():
            tar.add(path, arcname=str(path.relative_to(SOURCE)), recursive=False)
    return buffer.getvalue()


def setup(remote: Remote, say) -> None:
    conn, base = remote.conn, remote.base
    home = f"{base}/mrclab-{__version__}"
    archive = f"{home}.tar.gz"
    data = pack()
    say(f"copying mrclab {__version__} ({len(data) >> 10} KiB) to {remote.spec}:{home}")
    with conn.sftp.open(archive, "wb") as f:
        f.write(data)
    unpacked = conn.run(f"{remote.as_root('rm', '-rf', home)} && mkdir {sh(home)} "
                        f"&& tar -xzf {sh(archive)} -C {sh(home)} && rm {sh(archive)}")
    if unpacked.code != 0:
        raise EnvironmentNotReady(f"target {remote.spec}: cannot unpack into {home}: {unpacked.last_line()}")
    say(f"provisioning there (vagrant/provision.sh{', with sudo -n' if remote.sudo else ''}; minutes the first time)")
    provisioned = conn.run(f"cd {sh(home)} && {remote.as_root('bash', 'vagrant/provision.sh')}",
                           timeout=PROVISION_TIMEOUT_S)
    if provisioned.code != 0:
        raise EnvironmentNotReady(f"target {remote.spec}: vagrant/provision.sh failed there: {provisioned.last_line()}")
    conn.run(sh("ln", "-sfn", f"mrclab-{__version__}", f"{base}/current"))
    check(Remote(conn, (f"{base}/current/.venv/bin/mrclab",), remote.sudo, base))
