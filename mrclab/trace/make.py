"""Small Chakra traces of the usual parallelisms, written from a description (`mrclab trace make`), so a replay can
start without a PyTorch job.

A description names a `kind` and its sizes; every kind is one training iteration of `layers` layers, one ET file
per rank, nodes named as a profiler would name them (``layer2.fwd``, ``layer2.grad_allreduce``):

- ``dp``: data parallel. Forward compute per layer, then backward compute per layer in reverse, each layer's
  gradient all-reduced over every rank as soon as its backward is done (overlapping the next backward), and an
  optimizer step after the last all-reduce.
- ``tp``: tensor parallel in groups of `group` consecutive ranks: per layer an all-gather, compute and a
  reduce-scatter in the group; then the gradients all-reduced across the groups (ranks with the same place in
  their group).
- ``moe``: mixture of experts with expert-parallel groups of `group` ranks, taken `ranks/group` apart (so a group
  spans the racks): per layer attention compute, an all-to-all to the experts, expert compute, an all-to-all
  back; then the dense gradients all-reduced over every rank.
- ``mixed``: a tensor-parallel all-gather and reduce-scatter within groups of `group` consecutive ranks, an MoE
  all-to-all pair across the strided groups, and each layer's gradient all-reduced over every rank.

`comm_size` is each rank's buffer of the collective (ASTRA-sim's reading); `compute` the duration of each layer's
compute node.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import et_def_pb2 as pb
from .etfile import attribute, encode

KINDS = ("dp", "tp", "moe", "mixed")
VERSION = "0.0.4"  # the Chakra schema version these traces follow


@dataclass(frozen=True)
class Description:
    kind: str
    ranks: int
    layers: int = 4
    size: int = 1 << 20  # bytes per rank per collective
    compute_us: int = 1000  # per layer compute node
    group: int = 4  # tp / moe group size

    def check(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if not 2 <= self.ranks <= 8192:
            raise ValueError(f"ranks {self.ranks}: expected 2 to 8192")
        if not 1 <= self.layers <= 1000:
            raise ValueError(f"layers {self.layers}: expected 1 to 1000")
        if self.size < 1:
            raise ValueError(f"size {self.size}: expected at least 1 byte")
        if self.kind != "dp" and (self.group < 2 or self.ranks % self.group or self.group > self.ranks):
            raise ValueError(f"group {self.group}: expected at least 2 and a divisor of ranks ({self.ranks})")


class _Rank:
    """One rank's nodes as they are added, each depending on the ones named."""

    def __init__(self) -> None:
        self.nodes: list[pb.Node] = []

    def add(self, kind: pb.NodeType, name: str, data: tuple[int, ...] = (), ctrl: tuple[int, ...] = (),
            duration_us: int = 0, **attrs) -> int:
        node = pb.Node(id=len(self.nodes), name=name, type=kind, data_deps=[d for d in data if d >= 0],
                       ctrl_deps=[c for c in ctrl if c >= 0], duration_micros=duration_us,
                       attr=[attribute(k, v) for k, v in attrs.items()])
        self.nodes.append(node)
        return node.id

    def compute(self, name: str, us: int, after: tuple[int, ...] = ()) -> int:
        return self.add(pb.COMP_NODE, name, data=after, duration_us=us, is_cpu_op=False)

    def coll(self, name: str, comm: pb.CollectiveCommType, size: int, pg: str, after: tuple[int, ...] = ()) -> int:
        return self.add(pb.COMM_COLL_NODE, name, data=after, comm_type=comm, comm_size=size, pg_name=pg,
                        is_cpu_op=False)


def _ranks(d: Description) -> list[_Rank]:
    """Every rank's nodes for the description."""
    out = []
    for rank in range(d.ranks):
        r = _Rank()
        blocks = d.ranks // d.group if d.kind != "dp" else 1
        tp = f"tp{rank // d.group}" if d.kind != "dp" else ""
        strided = f"ep{rank % blocks}" if d.kind != "dp" else ""  # ranks/group apart: across racks
        across = f"dp{rank % d.group}" if d.kind == "tp" else "world"
        last = -1
        grads: list[int] = []
        for layer in range(d.layers):
            at = f"layer{layer}"
            if d.kind == "dp":
                last = r.compute(f"{at}.fwd", d.compute_us, (last,))
                continue
            if d.kind in ("tp", "mixed"):
                last = r.coll(f"{at}.allgather", pb.ALL_GATHER, d.size, tp, (last,))
                last = r.compute(f"{at}.fwd", d.compute_us, (last,))
                last = r.coll(f"{at}.reducescatter", pb.REDUCE_SCATTER, d.size, tp, (last,))
            if d.kind in ("moe", "mixed"):
                if d.kind == "moe":
                    last = r.compute(f"{at}.attn", d.compute_us // 2, (last,))
                last = r.coll(f"{at}.dispatch_alltoall", pb.ALL_TO_ALL, d.size, strided, (last,))
                last = r.compute(f"{at}.experts", d.compute_us // 2, (last,))
                last = r.coll(f"{at}.combine_alltoall", pb.ALL_TO_ALL, d.size, strided, (last,))
        for layer in reversed(range(d.layers)):
            at = f"layer{layer}"
            last = r.compute(f"{at}.bwd", d.compute_us, (last,))
            if d.kind in ("dp", "mixed"):  # each layer's gradient as soon as it is ready
                grads.append(r.coll(f"{at}.grad_allreduce", pb.ALL_REDUCE, d.size, "world", (last,)))
        if d.kind in ("tp", "moe"):  # the whole model's gradients at once
            grads.append(r.coll("grads.allreduce", pb.ALL_REDUCE, d.size * d.layers, across, (last,)))
        r.compute("optimizer.step", max(1, d.compute_us // 4), (last, *grads))
        out.append(r)
    return out


def write(d: Description, folder: Path, name: str | None = None) -> list[Path]:
    """The description's trace as `<name>.<rank>.et` files in ``folder`` (made if missing); their paths."""
    d.check()
    folder.mkdir(parents=True, exist_ok=True)
    stem = name or d.kind
    meta = {"kind": d.kind, "ranks": d.ranks, "layers": d.layers, "comm_size": d.size, "compute_us": d.compute_us,
            "group": d.group, "generator": "mrclab trace make"}
    paths = []
    for rank, r in enumerate(_ranks(d)):
        path = folder / f"{stem}.{rank}.et"
        path.write_bytes(encode(VERSION, meta, r.nodes))
        paths.append(path)
    return paths
