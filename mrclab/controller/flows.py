"""The static SRv6 uSID flow table of one switch, as plain data (no OVS, no os-ken).

Table 0 recognises the switch's own uSID right after the plane's block, shifts the
uSIDs left by 16 bits (NXM ``move`` through ``xxreg0``, then zero the last 16 bits),
decrements the hop limit and goes to table 1. Table 1 forwards on the uSID that is
now first: a leaf sends spine uSIDs up and its hosts' uSIDs down (rewriting the
Ethernet destination to the host's MAC, since hosts only accept their own); a spine
sends leaf uSIDs down. A pair on one leaf turns around at the spine, and OpenFlow
drops output to the ingress port unless it says IN_PORT, so each spine->leaf flow
has a higher-priority twin for packets that came in on that port. Whatever else
arrives hits a table-miss entry that drops it and counts it: never flood, never
send a packet to the controller.

The whole table is installed once when the switch connects; nothing here depends
on link state, which is the point of static source routing.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..addressing import host_usid, leaf_usid, spine_usid, usid_prefix
from ..layout import Port
from ..spec.topology import node_parts

ETH_TYPE_IPV6 = 0x86DD
IN_PORT = "in_port"

# Cookies say what a flow is for, so counters can be read by purpose (ovs-ofctl cookie=0x1/-1).
COOKIE_SHIFT = 0x1
COOKIE_FORWARD = 0x2
COOKIE_MISS = 0x3

PRIORITY_MISS = 0
PRIORITY_ROUTE = 100
PRIORITY_HAIRPIN = 200

# A 96-bit uSID carrier after the 32-bit block: keep the block, shift the rest.
SHIFT_ACTIONS = (
    ("move", "ipv6_dst", 0, "xxreg0", 0, 80),
    ("move", "xxreg0", 0, "ipv6_dst", 16, 80),
    ("load", "ipv6_dst", 0, 16, 0),
    ("dec_ttl",),
)


@dataclass(frozen=True)
class Flow:
    """One flow entry. Actions: ("move", src, src_ofs, dst, dst_ofs, n_bits),
    ("load", dst, ofs, n_bits, value), ("dec_ttl",), ("set_field", field, value), ("output", port or IN_PORT),
    ("multipath", n_links, dst): a symmetric hash of addresses, IP protocol and L4 ports (UDP's too), modulo
    n_links, into dst[0..15] (OVS's ``multipath`` with fields ``symmetric_l3l4+udp``)."""

    table: int
    priority: int
    cookie: int
    match: tuple[tuple[str, Any], ...]
    actions: tuple[tuple, ...] = ()
    goto: int | None = None

    def to_ofctl(self) -> str:
        """The same entry in ovs-ofctl syntax (for logs and humans)."""
        fields = [f"table={self.table}", f"priority={self.priority}", f"cookie={self.cookie:#x}"]
        for key, value in self.match:
            if key == "eth_type":
                fields.append("ipv6" if value == ETH_TYPE_IPV6 else f"dl_type={value:#x}")
            elif key == "ipv6_dst":
                fields.append(f"ipv6_dst={value[0]}/{value[1]}")
            else:
                fields.append(f"{key}={value}")
        acts = [_ofctl_action(a) for a in self.actions]
        if self.goto is not None:
            acts.append(f"goto_table:{self.goto}")
        return ",".join(fields) + " actions=" + (",".join(acts) or "drop")


def _ofctl_action(action: tuple) -> str:
    kind = action[0]
    if kind == "move":
        _, src, so, dst, do, n = action
        return f"move:{_nxm(src)}[{so}..{so + n - 1}]->{_nxm(dst)}[{do}..{do + n - 1}]"
    if kind == "load":
        _, dst, ofs, n, value = action
        return f"load:{value:#x}->{_nxm(dst)}[{ofs}..{ofs + n - 1}]"
    if kind == "set_field":
        return f"set_field:{action[2]}->{action[1]}"
    if kind == "output":
        return "IN_PORT" if action[1] == IN_PORT else f"output:{action[1]}"
    if kind == "multipath":
        return f"multipath(symmetric_l3l4+udp,0,modulo_n,{action[1]},0,{_nxm(action[2])}[0..15])"
    return kind


def _nxm(field: str) -> str:
    return {"ipv6_dst": "NXM_NX_IPV6_DST", "xxreg0": "NXM_NX_XXREG0", "reg0": "NXM_NX_REG0",
            "reg1": "NXM_NX_REG1"}[field]


def _ipv6_match(plane: int, usid: int) -> tuple[tuple[str, Any], ...]:
    prefix = usid_prefix(plane, usid)
    return (("eth_type", ETH_TYPE_IPV6), ("ipv6_dst", (str(prefix.network_address), str(prefix.netmask))))


def flows_for(switch: str, ports: Mapping[str, Port]) -> list[Flow]:
    """Every flow of `switch` (SPEC name), given its port map (neighbour SPEC name -> Port)."""
    kind, plane, index = node_parts(switch)
    own = leaf_usid(index) if kind == "leaf" else spine_usid(index)
    flows = [Flow(0, PRIORITY_ROUTE, COOKIE_SHIFT, _ipv6_match(plane, own), SHIFT_ACTIONS, goto=1)]
    for peer, port in sorted(ports.items(), key=lambda item: item[1].number):
        peer_kind, _, peer_index = node_parts(peer)
        if peer_kind == "host":
            flows.append(Flow(1, PRIORITY_ROUTE, COOKIE_FORWARD, _ipv6_match(plane, host_usid(peer_index)),
                              (("set_field", "eth_dst", port.peer_mac), ("output", port.number))))
        elif peer_kind == "spine":
            flows.append(Flow(1, PRIORITY_ROUTE, COOKIE_FORWARD, _ipv6_match(plane, spine_usid(peer_index)),
                              (("output", port.number),)))
        else:
            match = _ipv6_match(plane, leaf_usid(peer_index))
            flows.append(Flow(1, PRIORITY_ROUTE, COOKIE_FORWARD, match, (("output", port.number),)))
            flows.append(Flow(1, PRIORITY_HAIRPIN, COOKIE_FORWARD, (("in_port", port.number),) + match,
                              (("output", IN_PORT),)))
    flows += [Flow(table, PRIORITY_MISS, COOKIE_MISS, ()) for table in (0, 1)]
    return flows
