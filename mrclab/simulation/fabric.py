"""The lab's fabric in simulated time: the topology's cables as links of the discrete-event network
(`transport.sim`), the routing mode's paths through them, and the timeline's fault actions.

Each cable is two links, one per direction, at the topology's rates and queue, trimming where the
topology trims and marking ECN CE on the ports between switches (a leaf's port towards a host never
marks, as in the lab's egress program). A host's own port stands for its NIC: ``HOST_QUEUE_BYTES`` deep
and never trimming, since a NIC holds its host's packets back rather than dropping them; a packet
dropped there is counted and makes the run's fidelity say so (`queue_drops` on an ``h*`` link).

Routing follows `routing.ROUTINGS`: under static SRv6 an EV names its (plane, spine) path, as the
uSID address does in the lab (pairs on one leaf also go up through the spine); under ECMP the
source leaf hashes the flow (hosts, plane and the EV's entropy, salted with the run's seed as a lab run's
switches salt theirs) onto one of the member slots of
`controller.ecmp_flows`, and the slots of spines a fault cut off move to live ones only
``convergence_delay`` after the fault, as the reconverging controller does: until then, packets
hashed onto a dead path are lost.

A fault acts as in the lab: ``link_down`` cuts both directions (a host cable also tells the host
its NIC went down, as its netlink watch does), ``switch_down`` every cable of the switch, ``loss``,
``rate`` and ``blackhole`` act on both directions, ``restore`` undoes them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..actions import perform
from ..agent.ecmp import flow_hash
from ..controller.ecmp_flows import members
from ..routing import ROUTINGS
from ..spec.topology import PATH_HOPS, Topology, node_parts
from ..spec.topology import Link as Cable
from ..transport.config import CC_TARGET_DELAY_FLOOR, TransportConfig
from ..transport.sim import Link, Network

HOP_DELAY_S = 1e-6
"""Propagation and switching per hop: a few hundred metres of fibre and a switch's cut-through latency."""
HOST_QUEUE_BYTES = 4 << 20
TUNED_RATE_BPS, TUNED_QUEUE_BYTES = 25_000_000, 64 << 10
"""The link rate and queue the transport's timer defaults were tuned at: the default lab's."""
TIMERS = ("probe_interval", "probe_interval_max", "rto_min", "rto_initial", "rto_max", "reorder_window",
          "reorder_window_max", "hold_window", "dcqcn_period")
"""The transport options that are times of the fabric's, not of the transport's own logic."""


def round_trip(topology: Topology, host_rate: float, fabric_rate: float) -> float:
    """The longest trip host -> leaf -> spine -> leaf -> host a full packet can take in this model: behind a full
    queue at every hop, serialization and propagation included (what a loss timer must wait out)."""
    bits = (topology.queue_bytes + topology.mtu) * 8
    return 2 * (bits / host_rate + bits / fabric_rate) + 4 * HOP_DELAY_S


def timer_scale(topology: Topology) -> float:
    """This fabric's longest round trip against the one the transport's timers were tuned on (the default lab:
    25 Mbit links, 64 KiB queues), never above 1."""
    tuned = dataclasses.replace(topology, queue_bytes=TUNED_QUEUE_BYTES)
    return min(1.0, round_trip(topology, topology.host_rate_bps, topology.fabric_rate_bps)
               / round_trip(tuned, TUNED_RATE_BPS, TUNED_RATE_BPS))


def timer_defaults(topology: Topology) -> dict[str, float]:
    """The transport's timer defaults scaled by `timer_scale`: a retransmission, probe or reorder timer is then as
    many loaded round trips long as in the lab, whether the links run at 25 Mbit or 400 Gbit. The delay target
    keeps its floor of six full packets at the host link."""
    scale = timer_scale(topology)
    defaults = TransportConfig()
    return {**{name: getattr(defaults, name) * scale for name in TIMERS},
            "cc_target_delay": max(CC_TARGET_DELAY_FLOOR * scale, 6 * topology.mtu * 8 / topology.host_rate_bps)}


NicCallback = Callable[[str, int, bool], None]  # host name, plane, down


class SimFabric:
    """The links of one run and what the timeline does to them; `route` is the network's route function."""

    def __init__(self, topology: Topology, net: Network, *, routing: str, convergence_delay: float,
                 on_nic: NicCallback, seed: int = 0) -> None:
        """``seed`` salts the ECMP hash, as each lab run's kernel or switch hashes with a seed of its own."""
        self.topology, self.net, self.on_nic, self.seed = topology, net, on_nic, seed
        self.plan = topology.plan
        self.ecmp = not ROUTINGS[routing].source_routed
        self.convergence_delay = convergence_delay
        self.links: dict[str, Link] = {}
        self.cables: dict[str, tuple[Link, Link]] = {}
        for cable in topology.links:
            self.cables[cable.name] = (self._link(cable, cable.a, cable.b), self._link(cable, cable.b, cable.a))
        self.down: set[str] = set()       # cables cut (link_down, or a switch of theirs down)
        self.switches_down: set[str] = set()
        self.blackholed: set[str] = set()
        self.reprogrammed = 0  # ECMP member entries rewritten after boot
        self._dead: frozenset = frozenset()  # (plane, leaf, spine) the ECMP tables route around
        self._tables: dict[tuple[int, int, int], tuple] = {}
        self._reason: dict[str, str | None] = {}  # cable -> why its links drop everything now
        self._settled: dict[str, int] = {}       # link -> its cut drops already put down to a reason
        self._cut_drops: dict[str, dict[str, int]] = {"down": {}, "blackhole": {}}

    def _link(self, cable: Cable, a: str, b: str) -> Link:
        t = self.topology
        host_port = a.startswith("h")
        rate = t.host_rate_bps if cable.kind == "host" else t.fabric_rate_bps
        marks = t.ecn and cable.kind == "fabric"
        link = Link(f"{a}->{b}", rate, HOP_DELAY_S, HOST_QUEUE_BYTES if host_port else t.queue_bytes,
                    trim=t.trim and not host_port, ecn_min=t.ecn_min_bytes if marks else None,
                    ecn_max=t.ecn_max_bytes if marks else None)
        self.links[link.name] = link
        return link

    # -- routes --------------------------------------------------------------------------------------

    def route(self, src: int, dst: int, ev: int) -> list[Link]:
        plane, spine = self.plan.ev_path(ev)
        up, down = self.plan.leaf_of(src), self.plan.leaf_of(dst)
        links = self.links
        if self.ecmp:
            if up == down:  # a leaf sends its own hosts' addresses straight down
                return [links[f"h{src}->p{plane}l{up}"], links[f"p{plane}l{up}->h{dst}"]]
            table = self._table(plane, up, down)
            chosen = table[flow_hash(self.seed, src, dst, plane, spine) % len(table)]
            if chosen is None:  # no spine reaches the destination's leaf: the packet has nowhere to go
                return [links[f"h{src}->p{plane}l{up}"], _NOWHERE]
            spine = chosen
        return [links[f"h{src}->p{plane}l{up}"], links[f"p{plane}l{up}->p{plane}s{spine}"],
                links[f"p{plane}s{spine}->p{plane}l{down}"], links[f"p{plane}l{down}->h{dst}"]]

    def _table(self, plane: int, up: int, down: int) -> tuple:
        key = (plane, up, down)
        table = self._tables.get(key)
        if table is None:
            live = [(plane, up, s) not in self._dead and (plane, down, s) not in self._dead
                    for s in range(self.plan.spines)]
            table = self._tables[key] = members(list(range(self.plan.spines)), live)
        return table

    def _reconverge(self, dead: frozenset) -> None:
        """The controller's rewrite of the ECMP member tables for the dead links it saw ``convergence_delay``
        ago; the entries that changed are counted as flow mods after boot."""
        if dead == self._dead:
            return
        before, keys = self._tables, {(p, a, b) for p in range(self.plan.planes) for a in range(self.plan.leaves)
                                      for b in range(self.plan.leaves) if a != b}
        old = {key: before.get(key) or self._table(*key) for key in keys}
        self._dead, self._tables = dead, {}
        self.reprogrammed += sum(x != y for key in keys for x, y in zip(old[key], self._table(*key), strict=True))
        self.net.reroute()

    def _dead_links(self) -> frozenset:
        dead = set()
        for name in self.down:
            cable = self.topology.link(name)
            if cable.kind == "fabric":
                _, plane, leaf = node_parts(cable.a)
                dead.add((plane, leaf, node_parts(cable.b)[2]))
        return frozenset(dead)

    # -- faults --------------------------------------------------------------------------------------

    def apply(self, action: str, target: str, *, loss_probability: float | None = None,
              rate_bps: int | None = None) -> float:
        """Apply a timeline action now (the method its row names); the simulated time it took effect."""
        perform(self, action, target, loss_probability=loss_probability, rate_bps=rate_bps)
        return self.net.now

    def link_down(self, link: str) -> None:
        self._cut(self.topology.link(link).name, True)

    def link_up(self, link: str) -> None:
        self._cut(self.topology.link(link).name, False)

    def switch_down(self, switch: str) -> None:
        self._switch(switch, True)

    def switch_up(self, switch: str) -> None:
        self._switch(switch, False)

    def _switch(self, switch: str, down: bool) -> None:
        """A switch down is every cable of its down; it comes back with the cables not cut on their own."""
        if down:
            self.switches_down.add(switch)
        else:
            self.switches_down.discard(switch)
        for cable in self.topology.links:
            if switch in (cable.a, cable.b):
                self._cut(cable.name, down)

    def loss(self, link: str, p: float) -> None:
        for direction in self.cables[self.topology.link(link).name]:
            direction.loss = p

    def rate(self, link: str, rate_bps: int) -> None:
        for direction in self.cables[self.topology.link(link).name]:
            direction.rate = float(rate_bps)

    def blackhole(self, link: str, on: bool) -> None:
        name = self.topology.link(link).name
        if on:
            self.blackholed.add(name)
        else:
            self.blackholed.discard(name)
        self._wire(name)

    def restore(self, link: str) -> None:
        """Configured rate, no loss, no blackhole (the link's up/down state is left alone)."""
        cable = self.topology.link(link)
        self.loss(link, 0.0)
        self.rate(link, self.topology.host_rate_bps if cable.kind == "host" else self.topology.fabric_rate_bps)
        self.blackhole(link, False)

    def _cut(self, name: str, down: bool) -> None:
        """Cut or mend one cable (a cable of a switch that is down stays cut)."""
        cable = self.topology.link(name)
        down = down or bool({cable.a, cable.b} & self.switches_down)
        if down == (name in self.down):
            return
        if down:
            self.down.add(name)
        else:
            self.down.discard(name)
        self._wire(name)
        if cable.kind == "host":
            self.on_nic(cable.a, cable.plane, down)
        elif self.ecmp:
            self.net.at(self.net.now + self.convergence_delay, self._reconverge, self._dead_links())

    def _wire(self, name: str) -> None:
        """Set both links of a cable to drop or pass; what they dropped so far is put down to the state before."""
        reason = "down" if name in self.down else "blackhole" if name in self.blackholed else None
        for link in self.cables[name]:
            self._settle(link)
            link.blackhole = reason is not None
        self._reason[name] = reason

    def _settle(self, link: Link) -> None:
        name = link.name
        cut = link.cut_drops + link.stranded
        new = cut - self._settled.get(name, 0)
        if new:
            cable = self.topology.link(name.replace("->", "-")).name
            key = "down" if self._reason.get(cable) == "down" else "blackhole"
            self._cut_drops[key][name] = self._cut_drops[key].get(name, 0) + new
            self._settled[name] = cut

    # -- counters ------------------------------------------------------------------------------------

    def link_counters(self) -> list[dict]:
        """One row per link direction, with the keys of the lab's (`fabric.faults.Faults.link_counters`)."""
        rows = []
        for cable in self.topology.links:
            for link, (node, peer) in zip(self.cables[cable.name], ((cable.a, cable.b), (cable.b, cable.a)),
                                          strict=True):
                self._settle(link)
                down, black = (self._cut_drops[key].get(link.name, 0) for key in ("down", "blackhole"))
                queue = link.drops - link.cut_drops - link.loss_drops
                rows.append({"link": cable.name, "from": node, "to": peer, "tx_packets": link.tx_packets,
                             "tx_bytes": link.tx_bytes, "drops": queue + link.loss_drops + down + black,
                             "queue_drops": queue, "loss_drops": link.loss_drops, "blackhole_drops": black,
                             "down_drops": down, "trims": link.trims, "ecn_marked": link.ecn_marked,
                             "emulator_drops": 0, "queued_s": round(link.queued, 6)})
        return rows

    def queue_waits(self) -> tuple[float, float]:
        """Seconds a bulk packet waits along a path, each of its hops the per-port mean, its host's NIC included
        (the simulated senders date packets when they hand them over); high-priority packets skip the queue: 0."""
        bulk = sum(link.tx_packets - link.priority_packets for link in self.links.values())
        return PATH_HOPS * (sum(link.queued for link in self.links.values()) / bulk if bulk else 0.0), 0.0

    def controller_stats(self) -> dict:
        """No controller runs: static routes never change after boot; ECMP counts its member rewrites."""
        return {"flow_mods_boot": None, "flow_mods_after_boot": self.reprogrammed}


_NOWHERE = Link("nowhere", 1.0)
"""Where a packet goes when no route is left: it is dropped there, on no link of the fabric."""
_NOWHERE.blackhole = True
