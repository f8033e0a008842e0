"""The placements a lab spread over several servers can use: one row each.

A row names the Mininet Cluster placer (a `mininet.examples.cluster.Placer`) that puts each host,
leaf and spine on a server. The names are what a cluster file's `placement:` and
`mrclab topo show --servers N --placement` take; a cluster file may instead map every node to a
server (`mrclab.cluster.placement.MapPlacer`). Adding a placement is a row here plus its placer.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    name: str
    summary: str
    placer: str  # its placer class, as module:class (importing it imports Mininet)

    def placer_class(self) -> type:
        module, name = self.placer.split(":")
        return getattr(importlib.import_module(module), name)


PLACEMENTS = {
    "pods": Placement("pods", "whole leaf positions of every plane with their hosts per server, spines spread "
                              "evenly: only leaf-spine cables cross servers", "mrclab.cluster.placement:PodsPlacer"),
    "planes": Placement("planes", "whole planes per server, hosts spread evenly: no leaf-spine cable crosses "
                                  "servers, a host's cables to the other servers' planes do",
                        "mrclab.cluster.placement:PlanesPlacer"),
}
DEFAULT = "pods"
