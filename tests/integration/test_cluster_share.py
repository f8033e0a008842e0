"""A fabric built by two "servers" at once: each a network namespace (joined by a veth underlay with ULA
addresses) running `python -m mrclab.cluster.server`, which builds the share a pods placement gives it, with the
cables between them as VXLAN tunnels. Each server then probes from its own hosts, and `verify` proves every
(src, dst, plane, spine) path, crossing ones included, through the spine it names; both tear down to nothing."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mrclab.cluster import messages as msg
from mrclab.cluster.placement import assign
from mrclab.cluster.servers import Channel, RemoteProbes
from mrclab.fabric.verify import verify
from mrclab.spec import topology
from tests.cluster_servers import NamespaceServers
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

TOPO = topology.load("clos-2p-2l-2s")


@pytest.mark.parametrize("port", [4789, None], ids=["tunnels", "mismatched-ports"])
def test_two_servers_build_one_fabric_and_every_path_crosses_as_named(leftovers, port):
    servers = NamespaceServers(TOPO.mtu)
    channels, built = [], []
    try:
        where = assign(TOPO, ["a", "b"], "pods", source="test").server_of()
        underlays = {str(i): [u.address, u.device] for i, u in servers.underlays.items()}
        for i in range(2):
            proc = subprocess.Popen([*servers.enter(i), sys.executable, "-m", "mrclab.cluster.server"], cwd=REPO,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            servers.state.add_process(proc.pid, f"share {i}")
            assert proc.stdin is not None and proc.stdout is not None
            channels.append(Channel(f"server {i}", proc.stdin, proc.stdout, proc))
            # the control: a different VXLAN port on each server, so that nothing crosses
            channels[-1].tell(msg.Build(TOPO.to_dict(), i, where, underlays, port or 4789 + i))
        built = [ch.answer(msg.Built) for ch in channels]
        assert {h for b in built for h in b.hosts} == set(TOPO.host_names)
        sides = {RemoteProbes(ch, frozenset(TOPO.host_index(h) for h in b.hosts)):
                 sorted(s for s in b.switches if s in TOPO.spine_names) for ch, b in zip(channels, built, strict=True)}
        results = verify(TOPO, sides, timeout=0.5)
        crossing = [r for r in results if where[r.src] != where[r.dst] or where[r.spine] != where[r.src]]
        local = [r for r in results if r not in crossing]
        assert crossing and local
        failed = [r.to_dict() for r in results if not r.ok]
        if port:
            assert not failed, json.dumps(failed[:5])
        else:
            assert all(r.ok for r in local) and not any(r.arrived for r in crossing), json.dumps(failed[:5])
    finally:
        for ch in channels:
            ch.close()
            assert ch.closer.returncode == 0
        servers.close()
        for b in built:
            assert leftovers(f"m{b.run_id}") == []
        assert leftovers(servers.state.prefix, servers.state.processes) == []
