"""The datapaths a fabric's switches can be made of: one row each, and how `auto` chooses.

A row names the switch implementation, the faults that fit it, whether its cables are split
per direction (see `mrclab.layout`), how L4 checksums travel through it (see `egress`), and whether
the controller starts before the switches exist (os-ken's start-up overlaps the build) or
after (it programs namespaces that must exist first). Adding a datapath is a row here plus
its `Switches` and `Faults`.

`auto` prefers the OVS kernel datapath where the openvswitch module is loaded (the lab VM),
then Linux SRv6 routers where a probe router shifts a uSID packet, and userspace OVS only as
the last resort: its single forwarding thread, not the emulated links, sets the pace of a
fabric of any size on 2 cores.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import check
from .egress import CSUM_CARRIER, CSUM_FINAL
from .faults import Faults, LinuxFaults, OvsFaults
from .linux import LinuxRouters
from .ovs import OvsSwitches


@dataclass(frozen=True)
class Datapath:
    name: str
    summary: str
    switches: Callable[[Any], Any]  # Fabric -> its switches (OvsSwitches, LinuxRouters)
    faults: Callable[[Any], Faults]  # a built Fabric -> its faults
    split_cables: bool
    csum: int  # egress.CSUM_*: what a switch port's L4 checksums are computed over
    controller_first: bool


def _host_pids(fabric) -> dict[str, int]:
    return {name: node.pid for name, node in fabric.hosts.items()}


DATAPATHS = {
    "ovs": Datapath("ovs", "Open vSwitch bridges programmed over OpenFlow by os-ken", OvsSwitches,
                    lambda f: OvsFaults(f.topology, f.layout, f.egress, _host_pids(f), f.cables),
                    split_cables=False, csum=CSUM_CARRIER, controller_first=True),
    "linux": Datapath("linux", "Linux SRv6 routers (kernel seg6local End, next-csid), one namespace each",
                      LinuxRouters,
                      lambda f: LinuxFaults(f.topology, f.layout, f.egress, _host_pids(f), f.cables,
                                            f.switches.netns_pids(), nodes=f.nodes),
                      split_cables=True, csum=CSUM_FINAL, controller_first=False),
}
CHOICES = ("auto", *DATAPATHS)


def choose(requested: str) -> tuple[Datapath, str]:
    """The datapath to run and why: `auto` resolved on this machine, any other name as asked."""
    if requested != "auto":
        return DATAPATHS[requested], "as asked"
    name, why = check.auto_datapath()
    return DATAPATHS[name], why
