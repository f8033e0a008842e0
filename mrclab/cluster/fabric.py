"""The fabric of a run over servers, as `execution` and the runner use a fabric (`fabric.net.Fabric`'s
run-time face): a fault goes to every server that holds an end of what it names, at once, and takes effect when
the first of them changed it (on the runner's clock); the counters are every server's, gathered once the
workload has stopped."""
from __future__ import annotations

from ..actions import ACTIONS, LINK
from ..fabric.faults import queue_waits
from . import messages as msg
from .servers import Cluster


class ClusterFabric:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.topology = cluster.topology
        self._readings: dict[int, msg.Readings] = {}
        order = {link.name: i for i, link in enumerate(self.topology.links)}
        self._row_order = lambda row: (order[row["link"]], row["from"] != self.topology.link(row["link"]).a)

    def holders(self, action: str, target: str) -> list[int]:
        """The servers holding an end of what the action works on: a link's two ends, or every cable of a
        switch (a switch going down cuts its cables at both ends, as on one machine)."""
        if ACTIONS[action].target == LINK:
            links = [self.topology.link(target)]
        else:
            links = [link for link in self.topology.links if target in (link.a, link.b)]
        return sorted({self.cluster.server_of[node] for link in links for node in (link.a, link.b)})

    def apply(self, action: str, target: str, *, loss_probability: float | None = None,
              rate_bps: float | None = None) -> float:
        """One scenario event on every server concerned; the runner's time of the first change."""
        self.cluster.check()
        request = msg.Apply(action, target, loss_probability, rate_bps)
        applied = self.cluster.ask_all(dict.fromkeys(self.holders(action, target), request), msg.Applied)
        return min(a.t - self.cluster.shift(i) for i, a in applied.items())

    def readings(self) -> dict[int, msg.Readings]:
        """Every server's counters (read once, after the workload; a server that is gone has none)."""
        wanted = [i for i in self.cluster.live() if i not in self._readings]
        if wanted:
            self._readings.update(self.cluster.ask_all(dict.fromkeys(wanted, msg.Read()), msg.Readings))
        return self._readings

    def link_counters(self) -> list[dict]:
        """results.json `links`, in the topology's order, as on one machine."""
        return sorted((row for r in self.readings().values() for row in r.links), key=self._row_order)

    def queue_waits(self) -> tuple[float, float]:
        totals = [r.queue for r in self.readings().values()]
        return queue_waits(*(sum(column) for column in zip(*totals, strict=True))) if totals else (0.0, 0.0)

    def controller_stats(self) -> dict:
        """Each server's controller programs its own routers: the flow-mods are their sums."""
        stats = [r.controller for r in self.readings().values()]
        return {key: sum(s.get(key) or 0 for s in stats) for key in ("flow_mods_boot", "flow_mods_after_boot")}
