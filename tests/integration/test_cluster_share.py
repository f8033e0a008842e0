"""A fabric built by two "servers" at once: each a network namespace (joined by a veth underlay with ULA
addresses) running `python -m mrclab.cluster.server`, which builds the share a pods placement gives it, with the
cables between them as VXLAN tunnels. `verify_paths` then proves every (src, dst, plane, spine) path, crossing
ones included, through the spine it names; both servers tear down to nothing."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mrclab.cluster import server as cluster_server
from mrclab.cluster import tunnel
from mrclab.cluster.placement import assign
from mrclab.fabric.linux import _PACKETS, own_prefix
from mrclab.fabric.verify import verify_paths
from mrclab.layout import build
from mrclab.runstate import RunState
from mrclab.spec import topology
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

TOPO_NAME = "clos-2p-2l-2s"
TOPO = topology.load(TOPO_NAME)


def sh(*argv: str) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{' '.join(argv)}: {out.stderr.strip()}"
    return out.stdout


class Servers:
    """Two namespace servers with an underlay between them, recorded in one RunState."""

    def __init__(self) -> None:
        self.state = RunState.create("test cluster share")
        p = self.state.prefix
        self.names = [f"{p}srv{i}" for i in range(2)]
        self.underlays = {i: tunnel.Underlay(f"fdcc::{i + 1}", f"{p}u{i}") for i in range(2)}
        for name in self.names:
            self.state.add_namespace(name)
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.underlays[0].device, "netns", self.names[0], "type", "veth", "peer", "name",
           self.underlays[1].device, "netns", self.names[1])
        for i, name in enumerate(self.names):
            u = self.underlays[i]
            sh("ip", "-n", name, "addr", "add", f"{u.address}/64", "dev", u.device, "nodad")
            sh("ip", "-n", name, "link", "set", u.device, "mtu", str(tunnel.underlay_mtu(TOPO.mtu, 6)), "up")

    def start(self, i: int, build_message: cluster_server.Build) -> tuple[subprocess.Popen, cluster_server.Built]:
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{self.names[i]}", sys.executable, "-m",
                                 "mrclab.cluster.server"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        self.state.add_process(proc.pid, f"server {i}")
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(cluster_server.encode(build_message))
        proc.stdin.flush()
        answer = cluster_server.decode(proc.stdout.readline())
        assert isinstance(answer, cluster_server.Built), answer
        return proc, answer


class ClusterView:
    """What `verify_paths` asks of a fabric, answered from both servers' namespaces by PID."""

    def __init__(self, built: list[cluster_server.Built]) -> None:
        self.topology = TOPO
        self.pids = {name: pid for b in built for name, pid in b.hosts.items()}
        switch_pids = {name: pid for b in built for name, pid in b.switches.items()}
        layout = build(TOPO, "mxxx", split_cables=True)

        def spine_counts(spines: list[str]) -> dict[str, int]:
            counts = {}
            for name in spines:
                out = sh("nsenter", f"--net=/proc/{switch_pids[name]}/ns/net", "ip", "-6", "-s", "route", "show",
                         own_prefix(layout.switches[name]))
                match = _PACKETS.search(out)
                assert match, out
                counts[name] = int(match.group(1))
            return counts

        self.switches = SimpleNamespace(spine_counts=spine_counts)

    def host(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(pid=self.pids[name])


def test_two_servers_build_one_fabric_and_every_path_crosses_as_named(leftovers):
    servers = Servers()
    procs = []
    try:
        where = assign(TOPO, ["a", "b"], "pods", source="test").server_of()
        assert len(set(where.values())) == 2
        underlays = {str(i): [u.address, u.device] for i, u in servers.underlays.items()}
        built = []
        for i in range(2):
            proc, answer = servers.start(i, cluster_server.Build(TOPO_NAME, i, where, underlays))
            procs.append((proc, answer))
            built.append(answer)
        assert {h for b in built for h in b.hosts} == set(TOPO.host_names)
        results = verify_paths(ClusterView(built))
        crossing = [r for r in results if where[r.src] != where[r.dst] or where[r.spine] != where[r.src]]
        assert crossing, "no path crossed servers"
        failed = [r.to_dict() for r in results if not r.ok]
        assert not failed, json.dumps(failed[:5])
    finally:
        for proc, _answer in procs:
            assert proc.stdin is not None
            proc.stdin.write(cluster_server.encode(cluster_server.Stop()))
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
        servers.state.teardown()
        for _proc, answer in procs:
            assert leftovers(f"m{answer.run_id}") == []
        assert leftovers(servers.state.prefix, servers.state.processes) == []
