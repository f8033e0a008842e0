"""The eBPF egress program on a real shaped veth between two throwaway namespaces.

Senders and receivers are separate Python processes inside the namespaces; the receiver's
UDP socket sees only datagrams whose checksum the kernel verified (RX checksum offload is
off on its veth), so a counted trimmed header is also a correctly checksummed one.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from mrclab.fabric.egress import Ecn, Egress, PortCounters
from mrclab.runstate import RunState
from mrclab.transport.wire import DATA_HEADER_LEN, ETHERNET_HEADER, IP_UDP_OVERHEAD

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc, bpf)")]

SRC, DST = "fd00:6d72::1", "fd00:6d72::2"
MRC_PORT = 4793
PACKET = 1400  # UDP payload of a full MRC DATA packet
FRAME = ETHERNET_HEADER + IP_UDP_OVERHEAD + PACKET
TRIMMED_FRAME = ETHERNET_HEADER + IP_UDP_OVERHEAD + DATA_HEADER_LEN

SENDER = r"""
import json, socket, struct, sys, time
dst, port, size, count, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5]), sys.argv[6]
pps, tclass, burst = float(sys.argv[4]), int(sys.argv[7]), int(sys.argv[8])
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass)
body = bytes(size - 48)
sent = []  # when each left: halfway through its sendto, the egress hook's moment within a few us
t0 = time.perf_counter()
for i in range(count):
    if pps:
        delay = t0 + (i - i % burst) / pps - time.perf_counter()  # `burst` packets back to back, pps on average
        if delay > 0:
            time.sleep(delay)
    # DATA: version, type, flags, conn_id, psn, msg_id, msg_len, offset, length, ev, ts, digest, reserved
    # (a trimmed one: flag TRIMMED, nothing behind the header); SACK: type 2, then 44 bytes of its own
    head = {"data": struct.pack("!BBHIIIIIHHQQI", 1, 1, 0, 7, i, 0, 0, 0, size - 48, 0, 0, 0, 0),
            "trimmed": struct.pack("!BBHIIIIIHHQQI", 1, 1, 1, 7, i, 0, 0, 0, 1352, 0, 0, 0, 0),
            "sack": struct.pack("!BBH", 1, 2, 0) + bytes(44), "other": bytes(48)}[kind]
    before = time.monotonic()
    s.sendto(head + body, (dst, port))
    sent.append((before + time.monotonic()) / 2)
print(json.dumps(sent))
"""

RECEIVER = r"""
import json, socket, struct, sys, threading
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
s.bind((host, port))
rcvbuf_errors = int(dict(line.split() for line in open("/proc/net/snmp6"))["Udp6RcvbufErrors"])
s.settimeout(0.3)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), done.set()), daemon=True).start()
print("ready", flush=True)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
counts = {"full": 0, "trimmed": 0, "other": 0, "ce": []}
while True:  # until the senders are done and the port has been quiet for 0.3 s
    try:
        data, ancdata, _, _ = s.recvmsg(65536, 64)
    except socket.timeout:
        if done.is_set():
            break
        continue
    flags = struct.unpack_from("!H", data, 2)[0]
    kind = "full" if len(data) == size and flags == 0 else "trimmed" if len(data) == 48 and flags == 1 else "other"
    counts[kind] += 1
    tclass = [int.from_bytes(d, sys.byteorder) for level, t, d in ancdata if t == socket.IPV6_TCLASS]
    if tclass and tclass[0] & 3 == 3:
        counts["ce"].append(struct.unpack_from("!I", data, 8)[0])  # the PSN of a packet marked CE
snmp = dict(line.split() for line in open("/proc/net/snmp6"))
counts["csum_errors"] = int(snmp["Udp6InCsumErrors"])
counts["rcvbuf_errors"] = int(snmp["Udp6RcvbufErrors"]) - rcvbuf_errors
print(json.dumps(counts), flush=True)
"""


class VethLab:
    """Namespaces ``<prefix>a`` and ``<prefix>b`` joined by veth ``<prefix>a0`` - ``<prefix>b0``.

    ``a0`` is the shaped port; ``holder`` is a process in ``a`` for ``Egress.attach(netns_pid=)``.
    Neighbours are static and ND, MLD, router solicitation and DAD are off, so the port carries only
    the traffic a test sends. Everything is recorded in the RunState and torn down with it.
    """

    def __init__(self, mtu: int = 1500) -> None:
        self.state = RunState.create("egress test")
        p = self.state.prefix
        self.ns_a, self.ns_b, self.port, self.peer = f"{p}a", f"{p}b", f"{p}a0", f"{p}b0"
        try:
            for ns in (self.ns_a, self.ns_b):
                self.state.add_namespace(ns)
                self.ns(None, "ip", "netns", "add", ns)
                for key in ("router_solicitations=0", "accept_dad=0", "addr_gen_mode=1"):
                    self.ns(ns, "sysctl", "-qw", f"net.ipv6.conf.default.{key}")
            holder = subprocess.Popen(["ip", "netns", "exec", self.ns_a, "sleep", "3600"])
            self.state.add_process(holder.pid, "netns holder")
            self.holder = holder.pid
            self.ns(self.ns_a, "ip", "link", "add", self.port, "mtu", str(mtu), "type", "veth",
                    "peer", "name", self.peer, "mtu", str(mtu), "netns", self.ns_b)
            self.ns(self.ns_a, "ethtool", "-K", self.port, "tx", "off", "tso", "off", "gso", "off")
            self.ns(self.ns_b, "ethtool", "-K", self.peer, "rx", "off")  # the receiver verifies checksums
            ends = ((self.ns_a, self.port, SRC), (self.ns_b, self.peer, DST))
            for ns, dev, addr in ends:
                self.ns(ns, "ip", "link", "set", dev, "arp", "off")  # no solicited-node group, so no MLD
                self.ns(ns, "ip", "-6", "addr", "add", f"{addr}/64", "dev", dev, "nodad")
                self.ns(ns, "ip", "link", "set", dev, "up")
            for (ns, dev, _), (other_ns, other_dev, other) in (ends, ends[::-1]):
                mac = json.loads(self.ns(other_ns, "ip", "-j", "link", "show", other_dev))[0]["address"]
                self.ns(ns, "ip", "-6", "neigh", "replace", other, "lladdr", mac, "dev", dev, "nud", "permanent")
            self.egress = Egress(self.state)
        except BaseException:
            self.close()
            raise

    def ns(self, ns: str | None, *cmd: str, input: str | None = None) -> str:
        """Run ``cmd`` in namespace ``ns`` (None: the root namespace); its stdout."""
        prefix = [] if ns is None else ["ip", "netns", "exec", ns]
        return subprocess.run([*prefix, *cmd], input=input, check=True, capture_output=True, text=True).stdout

    def popen(self, ns: str, *cmd: str, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], text=True, **kw)
        self.state.add_process(proc.pid, cmd[0])
        return proc

    def send(self, senders: int, pps: float, count: int, size: int = PACKET, kind: str = "data", tclass: int = 0,
             burst: int = 1) -> dict:
        """``senders`` processes each send ``count`` packets at ``pps`` (in groups of ``burst`` back to back) with
        traffic class ``tclass``; returns what the receiver got, and in ``sent`` when each packet left."""
        receiver = self.popen(self.ns_b, sys.executable, "-c", RECEIVER, DST, str(MRC_PORT), str(size),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert receiver.stdout.readline().strip() == "ready"
        procs = [self.popen(self.ns_a, sys.executable, "-c", SENDER, DST, str(MRC_PORT), str(size), str(pps),
                            str(count), kind, str(tclass), str(burst), stdout=subprocess.PIPE) for _ in range(senders)]
        sent = []
        for proc in procs:
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 0
            sent += json.loads(out)
        got = json.loads(receiver.communicate("done\n", timeout=30)[0])
        return {**got, "sent": sorted(sent)}

    def iperf_bps(self, seconds: int = 3) -> float:
        """TCP goodput A -> B measured by iperf3's receiver, the first second (slow start) omitted."""
        server = self.popen(self.ns_b, "iperf3", "-s", "-1", "-B", DST, stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if f"[{DST}]:5201" in self.ns(self.ns_b, "ss", "-ltnH"):
                    break
                time.sleep(0.02)
            out = self.ns(self.ns_a, "iperf3", "-c", DST, "-t", str(seconds), "-O", "1", "-J")
            return json.loads(out)["end"]["sum_received"]["bits_per_second"]
        finally:
            server.wait(timeout=10)

    def close(self) -> None:
        if getattr(self, "egress", None):
            self.egress.close()
        self.state.teardown()


def tcp_goodput(rate_bps: float, mtu: int) -> float:
    """What a link of ``rate_bps`` (Ethernet frames) carries as TCP/IPv6 payload with timestamps."""
    mss = mtu - 40 - 32
    return rate_bps * mss / (mss + 40 + 32 + 14)


def bpf_mounts(state: RunState) -> list[str]:
    return [line for line in open("/proc/mounts") if f"{state.run_id}.bpf" in line]


@pytest.fixture(scope="module")
def veth(leftovers):
    lab = VethLab()
    yield lab
    lab.close()
    assert leftovers(lab.state.prefix, lab.state.processes) == [] and bpf_mounts(lab.state) == []


def delta(before: PortCounters, after: PortCounters) -> PortCounters:
    return PortCounters(*(a - b for a, b in zip(after, before, strict=True)))


def run(lab: VethLab, senders: int, pps: float, count: int, **kw) -> tuple[dict, PortCounters]:
    before = lab.egress.counters(lab.port)
    got = lab.send(senders, pps, count, **kw)
    return got, delta(before, lab.egress.counters(lab.port))


RATE = 20_000_000
PPS_AT_RATE = RATE / 8 / FRAME  # ~1730 full packets/s fill the port


def test_the_pinned_program_lives_in_a_root_only_bpffs(veth):
    mount = veth.egress._mount
    assert os.path.ismount(mount) and os.stat(mount).st_mode & 0o777 == 0o700  # bpffs always adds the sticky bit


def kernel_drops(lab: VethLab) -> int:
    """What the kernel dropped past the shaped port: the veth's own drops at either end (the receiving side's
    backlog full, when the CPU is busy)."""
    out = 0
    for ns, dev, way in ((lab.ns_a, lab.port, "tx"), (lab.ns_b, lab.peer, "rx")):
        [link] = json.loads(lab.ns(ns, "ip", "-j", "-s", "link", "show", "dev", dev))
        out += link["stats64"][way]["dropped"]
    return out


def test_incast_trims_and_counters_match_receiver(veth):
    veth.egress.attach(veth.port, RATE, 65536, 1500, True, netns_pid=veth.holder)
    before = kernel_drops(veth)
    got, c = run(veth, senders=4, pps=PPS_AT_RATE / 2, count=800)  # 2x the port rate for ~0.9 s
    assert c.trims > 500 and c.drops == 0 and c.loss_drops == c.blackhole_drops == 0
    assert got["other"] == 0 and got["csum_errors"] == 0
    # every packet the port passed arrived, or the kernel says where it dropped it (a loaded machine: a few)
    lost = kernel_drops(veth) - before + got["rcvbuf_errors"]
    assert got["full"] + got["trimmed"] + lost == c.tx_packets == 3200 and lost < 3200 * 0.02
    assert c.trims - lost <= got["trimmed"] <= c.trims
    assert c.tx_bytes == (c.tx_packets - c.trims) * FRAME + c.trims * TRIMMED_FRAME
    wait = c.queued_ns / (c.tx_packets - c.trims) / 1e9  # a full buffer drains in 65536 * 8 / RATE = 26 ms
    assert 0.010 < wait <= 65536 * 8 / RATE


def test_sender_below_rate_never_trims(veth):
    veth.egress.attach(veth.port, RATE, 65536, 1500, True, netns_pid=veth.holder)
    got, c = run(veth, senders=1, pps=PPS_AT_RATE / 2, count=800)
    assert c.trims == c.drops == 0
    assert got["full"] == c.tx_packets == 800


def test_trim_off_drops_instead(veth):
    veth.egress.attach(veth.port, RATE, 65536, 1500, False, netns_pid=veth.holder)
    got, c = run(veth, senders=4, pps=PPS_AT_RATE / 2, count=800)
    assert c.trims == 0 and c.drops > 500
    assert got["trimmed"] == 0 and got["full"] == c.tx_packets == 3200 - c.drops


def test_non_mrc_traffic_is_never_trimmed(veth):
    veth.egress.attach(veth.port, RATE, 65536, 1500, True, netns_pid=veth.holder)
    got, c = run(veth, senders=4, pps=PPS_AT_RATE / 2, count=400, kind="other")
    assert c.trims == 0 and c.drops > 0 and got["trimmed"] == 0


def class_bytes(lab: VethLab) -> dict[str, int]:
    """Bytes each HTB class of the shaped port has sent (this tc prints no JSON for HTB classes)."""
    text = lab.ns(lab.ns_a, "tc", "-s", "class", "show", "dev", lab.port)
    return {handle: int(sent) for handle, sent in re.findall(r"class htb (\S+) .*\n Sent (\d+) bytes", text)}


def test_mrc_control_and_trimmed_headers_take_the_priority_class(veth):
    """A switch serves MRC's small packets first: SACKs (and NACKs, probes) and a header trimmed at an
    earlier hop, which a real switch knows by its marking and this one by its flags; data waits in 1:20."""
    veth.egress.attach(veth.port, RATE, 65536, 1500, True, netns_pid=veth.holder)
    before = class_bytes(veth)
    for kind in ("sack", "trimmed", "data"):
        got, c = run(veth, senders=1, pps=500, count=50, size=PACKET if kind == "data" else 48, kind=kind)
        assert c.tx_packets == 50 and c.trims == c.drops == 0
        assert c.ctl_packets == (50 if kind != "data" else 0)
        # 2 ms apart, each gone in 0.6 ms: nothing waits long, unless the sender's timer bunches two
        assert c.queued_ns + c.ctl_queued_ns < 50 * FRAME * 8 / RATE * 1e9 / 4
    after = class_bytes(veth)
    assert after["1:10"] - before["1:10"] == 100 * TRIMMED_FRAME
    assert after["1:20"] - before["1:20"] == 50 * FRAME


ECT0, NOT_ECT = 0b10, 0b00
ECN_RATE = 5_000_000


def queue_ahead(sent: list[float], rate_bps: float, frame: int) -> list[float]:
    """The bytes each packet found ahead of it in the port's virtual queue, from when it was sent."""
    backlog, last, out = 0.0, sent[0], []
    for t in sent:
        backlog = max(0.0, backlog - (t - last) * rate_bps / 8)
        last = t
        out.append(backlog)
        backlog += frame
    return out


def test_ecn_marks_with_probability_rising_from_min_to_max(veth):
    """Bursts of 40 ECT packets into an idle port: packet j waits behind about j frames, so each burst walks
    the queue from empty past ecn_max. A packet with less than ecn_min ahead is never marked, one with more
    than ecn_max always, and in between as many are marked as the ramp's probabilities add up to."""
    lo, hi = 12 * FRAME, 32 * FRAME
    veth.egress.attach(veth.port, ECN_RATE, 65536, 1500, True, netns_pid=veth.holder, ecn=Ecn(lo, hi))
    drain_s = 40 * FRAME * 8 / ECN_RATE  # a burst's 40 frames leave in 92 ms
    got, c = run(veth, senders=1, pps=40 / (1.5 * drain_s), count=40 * 20, tclass=ECT0, burst=40)
    assert got["full"] == c.tx_packets == 800 and c.trims == c.drops == 0
    assert c.ecn_marked == len(got["ce"])  # the receiver sees CE in the traffic class of every marked packet
    ahead = queue_ahead(got["sent"], ECN_RATE, FRAME)
    marked = set(got["ce"])
    margin = 200  # bytes: a few tens of microseconds of the sender's timing
    assert not [i for i, a in enumerate(ahead) if i in marked and a < lo - margin]
    assert not [i for i, a in enumerate(ahead) if i not in marked and a > hi + margin]
    ramp = [min(1.0, max(0.0, (a - lo) / (hi - lo))) for a in ahead]
    expected, spread = sum(ramp), sum(p * (1 - p) for p in ramp) ** 0.5
    assert 200 < expected < 500  # the ramp was walked: most bursts had packets on it
    assert abs(len(marked) - expected) < 4 * spread + 2


def test_ecn_marks_only_ect_packets_on_ports_that_mark(veth):
    """Not-ECT packets are never marked, and a port attached without thresholds (a leaf's port towards a
    host) never marks, whatever its queue."""
    veth.egress.attach(veth.port, ECN_RATE, 65536, 1500, True, netns_pid=veth.holder, ecn=Ecn(0, 8 * FRAME))
    got, c = run(veth, senders=1, pps=40 / 0.15, count=40 * 5, tclass=NOT_ECT, burst=40)
    assert got["full"] == c.tx_packets == 200 and c.ecn_marked == 0 and got["ce"] == []
    veth.egress.attach(veth.port, ECN_RATE, 65536, 1500, True, netns_pid=veth.holder)
    got, c = run(veth, senders=1, pps=40 / 0.15, count=40 * 5, tclass=ECT0, burst=40)
    assert got["full"] == c.tx_packets == 200 and c.ecn_marked == 0 and got["ce"] == []


def test_loss_blackhole_restore(veth):
    veth.egress.attach(veth.port, 1_000_000_000, 1 << 20, 1500, True, netns_pid=veth.holder)
    veth.egress.set_loss(veth.port, 0.1)
    got, c = run(veth, senders=1, pps=20_000, count=10_000, size=200)
    assert 0.08 <= c.loss_drops / 10_000 <= 0.12
    assert got["full"] == c.tx_packets == 10_000 - c.loss_drops and c.drops == 0

    veth.egress.set_blackhole(veth.port, True)
    got, c = run(veth, senders=1, pps=20_000, count=1000, size=200)
    assert got["full"] == c.tx_packets == 0 and c.blackhole_drops == 1000
    link = json.loads(veth.ns(veth.ns_a, "ip", "-j", "link", "show", veth.port))[0]
    assert link["operstate"] == "UP"  # a gray failure: the link looks fine

    veth.egress.restore(veth.port)
    got, c = run(veth, senders=1, pps=20_000, count=1000, size=200)
    assert got["full"] == c.tx_packets == 1000 and c.loss_drops == c.blackhole_drops == 0


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_rate_matches_configured_and_set_rate(leftovers):
    lab = VethLab(mtu=9000)
    try:
        # A local TCP sender hands the port 64 KB GSO super-packets, which a 64 KiB virtual
        # queue drops whole; a queue deeper than TCP's small-queue budget measures HTB alone.
        lab.egress.attach(lab.port, 50_000_000, 4 << 20, 9000, True, netns_pid=lab.holder)
        assert lab.iperf_bps(2) == pytest.approx(tcp_goodput(50e6, 9000), rel=0.05)
        lab.egress.set_rate(lab.port, 20_000_000)
        assert lab.iperf_bps(2) == pytest.approx(tcp_goodput(20e6, 9000), rel=0.05)
        assert lab.egress.counters(lab.port).drops == 0
        lab.egress.restore(lab.port)
        assert "rate 50Mbit ceil 50Mbit" in lab.ns(lab.ns_a, "tc", "class", "show", "dev", lab.port, "classid", "1:1")
    finally:
        lab.close()
    assert leftovers(lab.state.prefix, lab.state.processes) == [] and bpf_mounts(lab.state) == []
