"""What a replayed trace sends and how fast a perfect fabric would run it, worked out once per run: each op's
phases of transfers between the hosts its ranks run on, its ideal time, its compute time as replayed, and the
iteration's ideal (the longest dependency path, ops weighted by those times)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..spec import Topology, Workload
from ..spec.trace import TraceSpec
from ..trace.graph import COLLECTIVE, COMPUTE, P2P
from .collectives import phases
from .patterns import Transfer, ideal_step_seconds


@dataclass(frozen=True)
class Plan:
    phases: tuple[tuple[tuple[Transfer, ...], ...], ...]  # per op: its phases, each a set of transfers
    ideal_s: tuple[float, ...]  # per op: its phases at the bottleneck's line rate, one after another
    compute_s: tuple[float, ...]  # per op: compute time as replayed (0 for the others)
    iteration_ideal_s: float  # the longest dependency path


@functools.lru_cache(maxsize=8)
def plan(spec: TraceSpec, topo: Topology) -> Plan:
    ops, hosts = spec.trace.ops, spec.hosts
    out_phases, ideal, compute = [], [], []
    for op in ops:
        if op.kind in (COLLECTIVE, P2P):
            members = tuple(hosts[r] for r in op.ranks)
            root = op.ranks.index(op.root) if op.comm == "BROADCAST" else 0
            ps = tuple(tuple(p) for p in phases(op.comm, members, spec.size(op.size), spec.algorithm(op.comm), root))
        else:
            ps = ()
        out_phases.append(ps)
        ideal.append(sum(ideal_step_seconds(list(p), topo) for p in ps))
        compute.append(op.duration_us * 1e-6 * spec.compute_factor if op.kind == COMPUTE else 0.0)
    finish: list[float] = []
    for i, op in enumerate(ops):  # ops come after their deps
        finish.append(max((finish[d] for d in op.deps), default=0.0) + ideal[i] + compute[i])
    return Plan(tuple(out_phases), tuple(ideal), tuple(compute), max(finish, default=0.0))


def replay_pairs(w: Workload, topo: Topology) -> set[tuple[str, str]]:
    """Every (src, dst) the trace's replay sends on."""
    if w.trace is None:
        return set()
    return {(t.src, t.dst) for op in plan(w.trace, topo).phases for p in op for t in p}
