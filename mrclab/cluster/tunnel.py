"""Cables between servers: each direction of a switch-to-switch cable whose ends a placement put on two servers
is a VXLAN device at either end, one VNI per direction, over the servers' underlay.

A split cable (the Linux datapath, see `layout`) already sends each direction on its own interface and lands it
on the peer's receive interface; across servers the two keep their names and MACs and become the two ends of
one point-to-point VXLAN tunnel (``remote`` set, no learning, no flooding), so the routers, the egress program
(shaping, trimming, ECN, faults on the sending end) and the fault actions (downing the receiving end) see the
same interfaces as on a local cable. Each device is made in the server's own namespace, where its UDP socket
stays, and is moved into its router's namespace in the same command; the emulated MTU is kept, so the underlay
has to carry it plus the encapsulation (`underlay_mtu`).

Both servers derive the VNIs from the layout alone (every switch-to-switch direction in one sorted order), so
no VNI is ever exchanged.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from ..layout import Layout

VXLAN_PORT = 4789  # IANA's; every server of a lab listens on it in its own namespace
VNI_BASE = 1 << 12  # clear of the small VNIs other VXLAN users on a shared underlay tend to pick
ENCAPSULATION = {4: 50, 6: 70}  # outer IP + UDP + VXLAN + inner Ethernet, by the underlay's IP version


@dataclass(frozen=True)
class Underlay:
    """Where a server meets the others: its address on the underlay and the interface that holds it."""

    address: str
    device: str

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.address).version


@dataclass(frozen=True)
class TunnelEnd:
    """One VXLAN device of a crossing cable, on the server that holds ``node``."""

    node: str        # SPEC name of the switch whose namespace holds it
    ifname: str
    mac: str
    vni: int
    remote_server: int
    sends: bool      # the sending end of its direction (the egress program shapes it); else the receiving end


def vnis(layout: Layout) -> dict[tuple[str, str], int]:
    """(from switch, to switch) -> VNI for every switch-to-switch direction of the fabric."""
    directions = sorted((name, peer) for name, switch in layout.switches.items()
                        for peer in switch.ports if peer in layout.switches)
    return {direction: VNI_BASE + i for i, direction in enumerate(directions)}


def ends(layout: Layout, placement: Mapping[str, int], server: int) -> list[TunnelEnd]:
    """The VXLAN devices ``server`` makes: two per crossing cable end it holds (it sends on one and receives on
    the other). Raises ValueError on an unsplit cable (OVS's: one interface carries both directions)."""
    numbers = vnis(layout)
    out = []
    for name, switch in sorted(layout.switches.items()):
        if placement[name] != server:
            continue
        for peer, port in sorted(switch.ports.items()):
            if peer not in layout.switches or placement[peer] == server:
                continue
            if not port.split:
                raise ValueError(f"cable {name}-{peer}: a cable between servers needs one interface per direction "
                                 "(the linux datapath)")
            remote = placement[peer]
            out.append(TunnelEnd(name, port.ifname, port.mac, numbers[(name, peer)], remote, True))
            out.append(TunnelEnd(name, port.rx_ifname, port.rx_mac, numbers[(peer, name)], remote, False))
    return out


def link_lines(tunnel_ends: list[TunnelEnd], *, pids: Mapping[str, int], underlays: Mapping[int, Underlay],
               server: int, mtu: int, port: int = VXLAN_PORT) -> list[str]:
    """`ip -batch` lines, run in ``server``'s own namespace, that make its tunnel ends inside their routers'
    namespaces."""
    local = underlays[server]
    return [f"link add name {end.ifname} address {end.mac} netns {pids[end.node]} mtu {mtu} type vxlan "
            f"id {end.vni} local {local.address} remote {underlays[end.remote_server].address} dev {local.device} "
            f"dstport {port} nolearning" for end in tunnel_ends]


def underlay_mtu(mtu: int, version: int) -> int:
    """The smallest underlay MTU that carries the fabric's ``mtu`` inside VXLAN without fragments."""
    return mtu + ENCAPSULATION[version]
