"""Faults on links and switches, and per-direction link counters; none of it talks to the controller.

Interfaces are downed by name (`ip link set dev X down`), never with Mininet's
configLinkStatus, which downs every parallel link between two nodes. A switch goes down as
all of its cables do; its routes, and every other switch's, stay as they are: static routes
do not reconverge, senders route around. Loss, blackhole, rate and restore go to the egress
program of both directions of a link. A host cable is pulled at its patch (see `cables`): the
host's NIC and the leaf's port both lose carrier, and the egress programs of both count and
drop what is still sent into them. How a cable between two switches is cut depends on the
datapath: `OvsFaults` downs both of its interfaces; `LinuxFaults` downs only what receives
from it (see `mrclab.layout`), so that the routers keep their routes.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from ..actions import perform
from ..layout import Layout
from ..netns import ip_batches
from ..spec.topology import PATH_HOPS, Link, Topology
from . import ovs


class Faults:
    """What every datapath's faults share: the egress faults, the timeline's entry point and the counters.
    A datapath's subclass cuts and mends cables (`link_down`, `link_up`, `switch_down`, `switch_up`) and
    says which of a port's lost packets were the fault's and which the emulator's (`_lost`)."""

    def __init__(self, topology: Topology, layout: Layout, egress, host_pids: dict[str, int], cables, *,
                 nodes: frozenset[str] | None = None) -> None:
        self.topology, self.layout, self.egress, self.host_pids = topology, layout, egress, host_pids
        self.cables = cables  # cables.HostCables
        # the nodes whose ends this process works (one server's, in a lab over several; else every node)
        self.nodes = nodes if nodes is not None else frozenset((*topology.host_names, *topology.switch_names))
        self._emulator_before: dict[str, int] = {}

    def start_counting(self) -> None:
        """Count the emulator's own drops from here (the workload's start): while the fabric came up, an
        interface may have sent a multicast listener report before its peer was up, which no workload
        packet ever met."""
        self._emulator_before = {name: emulator for name, (_dead, emulator) in self._lost(list(self._ports())).items()}

    def _ports(self) -> dict[str, tuple[Link, str, str]]:
        """Every link's two sending ports: interface -> (link, its node, the peer it sends to)."""
        return {self.layout.ifname(node, peer): (link, node, peer) for link in self.topology.links
                for node, peer in ((link.a, link.b), (link.b, link.a)) if node in self.nodes}

    def _link(self, name: str) -> Link:
        return self.topology.link(name)

    def link_down(self, link: str) -> float:
        raise NotImplementedError

    def link_up(self, link: str) -> float:
        raise NotImplementedError

    def switch_down(self, switch: str) -> float:
        raise NotImplementedError

    def switch_up(self, switch: str) -> float:
        raise NotImplementedError

    def _lost(self, ifnames: list[str]) -> dict[str, tuple[int, int]]:
        """Per port: (packets sent into the cut cable that the egress program did not count, packets the
        emulator itself failed to send)."""
        raise NotImplementedError

    def _host_cable_senders(self, links: list[Link]) -> list[str]:
        """The two sending interfaces of each host cable among `links`: the host's NIC and the leaf's port."""
        return [ifname for link in links if link.kind == "host" for _, ifname in self._ends(link)]

    def _switch_links(self, switch: str) -> list[Link]:
        return [link for link in self.topology.links if switch in (link.a, link.b)]

    def _ends(self, link: Link) -> list[tuple[str, str]]:
        """(node, its interface) for both ends of a link."""
        return [(node, self.layout.ifname(node, peer)) for node, peer in ((link.a, link.b), (link.b, link.a))
                if node in self.nodes]

    def loss(self, link: str, p: float) -> None:
        for _, ifname in self._ends(self._link(link)):
            self.egress.set_loss(ifname, p)

    def blackhole(self, link: str, on: bool) -> None:
        for _, ifname in self._ends(self._link(link)):
            self.egress.set_blackhole(ifname, on)

    def rate(self, link: str, rate_bps: int) -> None:
        for _, ifname in self._ends(self._link(link)):
            self.egress.set_rate(ifname, rate_bps)

    def restore(self, link: str) -> None:
        """Configured rate, no loss, no blackhole (the link's up/down state is left alone)."""
        for _, ifname in self._ends(self._link(link)):
            self.egress.restore(ifname)

    def apply(self, action: str, target: str, *, loss_probability: float | None = None,
              rate_bps: float | None = None) -> float:
        """A scenario event by its SPEC action name, with its setting (`loss_probability` for loss, `rate_bps` for
        rate). Returns the monotonic time the fabric changed, which `avoid_s` and `revive_s` count from."""
        t = time.monotonic()
        changed = perform(self, action, target, loss_probability=loss_probability, rate_bps=rate_bps)
        return t if changed is None else changed  # a cable says when it changed

    def link_counters(self) -> list[dict[str, Any]]:
        """One row per link direction, as results.json `links` wants it: what left `from` towards `to`.

        `drops` is every packet the emulated link dropped, split into `queue_drops` (its queue
        overflowed), `loss_drops` (a `loss` fault), `blackhole_drops` (a `blackhole` fault) and
        `down_drops` (sent into the cable while it was cut, as far as the datapath counts them; see
        `_lost`). `ecn_marked` are ECT packets it passed with CE set. `emulator_drops` are packets the emulator
        itself failed to send: not the emulated network's, they make a run untrustworthy."""
        rows = []
        ports = self._ports()
        lost = self._lost(list(ports))
        for ifname, (link, node, peer) in ports.items():
            c = self.egress.counters(ifname)
            dead, emulator = lost.get(ifname, (0, 0))
            emulator = max(0, emulator - self._emulator_before.get(ifname, 0))
            down = c.cut_drops + dead
            rows.append({"link": link.name, "from": node, "to": peer, "tx_packets": c.tx_packets,
                         "tx_bytes": c.tx_bytes, "drops": c.drops + c.loss_drops + c.blackhole_drops + down,
                         "queue_drops": c.drops, "loss_drops": c.loss_drops, "blackhole_drops": c.blackhole_drops,
                         "down_drops": down, "trims": c.trims, "ecn_marked": c.ecn_marked,
                         "emulator_drops": emulator, "queued_s": round(c.queued_ns * 1e-9, 6)})
        return rows

    def queue_waits(self) -> tuple[float, float]:
        """Seconds a packet waits in the emulated links' own queues along a path, each hop a per-port mean: (a
        DATA packet behind the bytes ahead of it, over the path's switch ports; its SACK, a high-priority packet,
        over every port of the path back, where HTB sends it at once unless its class is past its guaranteed rate:
        `mrclab.fabric.egress`). A DATA packet's wait at its host's NIC is
        the sender's own pacing, which the agents leave out of their RTT samples (they date each packet by when
        its NIC sends it: `mrclab.transport.departures`), so it is left out here too."""
        return queue_waits(*self.queue_totals())

    def queue_totals(self) -> tuple[int, int, int, int]:
        """What `queue_waits` averages: (ns data packets waited at switch ports, those data packets, ns control
        packets waited, control packets), summed over the ports this process sends on."""
        waited = bulk = ctl_waited = ctl = 0
        for ifname, (_link, node, _peer) in self._ports().items():
            c = self.egress.counters(ifname)
            ctl_waited += c.ctl_queued_ns
            ctl += c.ctl_packets
            if node not in self.layout.hosts:
                waited += c.queued_ns
                bulk += c.tx_packets - c.ctl_packets - c.trims
        return waited, bulk, ctl_waited, ctl


class OvsFaults(Faults):
    """Both ends of a cable between two switches go down; OVS counts a send into it as tx_dropped, read while the
    cable is up (before it goes down, after it comes back) so that every such send is the fault's, not the
    emulator's. Host cables are pulled at their patch."""

    def __init__(self, topology: Topology, layout: Layout, egress, host_pids: dict[str, int], cables) -> None:
        super().__init__(topology, layout, egress, host_pids, cables)
        # Per switch port: the count when it went down, and what accrued while it was down.
        self._down_at: dict[str, int] = {}
        self._dead_drops: dict[str, int] = {}
        self._ofports = {p.ifname: (sw.bridge, p.number) for sw in layout.switches.values()
                         for p in sw.ports.values()}

    def _cables(self, ends: list[tuple[str, str]]) -> dict[str, tuple[str, int]]:
        """Every switch port that cannot send while these interfaces are down (theirs and their peers'),
        as ovs.tx_dropped wants them."""
        names = set()
        for node, ifname in ends:
            names.add(ifname)
            if node in self.layout.switches:
                names.update(p.peer_ifname for p in self.layout.switches[node].ports.values() if p.ifname == ifname)
        return {name: self._ofports[name] for name in names if name in self._ofports}

    def _account(self, ends: list[tuple[str, str]], state: str) -> None:
        counts = ovs.tx_dropped(self._cables(ends))
        for ifname, count in counts.items():
            if state == "down":
                self._down_at.setdefault(ifname, count)
            elif ifname in self._down_at:
                self._dead_drops[ifname] = self._dead_drops.get(ifname, 0) + count - self._down_at.pop(ifname)

    def _set_state(self, links: list[Link], state: str, ends: list[tuple[str, str]] | None = None) -> float:
        """Cut or mend `links`: host cables at their patch, the others by downing `ends` (default: both ends of
        each). The drop counters of those are read while they are up (before they go down, after they come
        back), so that every send into the dead cable is the fault's; the read takes tens of ms on a busy
        ovs-vswitchd, so the time returned is taken next to the `ip` commands themselves."""
        if ends is None:
            ends = [end for link in links if link.kind == "fabric" for end in self._ends(link)]
        senders = self._host_cable_senders(links)
        if state == "down":
            self._account(ends, state)
            for ifname in senders:
                self.egress.set_cut(ifname, True)
        t = time.monotonic()
        batches = {}
        if ends:
            batches[os.getpid()] = [f"link set dev {ifname} {state}" for _, ifname in ends]
        pulled = [link for link in links if link.kind == "host"]
        if pulled:
            batches[self.cables.pid] = self.cables.state_lines(pulled, state)
        ip_batches(batches)
        if state == "up":
            for ifname in senders:
                self.egress.set_cut(ifname, False)
            self._account(ends, state)
        return t

    def link_down(self, link: str) -> float:
        return self._set_state([self._link(link)], "down")

    def link_up(self, link: str) -> float:
        return self._set_state([self._link(link)], "up")

    def _switch_ports(self, switch: str) -> list[tuple[str, str]]:
        """The switch's own ends of its cables to other switches."""
        return [(switch, port.ifname) for peer, port in self.layout.switches[switch].ports.items()
                if peer in self.layout.switches]

    def switch_down(self, switch: str) -> float:
        return self._set_state(self._switch_links(switch), "down", self._switch_ports(switch))

    def switch_up(self, switch: str) -> float:
        return self._set_state(self._switch_links(switch), "up", self._switch_ports(switch))

    def _lost(self, ifnames: list[str]) -> dict[str, tuple[int, int]]:
        total = ovs.tx_dropped({name: self._ofports[name] for name in ifnames if name in self._ofports})
        out = {}
        for ifname, count in total.items():
            dead = self._dead_drops.get(ifname, 0) + (count - self._down_at[ifname] if ifname in self._down_at else 0)
            out[ifname] = (dead, count - dead)
        return out


class LinuxFaults(Faults):
    """A cut of a cable between two routers downs both of its receive interfaces: each router's sending end then loses
    carrier and keeps its routes (on a cable between two servers, whose ends are VXLAN devices, each server takes
    carrier from its sending end itself: ``protodown``). A host cable is pulled at its patch (the host's NIC and the
    leaf's port lose carrier and keep their routes). Every port sending into a cut cable is marked in the egress
    program first, which counts what is sent into it and drops it, so `drops` holds exactly the fault's losses; what
    the kernel itself fails to send (a veth whose peer's backlog is full) is the emulator's."""

    def __init__(self, topology: Topology, layout: Layout, egress, host_pids: dict[str, int], cables,
                 switch_pids: dict[str, int], *, nodes: frozenset[str] | None = None) -> None:
        super().__init__(topology, layout, egress, host_pids, cables, nodes=nodes)
        self.switch_pids = switch_pids

    def _set_cables(self, links: list[Link], state: str) -> float:
        batches: dict[int, list[str]] = {}
        senders = self._host_cable_senders(links)
        pulled = [link for link in links if link.kind == "host" and link.a in self.nodes]  # its cable namespace's
        if pulled:
            batches[self.cables.pid] = self.cables.state_lines(pulled, state)
        for link in links:
            if link.kind == "fabric":
                for node, peer in ((link.a, link.b), (link.b, link.a)):
                    if node not in self.nodes:
                        continue
                    port = self.layout.port(node, peer)
                    lines = batches.setdefault(self.switch_pids[node], [])
                    lines.append(f"link set dev {port.receive_ifname} {state}")
                    if peer not in self.nodes:  # a tunnel to another server: no veth peer takes its carrier away
                        lines.append(f"link set dev {port.ifname} protodown {'on' if state == 'down' else 'off'}")
                    senders.append(port.ifname)
        if state == "down":
            for ifname in senders:
                self.egress.set_cut(ifname, True)
        t = time.monotonic()
        ip_batches(batches)
        if state == "up":
            for ifname in senders:
                self.egress.set_cut(ifname, False)
        return t

    def link_down(self, link: str) -> float:
        return self._set_cables([self._link(link)], "down")

    def link_up(self, link: str) -> float:
        return self._set_cables([self._link(link)], "up")

    def switch_down(self, switch: str) -> float:
        return self._set_cables(self._switch_links(switch), "down")

    def switch_up(self, switch: str) -> float:
        return self._set_cables(self._switch_links(switch), "up")

    def _lost(self, ifnames: list[str]) -> dict[str, tuple[int, int]]:
        wanted = set(ifnames)
        dropped = interface_stats(list({*self.switch_pids.values(), *self.host_pids.values()}))
        return {name: (0, tx_dropped) for name, tx_dropped in dropped.items() if name in wanted}


def interface_stats(netns_pids: list[int]) -> dict[str, int]:
    """tx_dropped of every interface in these network namespaces, one `ip` each, in parallel."""
    started = [subprocess.Popen(["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-j", "-s", "link", "show"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for pid in netns_pids]
    out = {}
    for process in started:
        text, _ = process.communicate()
        for link in json.loads(text or "[]"):
            out[link["ifname"]] = link.get("stats64", {}).get("tx", {}).get("dropped", 0)
    return out


def queue_waits(waited: int, bulk: int, ctl_waited: int, ctl: int) -> tuple[float, float]:
    """`Faults.queue_waits` of totals (`Faults.queue_totals`, summed over the ports of several processes)."""
    return (PATH_HOPS - 1) * _mean(waited, bulk), PATH_HOPS * _mean(ctl_waited, ctl)


def _mean(total: int, count: int) -> float:
    return total * 1e-9 / count if count else 0.0
