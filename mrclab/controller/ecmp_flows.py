"""ECMP destination routing of one switch, as plain data (no OVS, no os-ken): the baseline MRC is compared with.

Here the switches, not the senders, choose the path. Packets carry the destination
host's own address ``fcbb:k:<host uSID>::`` (`Plan.host_address`) and every switch of
plane k forwards on its /48 prefix:

* a spine sends each host's prefix to the port of that host's leaf;
* a leaf sends its own hosts' prefixes down (rewriting the Ethernet destination to the
  host's MAC, as the static tables do), and every other host's prefix through the ECMP
  table of the destination's leaf: table 0 writes that leaf into ``reg1`` and a hash of
  the packet's 5-tuple into ``reg0`` (one of ``SLOTS_PER_SPINE x spines`` hash slots),
  and table 1 maps (leaf, slot) to a spine uplink, the way a switch ASIC's ECMP member
  table does. Each spine starts with an equal share of the slots; a spine that can no
  longer reach the destination leaf hands its slots round-robin to the live ones, so
  only the flows that were on the dead path move, spread evenly (resilient hashing);
* whatever else arrives (uSID path addresses included) is dropped by a table-miss entry.

Why ``multipath`` and not an OpenFlow select group: OVS 3.1 hashes select groups with
``dp_hash`` over its symmetric L4 hash, which leaves UDP ports out (checked: 16 UDP
source ports between one host pair all took the same bucket), and naming the hash
fields (``selection_method=hash,fields(...)``) needs OpenFlow 1.5 group mods, while the
bridges speak 1.3. The ``multipath`` action with ``symmetric_l3l4+udp`` hashes IPv6
source and destination, IP protocol and the L4 ports, UDP included: a sender moves a
flow to another path by changing its UDP source port, which is how RoCE and UET NICs
feed entropy to ECMP. Nothing here watches port liveness, so a dead uplink keeps its
slots until the controller rewrites them: that wait is the reconvergence being modelled.

`dead_links` turns port and switch states into dead (leaf, spine) links, `entries_for`
gives a switch's whole table for a set of dead links, and `reprogram` the member-table
entries that differ between two such sets (so only the affected leaves are touched).
"""
from __future__ import annotations

from collections.abc import Iterable

from ..addressing import Plan, host_usid
from ..layout import Layout
from ..spec.topology import node_parts
from .flows import COOKIE_FORWARD, COOKIE_MISS, PRIORITY_MISS, PRIORITY_ROUTE, Flow, _ipv6_match

SLOTS_PER_SPINE = 4
TABLE_ROUTE, TABLE_MEMBERS = 0, 1
LEAF_REG, SLOT_REG = "reg1", "reg0"

DeadLinks = frozenset  # of (leaf name, spine name)
Members = tuple  # port per hash slot; None where no spine reaches the destination leaf


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
            if node_parts(peer)[0] == "spine" and ({(name, peer), (peer, name)} & down or {name, peer} & gone):
                dead.add((name, peer))
    return frozenset(dead)


def members(uplinks: list[int], live: list[bool]) -> Members:
    """The slot -> port table of one destination: slot s belongs to spine ``s % spines`` while that spine
    is live; the slots of dead spines go round-robin to the live ones."""
    spines = len(uplinks)
    alive = [port for port, ok in zip(uplinks, live, strict=True) if ok]
    table: list[int | None] = []
    handed = 0
    for slot in range(SLOTS_PER_SPINE * spines):
        if live[slot % spines]:
            table.append(uplinks[slot % spines])
        elif alive:
            table.append(alive[handed % len(alive)])
            handed += 1
        else:
            table.append(None)
    return tuple(table)


def spine_liveness(layout: Layout, leaf: str, dead: DeadLinks) -> dict[int, list[tuple[str, bool]]]:
    """Destination leaf index -> (spine, whether `leaf` still reaches that leaf through it), in spine
    order, for every other leaf of `leaf`'s plane."""
    plan = plan_of(layout)
    _, plane, own = node_parts(leaf)
    spines = [f"p{plane}s{i}" for i in range(plan.spines)]
    return {remote: [(s, (leaf, s) not in dead and (f"p{plane}l{remote}", s) not in dead) for s in spines]
            for remote in range(plan.leaves) if remote != own}


def live_spines(layout: Layout, leaf: str, dead: DeadLinks) -> dict[int, list[str]]:
    """Destination leaf index -> the spines through which `leaf` still reaches it."""
    return {remote: [s for s, ok in row if ok] for remote, row in spine_liveness(layout, leaf, dead).items()}


def leaf_members(layout: Layout, leaf: str, dead: DeadLinks) -> dict[int, Members]:
    """Destination leaf index -> member table of `leaf`, for every other leaf of its plane."""
    return {remote: members([layout.port(leaf, s).number for s, _ in row], [ok for _, ok in row])
            for remote, row in spine_liveness(layout, leaf, dead).items()}


def member_flow(remote: int, slot: int, port: int | None) -> Flow:
    match = ((LEAF_REG, remote), (SLOT_REG, slot))
    if port is None:
        return Flow(TABLE_MEMBERS, PRIORITY_ROUTE, COOKIE_MISS, match)  # no path: counted as a routing drop
    return Flow(TABLE_MEMBERS, PRIORITY_ROUTE, COOKIE_FORWARD, match, (("output", port),))


def entries_for(layout: Layout, switch: str, dead: DeadLinks = frozenset()) -> list[Flow]:
    """Every flow of `switch` for the given dead links."""
    plan = plan_of(layout)
    kind, plane, index = node_parts(switch)
    ports = layout.switches[switch].ports
    slots = SLOTS_PER_SPINE * plan.spines
    flows = []
    for host in range(plan.hosts):
        match = _ipv6_match(plane, host_usid(host))
        leaf = plan.leaf_of(host)
        goto = None
        actions: tuple[tuple, ...]
        if kind == "spine":
            actions = (("dec_ttl",), ("output", ports[f"p{plane}l{leaf}"].number))
        elif leaf == index:
            port = ports[f"h{host}"]
            actions = (("dec_ttl",), ("set_field", "eth_dst", port.peer_mac), ("output", port.number))
        else:
            actions, goto = (("dec_ttl",), ("load", LEAF_REG, 0, 16, leaf), ("multipath", slots, SLOT_REG)), 1
        flows.append(Flow(TABLE_ROUTE, PRIORITY_ROUTE, COOKIE_FORWARD, match, actions, goto))
    tables = [TABLE_ROUTE]
    if kind == "leaf":
        tables.append(TABLE_MEMBERS)
        for remote, table in leaf_members(layout, switch, dead).items():
            flows += [member_flow(remote, slot, port) for slot, port in enumerate(table)]
    return flows + [Flow(table, PRIORITY_MISS, COOKIE_MISS, ()) for table in tables]


def reprogram(layout: Layout, before: DeadLinks, after: DeadLinks) -> dict[str, list[Flow]]:
    """Leaf -> the member-table entries whose port differs between the two sets of dead links.

    Only the leaves of planes whose dead links changed are looked at; spines never change
    (a spine's only route to a host is through that host's leaf)."""
    planes = {node_parts(leaf)[1] for leaf, _ in before ^ after}
    changes = {}
    for name, switch in sorted(layout.switches.items()):
        if switch.kind != "leaf" or switch.plane not in planes:
            continue
        old, new = leaf_members(layout, name, before), leaf_members(layout, name, after)
        flows = [member_flow(remote, slot, port) for remote, table in new.items()
                 for slot, port in enumerate(table) if old[remote][slot] != port]
        if flows:
            changes[name] = flows
    return changes
