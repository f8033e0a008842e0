"""Every name, port number, MAC and dpid of one run's fabric, computed before anything exists.

The builder records these names in the RunState before creating them, the controller
reads the same layout (as JSON) to learn which OpenFlow port leads to which neighbour,
and faults and counters translate SPEC names (``p0l1-p0s2``) into interfaces through it.
Every name starts with the run prefix (``m`` + 3 characters) so concurrent runs never
collide, and fits Linux's 15-character limit: a switch port is ``<prefix><switch>-<peer>``
(``mab1p0l1-s2`` on leaf p0l1 towards spine 2, ``mab1p0s2-l1`` back, ``mab1p0l1-h3``
towards host h3) and host h3's NIC on plane 0 is ``mab1h3-p0``.

A cable between two switches is one veth pair, or, with ``split_cables`` (the Linux
datapath), two: one per direction, each sending on the port's own interface and landing on
the peer's receive interface (``<port>r``). Cutting such a cable downs the two receive
interfaces, which hold no routes, so the sending ends only lose carrier and keep their
routes, as a router's ports do when a fibre is pulled (an administratively downed interface
loses its routes in Linux). A host cable is patched instead, on both datapaths (see `fabric.cables`).

Port numbers are fixed: a leaf's hosts on ports 1..hosts_per_leaf (in host order), then
its spines; a spine's leaves on ports 1..leaves.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .spec.topology import Topology, node_parts

IFNAMSIZ = 15
GROUP_BASE = 0x6D000000  # "m" and 24 bits of run id: no other software uses these device groups
GATEWAY_IP = "fe80::1"  # every next hop, on every port and host NIC: a permanent neighbour entry per interface


@dataclass(frozen=True)
class Port:
    """One end of a cable on a switch."""

    number: int
    ifname: str
    mac: str
    peer: str        # SPEC node name on the other end
    peer_ifname: str  # the interface this one's frames land on
    peer_mac: str
    rx_ifname: str = ""  # where this switch receives from the peer: `ifname` unless the cable is split
    rx_mac: str = ""

    @property
    def split(self) -> bool:
        return bool(self.rx_ifname) and self.rx_ifname != self.ifname

    @property
    def receive_ifname(self) -> str:
        return self.rx_ifname or self.ifname


@dataclass(frozen=True)
class SwitchLayout:
    name: str        # SPEC name, e.g. p0l1
    bridge: str      # OVS bridge / Mininet node name
    dpid: int
    ports: dict[str, Port]  # peer SPEC name -> port

    @property
    def kind(self) -> str:
        return node_parts(self.name)[0]

    @property
    def plane(self) -> int:
        return node_parts(self.name)[1]

    @property
    def index(self) -> int:
        return node_parts(self.name)[2]

    @property
    def anchor(self) -> str:
        """A Linux router's interface that no fault ever downs (its peer is ``<anchor>b``): its End route's."""
        return f"{self.bridge}-a"


@dataclass(frozen=True)
class Nic:
    plane: int
    ifname: str
    mac: str
    address: str     # the host's own address on this plane
    leaf: str
    leaf_ifname: str
    leaf_mac: str    # the next hop's MAC: a router accepts only frames addressed to it


@dataclass(frozen=True)
class HostLayout:
    name: str
    node: str        # Mininet node name
    index: int
    nics: tuple[Nic, ...]  # one per plane, in plane order


@dataclass(frozen=True)
class Layout:
    prefix: str
    topology: dict[str, Any]
    switches: dict[str, SwitchLayout]
    hosts: dict[str, HostLayout]

    @property
    def link_group(self) -> int:
        """The iproute2 device group of this run's root-namespace interfaces, derived from its prefix.

        Deleting a whole group is one kernel batch (one RCU grace period instead of one per veth:
        ~30 ms instead of ~2 s for 200 interfaces); see `ovs.delete_group`."""
        index = 0
        for ch in self.prefix[1:]:
            index = index * 36 + int(ch, 36)
        return GROUP_BASE + index

    def port(self, switch: str, peer: str) -> Port:
        return self.switches[switch].ports[peer]

    def ifname(self, node: str, peer: str) -> str:
        """The interface of `node` on its cable to `peer` (switch port or host NIC)."""
        if node in self.switches:
            return self.switches[node].ports[peer].ifname
        return self.switches[peer].ports[node].peer_ifname

    @property
    def bridges(self) -> list[str]:
        return [s.bridge for s in self.switches.values()]

    @property
    def switch_ifnames(self) -> list[str]:
        """Every switch-side interface (with OVS, these live in the root namespace)."""
        return [name for s in self.switches.values() for p in s.ports.values()
                for name in ((p.ifname, p.rx_ifname) if p.split else (p.ifname,))]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layout:
        switches = {name: SwitchLayout(s["name"], s["bridge"], s["dpid"],
                                       {peer: Port(**p) for peer, p in s["ports"].items()})
                    for name, s in data["switches"].items()}
        hosts = {name: HostLayout(h["name"], h["node"], h["index"], tuple(Nic(**n) for n in h["nics"]))
                 for name, h in data["hosts"].items()}
        return cls(data["prefix"], data["topology"], switches, hosts)


def host_mac(host: int, plane: int) -> str:
    return f"02:01:{plane:02x}:00:{host >> 8:02x}:{host & 0xFF:02x}"


def switch_mac(dpid: int, port: int) -> str:
    return f"02:{dpid >> 32 & 0xFF:02x}:{dpid >> 16 & 0xFF:02x}:{dpid & 0xFF:02x}:{port >> 8:02x}:{port & 0xFF:02x}"


def dpid(kind: str, plane: int, index: int) -> int:
    """0x1_kkkk_iiii for leaves, 0x2_kkkk_iiii for spines: unique within a run, readable in ovs-ofctl."""
    return ((1 if kind == "leaf" else 2) << 32) | (plane << 16) | index


RX_PORT = 0x8000  # added to a port number for the MAC of its receive interface (split cables)


def build(topology: Topology, prefix: str, split_cables: bool = False) -> Layout:
    """The layout of `topology` for the run whose names start with `prefix`."""
    t, plan = topology, topology.plan
    ports: dict[str, dict[str, Port]] = {name: {} for name in t.switch_names}
    dpids = {name: dpid(*node_parts(name)) for name in t.switch_names}
    hosts = {}
    for n in range(t.hosts):
        leaf_index, local = plan.leaf_of(n), n % t.hosts_per_leaf
        nics = []
        for k in range(t.planes):
            leaf = f"p{k}l{leaf_index}"
            number = local + 1
            nic = Nic(k, f"{prefix}h{n}-p{k}", host_mac(n, k), str(plan.host_address(k, n)), leaf,
                      f"{prefix}{leaf}-h{n}", switch_mac(dpids[leaf], number))
            nics.append(nic)
            ports[leaf][f"h{n}"] = Port(number, nic.leaf_ifname, nic.leaf_mac, f"h{n}", nic.ifname, nic.mac,
                                        nic.leaf_ifname, nic.leaf_mac)
        hosts[f"h{n}"] = HostLayout(f"h{n}", f"{prefix}h{n}", n, tuple(nics))
    for k in range(t.planes):
        for j in range(t.leaves):
            for i in range(t.spines):
                leaf, spine = f"p{k}l{j}", f"p{k}s{i}"
                leaf_port, spine_port = t.hosts_per_leaf + 1 + i, j + 1
                leaf_if, spine_if = f"{prefix}{leaf}-s{i}", f"{prefix}{spine}-l{j}"
                leaf_mac, spine_mac = switch_mac(dpids[leaf], leaf_port), switch_mac(dpids[spine], spine_port)
                leaf_rx, spine_rx, leaf_rx_mac, spine_rx_mac = leaf_if, spine_if, leaf_mac, spine_mac
                if split_cables:
                    leaf_rx, spine_rx = f"{leaf_if}r", f"{spine_if}r"
                    leaf_rx_mac = switch_mac(dpids[leaf], RX_PORT + leaf_port)
                    spine_rx_mac = switch_mac(dpids[spine], RX_PORT + spine_port)
                ports[leaf][spine] = Port(leaf_port, leaf_if, leaf_mac, spine, spine_rx, spine_rx_mac,
                                          leaf_rx, leaf_rx_mac)
                ports[spine][leaf] = Port(spine_port, spine_if, spine_mac, leaf, leaf_rx, leaf_rx_mac,
                                          spine_rx, spine_rx_mac)
    switches = {name: SwitchLayout(name, f"{prefix}{name}", dpids[name], ports[name]) for name in t.switch_names}
    layout = Layout(prefix, t.to_dict(), switches, hosts)
    for name in [*layout.bridges, *layout.switch_ifnames, *(n.ifname for h in hosts.values() for n in h.nics)]:
        if len(name) > IFNAMSIZ:
            raise ValueError(f"interface name {name!r} is longer than {IFNAMSIZ} characters")
    return layout
