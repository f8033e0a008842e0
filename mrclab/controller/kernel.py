"""The controller of the `linux` datapath: every router's routes installed once, then watched for the whole run.

It runs as its own process (``python -m mrclab.controller --datapath linux ...``), as the
os-ken controller of the `ovs` datapath does, and reports through the same stats file
(`stats`). At start it installs each router's routes (`routes`) with one ``ip -6 -batch``
per namespace, all namespaces at once, and marks every switch programmed. Only then does
it open, inside every router's namespace, a netlink socket subscribed to IPv6 route
changes: from that moment any change to a router's main routing table, whoever makes it,
counts in ``flow_mods_after_boot`` (each is logged, and the first ones are kept in the stats
as ``route_changes``). Under static SRv6 nothing changes them, through every fault: a cut
cable only takes carrier away from a router's port (see `mrclab.layout`). If the kernel
drops notifications (a full socket buffer), ``monitor_overruns`` says so, and the count is
a lower bound.

ECMP with reconvergence (``--app ecmp_reconverge``) watches links too. A router's port
that loses carrier makes its leaf-spine link dead; the kernel already skips it in that
router's own multipath routes (``ignore_routes_with_linkdown``, as a switch handles its own
link), but other leaves keep hashing onto spines that lost the destination leaf until the
control plane reconverges: ``convergence_delay`` after the change, the leaves whose
multipath routes differ get them replaced (`routes.reroute`), and the reconvergence is
recorded as ``{t, trigger_t, trigger, switches, flow_mods}``, as the OVS app records it.
Those replacements are route changes and count in ``flow_mods_after_boot`` too. In a lab over
servers each server's controller programs its own routers and sees its own ports; the servers'
controllers flood their link states to each other (`flood`), so each reconverges its own leaves
on any server's change.
"""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import os
import select
import signal
import socket
import struct
import time
from pathlib import Path
from typing import Any

from ..layout import Layout
from ..netns import entered, ip_batches
from ..routing import APPS
from . import ecmp_flows, stats
from .flood import REFRESH_S, Flood
from .routes import Route, ecmp_routes, reroute, static_routes

log = logging.getLogger("mrclab.controller.kernel")

SOL_NETLINK, NETLINK_ADD_MEMBERSHIP = 270, 1
RTNLGRP_LINK, RTNLGRP_IPV6_ROUTE = 1, 11
RTM_NEWLINK, RTM_NEWROUTE, RTM_DELROUTE = 16, 24, 25
NLMSG_OVERRUN = 4
RT_TABLE_MAIN, RTA_DST, RTA_TABLE, IFLA_IFNAME = 254, 1, 15, 3
IFF_LOWER_UP = 0x10000
KEPT_CHANGES = 100
_NLMSG = struct.Struct("=IHHII")
_RTMSG = struct.Struct("=BBBBBBBBI")
_IFINFO = struct.Struct("=BxHiII")
_RTATTR = struct.Struct("=HH")


def _attributes(body: bytes, offset: int) -> dict[int, bytes]:
    attrs = {}
    while offset + _RTATTR.size <= len(body):
        length, kind = _RTATTR.unpack_from(body, offset)
        if length < _RTATTR.size:
            break
        attrs[kind] = body[offset + _RTATTR.size:offset + length]
        offset += (length + 3) & ~3
    return attrs


def messages(data: bytes):
    """(type, body) of every netlink message in one datagram."""
    offset = 0
    while offset + _NLMSG.size <= len(data):
        length, kind, _, _, _ = _NLMSG.unpack_from(data, offset)
        if length < _NLMSG.size:
            break
        yield kind, data[offset + _NLMSG.size:offset + length]
        offset += (length + 3) & ~3


def route_change(kind: int, body: bytes) -> str | None:
    """`added fcbb:0:2001::/48` for a change to the main table; None for other tables (e.g. the kernel's
    multicast entries in `local`, which come and go with an interface)."""
    family, dst_len, _, _, table, _, _, _, _ = _RTMSG.unpack_from(body)
    attrs = _attributes(body, _RTMSG.size)
    if RTA_TABLE in attrs:
        table = struct.unpack("=I", attrs[RTA_TABLE])[0]
    if table != RT_TABLE_MAIN:
        return None
    dst = socket.inet_ntop(socket.AF_INET6, attrs[RTA_DST]) if family == socket.AF_INET6 and RTA_DST in attrs else "::"
    return f"{'added' if kind == RTM_NEWROUTE else 'deleted'} {dst}/{dst_len}"


def link_state(body: bytes) -> tuple[str, bool] | None:
    """(interface name, carrier) of an RTM_NEWLINK."""
    _, _, _, flags, _ = _IFINFO.unpack_from(body)
    name = _attributes(body, _IFINFO.size).get(IFLA_IFNAME)
    return None if name is None else (name.rstrip(b"\0").decode(), bool(flags & IFF_LOWER_UP))


class KernelController:
    def __init__(self, layout: Layout, netns: dict[str, int], app: str, stats_path: Path,
                 convergence_delay: float, flood: Flood | None = None) -> None:
        self.layout, self.netns, self.app, self.stats_path = layout, netns, app, stats_path
        self.ecmp = not APPS[app].source_routed
        self.delay = convergence_delay
        self.doc: dict[str, Any] = {
            "app": app, "datapath": "linux", "pid": os.getpid(),
            "switches": {name: {"programmed": False, "routes": 0} for name in netns},
            "flow_mods_boot": 0, "flow_mods_after_boot": 0, "route_changes": [], "monitor_overruns": 0}
        if self.ecmp:
            self.doc.update(convergence_delay_s=self.delay, reconvergences=[])
        self.ports = {(name, port.ifname): peer
                      for name, s in layout.switches.items() for peer, port in s.ports.items()}
        self.down_ports: set[tuple[str, str]] = set()
        self.seen = self.applied = ecmp_flows.dead_links(layout, (), ())
        self.timers: list = []  # (due, order, trigger, trigger_t, dead links): reconvergences to come
        self._order = itertools.count()
        self.sockets: dict[int, tuple[socket.socket, str]] = {}
        self.flood = flood  # a share of a lab over servers: the other servers' link states
        if flood is not None:
            self.doc["flood_port"] = flood.port

    def save(self) -> None:
        stats.write(self.stats_path, self.doc)

    def boot_routes(self, name: str) -> list[Route]:
        switch = self.layout.switches[name]
        return ecmp_routes(self.layout, switch, self.applied) if self.ecmp else static_routes(switch, switch.anchor)

    def install(self) -> None:
        tables = {name: self.boot_routes(name) for name in self.netns}
        ip_batches({self.netns[name]: [route.to_ip() for route in routes] for name, routes in tables.items()},
                   family="-6")
        for name, routes in tables.items():
            self.doc["switches"][name].update(programmed=True, routes=len(routes))
            self.doc["flow_mods_boot"] += len(routes)
        log.info("installed %d routes in %d routers", self.doc["flow_mods_boot"], len(tables))

    def open_monitors(self) -> None:
        groups = (RTNLGRP_IPV6_ROUTE, RTNLGRP_LINK) if self.ecmp else (RTNLGRP_IPV6_ROUTE,)
        for name, pid in self.netns.items():
            with entered(pid):
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            sock.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE: a burst must not overrun it
            sock.bind((0, 0))
            for group in groups:
                sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
            sock.setblocking(False)
            self.sockets[sock.fileno()] = (sock, name)

    def run(self) -> None:
        self.install()
        self.open_monitors()  # after the boot routes: their own notifications are not changes
        self.save()
        flood = self.flood
        listened = [*self.sockets, *([flood.sock.fileno()] if flood else [])]
        while True:
            timeout = max(0.0, self.timers[0][0] - time.monotonic()) if self.timers else None
            if flood is not None:
                timeout = REFRESH_S if timeout is None else min(timeout, REFRESH_S)
            ready, _, _ = select.select(listened, [], [], timeout)
            for fd in ready:
                if fd in self.sockets:
                    self.read(*self.sockets[fd])
                elif flood is not None:
                    self.heard(flood)
            if flood is not None:
                flood.refresh()
            while self.timers and self.timers[0][0] <= time.monotonic():
                _, _, trigger, trigger_t, dead = heapq.heappop(self.timers)
                self.reconverge(trigger, trigger_t, dead)

    def read(self, sock: socket.socket, switch: str) -> None:
        changed = False
        while True:
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:  # ENOBUFS: the kernel dropped notifications
                self.doc["monitor_overruns"] += 1
                log.warning("%s: route notifications were lost (socket buffer overrun)", switch)
                changed = True
                continue
            for kind, body in messages(data):
                if kind in (RTM_NEWROUTE, RTM_DELROUTE):
                    change = route_change(kind, body)
                    if change is not None:
                        self.count(switch, change)
                        changed = True
                elif kind == RTM_NEWLINK and self.ecmp:
                    state = link_state(body)
                    if state is not None:
                        self.link(switch, *state)
                elif kind == NLMSG_OVERRUN:
                    self.doc["monitor_overruns"] += 1
        if changed:
            self.save()

    def count(self, switch: str, change: str) -> None:
        self.doc["flow_mods_after_boot"] += 1
        log.info("%s: route %s", switch, change)
        if len(self.doc["route_changes"]) < KEPT_CHANGES:
            self.doc["route_changes"].append({"t": time.time(), "switch": switch, "change": change})

    def link(self, switch: str, ifname: str, carrier: bool) -> None:
        peer = self.ports.get((switch, ifname))
        if peer is None or peer.startswith("h"):
            return
        key = (switch, peer)
        if carrier == (key not in self.down_ports):
            return
        (self.down_ports.discard if carrier else self.down_ports.add)(key)
        if self.flood is not None:
            self.flood.tell(frozenset(self.down_ports))
        self.changed(f"{switch} port to {peer} {'up' if carrier else 'down'}")

    def heard(self, flood: Flood) -> None:
        """Other servers' link states arrived: a change among them is a change of the fabric's."""
        changed = flood.receive()
        if "flood_peers" not in self.doc and flood.peers:
            self.doc["flood_peers"] = len(flood.peers)
            self.save()
        if changed:
            self.changed(f"link states of {', '.join(changed)}")

    def changed(self, trigger: str) -> None:
        """The ports without carrier changed (here or on another server): reconverge `delay` later if that
        changes which leaf-spine links are dead."""
        down = self.down_ports | (self.flood.down() if self.flood is not None else frozenset())
        dead = ecmp_flows.dead_links(self.layout, down, ())
        if dead == self.seen:
            log.info("%s: no leaf-spine link changed state", trigger)
            return
        self.seen = dead
        log.info("%s: reconverging in %.3fs", trigger, self.delay)
        heapq.heappush(self.timers, (time.monotonic() + self.delay, next(self._order), trigger, time.time(), dead))

    def reconverge(self, trigger: str, trigger_t: float, dead: ecmp_flows.DeadLinks) -> None:
        changes = {name: routes for name, routes in reroute(self.layout, self.applied, dead).items()
                   if name in self.netns}  # over servers, each controller rewrites its own leaves
        self.applied = dead
        if not changes:
            log.info("%s: nothing to reroute", trigger)
            return
        ip_batches({self.netns[name]: [route.to_ip() for route in routes] for name, routes in changes.items()},
                   family="-6")
        sent = sum(len(routes) for routes in changes.values())
        now = time.time()
        self.doc["reconvergences"].append({"t": now, "trigger_t": trigger_t, "trigger": trigger,
                                           "switches": sorted(changes), "flow_mods": sent})
        log.info("reconverged %.3fs after %s: %d routes replaced in %s", now - trigger_t, trigger, sent,
                 ", ".join(sorted(changes)))
        self.save()


def _exit(_signum, _frame) -> None:
    raise SystemExit(0)


def main(*, layout_path: str, netns_path: str, app: str, stats_path: str, convergence_delay: float,
         flood_path: str | None = None) -> None:
    signal.signal(signal.SIGTERM, _exit)
    layout = Layout.from_dict(json.loads(Path(layout_path).read_text()))
    netns = json.loads(Path(netns_path).read_text())
    flood = Flood(**json.loads(Path(flood_path).read_text())) if flood_path else None
    controller = KernelController(layout, netns, app, Path(stats_path), convergence_delay, flood)
    try:
        controller.run()
    except RuntimeError as e:
        log.error("%s", e)
        raise SystemExit(f"installing routes failed: {e}") from None
