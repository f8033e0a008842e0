"""The transports an agent can run: one row each.

A row says whether the agent speaks MRC (entropy values, trimming, SACKs, transport
options, RTT samples; else the kernel's TCP) and whether it keeps to one path per
connection. Adding a transport is a row here plus its agent datapath (``mrclab.agent``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transport:
    name: str
    summary: str
    mrc: bool  # the MRC protocol: EVs, transport_options, revive_s and RTT samples exist
    single_path: bool  # one EV per connection, picked by a flow hash


TRANSPORTS = {
    "mrc": Transport("mrc", "MRC over every path", mrc=True, single_path=False),
    "single-path": Transport("single-path", "MRC on one hashed path (RoCE RC-like)", mrc=True, single_path=True),
    "tcp": Transport("tcp", "the kernel's TCP, one hashed path per flow", mrc=False, single_path=True),
}
DEFAULT = "mrc"
