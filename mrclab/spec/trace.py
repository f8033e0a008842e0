"""A `trace` workload's keys -> a frozen `TraceSpec`: the Chakra trace read and checked whole, its ranks placed on
the fabric's hosts, and how it is replayed (iterations, compute, sizes, algorithms). A trace that cannot be
replayed is refused here, before anything is built (one line naming the ET file, the node and the field)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..shipped import folder
from ..trace import Trace, TraceError, load
from ..trace.graph import COLLECTIVES
from .keys import SCENARIO, TRACE
from .reader import Reader, short
from .topology import Topology

TRACE_DIR = folder("traces")
ALGORITHMS = ("ring", "direct")  # how a collective becomes flows (workload.collectives)
WORKLOAD = SCENARIO.section("workload")


@dataclass(frozen=True)
class TraceSpec:
    """How a trace is replayed. ``hosts[r]`` runs rank r; compute nodes last ``compute_factor`` times their traced
    duration; every comm_size is multiplied by ``size_scale``; ``algorithms`` maps a collective to ring or direct."""

    path: str  # as the scenario wrote it
    trace: Trace = field(hash=False, compare=False)
    hosts: tuple[str, ...]
    ranks: Any = field(hash=False)  # as written: auto, spread, or {rank: host}
    iterations: int
    compute: str  # as written: as-traced, skip, scale X
    compute_factor: float
    size_scale: float
    algorithms: tuple[tuple[str, str], ...]  # (collective or "default", ring | direct)
    dims: tuple[int, ...] | None = None

    def algorithm(self, comm: str) -> str:
        chosen = dict(self.algorithms)
        return chosen.get(comm, chosen.get("default", "ring"))

    def size(self, traced: int) -> int:
        """A comm_size as replayed: scaled, and at least a byte when the trace had any."""
        return max(1, round(traced * self.size_scale)) if traced > 0 else 0

    def to_dict(self) -> dict[str, Any]:
        chosen = dict(self.algorithms)
        algorithm: Any = chosen.get("default", "ring") if set(chosen) <= {"default"} else {
            k.lower(): v for k, v in chosen.items()}
        out: dict[str, Any] = {"path": self.path, "ranks": self.ranks, "iterations": self.iterations,
                               "compute": self.compute, "size_scale": self.size_scale, "algorithm": algorithm}
        if self.dims is not None:
            out["dims"] = list(self.dims)
        return out


def resolve(path: str, source: str) -> Path:
    """A trace folder or glob: as given when absolute or found from the working folder, else beside the scenario
    file, else a shipped trace by name (traces/NAME)."""
    given = Path(path)
    candidates = [given] if given.is_absolute() else [
        *([Path(source).parent / given] if source else []), given, TRACE_DIR / given]
    for candidate in candidates:
        if candidate.exists() or any(ch in str(candidate) for ch in "*?[") and list(
                candidate.parent.glob(candidate.name)):
            return candidate
    return given


def shipped() -> list[str]:
    return sorted(p.name for p in TRACE_DIR.iterdir() if p.is_dir()) if TRACE_DIR.is_dir() else []


def read(w: Reader, topo: Topology) -> TraceSpec:
    """The trace workload's own keys (the common ones are the caller's)."""
    path = w.read(_row("path"), what="a folder of <name>.<rank>.et files, a glob of them, or a shipped trace "
                                     f"({', '.join(shipped())})")
    dims = w.get("dims", _dims, None)
    try:
        trace = load(str(resolve(path, w.source)), dims=dims)
    except TraceError as exc:
        w.fail(w.key("path"), str(exc))
    if trace.ranks > topo.hosts:
        w.fail(w.key("path"), f"{path}: the trace has {trace.ranks} ranks, more than the {topo.hosts} hosts of "
                              f"{topo.name}: one rank runs on one host (give the topology more leaves or "
                              "hosts_per_leaf)")
    ranks = w.raw("ranks", _row("ranks").default)
    hosts = _placement(w, ranks, trace.ranks, topo)
    iterations = w.read(_row("iterations"))
    compute = w.read(_row("compute"))
    factor = _compute_factor(w, compute)
    size_scale = w.read(_row("size_scale"))
    algorithms = _algorithms(w)
    return TraceSpec(path, trace, hosts, ranks, iterations, compute, factor, size_scale, algorithms, dims)


def _row(name: str):
    return WORKLOAD.row(name, TRACE)


def _dims(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        raise ValueError(f"expected a list of dimension sizes like [4, 4], got {short(value)}")
    return tuple(value)


def _placement(w: Reader, ranks: Any, count: int, topo: Topology) -> tuple[str, ...]:
    """The host of each rank: `auto` packs ranks in the fabric's order (consecutive ranks share a leaf, so a
    group of consecutive ranks sits under one leaf when it fits), `spread` deals them round the leaves, a
    mapping places each rank."""
    names = topo.host_names
    if ranks == "auto":
        return tuple(names[:count])
    if ranks == "spread":
        leaves, per = topo.leaves, topo.hosts_per_leaf
        order = [names[(i % leaves) * per + i // leaves] for i in range(leaves * per)]
        return tuple(order[:count])
    if not isinstance(ranks, dict):
        w.fail(w.key("ranks"), f"expected auto, spread or a mapping of rank to host, got {short(ranks)}")
    out: dict[int, str] = {}
    for rank, host in ranks.items():
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < count:
            w.fail(w.key("ranks"), f"{short(rank)} is not a rank of this {count}-rank trace (0 to {count - 1})")
        if not isinstance(host, str) or not topo.has_host(host):
            w.fail(w.key("ranks"), f"rank {rank}: unknown host {short(host)}; this fabric has h0..h{topo.hosts - 1}")
        if host in out.values():
            w.fail(w.key("ranks"), f"rank {rank}: {host} already runs another rank: one rank per host")
        out[rank] = host
    missing = [r for r in range(count) if r not in out]
    if missing:
        w.fail(w.key("ranks"), f"rank {missing[0]} has no host: place every rank (0 to {count - 1}), or use auto")
    return tuple(out[r] for r in range(count))


def _compute_factor(w: Reader, compute: str) -> float:
    if compute == "as-traced":
        return 1.0
    if compute == "skip":
        return 0.0
    word, _, value = compute.partition(" ")
    try:
        factor = float(value)
    except ValueError:
        factor = -1.0
    if word != "scale" or not 0 <= factor <= 1e6:
        w.fail(w.key("compute"), f"{short(compute)}: expected as-traced, skip, or scale X (X from 0 to 1e6)")
    return factor


def _algorithms(w: Reader) -> tuple[tuple[str, str], ...]:
    """`algorithm: ring` for every collective, or a mapping such as {all_reduce: direct} (the rest ring)."""
    value = w.raw("algorithm", _row("algorithm").default)
    if isinstance(value, str):
        if value not in ALGORITHMS:
            w.fail(w.key("algorithm"), f"{short(value)} is not one of: {', '.join(ALGORITHMS)}")
        return (("default", value),)
    if not isinstance(value, dict):
        w.fail(w.key("algorithm"), f"expected ring, direct or a mapping like {{all_reduce: direct}}, got "
                                   f"{short(value)}")
    out = {}
    for comm, algorithm in value.items():
        name = str(comm).upper()
        if name not in (*COLLECTIVES, "DEFAULT"):
            w.fail(w.key("algorithm"), f"{short(comm)} is not a collective: expected one of "
                                       f"{', '.join(c.lower() for c in COLLECTIVES)} or default")
        if algorithm not in ALGORITHMS:
            w.fail(w.key("algorithm"), f"{comm}: {short(algorithm)} is not one of: {', '.join(ALGORITHMS)}")
        out["default" if name == "DEFAULT" else name] = algorithm
    return tuple(out.items())
