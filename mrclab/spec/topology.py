"""Topology files -> a frozen `Topology`: counts, rates and every node and link name of docs/spec.md."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..addressing import Plan
from ..engines import DEFAULT as ENGINE_DEFAULT
from ..engines import ENGINES
from ..errors import UsageError
from ..shipped import folder
from ..units import format_rate, format_size
from .keys import NODE, TOPOLOGY
from .reader import Reader, clip, is_file, load_yaml, suggest

TOPOLOGY_DIR = folder("topologies")


ECN_MIN_SHARE, ECN_MAX_SHARE = 0.25, 0.75
"""Default marking thresholds as shares of `queue`. At the shipped 64 KiB and MTU 9000 a queue holds
about seven frames: marking starts once about two wait (16 KiB; one frame ahead is ordinary when
sprayed packets meet, and is never marked) and marks every packet from about five (48 KiB), so an EV
whose path stays congested is marked on nearly every packet before the queue is full and trims."""



PATH_HOPS = 4
"""Egress ports on every path between two hosts of a two-tier Clos: host NIC, leaf up, spine down, leaf down."""


@dataclass(frozen=True)
class Link:
    """One cable. `a` is the lower tier (host or leaf), `b` the upper one (leaf or spine)."""

    a: str
    b: str
    plane: int
    kind: str  # "host" or "fabric"

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass(frozen=True)
class Topology:
    name: str
    planes: int
    leaves: int
    spines: int
    hosts_per_leaf: int
    host_rate_bps: int
    fabric_rate_bps: int
    queue_bytes: int
    mtu: int
    trim: bool = True
    ecn: bool = True  # switch ports facing another switch mark CE (a leaf's port towards a host never does)
    ecn_min_bytes: int = 0
    ecn_max_bytes: int = 0
    source: str = field(default="", compare=False)

    @cached_property
    def plan(self) -> Plan:
        return Plan(self.planes, self.leaves, self.spines, self.hosts_per_leaf)

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    @cached_property
    def host_names(self) -> tuple[str, ...]:
        """Made once: the runner names a host by its index for every event it records."""
        return tuple(f"h{n}" for n in range(self.hosts))

    @property
    def leaf_names(self) -> list[str]:
        return [f"p{k}l{j}" for k in range(self.planes) for j in range(self.leaves)]

    @property
    def spine_names(self) -> list[str]:
        return [f"p{k}s{i}" for k in range(self.planes) for i in range(self.spines)]

    @property
    def switch_names(self) -> list[str]:
        return self.leaf_names + self.spine_names

    @cached_property
    def links(self) -> tuple[Link, ...]:
        host_links = [Link(f"h{n}", f"p{k}l{n // self.hosts_per_leaf}", k, "host")
                      for n in range(self.hosts) for k in range(self.planes)]
        fabric_links = [Link(f"p{k}l{j}", f"p{k}s{i}", k, "fabric")
                        for k in range(self.planes) for j in range(self.leaves) for i in range(self.spines)]
        return tuple(host_links + fabric_links)

    @cached_property
    def _links_by_name(self) -> dict[str, Link]:
        table = {}
        for link in self.links:
            table[f"{link.a}-{link.b}"] = table[f"{link.b}-{link.a}"] = link
        return table

    def link(self, name: str) -> Link:
        """A link by `a-b` in either order; KeyError if the fabric has no such cable."""
        return self._links_by_name[name]

    def has_link(self, name: str) -> bool:
        return name in self._links_by_name

    def has_switch(self, name: str) -> bool:
        parsed = parse_node(name)
        if parsed is None or parsed[0] == "host":
            return False
        kind, plane, index = parsed
        return plane < self.planes and index < (self.leaves if kind == "leaf" else self.spines)

    def has_host(self, name: str) -> bool:
        parsed = parse_node(name)
        return parsed is not None and parsed[0] == "host" and parsed[2] < self.hosts

    def host_index(self, name: str) -> int:
        parsed = parse_node(name)
        if parsed is None or parsed[0] != "host":
            raise ValueError(f"{name!r} is not a host name")
        return parsed[2]

    def link_rate_bps(self, link: Link) -> int:
        return self.host_rate_bps if link.kind == "host" else self.fabric_rate_bps

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "planes": self.planes, "leaves": self.leaves, "spines": self.spines,
                "hosts_per_leaf": self.hosts_per_leaf,
                "links": {"host_rate": format_rate(self.host_rate_bps),
                          "fabric_rate": format_rate(self.fabric_rate_bps),
                          "queue": format_size(self.queue_bytes), "mtu": self.mtu, "trim": self.trim,
                          "ecn": self.ecn, "ecn_min": format_size(self.ecn_min_bytes),
                          "ecn_max": format_size(self.ecn_max_bytes)}}


def parse_node(name: str) -> tuple[str, int, int] | None:
    """`p2s3` -> ("spine", 2, 3); `h5` -> ("host", -1, 5); anything else -> None."""
    match = NODE.fullmatch(name) if isinstance(name, str) else None
    if not match:
        return None
    if match.group(4) is not None:
        return "host", -1, int(match.group(4))
    return ("leaf" if match.group(2) == "l" else "spine"), int(match.group(1)), int(match.group(3))


def node_parts(name: str) -> tuple[str, int, int]:
    """`parse_node` of a name the fabric itself made (a layout's switch or peer): a bad one is a bug."""
    parsed = parse_node(name)
    if parsed is None:
        raise ValueError(f"not a node name: {name!r}")
    return parsed


def from_mapping(data: Any, source: str, default_name: str = "inline", engine: str = ENGINE_DEFAULT) -> Topology:
    """A topology the engine can run: the lab's sizes are what a 2-core machine emulates faithfully (checked by
    `mrclab topo show` before anything is built); the simulator's, what the address plan holds."""
    r = Reader(data, source)
    r.only(TOPOLOGY.names())
    name = r.read(TOPOLOGY["name"], default_name)
    planes, leaves, spines, hosts_per_leaf = (r.read(TOPOLOGY[k]) for k in ("planes", "leaves", "spines",
                                                                             "hosts_per_leaf"))
    links = r.sub("links")
    rows = TOPOLOGY.section("links")
    links.only(rows.names())
    host_rate, fabric_rate, queue, mtu, trim, ecn = (links.read(rows[k]) for k in (
        "host_rate", "fabric_rate", "queue", "mtu", "trim", "ecn"))
    ecn_min = links.read(rows["ecn_min"], int(queue * ECN_MIN_SHARE))
    ecn_max = links.read(rows["ecn_max"], int(queue * ECN_MAX_SHARE))
    links.done(rows.names())
    r.done(TOPOLOGY.names())
    for key, value in (("links.host_rate", host_rate), ("links.fabric_rate", fabric_rate)):
        if value < 1000:
            r.fail(key, f"must be at least 1Kbit, got {value} bit/s")
    if queue < mtu:
        r.fail("links.queue", f"must hold at least one MTU ({mtu} bytes), got {queue}")
    if ecn_max > queue:
        r.fail("links.ecn_max", f"must be at most the queue ({queue} bytes), got {ecn_max}")
    if ecn_min >= ecn_max:
        given = {name: "" if links.has(name) else f", {share:g} of the queue by default"
                 for name, share in (("ecn_min", ECN_MIN_SHARE), ("ecn_max", ECN_MAX_SHARE))}
        r.fail("links.ecn_min" if links.has("ecn_min") else "links.ecn_max",
               f"ecn_min ({ecn_min} bytes{given['ecn_min']}) must be below ecn_max ({ecn_max} bytes{given['ecn_max']})")
    switches = planes * (leaves + spines)
    limits = ENGINES[engine]
    more = "" if engine != ENGINE_DEFAULT else "; the simulator runs more (--engine sim)"
    if switches > limits.max_switches:
        r.fail("planes", f"{switches} switches is more than engine {engine} runs faithfully "
                         f"({limits.max_switches}){more}")
    if leaves * hosts_per_leaf > limits.max_hosts:
        r.fail("hosts_per_leaf", f"{leaves * hosts_per_leaf} hosts is more than engine {engine} runs "
                                 f"({limits.max_hosts}){more}")
    return Topology(name, planes, leaves, spines, hosts_per_leaf, host_rate, fabric_rate, queue, mtu, trim,
                    ecn, ecn_min, ecn_max, source)


def resolve_path(ref: str) -> Path:
    """A topology named by file stem (looked up in topologies/) or by path."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or "/" in ref:
        return path
    return TOPOLOGY_DIR / f"{ref}.yaml"


def load(ref: str | Path, engine: str = ENGINE_DEFAULT) -> Topology:
    path = resolve_path(str(ref))
    if not is_file(path):
        raise UsageError(f"{clip(path)}: no such topology file{did_you_mean(str(ref))} "
                         f"(shipped: {', '.join(shipped()) or 'none'})")
    return from_mapping(load_yaml(path, "topology file"), str(path), default_name=path.stem, engine=engine)


def shipped() -> list[str]:
    return sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def did_you_mean(ref: str) -> str:
    """` (did you mean clos-4p-4l-4s?)` when `ref` is close to a shipped topology's name, else ""."""
    close = suggest(Path(ref).stem, shipped())
    return f" (did you mean {close}?)" if close and close != Path(ref).stem else ""
