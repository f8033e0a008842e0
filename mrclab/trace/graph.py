"""A job's Chakra trace (one ET file per rank) as one graph of operations over every rank, checked whole before
anything runs.

Every node of every rank becomes part of an `Op`:
- a COMP_NODE is a compute op of its rank (its traced duration);
- the k-th collective a rank issues on a communicator is the same op as every other member's k-th on it (NCCL
  requires members to issue a communicator's collectives in one order), and starts when every member reached it;
- a COMM_SEND_NODE and the COMM_RECV_NODE it meets (by source, destination and tag, in order) are one
  point-to-point op: a rendezvous, as NCCL's send and recv are;
- METADATA, MEM_LOAD and MEM_STORE nodes are no-ops that keep their place in the dependencies.

A communicator is the node's `pg_name` (PyTorch names each process group once for the whole job, so a name is a
group): its members are the ranks that issue collectives on it. A node with no `pg_name` but an `involved_dim`
list runs among the ranks that share its coordinates on the dimensions not involved (ranks laid out over `dims`,
the first dimension varying fastest, as ASTRA-sim lays them); with neither, among every rank.

Everything that would stop a replay half way is a `TraceError` here, one line naming the file, the node and the
field: a dependency on a node the file lacks, a cycle (within a rank, or across ranks through collectives and
sends), a comm type mrclab does not replay, members disagreeing on a communicator's collectives, a send with no
receive.
"""
from __future__ import annotations

import glob
import math
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

from . import et_def_pb2 as pb
from .etfile import EtFile, RawNode, TraceError, read

COLLECTIVES = ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "BROADCAST", "BARRIER")
"""The comm types replayed (the schema's CollectiveCommType names)."""
ALIASES = {"REDUCE_SCATTER_BLOCK": "REDUCE_SCATTER"}
NOOPS = ("METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE")
MAX_RANKS = 8192
RANK_OF_FILE = re.compile(r"(\d+)\.et$")
COMPUTE, COLLECTIVE, P2P, NOOP = "compute", "collective", "p2p", "noop"


@dataclass(frozen=True)
class Op:
    """One operation of the job: ``ranks`` take part (in ring order), it starts once every op of ``deps`` is done.
    ``nodes`` are the (rank, node id) it stands for; ``name`` the trace's name of its first node."""

    kind: str
    name: str
    ranks: tuple[int, ...]
    deps: tuple[int, ...]
    nodes: tuple[tuple[int, int], ...]
    duration_us: int = 0  # compute
    comm: str = ""  # a collective's type, or SEND_RECV
    size: int = 0  # bytes, as traced (comm_size)
    group: str = ""  # its communicator: the pg_name, `dims:...` or "" (every rank)
    root: int = 0  # a broadcast's source rank


@dataclass(frozen=True)
class Trace:
    """The job: its files (rank i is ``files[i]``), its ops in an order where every op follows its deps, and its
    communicators' members."""

    source: str
    files: tuple[str, ...]
    ops: tuple[Op, ...]
    groups: dict = field(hash=False, compare=False)

    @property
    def ranks(self) -> int:
        return len(self.files)


def rank_files(spec: str, base: Path | None = None) -> list[Path]:
    """The ET files a `path:` names (a folder of `*.et` files, or a glob), ordered by rank: the number before
    `.et` in each name (Chakra's `<prefix>.<rank>.et`); ranks must run from 0 without a gap."""
    path = Path(spec)
    if base is not None and not path.is_absolute():
        path = base / path
    found = sorted(path.glob("*.et")) if path.is_dir() else [Path(p) for p in sorted(glob.glob(str(path)))]
    if not found:
        raise TraceError(f"{spec}: no Chakra ET files (a folder of <name>.<rank>.et files, or a glob of them)")
    if len(found) > MAX_RANKS:
        raise TraceError(f"{spec}: {len(found)} files, more than {MAX_RANKS} ranks")
    by_rank: dict[int, Path] = {}
    for p in found:
        match = RANK_OF_FILE.search(p.name)
        if match is None:
            raise TraceError(f"{p}: no rank in the name: expected <name>.<rank>.et")
        rank = int(match.group(1))
        if rank in by_rank:
            raise TraceError(f"{p}: rank {rank} again (also {by_rank[rank]})")
        by_rank[rank] = p
    for rank in range(len(by_rank)):
        if rank not in by_rank:
            raise TraceError(f"{spec}: no file for rank {rank} ({len(by_rank)} files, ranks must be 0 to "
                             f"{len(by_rank) - 1})")
    return [by_rank[r] for r in range(len(by_rank))]


def load(spec: str, base: Path | None = None, dims: tuple[int, ...] | None = None) -> Trace:
    """Every rank's file read and the whole job checked (TraceError, one line, on the first thing wrong)."""
    files = [read(p) for p in rank_files(spec, base)]
    return build(files, spec, dims)


# -- from nodes to ops -----------------------------------------------------------------------------------------

def _int_attr(f: EtFile, node: RawNode, name: str, default: int | None = None) -> int:
    value = node.attrs.get(name, default)
    if value is None:
        raise TraceError(f"{f.path}: node {node.id}: {name}: missing (a {node.type} needs it)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceError(f"{f.path}: node {node.id}: {name}: expected a non-negative integer, got {value!r}")
    return value


def _comm_type(f: EtFile, node: RawNode) -> str:
    code = _int_attr(f, node, "comm_type")
    name = pb.CollectiveCommType.Name(code) if code in pb.CollectiveCommType.values() else None
    name = ALIASES.get(name or "", name)
    if name not in COLLECTIVES:
        label = f"{code} ({name})" if name else f"{code} (not a Chakra CollectiveCommType)"
        raise TraceError(f"{f.path}: node {node.id}: comm_type: {label} is not replayed; mrclab replays "
                         f"{', '.join(COLLECTIVES)}")
    return name


def _group(f: EtFile, node: RawNode, rank: int, ranks: int, dims: tuple[int, ...] | None) -> str:
    """The communicator key of a collective node (see the module's docstring)."""
    pg = node.attrs.get("pg_name")
    if pg not in (None, ""):
        if not isinstance(pg, str):
            raise TraceError(f"{f.path}: node {node.id}: pg_name: expected a string, got {pg!r}")
        return pg
    involved = node.attrs.get("involved_dim")
    if involved is None:
        return ""
    if not isinstance(involved, tuple) or not all(isinstance(v, bool) for v in involved):
        raise TraceError(f"{f.path}: node {node.id}: involved_dim: expected a list of booleans, got {involved!r}")
    shape = dims or (ranks,)
    if len(involved) != len(shape):
        raise TraceError(f"{f.path}: node {node.id}: involved_dim: {len(involved)} dimensions, the ranks are laid "
                         f"out over {len(shape)} ({'x'.join(map(str, shape))}): give the workload's `dims`")
    coords, left = [], rank
    for size in shape:
        coords.append(left % size)
        left //= size
    return "dims:" + ",".join("*" if on else str(c) for on, c in zip(involved, coords, strict=True))


def _members(key: str, ranks: int, dims: tuple[int, ...] | None, seen: set[int]) -> tuple[int, ...]:
    """A communicator's ranks: every rank for "", those a dims key matches, else the ranks that use it."""
    if key == "":
        return tuple(range(ranks))
    if key.startswith("dims:"):
        shape, want = dims or (ranks,), key[5:].split(",")
        out = []
        for r in range(ranks):
            left, ok = r, True
            for size, w in zip(shape, want, strict=True):
                ok = ok and (w == "*" or int(w) == left % size)
                left //= size
            if ok:
                out.append(r)
        return tuple(out)
    return tuple(sorted(seen))


def build(files: list[EtFile], source: str, dims: tuple[int, ...] | None = None) -> Trace:
    if dims is not None and math.prod(dims) != len(files):
        raise TraceError(f"{source}: dims {'x'.join(map(str, dims))} make {math.prod(dims)} ranks, the trace has "
                         f"{len(files)}")
    b = _Builder(files, dims)
    b.classify()
    b.collectives()
    b.point_to_point()
    return b.link(source)


class _Builder:
    """The ops of a job as they are made: ``op_of`` maps every (rank, node id) to its op."""

    def __init__(self, files: list[EtFile], dims: tuple[int, ...] | None) -> None:
        self.files, self.dims, self.ranks = files, dims, len(files)
        self.by_id = [_index(f) for f in files]
        self.op_of: dict[tuple[int, int], int] = {}
        self.ops: list[dict] = []
        self.groups: dict[str, tuple[int, ...]] = {}
        # collectives per communicator and rank, sends and receives per (src, dst, tag), in each file's order
        self.issued: dict[str, dict[int, list[tuple[RawNode, str]]]] = defaultdict(lambda: defaultdict(list))
        self.sends: dict[tuple[int, int, int], list[RawNode]] = defaultdict(list)
        self.recvs: dict[tuple[int, int, int], list[RawNode]] = defaultdict(list)

    def new_op(self, kind: str, **fields) -> int:
        self.ops.append({"kind": kind, "nodes": [], **fields})
        return len(self.ops) - 1

    def classify(self) -> None:
        for rank, f in enumerate(self.files):
            for node in f.nodes:
                if node.type == "COMP_NODE":
                    self.op_of[(rank, node.id)] = self.new_op(COMPUTE, name=node.name, ranks=(rank,),
                                                              duration_us=node.duration_micros)
                elif node.type in NOOPS:
                    self.op_of[(rank, node.id)] = self.new_op(NOOP, name=node.name, ranks=(rank,))
                elif node.type == "COMM_COLL_NODE":
                    comm = _comm_type(f, node)
                    self.issued[_group(f, node, rank, self.ranks, self.dims)][rank].append((node, comm))
                elif node.type in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
                    self._p2p_node(f, rank, node)
                else:
                    raise TraceError(f"{f.path}: node {node.id}: type: {node.type} is not a node type mrclab "
                                     "replays (COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE, or a "
                                     f"no-op: {', '.join(NOOPS)})")
        if not self.op_of and not self.issued and not self.sends:
            raise TraceError(f"{self.files[0].path}: no nodes: nothing to replay")

    def _p2p_node(self, f: EtFile, rank: int, node: RawNode) -> None:
        send = node.type == "COMM_SEND_NODE"
        peer_field = "comm_dst" if send else "comm_src"
        peer = _int_attr(f, node, peer_field)
        if peer >= self.ranks or peer == rank:
            raise TraceError(f"{f.path}: node {node.id}: {peer_field}: rank {peer} is not another rank of this "
                             f"{self.ranks}-rank trace")
        tag = _int_attr(f, node, "comm_tag", 0)
        if send:
            _int_attr(f, node, "comm_size")
            self.sends[(rank, peer, tag)].append(node)
        else:
            self.recvs[(peer, rank, tag)].append(node)

    def collectives(self) -> None:
        """The k-th collective of every member of a communicator is one op; members must agree on them."""
        files = self.files
        for key, per_rank in self.issued.items():
            members = _members(key, self.ranks, self.dims, set(per_rank))
            self.groups[key] = members
            label = repr(key) if key else "(every rank)"
            counts = {r: len(per_rank.get(r, [])) for r in members}
            most = max(counts.values())
            for r in members:
                if counts[r] != most:
                    other = next(m for m in members if counts[m] == most)
                    extra = per_rank[other][counts[r]][0]
                    raise TraceError(f"{files[r].path}: pg_name: rank {r} issues {counts[r]} collectives on "
                                     f"communicator {label}, rank {other} {most} (its node {extra.id} has no match "
                                     "here)")
            for k in range(most):
                first, comm = per_rank[members[0]][k]
                for r in members[1:]:
                    node, other_comm = per_rank[r][k]
                    if other_comm != comm:
                        raise TraceError(f"{files[r].path}: node {node.id}: comm_type: {other_comm}, but rank "
                                         f"{members[0]}'s collective {k} on communicator {label} is {comm} "
                                         f"(node {first.id})")
                size = max(_int_attr(files[r], per_rank[r][k][0], "comm_size", 0 if comm == "BARRIER" else None)
                           for r in members)
                root = _int_attr(files[members[0]], first, "root", members[0]) if comm == "BROADCAST" else 0
                if comm == "BROADCAST" and root not in members:
                    raise TraceError(f"{files[members[0]].path}: node {first.id}: root: rank {root} is not a "
                                     f"member of communicator {label}")
                index = self.new_op(COLLECTIVE, name=first.name, ranks=members, comm=comm, size=size, group=key,
                                    root=root)
                for r in members:
                    self.op_of[(r, per_rank[r][k][0].id)] = index

    def point_to_point(self) -> None:
        """A send and the receive it meets (same source, destination and tag, in order) are one op."""
        for key in sorted(set(self.sends) | set(self.recvs)):
            src, dst, tag = key
            s, r = self.sends.get(key, []), self.recvs.get(key, [])
            if len(s) != len(r):
                rank, nodes, what = (src, s, "receive") if len(s) > len(r) else (dst, r, "send")
                lone = nodes[min(len(s), len(r))]
                raise TraceError(f"{self.files[rank].path}: node {lone.id}: "
                                 f"{'comm_dst' if rank == src else 'comm_src'}: no matching {what} on rank "
                                 f"{dst if rank == src else src} (tag {tag})")
            for send, recv in zip(s, r, strict=True):
                index = self.new_op(P2P, name=send.name, ranks=(src, dst), comm="SEND_RECV",
                                    size=_int_attr(self.files[src], send, "comm_size"), group=f"{src}>{dst}")
                self.op_of[(src, send.id)] = self.op_of[(dst, recv.id)] = index

    def link(self, source: str) -> Trace:
        """The ops' dependencies, in an order where each op follows them; a cycle is an error."""
        ops = self.ops
        deps: list[set[int]] = [set() for _ in ops]
        for (rank, node_id), index in self.op_of.items():
            ops[index]["nodes"].append((rank, node_id))
            node = self.by_id[rank][node_id]
            for dep in (*node.data_deps, *node.ctrl_deps):
                other = self.op_of[(rank, dep)]
                if other != index:
                    deps[index].add(other)
        order = _topological(deps)
        if len(order) < len(ops):
            raise _cycle(set(range(len(ops))) - set(order), ops, self.op_of, self.by_id, self.files)
        renumber = {old: new for new, old in enumerate(order)}
        out = tuple(Op(kind=ops[i]["kind"], name=ops[i]["name"], ranks=tuple(ops[i]["ranks"]),
                       deps=tuple(sorted(renumber[d] for d in deps[i])), nodes=tuple(sorted(ops[i]["nodes"])),
                       duration_us=ops[i].get("duration_us", 0), comm=ops[i].get("comm", ""),
                       size=ops[i].get("size", 0), group=ops[i].get("group", ""), root=ops[i].get("root", 0))
                    for i in order)
        return Trace(source, tuple(f.path for f in self.files), out, self.groups)


def _index(f: EtFile) -> dict[int, RawNode]:
    """A file's nodes by id: ids unique, every dependency on a node of the file."""
    nodes: dict[int, RawNode] = {}
    for node in f.nodes:
        if node.id in nodes:
            raise TraceError(f"{f.path}: node {node.id}: id: used by an earlier node of this file")
        nodes[node.id] = node
    for node in f.nodes:
        for name in ("data_deps", "ctrl_deps"):
            for dep in getattr(node, name):
                if dep not in nodes:
                    raise TraceError(f"{f.path}: node {node.id}: {name}: node {dep} is not in this file")
    return nodes


def _topological(deps: list[set[int]]) -> list[int]:
    """Kahn's order (ties by index, so it is the files' order where the graph allows); cyclic ops left out."""
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in deps]
    for i, d in enumerate(deps):
        for dep in d:
            users[dep].append(i)
    ready = deque(i for i, n in enumerate(waiting) if n == 0)
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return order


def _cycle(stuck: set[int], ops: list[dict], op_of: dict, by_id: list[dict], files: list[EtFile]) -> TraceError:
    """The error of a dependency cycle: the first stuck node (by rank and id) whose dependency is stuck too."""
    for index in sorted(stuck):
        for rank, node_id in sorted(ops[index]["nodes"]):
            node = by_id[rank][node_id]
            for name in ("data_deps", "ctrl_deps"):
                for dep in getattr(node, name):
                    if op_of[(rank, dep)] in stuck and op_of[(rank, dep)] != index:
                        across = " (the cycle runs across ranks, through collectives or sends)" \
                            if len({r for r, _ in ops[index]["nodes"]}) > 1 or ops[index]["kind"] != COMPUTE else ""
                        return TraceError(f"{files[rank].path}: node {node_id}: {name}: dependency cycle through "
                                          f"node {dep}{across}")
    return TraceError(f"{files[0].path}: dependency cycle")  # not reached: a stuck op always waits on another
