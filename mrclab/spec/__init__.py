"""Topology and scenario files -> validated, frozen objects; nothing inward sees a raw dict."""
from .scenario import Capture, Event, Scenario, Workload
from .topology import Link, Topology

__all__ = ["Capture", "Event", "Link", "Scenario", "Topology", "Workload"]
