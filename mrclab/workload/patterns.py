"""Which host sends how much to whom in each step, and how fast a perfect fabric would finish it.

`message` is what each sending host sends per step (docs/spec.md):
- ring-allreduce: host i sends the whole message to host i+1 (one reduce-scatter/all-gather hop);
- all-to-all: host i sends message/(n-1) to every other host (the remainder to the first ones);
- incast: every sender sends the whole message to the receiver;
- permutation: each host sends the whole message to a partner drawn by a seeded derangement,
  a new one every step, so hashing baselines meet new collisions each step.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from ..spec import Topology, Workload
from ..spec.scenario import derangement


@dataclass(frozen=True)
class Transfer:
    src: str
    dst: str
    size: int


def step_transfers(workload: Workload, step: int, seed: int) -> list[Transfer]:
    hosts, size = workload.hosts, workload.message_bytes
    n = len(hosts)
    if workload.pattern == "ring-allreduce":
        return [Transfer(hosts[i], hosts[(i + 1) % n], size) for i in range(n)]
    if workload.pattern == "all-to-all":
        share, extra = divmod(size, n - 1)
        out: list[Transfer] = []
        for i, src in enumerate(hosts):
            peers = [hosts[(i + k) % n] for k in range(1, n)]
            out.extend(Transfer(src, dst, share + (1 if k < extra else 0)) for k, dst in enumerate(peers))
        return [t for t in out if t.size > 0]
    if workload.pattern == "incast":
        receiver = workload.receiver
        if receiver is None:
            raise ValueError("an incast workload names its receiver")
        return [Transfer(src, receiver, size) for src in workload.senders]
    if workload.pattern == "permutation":
        rng = random.Random(f"{seed}:{step}")
        return [Transfer(src, dst, size) for src, dst in zip(hosts, derangement(hosts, rng), strict=True)]
    raise ValueError(f"unknown pattern {workload.pattern!r}")


def ideal_step_seconds(transfers: list[Transfer], topo: Topology) -> float:
    """The busiest bottleneck's bytes over its capacity: host NICs (all planes) and leaf uplinks.

    Same-leaf traffic is counted on the uplinks too, because every path climbs to a spine.
    """
    host_cap = topo.planes * topo.host_rate_bps / 8
    uplink_cap = topo.planes * topo.spines * topo.fabric_rate_bps / 8
    out_bytes: defaultdict[str, int] = defaultdict(int)
    in_bytes: defaultdict[str, int] = defaultdict(int)
    leaf_up: defaultdict[int, int] = defaultdict(int)
    leaf_down: defaultdict[int, int] = defaultdict(int)
    for t in transfers:
        out_bytes[t.src] += t.size
        in_bytes[t.dst] += t.size
        leaf_up[topo.host_index(t.src) // topo.hosts_per_leaf] += t.size
        leaf_down[topo.host_index(t.dst) // topo.hosts_per_leaf] += t.size
    busiest_host = max([*out_bytes.values(), *in_bytes.values(), 0]) / host_cap
    busiest_leaf = max([*leaf_up.values(), *leaf_down.values(), 0]) / uplink_cap
    return max(busiest_host, busiest_leaf)
