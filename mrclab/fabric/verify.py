"""Prove that every (src, dst, plane, spine) path of a built fabric delivers, through the spine it names.

One process per machine does it: it opens a UDP socket inside every host's network namespace
(``setns`` on the calling thread, then straight back), so no helper process starts per host
(`LocalProbes`; a lab over several servers has one such side on each, see `cluster.server`).
Probes go out in one batch per spine index: batch i sends, from every host to
every other host on every plane, a datagram to ``plan.path_address(src, dst, plane, i)``.
A path passes when (a) its probe arrived at dst, addressed to dst's own address on that
plane (the receiver reads the destination from IPV6_PKTINFO), and (b) during its batch
spine p<k>s<i>'s own-uSID counter (OVS: its table-0 shift flow; Linux: its counted
seg6local End route) counted between "arrived" and "sent" packets of plane k while every
other spine of plane k counted none. A probe can only reach a host after each switch on its
way matched its own uSID, and (b) shows which spine that was, so spine counters are read once
per batch (one command per spine, in parallel) rather than once per path.
"""
from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import time
from dataclasses import asdict, dataclass

from ..netns import entered

PORT = 4791  # any port: the sockets live in the fabric's namespaces only


@dataclass(frozen=True)
class PathResult:
    src: str
    dst: str
    plane: int
    spine: str
    address: str
    arrived: bool
    through_spine: bool

    @property
    def ok(self) -> bool:
        return self.arrived and self.through_spine

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def _host_sockets(pid: int) -> tuple[socket.socket, socket.socket]:
    with entered(pid):
        sender = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        receiver = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        receiver.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        receiver.bind(("::", PORT))
        receiver.setblocking(False)
    return sender, receiver


class LocalProbes:
    """The probing side of the hosts and spines this process holds: a sender and a receiver socket in each
    host's namespace, and the spines' own-uSID counters. A fabric built here is one side; on a lab over several
    servers, each server's share is one (`cluster.server`)."""

    def __init__(self, topology, host_pids: dict[int, int], spine_counts) -> None:
        plan = topology.plan
        self.hosts = frozenset(host_pids)
        self._spine_counts = spine_counts  # list of spine names -> {name: packets its End route shifted}
        self._own = {(k, n): ipaddress.IPv6Address(plan.host_address(k, n)) for k in range(topology.planes)
                     for n in host_pids}
        self._sockets: dict[int, tuple[socket.socket, socket.socket]] = {}
        try:
            for n, pid in host_pids.items():
                self._sockets[n] = _host_sockets(pid)
        except BaseException:
            self.close()
            raise

    def send(self, probes: list[tuple[int, int, int, int, str]]) -> None:
        """(src, dst, plane, spine, address) from each src this side holds."""
        for src, dst, k, i, address in probes:
            with contextlib.suppress(OSError):  # e.g. the NIC is down: the path fails, the others go on
                self._sockets[src][0].sendto(f"{src} {dst} {k} {i}".encode(), (address, PORT))

    def receive(self, spine: int, wanted: int, timeout: float) -> set[tuple[int, int, int]]:
        return _receive(self._sockets, self._own, spine, wanted, timeout)

    def counts(self, spines: list[str]) -> dict[str, int]:
        return self._spine_counts(spines) if spines else {}

    def close(self) -> None:
        for sender, receiver in self._sockets.values():
            sender.close()
            receiver.close()


def verify_paths(fabric, timeout: float = 1.0) -> list[PathResult]:
    """Probe every path of a built `Fabric`; `timeout` is how long a batch waits for missing probes."""
    t = fabric.topology
    side = LocalProbes(t, {n: fabric.host(f"h{n}").pid for n in range(t.hosts)}, fabric.switches.spine_counts)
    try:
        return verify(t, {side: list(t.spine_names)}, timeout)
    finally:
        side.close()


def verify(topology, sides: dict, timeout: float = 1.0) -> list[PathResult]:
    """Probe every path through the probing `sides` (each: `hosts`, `send`, `receive`, `counts`; mapped to the
    spines whose counters it reads), one batch per spine index: every host sends a probe to every other host on
    every plane through spine i, each side collects what reached its hosts, and the spines' counters say which
    spine each plane's probes crossed."""
    t = topology
    plan = t.plan
    spines = list(t.spine_names)

    def counted() -> dict[str, int]:
        return {name: n for side, names in sides.items() for name, n in side.counts(names).items()}

    results = []
    before = counted()
    for i in range(t.spines):
        expected = {(src, dst, k): str(plan.path_address(src, dst, k, i)) for src in range(t.hosts)
                    for dst in range(t.hosts) if src != dst for k in range(t.planes)}
        for side in sides:
            side.send([(src, dst, k, i, a) for (src, dst, k), a in expected.items() if src in side.hosts])
        arrived: set[tuple[int, int, int]] = set()
        for side in sides:
            arrived |= side.receive(i, sum(1 for key in expected if key[1] in side.hosts), timeout)
        after = counted()
        counts = {name: after[name] - before[name] for name in spines}
        before = after
        for k in range(t.planes):
            sent_k = sum(1 for key in expected if key[2] == k)
            arrived_k = sum(1 for key in arrived if key[2] == k)
            others_quiet = all(counts[f"p{k}s{s}"] == 0 for s in range(t.spines) if s != i)
            through = others_quiet and arrived_k <= counts[f"p{k}s{i}"] <= sent_k
            results += [PathResult(f"h{src}", f"h{dst}", k, f"p{k}s{i}", address, (src, dst, k) in arrived, through)
                        for (src, dst, kk), address in expected.items() if kk == k]
    return results


def _receive(sockets, own_address, spine: int, wanted: int, timeout: float) -> set[tuple[int, int, int]]:
    """Collect this batch's probes until all are in or `timeout` passes without a new one."""
    by_fd = {receiver.fileno(): (n, receiver) for n, (_, receiver) in sockets.items()}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    arrived: set[tuple[int, int, int]] = set()
    deadline = time.monotonic() + timeout
    while len(arrived) < wanted:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        for fd, _ in poller.poll(remaining * 1000):
            n, receiver = by_fd[fd]
            while True:
                try:
                    data, ancdata, _, _ = receiver.recvmsg(256, socket.CMSG_SPACE(20))
                except BlockingIOError:
                    break
                src, dst, k, i = (int(x) for x in data.split())
                to = next((ipaddress.IPv6Address(d[:16]) for level, kind, d in ancdata
                           if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO), None)
                if dst == n and i == spine and to == own_address[(k, n)]:
                    arrived.add((src, dst, k))
                    deadline = time.monotonic() + timeout
    return arrived


def summary(results: list[PathResult]) -> dict:
    """Counts per (plane, spine) and the failed paths: what a table or a JSON document shows."""
    per_spine: dict[str, dict] = {}
    for r in results:
        row = per_spine.setdefault(r.spine, {"spine": r.spine, "paths": 0, "ok": 0, "arrived": 0})
        row["paths"] += 1
        row["ok"] += r.ok
        row["arrived"] += r.arrived
    return {"paths": len(results), "ok_paths": sum(r.ok for r in results),
            "spines": list(per_spine.values()), "failed": [r.to_dict() for r in results if not r.ok]}



def verify_topology(topology, timeout: float = 1.0, datapath: str = "auto") -> dict:
    """Build the fabric, probe every path, tear it down: the `mrclab topo verify` document, with timings."""
    from .net import Fabric

    started = time.monotonic()
    fabric = Fabric(topology, datapath=datapath)
    with fabric:
        built = time.monotonic()
        results = verify_paths(fabric, timeout)
        verified = time.monotonic()
        controller = fabric.controller_stats()
    done = time.monotonic()
    doc = summary(results)
    return {"topology": topology.name, "ok": doc["ok_paths"] == doc["paths"], "datapath": fabric.datapath.name,
            "datapath_detail": fabric.datapath_detail,
            "run_id": fabric.state.run_id, **doc, "controller": controller,
            "timings_s": {"build": round(built - started, 3), "verify": round(verified - built, 3),
                          "teardown": round(done - verified, 3), "total": round(done - started, 3)}}
