"""The base of a workload's driver (execution.py runs one per workload): what it posts and when it is over.

Each kind of workload has its own: a collective's steps and a stream (execution.py), a trace's replay
(replay.py)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .addressing import conn_id
from .metrics.outcome import MessageKey
from .workload import Transfer

if TYPE_CHECKING:
    from .execution import Execution


class Driver:
    """One workload's sending: what it posts and when it is over. ``index`` is its place in the scenario."""

    def __init__(self, ex: Execution, index: int, qp_base: int) -> None:
        self.ex, self.index, self.qp_base = ex, index, qp_base
        self.w = ex.s.workloads[index]
        self.done = False
        self.wake = math.inf  # when, on the engine's clock, it must act though no event came (a trace's compute)

    def post(self, src: str, dst: str, msg: int, size: int, qp: int) -> MessageKey:
        topo, o = self.ex.topo, self.ex.outcome
        peer = topo.host_index(dst)
        key = MessageKey(conn_id(topo.host_index(src), peer, self.qp_base + qp), msg)
        o.post(key, size, self.ex.clock(), self.index)
        self.ex.agents.post(src, conn=key.conn, peer=peer, msg=msg, size=size)
        return key

    def post_transfers(self, transfers: list[Transfer], msg: int) -> set[MessageKey]:
        """Each transfer as message ``msg`` of its pair, split evenly over the pair's QPs (empty shares skipped)."""
        n, keys = self.w.connections, set()
        for t in transfers:
            share, extra = divmod(t.size, n)
            for qp in range(n):
                if share + (qp < extra):
                    keys.add(self.post(t.src, t.dst, msg, share + (qp < extra), qp))
        return keys

    def start(self) -> None:
        raise NotImplementedError

    def advance(self, finished: MessageKey | None) -> None:
        """After events: ``finished`` is a message of this workload that just completed or failed (None: a
        poll went by)."""
        raise NotImplementedError
