"""`avoid_s`: from a fault to the last data packet any sender put on a path through it; and
`revive_s`: from its repair to the first path through it that a sender brought back.

An MRC path is (src host, dst host, plane, spine); the fault's footprint is the set of
paths that cross the failed link or switch. Agents report, per peer and EV, when they
last sent data on it; the runner snapshots that just before the fault is cleared (or at
the end of the run), so later sends after repair do not count.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..spec import Topology
from ..spec.topology import node_parts
from .outcome import EvChange


def path_hits(topo: Topology, target: str, src: int, dst: int, plane: int, spine: int) -> bool:
    """Does the path src -> dst on (plane, spine) cross the link or switch named `target`?"""
    leaf_s, leaf_d = topo.plan.leaf_of(src), topo.plan.leaf_of(dst)
    if topo.has_switch(target):
        kind, p, index = node_parts(target)
        return p == plane and (index == spine if kind == "spine" else index in (leaf_s, leaf_d))
    link = topo.link(target)
    if link.plane != plane:
        return False
    lower, upper = node_parts(link.a), node_parts(link.b)
    if link.kind == "host":
        return lower[2] in (src, dst)
    return upper[2] == spine and lower[2] in (leaf_s, leaf_d)


def dead_hop(topo: Topology, target: str, src: int, dst: int, plane: int, spine: int) -> tuple[str, str] | None:
    """(from, to) of the link direction where a packet on this path first meets the downed `target`, or
    None when the path does not cross it: the sender's side of the fault (going up) before the receiver's."""
    if not path_hits(topo, target, src, dst, plane, spine):
        return None
    host_s, host_d = topo.host_names[src], topo.host_names[dst]
    leaf_s, leaf_d = (f"p{plane}l{topo.plan.leaf_of(n)}" for n in (src, dst))
    hops = [(host_s, leaf_s), (leaf_s, f"p{plane}s{spine}"), (f"p{plane}s{spine}", leaf_d), (leaf_d, host_d)]
    if topo.has_switch(target):
        return next(hop for hop in hops if hop[1] == target)
    ends = set(topo.link(target).name.split("-"))
    return next(hop for hop in hops if set(hop) == ends)


def sent_into(topo: Topology, target: str, before: dict, after: dict) -> dict[tuple[str, str], int]:
    """DATA packets senders put on paths through `target` between two snapshots of their per-EV counts
    (`[src][dst][ev]`), by the link direction where each met the fault."""
    out: dict[tuple[str, str], int] = {}
    for src, peers in after.items():
        for dst, evs in peers.items():
            for ev, n in evs.items():
                hop = dead_hop(topo, target, src, dst, *topo.plan.ev_path(ev))
                sent = n - before.get(src, {}).get(dst, {}).get(ev, 0)
                if hop is not None and sent > 0:
                    out[hop] = out.get(hop, 0) + sent
    return out


def avoid_seconds(topo: Topology, target: str, fault_t: float,
                  last_send: dict[int, dict[int, dict[int, float]]]) -> float | None:
    """Max over senders of (last send on an affected EV) - fault time; 0 if nothing was sent after.

    `last_send[src][dst][ev]` is a monotonic time; None when no sender ever used an affected
    path (the fault touched nothing the workload used).
    """
    worst, touched = 0.0, False
    for src, peers in last_send.items():
        for dst, evs in peers.items():
            for ev, t in evs.items():
                plane, spine = topo.plan.ev_path(ev)
                if path_hits(topo, target, src, dst, plane, spine):
                    touched = True
                    worst = max(worst, t - fault_t)
    return worst if touched else None


def revive_seconds(topo: Topology, target: str, repaired_t_s: float, ev_changes: Iterable[EvChange]) -> float | None:
    """From a repair to the first path through it that a sender brought back (probes succeeded):
    how soon the link carries traffic again. None when no sender had retired a path through it."""
    for change in sorted(ev_changes, key=lambda c: c.t_s):
        if change.t_s < repaired_t_s or change.old != "ASSUMED_BAD" or change.new != "GOOD":
            continue
        plane, spine = topo.plan.ev_path(change.ev)
        if path_hits(topo, target, topo.host_index(change.host), topo.host_index(change.peer), plane, spine):
            return change.t_s - repaired_t_s
    return None
