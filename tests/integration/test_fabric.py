"""A real clos-2p-2l-2s on each datapath: every path verifies; a link or a spine down breaks exactly the
paths through it and changes no flow or route; checksums hold end to end, trimmed packets included;
teardown leaves nothing of the run behind."""
from __future__ import annotations

import shlex
import subprocess
import sys
import time

import pytest

from mrclab.fabric.net import Fabric
from mrclab.fabric.verify import verify_paths
from mrclab.spec import topology
from mrclab.transport.wire import DATA_HEADER_LEN, IP_UDP_OVERHEAD

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

TOPO = topology.load("clos-2p-2l-2s")
QUICK = 0.3  # s a batch waits for probes that are not coming


BOOT_ENTRIES = {"ovs": 56, "linux": 32}  # flows or routes: 8 switches, 2 planes, 4 hosts


@pytest.fixture(scope="module", params=["ovs", "linux"])
def fabric(lab, request):
    with Fabric(TOPO, datapath=request.param) as f:
        yield f


def entries(fabric) -> dict[str, list[str]]:
    return fabric.switches.tables()


def failed(results) -> set[tuple]:
    return {(r.src, r.dst, r.plane, r.spine) for r in results if not r.ok}


def test_every_path_verifies(fabric):
    results = verify_paths(fabric)
    assert len(results) == 4 * 3 * 2 * 2 and failed(results) == set()
    stats = fabric.controller.stats()
    assert stats["flow_mods_boot"] == BOOT_ENTRIES[fabric.datapath.name]
    assert stats.get("packet_ins", 0) == 0 and stats.get("errors", 0) == 0


def _through(results, plane: int, spine: int, leaf: int | None = None) -> set[tuple]:
    leaf_of = TOPO.plan.leaf_of
    return {(r.src, r.dst, r.plane, r.spine) for r in results
            if r.plane == plane and r.spine == f"p{plane}s{spine}"
            and (leaf is None or leaf in (leaf_of(int(r.src[1:])), leaf_of(int(r.dst[1:]))))}


def test_link_and_spine_down_break_exactly_their_paths_and_no_flow(fabric):
    before = entries(fabric)
    all_paths = verify_paths(fabric)
    fabric.faults.link_down("p0s0-p0l1")  # either order names the link
    try:
        broken = failed(verify_paths(fabric, QUICK))
    finally:
        fabric.faults.link_up("p0l1-p0s0")
    assert broken == _through(all_paths, plane=0, spine=0, leaf=1)
    fabric.apply("switch_down", "p1s1")
    try:
        broken = failed(verify_paths(fabric, QUICK))
    finally:
        fabric.apply("switch_up", "p1s1")
    assert broken == _through(all_paths, plane=1, spine=1)
    fabric.apply("link_down", "h1-p0l0")  # a host cable, pulled at its patch: h1's NIC loses carrier
    fabric.apply("blackhole", "p1s0-p1l1")  # silent drop in the egress program, both directions
    try:
        broken = failed(verify_paths(fabric, QUICK))
    finally:
        fabric.apply("link_up", "h1-p0l0")
        fabric.apply("restore", "p1s0-p1l1")
    h1_plane0 = {(r.src, r.dst, r.plane, r.spine) for r in all_paths if r.plane == 0 and "h1" in (r.src, r.dst)}
    assert broken == h1_plane0 | _through(all_paths, plane=1, spine=0, leaf=1)
    assert failed(verify_paths(fabric)) == set()
    assert entries(fabric) == before
    assert fabric.controller_stats()["flow_mods_after_boot"] == 0


def test_counters_cover_both_directions_of_every_link(fabric):
    rows = fabric.link_counters()
    assert len(rows) == 2 * len(TOPO.links)
    probe_rows = [r for r in rows if r["from"] == "h0" and r["to"] == "p0l0"]
    assert probe_rows and probe_rows[0]["tx_packets"] > 0 and probe_rows[0]["link"] == "h0-p0l0"


def test_a_full_mtu_datagram_crosses_the_fabric(fabric):
    """9000-byte frames through veths, the userspace datapath and three uSID shifts."""
    payload = TOPO.mtu - IP_UDP_OVERHEAD
    dst = TOPO.plan.path_address(0, 3, 1, 1)
    receiver = fabric.host("h3").popen(
        [sys.executable, "-c", "import socket; s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); "
         "s.bind(('::', 5000)); s.settimeout(5); print(len(s.recv(65535)), flush=True)"], text=True)
    try:
        time.sleep(0.3)  # the receiver binds
        fabric.host("h0").cmd(f"{sys.executable} -c \"import socket; socket.socket(socket.AF_INET6, "
                              f"socket.SOCK_DGRAM).sendto(bytes({payload}), ('{dst}', 5000))\"")
        out, _ = receiver.communicate(timeout=10)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    assert out.strip() == str(payload)

RECEIVE_ALL = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: the burst waits for this reader
s.bind(("::", 4793))
s.settimeout(2)
print("ready", flush=True)
sizes = []
try:
    while True:
        sizes.append(len(s.recv(65535)))
except socket.timeout:
    pass
print(" ".join(map(str, sizes)), flush=True)
"""
SEND_BURST = """
import socket, sys, time
from mrclab.transport import wire
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
def data(psn, msg_id, msg_len, payload):
    return wire.encode_data(flags=0, conn_id=7, psn=psn, msg_id=msg_id, msg_len=msg_len, offset=psn * len(payload),
                            ev=5, ts=0, digest=0, payload=payload)
s.sendto(data(0, 0, 8, bytes(8)), (sys.argv[1], 4793))  # warms OVS's flow cache
time.sleep(0.5)
for psn in range(int(sys.argv[2])):
    s.sendto(data(psn, 1, 1 << 20, bytes(8000)), (sys.argv[1], 4793))
"""


def _udp_checksum_errors(fabric, host: str) -> int:
    for line in fabric.host(host).cmd("cat /proc/net/snmp6").splitlines():
        if line.startswith("Udp6InCsumErrors"):
            return int(line.split()[1])
    raise AssertionError("no Udp6InCsumErrors counter")


def test_a_verifying_receiver_accepts_every_datagram_trimmed_ones_too(fabric):
    """h3's kernel verifies every UDP checksum. Linux routers' End shifts leave the checksum alone, so the
    sending NIC makes it the final destination's; a trimmed packet's checksum is recomputed for the same."""
    dst, count = TOPO.plan.path_address(0, 3, 1, 1), 40
    port = fabric.layout.ifname("p1s1", "p1l1")  # the spine's port towards h3's leaf
    errors = _udp_checksum_errors(fabric, "h3")
    receiver = fabric.host("h3").popen([sys.executable, "-c", RECEIVE_ALL], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        fabric.egress.set_rate(port, 1_000_000)  # the burst overflows that port's queue: DATA is trimmed there
        fabric.host("h0").cmd(f"{sys.executable} -c {shlex.quote(SEND_BURST)} {dst} {count}")
        sizes = [int(n) for n in receiver.communicate(timeout=15)[0].split()]
    finally:
        fabric.egress.restore(port)
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    trimmed, full = sizes.count(DATA_HEADER_LEN), sizes.count(DATA_HEADER_LEN + 8000)
    assert trimmed > 0 and full > 0 and trimmed + full == len(sizes) - 1
    if fabric.datapath.name == "linux":  # userspace OVS may lose part of a burst on a busy machine, unseen
        assert len(sizes) == count + 1
    assert _udp_checksum_errors(fabric, "h3") == errors


def test_teardown_leaves_nothing(fabric, leftovers):
    state = fabric.state
    processes = list(state.processes)
    assert len(processes) == TOPO.hosts + len(TOPO.switch_names) + 2  # hosts, switches, controller, cables
    fabric.close()
    assert leftovers(state.prefix, processes) == []
    assert not state.path.exists()

