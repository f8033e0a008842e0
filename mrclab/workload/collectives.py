"""A collective of a replayed trace as the flows NCCL would send for it: phases of transfers, each phase starting
when the one before it has finished.

``size`` is each member's buffer (the trace's comm_size); members are in ring order (rank order, which the
placement keeps rack by rack), so a ring's neighbours share a leaf wherever the placement allows.

| collective | ring | direct |
|---|---|---|
| ALL_REDUCE | a reduce-scatter phase, then an all-gather phase | both phases, direct |
| ALL_GATHER, REDUCE_SCATTER | one ring phase | one direct phase |
| ALL_TO_ALL | (point to point, as NCCL does it) one direct phase | one direct phase |
| BROADCAST | the buffer down a chain from the root (pipelined: one phase) | the root to every other member |
| BARRIER | an all-reduce of `BARRIER_BYTES` | its direct form |
| SEND_RECV | the buffer from the sender to the receiver | the same |

In a ring phase each member sends (n-1)/n of the buffer to the next; in a direct phase 1/n of it to every other.
A ring phase carries each member's whole share as one transfer: NCCL pipelines its chunks round the ring, so a
phase lasts as long as its slowest hop.
"""
from __future__ import annotations

import math

from ..spec.trace import ALGORITHMS
from .patterns import Transfer

__all__ = ["ALGORITHMS", "BARRIER_BYTES", "algorithm_used", "phases"]
BARRIER_BYTES = 8


def _ring(hosts: tuple[str, ...], size: int) -> list[Transfer]:
    n = len(hosts)
    share = math.ceil(size * (n - 1) / n)
    return [Transfer(hosts[i], hosts[(i + 1) % n], share) for i in range(n)] if share else []


def _direct(hosts: tuple[str, ...], size: int) -> list[Transfer]:
    n = len(hosts)
    share = math.ceil(size / n)
    return [Transfer(a, b, share) for a in hosts for b in hosts if a != b] if share else []


def algorithm_used(comm: str, chosen: str) -> str:
    """What a collective runs as: all-to-all is always direct, a send/recv point to point."""
    return {"ALL_TO_ALL": "direct", "SEND_RECV": "p2p"}.get(comm, chosen)


def phases(comm: str, hosts: tuple[str, ...], size: int, algorithm: str = "ring",
           root: int = 0) -> list[list[Transfer]]:
    """The transfers of one collective among ``hosts`` (``root``: the broadcast source's place among them)."""
    if len(hosts) < 2 or (size <= 0 and comm != "BARRIER"):
        return []
    one = _ring if algorithm == "ring" else _direct
    if comm == "SEND_RECV":
        return [[Transfer(hosts[0], hosts[1], size)]]
    if comm in ("ALL_REDUCE", "BARRIER"):
        size = BARRIER_BYTES if comm == "BARRIER" else size
        return [p for p in (one(hosts, size), one(hosts, size)) if p]
    if comm in ("ALL_GATHER", "REDUCE_SCATTER"):
        return [one(hosts, size)]
    if comm == "ALL_TO_ALL":
        return [_direct(hosts, size)]
    if comm == "BROADCAST":
        order = hosts[root:] + hosts[:root]
        if algorithm == "ring":
            return [[Transfer(order[i], order[i + 1], size) for i in range(len(order) - 1)]]
        return [[Transfer(order[0], h, size) for h in order[1:]]]
    raise ValueError(f"unknown collective {comm!r}")
