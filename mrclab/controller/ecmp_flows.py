"""ECMP destination routing of one switch, as plain data (no OVS, no os-ken): the baseline MRC is compared with.

Here the switches, not the senders, choose the path. Packets carry the destination
host's own address ``fcbb:k:<host uSID>::`` (`Plan.host_address`) and every switch of
plane k forwards on its /48 prefix, in one table:

* a leaf sends its own hosts' prefixes down (rewriting the Ethernet destination to the
  host's MAC, as the static tables do) and every other host's prefix to a **select
  group** of the destination's leaf, one bucket per live spine uplink. Keeping one group
  per remote leaf (group id = leaf index + 1) is what makes a fault cheap to route
  around: a dead (leaf, spine) link removes that spine from exactly the groups that
  lead to or leave from that leaf, and nothing else changes;
* a spine sends each host's prefix to the port of that host's leaf;
* whatever else arrives (uSID path addresses included) hits the table-miss drop.

The select groups are sent over OpenFlow 1.3, which has no way to name the hash
fields (OVS takes ``selection_method=hash,fields(...)`` only in OpenFlow 1.5 group
mods, and the bridges speak 1.3). OVS's default for a select group of equal-weight
buckets is then ``dp_hash`` with its symmetric L4 hash (IPv6 source and destination,
IP protocol, L4 ports), the usual switch ECMP: a sender moves a flow to another path
by changing its UDP source port, which is how RoCE and UET NICs feed entropy to ECMP.
Buckets watch no port (``watch_port=ANY``), so OVS never skips a dead uplink by itself:
a dead link keeps its share of the hash until the controller reprograms the group,
which is the reconvergence delay being modelled.

`dead_links` turns port and switch states into dead (leaf, spine) links, `entries_for`
gives a switch's whole table for a set of dead links, and `reprogram` the group
changes between two such sets (the affected switches only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

from ..addressing import Plan, host_usid
from ..fabric.layout import Layout
from ..spec.topology import parse_node
from .flows import COOKIE_FORWARD, COOKIE_MISS, PRIORITY_MISS, PRIORITY_ROUTE, Flow, _ipv6_match

DeadLinks = frozenset  # of (leaf name, spine name)


@dataclass(frozen=True)
class Group:
    """A select group with one bucket (plain ``output``) per port; `modify` replaces an existing group."""

    group_id: int
    ports: tuple[int, ...]
    modify: bool = False

    def to_ofctl(self) -> str:
        buckets = "".join(f",bucket=output:{port}" for port in self.ports)
        return f"group_id={self.group_id},type=select{buckets}"


Entry = Union[Group, Flow]


def group_id(dest_leaf: int) -> int:
    """The group a leaf forwards to for hosts behind leaf `dest_leaf` (0 is not a valid OpenFlow group id)."""
    return dest_leaf + 1


def plan_of(layout: Layout) -> Plan:
    t = layout.topology
    return Plan(t["planes"], t["leaves"], t["spines"], t["hosts_per_leaf"])


def dead_links(layout: Layout, down_ports: Iterable[tuple[str, str]], disconnected: Iterable[str]) -> DeadLinks:
    """Leaf-spine links that cannot carry traffic: either end's port down ((switch, peer) pairs),
    or either switch gone from the controller."""
    down, gone = set(down_ports), set(disconnected)
    dead = set()
    for name, switch in layout.switches.items():
        if switch.kind != "leaf":
            continue
        for peer in switch.ports:
            if parse_node(peer)[0] == "spine" and ({(name, peer), (peer, name)} & down or {name, peer} & gone):
                dead.add((name, peer))
    return frozenset(dead)


def leaf_groups(layout: Layout, leaf: str, dead: DeadLinks) -> dict[int, Group]:
    """group id -> group of `leaf`: towards each other leaf of its plane, the spines both reach alive."""
    plan = plan_of(layout)
    _, plane, own = parse_node(leaf)
    ports = layout.switches[leaf].ports
    groups = {}
    for remote in range(plan.leaves):
        if remote == own:
            continue
        other = f"p{plane}l{remote}"
        live = [ports[spine].number for spine in (f"p{plane}s{i}" for i in range(plan.spines))
                if (leaf, spine) not in dead and (other, spine) not in dead]
        groups[group_id(remote)] = Group(group_id(remote), tuple(sorted(live)))
    return groups


def entries_for(layout: Layout, switch: str, dead: DeadLinks = frozenset()) -> list[Entry]:
    """The whole table of `switch` (groups first: a flow may only name a group that exists)."""
    plan = plan_of(layout)
    kind, plane, index = parse_node(switch)
    ports = layout.switches[switch].ports
    entries: list[Entry] = []
    if kind == "leaf":
        entries += leaf_groups(layout, switch, dead).values()
    for host in range(plan.hosts):
        match = _ipv6_match(plane, host_usid(host))
        leaf = plan.leaf_of(host)
        if kind == "spine":
            actions = (("dec_ttl",), ("output", ports[f"p{plane}l{leaf}"].number))
        elif leaf == index:
            port = ports[f"h{host}"]
            actions = (("dec_ttl",), ("set_field", "eth_dst", port.peer_mac), ("output", port.number))
        else:
            actions = (("dec_ttl",), ("group", group_id(leaf)))
        entries.append(Flow(0, PRIORITY_ROUTE, COOKIE_FORWARD, match, actions))
    entries.append(Flow(0, PRIORITY_MISS, COOKIE_MISS, ()))
    return entries


def reprogram(layout: Layout, before: DeadLinks, after: DeadLinks) -> dict[str, list[Group]]:
    """Leaf -> the groups (as modifications) whose buckets differ between the two sets of dead links.

    Only the leaves of planes whose dead links changed are looked at; spines never change
    (a spine's only route to a host is through that host's leaf)."""
    planes = {parse_node(leaf)[1] for leaf, _ in before ^ after}
    changes = {}
    for name, switch in sorted(layout.switches.items()):
        if switch.kind != "leaf" or switch.plane not in planes:
            continue
        old, new = leaf_groups(layout, name, before), leaf_groups(layout, name, after)
        changed = [Group(g.group_id, g.ports, modify=True) for gid, g in new.items() if old[gid].ports != g.ports]
        if changed:
            changes[name] = changed
    return changes
