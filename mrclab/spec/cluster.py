"""Cluster files -> a frozen `Cluster`: the servers a lab spreads over and how its nodes are placed on them.

```yaml
servers: [alice@lab1, lab2:2222, "[fd00::3]"]   # [user@]host[:port], as for --target
placement: pods                                  # pods | planes | {node: server index or name, ...}
```

A file names no topology, so an explicit map is checked here for its own sake (node names, servers that
exist) and against a fabric when it is placed (`mrclab.cluster.placement.assign`: every node once).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..placements import DEFAULT, PLACEMENTS
from . import address as address_mod
from .reader import Reader, integer, load_yaml, short
from .topology import parse_node

MAX_SERVERS = 64


@dataclass(frozen=True)
class Cluster:
    servers: tuple[address_mod.Address, ...]
    placement: str | Mapping[str, int]  # a row of PLACEMENTS, or node (spec name) -> server index
    source: str = field(default="", compare=False)

    @property
    def server_names(self) -> list[str]:
        """What Mininet Cluster's placers return: each server as written."""
        return [server.spec for server in self.servers]


def from_mapping(data: Any, source: str) -> Cluster:
    r = Reader(data, source)
    servers = _servers(r)
    placement = r.raw("placement")
    r.done(("servers", "placement"))
    if isinstance(placement, dict):
        return Cluster(servers, MappingProxyType(_map(r, placement, servers)), source)
    placement = DEFAULT if placement is None else placement
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        r.fail("placement", f"{short(placement)} is not one of: {', '.join(PLACEMENTS)}, or a map of node -> server")
    return Cluster(servers, placement, source)


def load(path: str | Path) -> Cluster:
    return from_mapping(load_yaml(Path(path), "cluster file"), str(path))


def _servers(r: Reader) -> tuple[address_mod.Address, ...]:
    value = r.raw("servers")
    if not isinstance(value, list) or not value:
        r.fail("servers", f"expected a non-empty list of {address_mod.FORM}, got {short(value)}")
    if len(value) > MAX_SERVERS:
        r.fail("servers", f"{len(value)} servers is more than {MAX_SERVERS}")
    servers: list[address_mod.Address] = []
    for i, spec in enumerate(value):
        if not isinstance(spec, str):
            r.fail(f"servers[{i}]", f"expected {address_mod.FORM}, got {short(spec)}")
        try:
            server = address_mod.parse(spec)
        except ValueError as exc:
            r.fail(f"servers[{i}]", f"{short(spec)}: {exc}")
        for j, other in enumerate(servers):
            if (other.host.lower(), other.port) == (server.host.lower(), server.port):
                r.fail(f"servers[{i}]", f"{short(spec)} is servers[{j}] ({short(other.spec)}) again")
        servers.append(server)
    return tuple(servers)


def _map(r: Reader, placement: dict[Any, Any], servers: tuple[address_mod.Address, ...]) -> dict[str, int]:
    """Node -> server index; a server is its index in `servers`, as written there, or its host alone."""
    by_name: dict[str, list[int]] = {}
    for i, server in enumerate(servers):
        for name in {server.spec, server.host}:
            by_name.setdefault(name, []).append(i)
    index = integer(0, len(servers) - 1)
    out = {}
    for node, server in placement.items():
        named = isinstance(node, str) and parse_node(node) is not None
        key = f"placement.{node if named else short(node)}"
        if not named:
            r.fail(key, "not a host, leaf or spine name (h<n>, p<k>l<j>, p<k>s<i>)")
        if isinstance(server, str):
            found = by_name.get(server, [])
            if len(found) != 1:
                r.fail(key, f"{short(server)} is {'more than one' if found else 'not one'} of the servers "
                            f"({', '.join(s.spec for s in servers)})")
            out[node] = found[0]
            continue
        try:
            out[node] = index(server)
        except ValueError as exc:
            r.fail(key, f"a server index: {exc}")
    if not out:
        r.fail("placement", "an empty map places nothing")
    return out
