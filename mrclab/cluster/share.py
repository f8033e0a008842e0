"""What one server of a cluster lab builds: the nodes a placement gave it, and a VXLAN end for every cable that
leaves it (`tunnel`). The fabric builder takes a `Share` and makes only that part, in the namespace it runs in;
every server computes the same layout, so names, MACs and VNIs agree without being exchanged."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .tunnel import VXLAN_PORT, Underlay


@dataclass(frozen=True)
class Share:
    server: int                       # this server's index in the cluster's server list
    server_of: Mapping[str, int]      # every SPEC node name -> the index of the server that runs it
    underlays: Mapping[int, Underlay]  # server index -> its underlay address and interface
    port: int = VXLAN_PORT

    def holds(self, node: str) -> bool:
        return self.server_of[node] == self.server

    def nodes(self) -> frozenset[str]:
        return frozenset(node for node, server in self.server_of.items() if server == self.server)
