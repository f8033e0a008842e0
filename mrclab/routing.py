"""The routing modes a fabric can run: one row each.

A row names the controller app that programs the switches, whether hosts write the path
(uSID segments) or the switches hash host addresses onto one (which decides how the agents
address their packets), whether `avoid_s` can be measured, and whether the mode is a
baseline that MRC's claims (`max_avoid_s`, `flow_mods_after_boot`) do not bind. Adding a
routing mode is a row here plus its controller app (``mrclab.controller.<app>``, and the
kernel controller's routes for Linux routers).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Routing:
    name: str
    summary: str
    app: str  # the controller app: mrclab.controller.<app>
    source_routed: bool  # the sender writes each packet's path; else the switches hash it onto one
    avoid_measurable: bool  # avoid_s needs the path each EV took, which only source routing fixes
    baseline: bool  # what MRC is compared with: MRC's claims are reported, not checked


ROUTINGS = {
    "static-srv6": Routing("static-srv6", "static SRv6 uSID routes, installed once at boot", "static_srv6",
                           source_routed=True, avoid_measurable=True, baseline=False),
    "ecmp-reconverge": Routing("ecmp-reconverge", "ECMP over host addresses, reprogrammed after a fault",
                               "ecmp_reconverge", source_routed=False, avoid_measurable=False, baseline=True),
}
DEFAULT = "static-srv6"
APPS = {row.app: row for row in ROUTINGS.values()}
