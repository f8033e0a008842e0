"""A replayed trace's figures (results.json `workloads[i]` of a `trace` workload), from the spans its driver
recorded (replay.py): the headline iteration time, each iteration split into compute and communication, every
collective with its time, its share of ideal and the faults it overlapped, each by the trace's own name, and the
ops and spans the report's Gantt chart draws.

An iteration's `compute_s` is the most compute any rank did in it (a rank computes one op at a time);
`communication_s` is the rest of the iteration: the communication that compute did not hide, on the rank that
computed most. `comm_busy_s` is the longest time any rank had a collective or a send/recv under way.
"""
from __future__ import annotations

from collections import defaultdict

from ..actions import clears_target
from ..spec import Scenario, Workload
from ..trace.graph import COMPUTE, NOOP
from ..workload.collectives import algorithm_used
from ..workload.trace_plan import plan
from .outcome import Fired, Outcome, Span
from .records import Records
from .results import percentile


def fault_intervals(fired: list[Fired], end_s: float) -> list[tuple[float, float, str]]:
    """(start, end, "action target") of every fault that was in force for a while: from the action to the one
    that cleared its target (or the end)."""
    opened: dict[str, tuple[float, str]] = {}
    out = []
    for f in sorted(fired, key=lambda f: f.t_s):
        if clears_target(f.action, f.rate if f.action == "loss" else None):
            if f.target in opened:
                start, what = opened.pop(f.target)
                out.append((start, f.t_s, what))
        elif f.target not in opened:
            opened[f.target] = (f.t_s, f"{f.action} {f.target}")
    out.extend((start, end_s, what) for start, what in opened.values())
    return sorted(out)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def figures(w: Workload, index: int, scenario: Scenario, outcome: Outcome) -> dict:
    """The trace workload's part of its results row."""
    spec = w.trace
    assert spec is not None
    ops, p = spec.trace.ops, plan(spec, scenario.topology)
    spans = outcome.spans.get(index, Records(Span))
    steps = outcome.workload_steps.get(w.name)
    faults = fault_intervals(outcome.fired, outcome.wall_s)
    by_iteration: dict[int, list[Span]] = defaultdict(list)
    for s in spans:
        by_iteration[s.iteration].append(s)
    iterations = []
    for step in steps or []:
        compute: dict[int, float] = defaultdict(float)
        comm: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for s in by_iteration[step.index]:
            op = ops[s.op]
            if op.kind == COMPUTE:
                compute[op.ranks[0]] += s.end_s - s.start_s
            elif op.kind != NOOP and p.phases[s.op]:
                for rank in op.ranks:
                    comm[rank].append((s.start_s, s.end_s))
        busiest = max(compute.values(), default=0.0)
        exposed = max(step.duration_s - busiest, 0.0)
        iterations.append({"index": step.index, "start_s": step.start_s, "time_s": step.duration_s,
                           "compute_s": round(busiest, 6), "communication_s": round(exposed, 6),
                           "comm_busy_s": round(max((_union(v) for v in comm.values()), default=0.0), 6),
                           "ideal_s": round(step.ideal_s, 6)})
    collectives = []
    for s in spans:
        op = ops[s.op]
        if op.kind in (COMPUTE, NOOP):
            continue
        duration = s.end_s - s.start_s
        ideal = p.ideal_s[s.op]
        collectives.append({
            "iteration": s.iteration, "name": op.name, "comm": op.comm, "group": op.group, "ranks": len(op.ranks),
            "bytes": spec.size(op.size), "algorithm": algorithm_used(op.comm, spec.algorithm(op.comm)),
            "start_s": s.start_s, "time_s": round(duration, 6), "ideal_s": round(ideal, 6),
            "share_of_ideal": round(ideal / duration, 4) if duration > 0 else None,
            "faults": [what for start, end, what in faults if start < s.end_s and end > s.start_s]})
    times = [it["time_s"] for it in iterations]
    return {
        "iteration_time_s": {"p50": round(percentile(times, 50), 6), "p100": round(max(times, default=0.0), 6),
                             "mean": round(sum(times) / len(times), 6) if times else 0.0},
        "iterations": iterations,
        "collectives": collectives,
        "by_name": _by_name(collectives),
        "trace": {"path": spec.path, "ranks": spec.trace.ranks, "hosts": list(spec.hosts),
                  "ops": [{"name": op.name, "kind": op.kind, "comm": op.comm, "ranks": list(op.ranks)} for op in ops],
                  "spans": {k: spans.column(k) for k in ("iteration", "op", "start_s", "end_s")}},
    }


def _by_name(collectives: list[dict]) -> list[dict]:
    """The collectives grouped by the trace's name and type: how many ran, their time and share of ideal."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for c in collectives:
        groups[(c["name"], c["comm"])].append(c)
    out = []
    for (name, comm), rows in groups.items():
        times = [r["time_s"] for r in rows]
        shares = [r["share_of_ideal"] for r in rows if r["share_of_ideal"] is not None]
        out.append({"name": name, "comm": comm, "count": len(rows), "time_s_p50": round(percentile(times, 50), 6),
                    "time_s_p100": round(max(times), 6),
                    "share_of_ideal_p50": round(percentile(shares, 50), 4) if shares else None,
                    "with_faults": sum(1 for r in rows if r["faults"])})
    return out
