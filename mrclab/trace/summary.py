"""What a trace holds, in a few lines (`mrclab trace show`): its ranks, its ops by kind, its collectives by type
with their bytes, and its communicators."""
from __future__ import annotations

from collections import Counter, defaultdict

from .graph import COLLECTIVE, COMPUTE, P2P, Trace


def summarize(trace: Trace) -> dict:
    kinds = Counter(op.kind for op in trace.ops)
    comms: dict[str, dict] = defaultdict(lambda: {"count": 0, "bytes": 0})
    for op in trace.ops:
        if op.kind in (COLLECTIVE, P2P):
            comms[op.comm]["count"] += 1
            comms[op.comm]["bytes"] += op.size
    sizes = Counter(len(members) for members in trace.groups.values())
    return {"source": trace.source, "ranks": trace.ranks, "files": [trace.files[0], trace.files[-1]],
            "ops": dict(kinds), "collectives": dict(comms),
            "compute_us_per_rank": max((sum(op.duration_us for op in trace.ops if op.kind == COMPUTE
                                            and op.ranks[0] == r) for r in range(trace.ranks)), default=0),
            "communicators": {"count": len(trace.groups), "sizes": {str(k): v for k, v in sorted(sizes.items())}}}


def lines(doc: dict) -> list[str]:
    out = [f"{doc['source']}: {doc['ranks']} ranks ({doc['files'][0]} ... {doc['files'][1]})",
           "ops: " + ", ".join(f"{n} {kind}" for kind, n in sorted(doc["ops"].items())),
           f"compute: {doc['compute_us_per_rank'] / 1000:g} ms on the busiest rank, as traced"]
    for comm, c in sorted(doc["collectives"].items()):
        out.append(f"{comm}: {c['count']} ops, {c['bytes']} bytes of comm_size in all")
    sizes = ", ".join(f"{n} of {k} ranks" for k, n in doc["communicators"]["sizes"].items())
    out.append(f"communicators: {doc['communicators']['count']} ({sizes})")
    return out
