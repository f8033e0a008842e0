"""The host's own NICs, one per plane, watched through netlink link events: which are down, the moment it changes.

A NIC is up while it is administratively up and has carrier (``IFF_UP`` and ``IFF_LOWER_UP``); a
pulled cable (``link_down`` of a host cable) takes the carrier away. Which interface is which
plane's NIC is found once at start: the one holding the host's address on that plane. The
kernel then tells every change to an ``RTMGRP_LINK`` socket in the agent's loop (no polling),
and :meth:`NicWatch.on_readable` reports a new set of down planes within the wake-up the event
arrives in. Were events lost (the socket's buffer overran: ``ENOBUFS``), the states are read
afresh. The parsing is pure (:func:`messages`, :func:`link_states`, :func:`address_indexes`) and
tested without a kernel.
"""
from __future__ import annotations

import errno
import ipaddress
import socket
import struct
import time
from collections.abc import Callable, Iterator

from ..addressing import Plan
from .loop import Reactor

# linux/netlink.h, linux/rtnetlink.h, linux/if_link.h, linux/if_addr.h, linux/if.h
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_NEWADDR, RTM_GETADDR = 16, 17, 18, 20, 22
RTMGRP_LINK = 0x1
IFLA_IFNAME = 3
IFA_ADDRESS, IFA_LOCAL = 1, 2
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index
RTATTR = struct.Struct("=HH")  # len, type
RCVBUF = 1 << 20

Changed = Callable[[int, list[tuple[int, bool]], float], None]
"""(bitmap of the planes whose NIC is down, [(plane, up)] of what changed, when) -> None."""


def messages(buf: bytes) -> Iterator[tuple[int, memoryview]]:
    """(type, payload) of each netlink message in ``buf``; a truncated one ends the walk."""
    view, offset = memoryview(buf), 0
    while offset + NLMSGHDR.size <= len(buf):
        length, kind, _flags, _seq, _pid = NLMSGHDR.unpack_from(buf, offset)
        if length < NLMSGHDR.size or offset + length > len(buf):
            return
        yield kind, view[offset + NLMSGHDR.size:offset + length]
        offset += (length + 3) & ~3


def attributes(payload: memoryview, start: int) -> Iterator[tuple[int, memoryview]]:
    """(type, value) of each route attribute from ``start`` on."""
    offset = (start + 3) & ~3
    while offset + RTATTR.size <= len(payload):
        length, kind = RTATTR.unpack_from(payload, offset)
        if length < RTATTR.size or offset + length > len(payload):
            return
        yield kind, payload[offset + RTATTR.size:offset + length]
        offset += (length + 3) & ~3


def link_states(buf: bytes) -> list[tuple[int, bool]]:
    """(interface index, up) of each link message: up is administratively up with carrier; a deleted
    interface is down."""
    out = []
    for kind, payload in messages(buf):
        if kind in (RTM_NEWLINK, RTM_DELLINK) and len(payload) >= IFINFOMSG.size:
            _family, _type, index, flags, _change = IFINFOMSG.unpack_from(payload)
            up = kind == RTM_NEWLINK and flags & (IFF_UP | IFF_LOWER_UP) == IFF_UP | IFF_LOWER_UP
            out.append((index, up))
    return out


def address_indexes(buf: bytes) -> dict[str, int]:
    """IPv6 address (compressed text) -> the index of the interface that holds it, from address messages."""
    out = {}
    for kind, payload in messages(buf):
        if kind != RTM_NEWADDR or len(payload) < IFADDRMSG.size:
            continue
        family, _plen, _flags, _scope, index = IFADDRMSG.unpack_from(payload)
        if family != socket.AF_INET6:
            continue
        for attr, value in attributes(payload, IFADDRMSG.size):
            if attr in (IFA_ADDRESS, IFA_LOCAL) and len(value) == 16:
                out[str(ipaddress.IPv6Address(bytes(value)))] = index
    return out


def dump(kind: int, family: int = socket.AF_UNSPEC) -> bytes:
    """Every reply of one netlink dump request (RTM_GETLINK, RTM_GETADDR), concatenated."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE) as sock:
        body = struct.pack("=B3x", family) + bytes(12 if kind == RTM_GETLINK else 4)  # ifinfomsg / ifaddrmsg
        sock.sendall(NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + body)
        out = []
        while True:
            chunk = sock.recv(1 << 16)
            ends = [k for k, _ in messages(chunk) if k in (NLMSG_DONE, NLMSG_ERROR)]
            out.append(chunk)
            if ends or not chunk:
                return b"".join(out)


class NicWatch:
    """The planes whose NIC is down (`down`, a bitmap) and a callback for every change, from netlink."""

    def __init__(self, plan: Plan, host: int) -> None:
        owners = address_indexes(dump(RTM_GETADDR, socket.AF_INET6))
        self.planes: dict[int, int] = {}  # interface index -> plane
        for plane in range(plan.planes):
            index = owners.get(str(plan.host_address(plane, host)))
            if index is not None:
                self.planes[index] = plane
        self._up = {plane: True for plane in self.planes.values()}
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                   socket.NETLINK_ROUTE)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self._sock.bind((0, RTMGRP_LINK))  # subscribed first, so no change falls between the dump and the events
        self._changed: Changed | None = None
        self.update(link_states(dump(RTM_GETLINK)), 0.0)

    @property
    def down(self) -> int:
        return sum(1 << plane for plane, up in self._up.items() if not up)

    def attach(self, reactor: Reactor, changed: Changed, now: float) -> None:
        """From now on, report every change to ``changed``; the NICs already down are reported at once."""
        self._changed = changed
        reactor.add_reader(self._sock, self.on_readable)
        already = [(plane, False) for plane, up in sorted(self._up.items()) if not up]
        if already:
            changed(self.down, already, now)

    def on_readable(self) -> None:
        now = time.monotonic()
        states: list[tuple[int, bool]] = []
        while True:
            try:
                states += link_states(self._sock.recv(1 << 16))
            except BlockingIOError:
                break
            except OSError as err:
                if err.errno != errno.ENOBUFS:
                    raise
                states += link_states(dump(RTM_GETLINK))  # events were lost: read every state afresh
        self.update(states, now)

    def update(self, states: list[tuple[int, bool]], now: float) -> None:
        """Apply link states in order, and report each plane's NIC going down or coming up."""
        changes = []
        for index, up in states:
            plane = self.planes.get(index)
            if plane is not None and self._up[plane] != up:
                self._up[plane] = up
                changes.append((plane, up))
        if changes and self._changed is not None:
            self._changed(self.down, changes, now)

    def close(self) -> None:
        self._sock.close()
