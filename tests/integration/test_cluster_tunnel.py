"""Cables between servers, for real: two "servers" (network namespaces joined by a veth underlay with ULA
addresses), each holding the routers' namespaces a pods placement gives it, and every crossing direction made
by `cluster.tunnel` as VXLAN devices. A full-size frame crosses each direction into the interface the layout
names, and the egress program shapes and counts it on the sending end as on a local cable."""
from __future__ import annotations

import socket
import subprocess
import time

import pytest

from mrclab.cluster import tunnel
from mrclab.cluster.placement import assign
from mrclab.fabric.egress import CSUM_CARRIER, Egress
from mrclab.layout import build
from mrclab.netns import entered
from mrclab.runstate import RunState
from mrclab.spec import topology

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

TOPO = topology.load("clos-1p-4l-2s")
MTU = TOPO.mtu
PORT = 4999
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO = 23, 2  # <linux/in6.h>: never fragment, so a frame too large for the tunnel fails


def sh(*argv: str, stdin: str | None = None) -> str:
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{' '.join(argv)}: {out.stderr.strip()}"
    return out.stdout


@pytest.fixture
def servers(leftovers):
    """Two namespace servers and the switches' namespaces, all recorded in one RunState and removed after."""
    state = RunState.create("test cluster tunnel")
    names = [f"{state.prefix}srv{i}" for i in range(2)]
    underlays = {i: tunnel.Underlay(f"fdcc::{i + 1}", f"{state.prefix}u{i}") for i in range(2)}
    try:
        for name in names:
            state.add_namespace(name)
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "link", "add", underlays[0].device, "netns", names[0], "type", "veth", "peer", "name",
           underlays[1].device, "netns", names[1])
        for i, name in enumerate(names):
            sh("ip", "-n", name, "addr", "add", f"{underlays[i].address}/64", "dev", underlays[i].device, "nodad")
            sh("ip", "-n", name, "link", "set", underlays[i].device, "mtu", str(tunnel.underlay_mtu(MTU, 6)), "up")
        yield state, names, underlays
    finally:
        state.teardown()
        assert leftovers(state.prefix, state.processes) == []


def test_every_crossing_direction_carries_a_full_frame_shaped_at_its_sending_end(servers):
    state, names, underlays = servers
    layout = build(TOPO, state.prefix, split_cables=True)
    where = assign(TOPO, ["a", "b"], "pods", source="test").server_of()
    pids = {}
    for node in layout.switches:  # a router's namespace, made from inside its server's as mrclab's are
        proc = subprocess.Popen(["ip", "netns", "exec", names[where[node]], "unshare", "--net", "sleep", "300"])
        state.add_process(proc.pid, f"switch {node}")
        pids[node] = proc.pid
    time.sleep(0.3)
    ends = {i: tunnel.ends(layout, where, i) for i in range(2)}
    crossing = [(a, b) for a, s in layout.switches.items() for b in s.ports
                if b in layout.switches and where[a] != where[b]]
    assert crossing and len(ends[0]) + len(ends[1]) == 2 * len(crossing)
    assert {e.vni for e in ends[0] if e.sends} == {e.vni for e in ends[1] if not e.sends}
    for i, name in enumerate(names):
        lines = tunnel.link_lines(ends[i], pids=pids, underlays=underlays, server=i, mtu=MTU, port=PORT)
        sh("ip", "-n", name, "-batch", "-", stdin="\n".join(lines) + "\n")
    for i in range(2):
        for end in ends[i]:
            shown = sh("nsenter", f"--net=/proc/{pids[end.node]}/ns/net", "ip", "-o", "link", "show", end.ifname)
            assert f" mtu {MTU} " in shown, f"{end.ifname} lost the fabric's MTU: {shown}"
            sh("nsenter", f"--net=/proc/{pids[end.node]}/ns/net", "ip", "link", "set", end.ifname, "up")
    with Egress(state) as egress:
        for a, b in crossing:
            port = layout.port(a, b)
            egress.attach(port.ifname, 25_000_000, 64 << 10, MTU, trim=True, netns_pid=pids[a], csum_mode=CSUM_CARRIER)
        for n, (a, b) in enumerate(crossing):
            port = layout.port(a, b)
            src, dst = f"fd99::{2 * n + 1}", f"fd99::{2 * n + 2}"
            sh("nsenter", f"--net=/proc/{pids[b]}/ns/net", "ip", "addr", "add", f"{dst}/128", "dev",
               port.peer_ifname, "nodad")
            setup = [f"addr add {src}/128 dev {port.ifname} nodad",
                     f"route add {dst}/128 dev {port.ifname}",
                     f"neigh add {dst} lladdr {port.peer_mac} dev {port.ifname} nud permanent"]
            sh("nsenter", f"--net=/proc/{pids[a]}/ns/net", "ip", "-batch", "-", stdin="\n".join(setup) + "\n")
            with entered(pids[b]):
                rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                rx.bind((dst, PORT + 1))
            with entered(pids[a]):
                tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
                tx.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
            payload = bytes(range(256)) * ((MTU - 48) // 256) + bytes((MTU - 48) % 256)
            with rx, tx:
                rx.settimeout(3)
                tx.sendto(payload, (dst, PORT + 1))
                data, _ = rx.recvfrom(65535)
            assert data == payload, f"{a}->{b}: {len(data)} bytes arrived of {len(payload)}"
            assert egress.counters(port.ifname).tx_packets >= 1, f"{a}->{b}: the egress program saw nothing"
