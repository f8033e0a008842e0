"""Servers of a cluster lab for tests, on this machine: each a network namespace, joined by one veth underlay
with ULA addresses (fdcc::1, fdcc::2) and an MTU that carries the fabric's frames inside VXLAN; everything is
recorded in one RunState and removed by `close`. `sshd(i, root)` gives server i its own sshd, listening on its
underlay address inside its namespace only."""
from __future__ import annotations

import subprocess
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

    def enter(self, i: int) -> list[str]:
        """A command prefix that runs in server i's namespace."""
        return ["nsenter", f"--net=/run/netns/{self.names[i]}"]

    def close(self) -> None:
        for server in self.sshds:
            server.stop()
        self.state.teardown()
