"""Which server runs each host, leaf and spine when Mininet Cluster spreads a lab over several.

The placers are Mininet Cluster placers: built with the servers, nodes, hosts, switches and links,
then asked `place(node)` for each node, so `MininetCluster(placement=...)` takes them as they are. They
tell a node's role by its name, never by its Mininet class: the Linux datapath's routers are Mininet
hosts, which leaves Mininet's own `SwitchBinPlacer` no switch to bin and every router an isolated
host. A node's name ends in its spec name (`p0l1`; the lab's nodes carry the run's prefix, `mab1p0l1`),
and a host's leaf position is that of the leaves its links reach.

An agent runs in its host's namespace, so it runs where its host does; agents are the CPU-heavy part
of a lab, and cables between servers are tunnels: the placements balance the first and keep the
second few (the table in `mrclab.placements`).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mininet.examples.cluster import Placer

from ..errors import UsageError
from ..placements import DEFAULT, PLACEMENTS
from ..spec.topology import Topology, node_parts, parse_node

CABLES = {"host": "host-leaf", "fabric": "leaf-spine"}  # a `Link.kind` -> how a placement names its cables
_SPEC_NAME = re.compile(r"(?:p[0-9]+[ls][0-9]+|h[0-9]+)$")
Item = TypeVar("Item")


def spec_name(node: str) -> str:
    """`mab1p0l1` -> `p0l1`; ValueError for a name that does not end in a host, leaf or spine name."""
    match = _SPEC_NAME.search(node)
    if match is None or parse_node(match.group()) is None:
        raise ValueError(f"{node!r} is not a host, leaf or spine name")
    return match.group()


def _spread(items: Sequence[Item], servers: Sequence[str], extra: Sequence[str]) -> dict[Item, str]:
    """`items` in contiguous blocks, in server order, as even as can be: what does not divide evenly goes one
    each to the first servers of `extra` (the servers in the order they should take more)."""
    base, remainder = divmod(len(items), len(servers))
    more = set(extra[:remainder])
    blocks = iter(items)
    return {next(blocks): server for server in servers for _ in range(base + (server in more))}


class NamedPlacer(Placer):
    """A placer that knows each node's role by name; subclasses say where each goes (`assign`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.servers:
            raise ValueError("no servers to place nodes on")
        self.roles = {node: node_parts(spec_name(node)) for node in self.nodes}
        self.position: dict[str, int] = {}  # host node -> its leaf position
        for link in self.links:
            for host, leaf in ((link[0], link[1]), (link[1], link[0])):
                if self.roles[host][0] == "host" and self.roles[leaf][0] == "leaf":
                    self.position[host] = self.roles[leaf][2]
        isolated = [node for node in self.of_kind("host") if node not in self.position]
        if isolated:
            raise ValueError(f"host {isolated[0]} has no link to a leaf")
        self.placement = self.assign()

    def of_kind(self, kind: str) -> list[str]:
        """The nodes of one kind (host, leaf, spine), in index order."""
        return sorted((node for node, role in self.roles.items() if role[0] == kind),
                      key=lambda node: (self.roles[node][2], self.roles[node][1]))

    def assign(self) -> dict[str, str]:
        raise NotImplementedError

    def place(self, node: str) -> str:
        if node not in self.placement:
            raise ValueError(f"{node!r} is not a node this placer was given")
        return self.placement[node]


class PodsPlacer(NamedPlacer):
    """Whole leaf positions per server: leaf j of every plane and the hosts under it (so their agents) on one
    server, no host cable between servers. Positions and spines are spread evenly, a spine more going to a
    server holding a position fewer; spines are dealt in index order across the planes (p0s0, p1s0, ...,
    p0s1, ...), so that a server's spines serve every plane alike where the counts divide."""

    def assign(self) -> dict[str, str]:
        positions = sorted({self.roles[node][2] for node in self.of_kind("leaf")})
        if len(self.servers) > len(positions):
            raise ValueError(f"pods placement: {len(self.servers)} servers is more than the fabric's "
                             f"{len(positions)} leaf positions (at least one on every server)")
        server_of = _spread(positions, self.servers, self.servers)
        held = Counter(server_of.values())
        fewest_first = sorted(self.servers, key=lambda server: held[server])
        placement = _spread(self.of_kind("spine"), self.servers, fewest_first)
        placement.update({node: server_of[self.roles[node][2]] for node in self.of_kind("leaf")})
        placement.update({node: server_of[self.position[node]] for node in self.of_kind("host")})
        return placement


class PlanesPlacer(NamedPlacer):
    """Whole planes per server, so no leaf-spine cable between servers. A host has a NIC in every plane, so
    wherever it runs, its cables to the other servers' planes cross: hosts are spread evenly in index
    order (keeping a leaf's hosts together where the counts allow), more going where more planes are."""

    def assign(self) -> dict[str, str]:
        planes = sorted({role[1] for role in self.roles.values() if role[0] != "host"})
        if len(self.servers) > len(planes):
            raise ValueError(f"planes placement: {len(self.servers)} servers is more than the fabric's "
                             f"{len(planes)} planes (at least one on every server)")
        server_of = _spread(planes, self.servers, self.servers)
        placement = _spread(self.of_kind("host"), self.servers, self.servers)
        placement.update({node: server_of[role[1]] for node, role in self.roles.items() if role[0] != "host"})
        return placement


class MapPlacer(NamedPlacer):
    """Each node where `assignment` (spec name -> server index) says: every node exactly once."""

    def __init__(self, *args: Any, assignment: Mapping[str, int], **kwargs: Any) -> None:
        self.assignment = assignment
        super().__init__(*args, **kwargs)

    def assign(self) -> dict[str, str]:
        names = {spec_name(node): node for node in self.nodes}
        unknown = [name for name in self.assignment if name not in names]
        if unknown:
            raise ValueError(f"{unknown[0]} is not a node of this fabric")
        missing = [name for name in names if name not in self.assignment]
        if missing:
            more = f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ValueError(f"every node needs a server: {missing[0]} has none{more}")
        return {node: self.servers[self.assignment[name]] for name, node in names.items()}


@dataclass(frozen=True)
class Share:
    """What one server runs."""

    server: str
    leaves: tuple[str, ...]
    spines: tuple[str, ...]
    hosts: tuple[str, ...]

    @property
    def agents(self) -> int:
        """One per host, in its namespace."""
        return len(self.hosts)

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server, "leaves": list(self.leaves), "spines": list(self.spines),
                "hosts": list(self.hosts), "agents": self.agents}


@dataclass(frozen=True)
class Assignment:
    """A topology placed on servers: what each runs, and the cables between two servers."""

    placement: str  # a row of PLACEMENTS, or "map"
    shares: tuple[Share, ...]  # in server order
    crossing: dict[str, int]  # host-leaf, leaf-spine -> cables whose ends run on different servers
    cables: dict[str, int]  # host-leaf, leaf-spine -> every cable

    def server_of(self) -> dict[str, int]:
        """SPEC node name -> the index of the server that runs it."""
        return {node: i for i, share in enumerate(self.shares) for node in (*share.leaves, *share.spines, *share.hosts)}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.placement, "servers": [share.to_dict() for share in self.shares],
                "crossing_cables": self.crossing, "cables": self.cables}


def assign(topology: Topology, servers: Sequence[str], placement: str | Mapping[str, int] = DEFAULT, *,
           source: str) -> Assignment:
    """Place `topology` on `servers` as Mininet Cluster would: one placer, asked for every node. `placement` is a
    row of PLACEMENTS or a map (spec name -> server index); what does not fit is a UsageError that starts with
    `source` (where the servers and the placement were given)."""
    nodes = [*topology.host_names, *topology.switch_names]
    links = [(link.a, link.b) for link in topology.links]
    common: dict[str, Any] = {"servers": list(servers), "nodes": nodes, "hosts": list(topology.host_names),
                              "switches": topology.switch_names, "links": links}
    try:
        if isinstance(placement, str):
            placer = PLACEMENTS[placement].placer_class()(**common)
        else:
            placer = MapPlacer(**common, assignment=placement)
    except ValueError as exc:
        raise UsageError(f"{source}: {exc}") from None
    where = {node: placer.place(node) for node in nodes}
    shares = tuple(Share(server, *(tuple(n for n in names if where[n] == server) for names in
                                   (topology.leaf_names, topology.spine_names, topology.host_names)))
                   for server in servers)
    cables = Counter(CABLES[link.kind] for link in topology.links)
    crossing = Counter(CABLES[link.kind] for link in topology.links if where[link.a] != where[link.b])
    return Assignment(placement if isinstance(placement, str) else "map", shares,
                      {kind: crossing[kind] for kind in CABLES.values()},
                      {kind: cables[kind] for kind in CABLES.values()})
