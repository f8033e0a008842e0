"""The engines a scenario can run on: one row each.

Both run the same scenario file through the same workload drivers, fault timeline, metrics and report
(`runner`); they differ only where packets move. A row says what moves them, the fabric sizes it
takes, which transports it can run and whether it needs the machine (root, the fabric's tools, no
other lab beside it). Adding an engine is a row here plus its run class (a `runner.Run`: how the
fabric and the hosts are made, and what the engine reports about itself).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from .addressing import MAX_HOSTS as ADDRESSABLE_HOSTS
from .transports import TRANSPORTS


@dataclass(frozen=True)
class Engine:
    name: str
    summary: str
    run: str  # its run class, as module:class
    lab: bool  # real packets: needs root and the fabric's tools, and a machine no other lab is using
    max_hosts: int
    max_switches: int
    transports: tuple[str, ...]

    def run_class(self) -> type:
        module, name = self.run.split(":")
        return getattr(importlib.import_module(module), name)


ENGINES = {
    "lab": Engine("lab", "real packets through Mininet, Open vSwitch or Linux routers, tc-eBPF and the agents",
                  "mrclab.runner:LabRun", lab=True, max_hosts=64, max_switches=256, transports=tuple(TRANSPORTS)),
    "sim": Engine("sim", "the agents' transport code over a discrete-event network, in simulated time",
                  "mrclab.simulation.run:SimRun", lab=False, max_hosts=ADDRESSABLE_HOSTS, max_switches=8192,
                  transports=tuple(name for name, row in TRANSPORTS.items() if row.mrc)),
}
DEFAULT = "lab"
