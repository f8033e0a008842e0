"""Servers of a cluster lab for tests, on this machine: each a network namespace, joined by one veth underlay
with ULA addresses (fdcc::1, fdcc::2) and an MTU that carries the fabric's frames inside VXLAN; everything is
recorded in one RunState and removed by `close`. `sshd(i, root)` gives server i its own sshd, listening on its
underlay address inside its namespace only."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from mrclab.cluster import tunnel
from mrclab.runstate import RunState
from tests.sshd import Sshd


def sh(*argv: str) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{' '.join(argv)}: {out.stderr.strip()}"
    return out.stdout


class NamespaceServers:
    def __init__(self, mtu: int, count: int = 2) -> None:
        assert count == 2, "one veth is the underlay: two servers"
        self.state = RunState.create("test cluster servers")
        p = self.state.prefix
        self.names = [f"{p}srv{i}" for i in range(count)]
        self.underlays = {i: tunnel.Underlay(f"fdcc::{i + 1}", f"{p}u{i}") for i in range(count)}
        self.sshds: list[Sshd] = []
        try:
            for name in self.names:
                self.state.add_namespace(name)
                sh("ip", "netns", "add", name)
                sh("ip", "-n", name, "link", "set", "lo", "up")
            sh("ip", "link", "add", self.underlays[0].device, "netns", self.names[0], "type", "veth", "peer", "name",
               self.underlays[1].device, "netns", self.names[1])
            for i, name in enumerate(self.names):
                u = self.underlays[i]
                sh("ip", "-n", name, "addr", "add", f"{u.address}/64", "dev", u.device, "nodad")
                sh("ip", "-n", name, "link", "set", u.device, "mtu", str(tunnel.underlay_mtu(mtu, 6)), "up")
        except BaseException:
            self.close()
            raise

    def sshd(self, i: int, root: Path) -> Sshd:
        root.mkdir(parents=True, exist_ok=True)
        server = Sshd(root, address=self.underlays[i].address, netns=self.names[i])
        self.sshds.append(server)
        self.state.add_process(server.proc.pid, f"sshd of server {i}")
        return server

    def runner_env(self, home: Path) -> dict:
        """The environment of a runner that reaches every server's sshd so far as a user whose ~/.ssh (`home`)
        knows their host keys and holds one client key (the first sshd's, authorized by the others too); the
        remote mrclab is this checkout, its run directories in the first sshd's directory."""
        first = self.sshds[0]
        client = (first.root / "client.pub").read_text()
        for other in self.sshds[1:]:
            with open(other.root / "authorized_keys", "a") as keys:
                keys.write(client)
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "known_hosts").write_text("".join(s.known_hosts.read_text() for s in self.sshds))
        (home / ".ssh" / "id_ed25519").write_bytes((first.root / "client").read_bytes())
        (home / ".ssh" / "id_ed25519").chmod(0o600)
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "MRCLAB_TARGET")}
        env.update(HOME=str(home), MRCLAB_REMOTE_DIR=str(first.root / "remote"), MRCLAB_REMOTE_COMMAND=shlex.join(
            ["env", f"MRCLAB_STATE_DIR={first.root}/state", sys.executable, "-m", "mrclab"]))
        return env

    def enter(self, i: int) -> list[str]:
        """A command prefix that runs in server i's namespace."""
        return ["nsenter", f"--net=/run/netns/{self.names[i]}"]

    def close(self) -> None:
        for server in self.sshds:
            server.stop()
        self.state.teardown()


def records(directory: Path, purpose: str, since: float = 0.0) -> dict[str, dict]:
    """Run records under `directory` made since then whose purpose starts with `purpose` (as root, every mrclab
    records in /run/mrclab: both servers' shares do, being on one machine)."""
    found = {}
    for path in directory.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(path.read_text())
            if doc.get("purpose", "").startswith(purpose) and doc.get("created_at", 0) >= since:
                found[doc["run_id"]] = doc
    return found
