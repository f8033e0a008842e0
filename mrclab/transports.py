"""The transports an agent can run: one row each.

A row says whether the agent speaks the MRC wire protocol through the sans-IO connection
(``mrclab.transport``: EVs, transport_options, revive_s and RTT samples; else the kernel's TCP),
whether it keeps to one hashed path per connection (QP), the UDP port it uses (switches trim
MRC's port only: anything else that does not fit a queue is dropped) and the transport options
it fixes. Adding a transport is a row here plus, where it needs one, its agent datapath
(``mrclab.agent``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .transport.wire import MRC_UDP_PORT

ROCE_UDP_PORT = 4791  # RoCEv2's


@dataclass(frozen=True)
class Transport:
    name: str
    summary: str
    mrc: bool  # driven by mrclab.transport's Connection: EVs, transport_options, revive_s and RTT samples exist
    single_path: bool  # one EV per connection (QP), picked by a flow hash
    port: int = MRC_UDP_PORT
    options: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Transport options the row sets (a scenario's ``transport_options`` may not override them)."""

    def shares_datapath(self, other: Transport) -> bool:
        """Whether workloads of both can run in one run: an agent drives one datapath, on one port."""
        return self.mrc and other.mrc and self.port == other.port or self.name == other.name


TRANSPORTS = {
    "mrc": Transport("mrc", "MRC over every path", mrc=True, single_path=False),
    "single-path": Transport("single-path", "MRC's selective repeat on one hashed path per QP", mrc=True,
                             single_path=True),
    "roce": Transport("roce", "RoCE RC-like: one hashed path per QP, go-back-N, DCQCN, never trimmed", mrc=True,
                      single_path=True, port=ROCE_UDP_PORT,
                      options=MappingProxyType({"go_back_n": True, "cc_algorithm": "dcqcn"})),
    "tcp": Transport("tcp", "the kernel's TCP, one hashed path per flow", mrc=False, single_path=True),
}
DEFAULT = "mrc"
