"""The SRv6 uSID address plan, shared by the controller (which routes it) and the agents (which write it).

Each plane k owns the 32-bit locator block ``fcbb:k::/32`` (ULA space, never routed
outside the fabric). After the block come 16-bit uN micro-SIDs, one per hop:

    leaf j  -> 0x1000 + j        spine i -> 0x2000 + i        host n -> 0x4000 + n

A packet from host s to host d on plane k through spine i carries the whole path::

    fcbb:k:<leaf(s)>:<spine i>:<leaf(d)>:<host d>::

Every switch that finds its own uSID right after the block shifts the rest left by
16 bits and forwards on the next uSID, so the packet reaches host d as
``fcbb:k:<host d>::``, the host's own address on that plane. Pairs on the same leaf
also go up through a spine (leaf, spine, same leaf again), so every host pair has
exactly planes x spines paths and spraying is uniform for every pair.

An entropy value (EV) names one of those paths: ``plane = ev % planes`` and
``spine = (ev // planes) % spines``, so consecutive EVs walk the planes first and an
EV set whose size is a multiple of planes x spines covers every path equally.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LEAF_BASE = 0x1000
SPINE_BASE = 0x2000
HOST_BASE = 0x4000
MAX_LEAVES = SPINE_BASE - LEAF_BASE
MAX_SPINES = HOST_BASE - SPINE_BASE
CONN_HOST_BITS = 12
MAX_HOSTS = 1 << CONN_HOST_BITS  # within the uSID space (0x10000 - HOST_BASE), and both fit in a conn_id
QP_BITS = 32 - 2 * CONN_HOST_BITS
MAX_CONNECTIONS = 1 << QP_BITS  # QPs per ordered pair of hosts
MAX_PLANES = 0x10000


def leaf_usid(leaf: int) -> int:
    return LEAF_BASE + leaf


def spine_usid(spine: int) -> int:
    return SPINE_BASE + spine


def host_usid(host: int) -> int:
    return HOST_BASE + host


def block(plane: int) -> ipaddress.IPv6Network:
    """The plane's /32 locator block."""
    return ipaddress.IPv6Network(((0xFCBB << 112) | (plane << 96), 32))


def usid_prefix(plane: int, usid: int) -> ipaddress.IPv6Network:
    """``block:usid::/48``: what a switch matches to recognise its own (or the next) uSID."""
    return ipaddress.IPv6Network(((0xFCBB << 112) | (plane << 96) | (usid << 80), 48))


def encode(plane: int, usids: tuple[int, ...] | list[int]) -> ipaddress.IPv6Address:
    """Block of ``plane`` followed by up to six uSIDs, zero-filled."""
    if len(usids) > 6:
        raise ValueError(f"at most 6 uSIDs fit after a /32 block, got {len(usids)}")
    value = (0xFCBB << 112) | (plane << 96)
    for position, usid in enumerate(usids):
        if not 0 < usid < 0x10000:
            raise ValueError(f"uSID {usid:#x} out of range")
        value |= usid << (80 - 16 * position)
    return ipaddress.IPv6Address(value)


def decode(address: ipaddress.IPv6Address | str) -> tuple[int, tuple[int, ...]]:
    """Inverse of :func:`encode`: (plane, uSIDs up to the first zero)."""
    value = int(ipaddress.IPv6Address(address))
    if value >> 112 != 0xFCBB:
        raise ValueError(f"{address} is not in the fcbb::/16 uSID space")
    plane = (value >> 96) & 0xFFFF
    usids = []
    for position in range(6):
        usid = (value >> (80 - 16 * position)) & 0xFFFF
        if usid == 0:
            break
        usids.append(usid)
    return plane, tuple(usids)


def shift(address: ipaddress.IPv6Address | str) -> ipaddress.IPv6Address:
    """What a switch does on matching its uSID: drop it, move the rest up, zero-fill."""
    value = int(ipaddress.IPv6Address(address))
    head = value & ~((1 << 96) - 1)
    usids = value & ((1 << 96) - 1)
    return ipaddress.IPv6Address(head | ((usids << 16) & ((1 << 96) - 1)))


@dataclass(frozen=True)
class Plan:
    """The address plan of one fabric shape; the agents and the controller share it."""

    planes: int
    leaves: int
    spines: int
    hosts_per_leaf: int

    def __post_init__(self) -> None:
        for name, value, limit in (("planes", self.planes, MAX_PLANES), ("leaves", self.leaves, MAX_LEAVES),
                                   ("spines", self.spines, MAX_SPINES), ("hosts", self.hosts, MAX_HOSTS)):
            if not 1 <= value <= limit:
                raise ValueError(f"{name} must be between 1 and {limit}, got {value}")

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    @property
    def paths_per_pair(self) -> int:
        return self.planes * self.spines

    def check_peer(self, host: int, peer: int) -> None:
        """ValueError unless ``peer`` is a host of the fabric other than ``host`` (an agent's own)."""
        if not 0 <= peer < self.hosts or peer == host:
            raise ValueError(f"peer {peer} is not another host (0..{self.hosts - 1}, not {host})")

    def leaf_of(self, host: int) -> int:
        return host // self.hosts_per_leaf

    def host_address(self, plane: int, host: int) -> ipaddress.IPv6Address:
        """Host's own address on a plane: what a packet carries once every hop is shifted out."""
        return encode(plane, (host_usid(host),))

    def path_address(self, src: int, dst: int, plane: int, spine: int) -> ipaddress.IPv6Address:
        """Destination address that steers a packet from src to dst through one spine of one plane."""
        for name, value, limit in (("src", src, self.hosts), ("dst", dst, self.hosts),
                                   ("plane", plane, self.planes), ("spine", spine, self.spines)):
            if not 0 <= value < limit:
                raise ValueError(f"{name} {value} out of range 0..{limit - 1}")
        return encode(plane, (leaf_usid(self.leaf_of(src)), spine_usid(spine),
                              leaf_usid(self.leaf_of(dst)), host_usid(dst)))

    def ev_path(self, ev: int) -> tuple[int, int]:
        """(plane, spine) that an entropy value steers to."""
        return ev % self.planes, (ev // self.planes) % self.spines

    def ev_address(self, src: int, dst: int, ev: int) -> ipaddress.IPv6Address:
        plane, spine = self.ev_path(ev)
        return self.path_address(src, dst, plane, spine)


def conn_id(src: int, dst: int, qp: int = 0) -> int:
    """Connection (QP) ``qp`` of the ordered pair src -> dst, the same in every step: a 32-bit id that holds all
    three."""
    return (qp << 2 * CONN_HOST_BITS) | (src << CONN_HOST_BITS) | dst


def conn_hosts(conn: int) -> tuple[int, int]:
    """(src, dst) of a `conn_id`."""
    mask = (1 << CONN_HOST_BITS) - 1
    return (conn >> CONN_HOST_BITS) & mask, conn & mask


def conn_qp(conn: int) -> int:
    """The QP index of a `conn_id` among its pair's connections."""
    return conn >> 2 * CONN_HOST_BITS
