"""Chakra traces: written by `trace make` and read back, a byte-level fixture made by hand from the public schema,
every way a trace cannot be replayed (exit 2, one line naming the file, the node and the field), the flows a
collective becomes, and a replay on the simulator."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mrclab.spec import scenario as scenario_mod
from mrclab.trace import TraceError, etfile, graph, make
from mrclab.trace import et_def_pb2 as pb
from mrclab.workload.collectives import phases
from tests.conftest import REPO


def mrclab(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=cwd)


# -- written and read back -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", make.KINDS)
def test_a_made_trace_reads_back_as_the_job_it_describes(tmp_path, kind):
    d = make.Description(kind, 8, layers=3, size=4096, compute_us=700, group=4)
    paths = make.write(d, tmp_path)
    assert [p.name for p in paths] == [f"{kind}.{r}.et" for r in range(8)]
    trace = graph.load(str(tmp_path))
    assert trace.ranks == 8
    ops = trace.ops
    assert all(dep < i for i, op in enumerate(ops) for dep in op.deps)  # every op after its dependencies
    compute = [op for op in ops if op.kind == graph.COMPUTE]
    assert len(compute) == 8 * len(compute) // 8 and {op.duration_us for op in compute} >= {700}
    comms = {op.comm for op in ops if op.kind == graph.COLLECTIVE}
    expected = {"dp": {"ALL_REDUCE"}, "tp": {"ALL_GATHER", "REDUCE_SCATTER", "ALL_REDUCE"},
                "moe": {"ALL_TO_ALL", "ALL_REDUCE"}, "mixed": {"ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL",
                                                              "ALL_REDUCE"}}[kind]
    assert comms == expected
    if kind != "dp":  # tensor-parallel groups are consecutive ranks, expert-parallel ones strided across racks
        sizes = {len(m) for k, m in trace.groups.items() if k != "world"}
        assert sizes == {4} or sizes == {2, 4}
    if kind in ("tp", "mixed"):
        assert trace.groups["tp1"] == (4, 5, 6, 7)
    if kind in ("moe", "mixed"):
        assert trace.groups["ep0"] == (0, 2, 4, 6)
    first = next(op for op in ops if op.kind == graph.COLLECTIVE)
    assert first.size == 4096 and first.nodes == tuple(sorted(first.nodes))


def test_unknown_fields_are_kept_and_ignored(tmp_path):
    node = pb.Node(id=0, name="c", type=pb.COMP_NODE, duration_micros=5)
    payload = node.SerializeToString() + bytes([0xF8, 0x06, 0x2A])  # field 111, varint 42: a newer schema's
    meta = pb.GlobalMetadata(version="9.9").SerializeToString() + bytes([0x1A, 0x01, 0x41])  # field 3, "A"
    data = bytes([len(meta)]) + meta + bytes([len(payload)]) + payload
    for r in range(2):
        (tmp_path / f"t.{r}.et").write_bytes(data)
    trace = graph.load(str(tmp_path))
    assert [(op.kind, op.duration_us) for op in trace.ops] == [("compute", 5), ("compute", 5)]
    parsed = pb.Node()
    parsed.ParseFromString(payload)
    assert parsed.SerializeToString() == payload  # the unknown field survives a round trip


# -- a fixture made byte by byte from the public schema (not by mrclab's writer) -------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, wire: int, body: bytes) -> bytes:
    return _varint(number << 3 | wire) + body


def _len(number: int, body: bytes) -> bytes:
    return _field(number, 2, _varint(len(body)) + body)


def _attr_int(name: str, value: int) -> bytes:  # AttributeProto{name = 1; int64_val = 9}
    return _len(1, name.encode()) + _field(9, 0, _varint(value))


def _attr_str(name: str, value: str) -> bytes:  # AttributeProto{name = 1; string_val = 29}
    return _len(1, name.encode()) + _len(29, value.encode())


def _node(node_id: int, name: str, kind: int, *, data_deps=(), duration=0, attrs=()) -> bytes:
    """Node{id = 1; name = 2; type = 3; data_deps = 5 (packed); duration_micros = 7; attr = 10}"""
    body = _field(1, 0, _varint(node_id)) + _len(2, name.encode()) + _field(3, 0, _varint(kind))
    if data_deps:
        body += _len(5, b"".join(_varint(d) for d in data_deps))
    if duration:
        body += _field(7, 0, _varint(duration))
    for a in attrs:
        body += _len(10, a)
    return body


def _file(*messages: bytes) -> bytes:
    return b"".join(_varint(len(m)) + m for m in messages)


def _fixture(folder: Path, ranks: int = 2, comm_type: int = 0) -> None:
    """Per rank: a compute node of 250 us, then an all-reduce (comm_type) of 1 MiB on process group "7"
    depending on it, then a send to (rank 0) or receive from (rank 1) the other rank of 4 KiB."""
    meta = _len(1, b"0.0.4") + _len(2, _attr_str("schema", "1.0.2-chakra.0.0.4"))  # GlobalMetadata{version; attr}
    for r in range(ranks):
        peer = (r + 1) % ranks if r % 2 == 0 else r - 1
        p2p = _node(3, "send" if r % 2 == 0 else "recv", 5 if r % 2 == 0 else 6, data_deps=(2,),
                    attrs=(_attr_int("comm_dst" if r % 2 == 0 else "comm_src", peer), _attr_int("comm_size", 4096),
                           _attr_int("comm_tag", 9)))
        (folder / f"job.{r}.et").write_bytes(_file(
            meta, _node(1, "fwd", 4, duration=250),
            _node(2, "grad", 7, data_deps=(1,), attrs=(_attr_int("comm_type", comm_type),
                                                       _attr_int("comm_size", 1 << 20), _attr_str("pg_name", "7"))),
            p2p))


def test_a_hand_made_byte_level_fixture_reads_as_the_schema_says(tmp_path):
    _fixture(tmp_path)
    f = etfile.read(tmp_path / "job.0.et")
    assert f.version == "0.0.4" and f.metadata == {"schema": "1.0.2-chakra.0.0.4"}
    assert [(n.id, n.type, n.data_deps) for n in f.nodes] == [(1, "COMP_NODE", ()), (2, "COMM_COLL_NODE", (1,)),
                                                              (3, "COMM_SEND_NODE", (2,))]
    assert f.nodes[1].attrs == {"comm_type": 0, "comm_size": 1 << 20, "pg_name": "7"}
    trace = graph.load(str(tmp_path))
    kinds = [(op.kind, op.comm, op.ranks) for op in trace.ops]
    assert kinds == [("compute", "", (0,)), ("compute", "", (1,)), ("collective", "ALL_REDUCE", (0, 1)),
                     ("p2p", "SEND_RECV", (0, 1))]
    assert trace.ops[2].deps == (0, 1) and trace.ops[3].deps == (2,) and trace.ops[3].size == 4096
    assert trace.groups == {"7": (0, 1)}


def test_collectives_become_nccl_flows():
    hosts = ("h0", "h1", "h2", "h3")
    ring = phases("ALL_REDUCE", hosts, 4000)
    assert len(ring) == 2 and all(len(p) == 4 and {t.size for t in p} == {3000} for p in ring)  # RS, then AG
    assert [(t.src, t.dst) for t in ring[0]] == [("h0", "h1"), ("h1", "h2"), ("h2", "h3"), ("h3", "h0")]
    direct = phases("ALL_REDUCE", hosts, 4000, "direct")
    assert len(direct) == 2 and all(len(p) == 12 and {t.size for t in p} == {1000} for p in direct)
    assert len(phases("ALL_GATHER", hosts, 4000)) == 1
    assert len(phases("ALL_TO_ALL", hosts, 4000, "ring")[0]) == 12  # point to point, whatever the algorithm
    chain = phases("BROADCAST", hosts, 500, "ring", root=2)[0]
    assert [(t.src, t.dst) for t in chain] == [("h2", "h3"), ("h3", "h0"), ("h0", "h1")]
    assert phases("ALL_REDUCE", ("h0",), 4000) == [] and phases("ALL_GATHER", hosts, 0) == []


# -- every way a trace cannot be replayed: exit 2, one line naming the file, the node and the field -------------

def _rewrite(path: Path, change) -> None:
    """Read an ET file, let ``change`` edit its list of nodes, write it back."""
    f = etfile.read(path)
    nodes = []
    for raw in f.nodes:
        node = pb.Node(id=raw.id, name=raw.name, type=pb.NodeType.Value(raw.type), data_deps=raw.data_deps,
                       ctrl_deps=raw.ctrl_deps, duration_micros=raw.duration_micros,
                       attr=[etfile.attribute(k, v) for k, v in raw.attrs.items()])
        nodes.append(node)
    change(nodes)
    path.write_bytes(etfile.encode(f.version, f.metadata, nodes))


def _cycle(nodes):
    nodes[0].ctrl_deps.append(nodes[2].id)


def _unknown_comm(nodes):
    for a in nodes[1].attr:
        if a.name == "comm_type":
            a.int64_val = 4  # SCATTER: in the schema, not replayed


def _missing_dep(nodes):
    nodes[2].data_deps.append(77)


def _cross_rank(nodes):  # rank 1 waits for its send... a receive that needs what comes after the all-reduce
    nodes[1].data_deps.append(nodes[2].id)


BAD = {
    "cycle": ("job.0.et", _cycle, "job.0.et: node 1: ctrl_deps: dependency cycle through node 3"),
    "unknown comm type": ("job.1.et", _unknown_comm, "job.1.et: node 2: comm_type: 4 (SCATTER) is not replayed"),
    "missing dependency": ("job.0.et", _missing_dep, "job.0.et: node 3: data_deps: node 77 is not in this file"),
    "cycle across ranks": ("job.1.et", _cross_rank, "job.1.et: node 2: data_deps: dependency cycle through node 3"),
}


def _scenario(folder: Path, trace: Path, hosts_per_leaf: int = 2) -> Path:
    path = folder / "s.yaml"
    path.write_text(json.dumps({"topology": {"name": "t", "planes": 1, "leaves": 2, "spines": 1,
                                             "hosts_per_leaf": hosts_per_leaf},
                                "engine": "sim", "workload": {"pattern": "trace", "path": str(trace)}}))
    return path


def _one_line(result, fragment):
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_trace_is_refused_with_one_line_naming_file_node_and_field(tmp_path, case):
    name, change, fragment = BAD[case]
    trace = tmp_path / "trace"
    trace.mkdir()
    _fixture(trace)
    _rewrite(trace / name, change)
    _one_line(mrclab("run", str(_scenario(tmp_path, trace)), "--dry-run"), fragment)


def test_a_truncated_file_is_refused_naming_the_last_node_read(tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    _fixture(trace)
    data = (trace / "job.1.et").read_bytes()
    (trace / "job.1.et").write_bytes(data[:-5])
    _one_line(mrclab("run", str(_scenario(tmp_path, trace)), "--dry-run"),
              "job.1.et: byte ")
    with pytest.raises(TraceError, match=r"truncated file: \d+ bytes announced, \d+ left \(after node 2\)"):
        graph.load(str(trace))


def test_more_ranks_than_hosts_is_refused(tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    make.write(make.Description("dp", 6, layers=1), trace)
    _one_line(mrclab("run", str(_scenario(tmp_path, trace, hosts_per_leaf=2)), "--dry-run"),
              "the trace has 6 ranks, more than the 4 hosts of t")


def test_trace_errors_of_the_graph(tmp_path):
    """The checks a converter's output can fail, on the graph directly."""
    _fixture(tmp_path)
    _rewrite(tmp_path / "job.1.et", lambda nodes: nodes.pop(2))  # rank 1 never receives
    with pytest.raises(TraceError, match=r"job.0.et: node 3: comm_dst: no matching receive on rank 1 \(tag 9\)"):
        graph.load(str(tmp_path))
    _fixture(tmp_path)
    _rewrite(tmp_path / "job.1.et", lambda nodes: nodes.append(pb.Node(
        id=4, name="extra", type=pb.COMM_COLL_NODE, attr=[etfile.attribute("comm_type", 0),
                                                          etfile.attribute("comm_size", 8),
                                                          etfile.attribute("pg_name", "7")])))
    with pytest.raises(TraceError, match=r"job.0.et: pg_name: rank 0 issues 1 collectives on communicator '7', "
                                         r"rank 1 2 \(its node 4 has no match here\)"):
        graph.load(str(tmp_path))
    (tmp_path / "job.5.et").write_bytes((tmp_path / "job.0.et").read_bytes())
    with pytest.raises(TraceError, match="no file for rank 2"):
        graph.load(str(tmp_path))


def test_trace_keys_are_checked_at_the_edge(tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    make.write(make.Description("moe", 4, layers=1, group=2), trace)
    base = {"topology": {"name": "t", "planes": 1, "leaves": 2, "spines": 1, "hosts_per_leaf": 2}, "engine": "sim"}
    for workload, fragment in [({"ranks": {0: "h0", 1: "h0"}}, "h0 already runs another rank"),
                               ({"ranks": {0: "h0"}}, "rank 1 has no host"),
                               ({"compute": "twice"}, "expected as-traced, skip, or scale X"),
                               ({"algorithm": {"all_reduce": "tree"}}, "'tree' is not one of: ring, direct"),
                               ({"size_scale": 0}, "size_scale"),
                               ({"hosts": "all"}, "workload.hosts: unknown key")]:
        with pytest.raises(Exception, match=fragment):
            scenario_mod.from_mapping({**base, "workload": {"pattern": "trace", "path": str(trace), **workload}},
                                      "s.yaml")
    s = scenario_mod.from_mapping({**base, "workload": {"pattern": "trace", "path": str(trace), "ranks": "spread",
                                                        "compute": "scale 2", "algorithm": {"all_reduce": "direct"},
                                                        "iterations": 2}}, "s.yaml")
    w = s.workload
    assert w.trace.hosts == ("h0", "h2", "h1", "h3") and w.steps == 2 and w.trace.compute_factor == 2.0
    assert w.trace.algorithm("ALL_REDUCE") == "direct" and w.trace.algorithm("ALL_GATHER") == "ring"
    again = scenario_mod.from_mapping(s.to_dict(), "resolved.yaml")  # the resolved scenario loads as it ran
    assert again.workload.trace.to_dict() == w.trace.to_dict()


# -- a replay -------------------------------------------------------------------------------------------------

def test_a_replay_on_the_simulator_reports_iterations_and_collectives(tmp_path):
    """traces/moe-4 as scenarios/trace-moe.yaml runs it, on the simulator: every iteration split, every
    collective with its share of ideal, the fault it overlapped named, every byte verified."""
    out = tmp_path / "run"
    result = mrclab("run", "trace-moe", "--set", "engine=sim", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    w = doc["workloads"][0]
    assert len(w["iterations"]) == 3 and doc["summary"]["iteration_time_s"] == w["iteration_time_s"]
    for it in w["iterations"]:
        assert it["compute_s"] > 0 and it["communication_s"] > 0
        assert it["compute_s"] + it["communication_s"] == pytest.approx(it["time_s"], abs=2e-6)
        assert it["time_s"] >= it["ideal_s"]
    names = {c["name"] for c in w["collectives"]}
    assert names == {"layer0.dispatch_alltoall", "layer0.combine_alltoall", "layer1.dispatch_alltoall",
                     "layer1.combine_alltoall", "grads.allreduce"}
    assert all(0 < c["share_of_ideal"] <= 1 for c in w["collectives"])
    cut = [c for c in w["collectives"] if c["faults"]]
    assert cut and all(c["iteration"] >= 1 for c in cut) and cut[0]["faults"] == ["switch_down p0s1"]
    assert doc["summary"]["messages"]["failed"] == 0
    assert doc["summary"]["bytes"]["verified"] == doc["summary"]["bytes"]["delivered"] > 0
    spans = w["trace"]["spans"]
    assert len(spans["op"]) == 3 * len(w["trace"]["ops"])


def test_the_replay_follows_the_dependencies_in_simulated_time(tmp_path):
    """The hand-made fixture on the simulator: each rank computes 25 ms (250 us x 100), then the all-reduce,
    then the send/recv; ranks on two leaves of one 8 Mbit plane, so every op's time is known."""
    from mrclab import runner

    trace = tmp_path / "trace"
    trace.mkdir()
    _fixture(trace)
    spec = scenario_mod.from_mapping({
        "topology": {"name": "t", "planes": 1, "leaves": 2, "spines": 1, "hosts_per_leaf": 1,
                     "links": {"host_rate": "8Mbit", "fabric_rate": "8Mbit"}},
        "engine": "sim", "workload": {"pattern": "trace", "path": str(trace), "compute": "scale 100",
                                      "size_scale": 0.125, "iterations": 2}}, "t.yaml")
    doc = runner.run_scenario(spec, tmp_path / "run")
    w = doc["workloads"][0]
    ops = w["trace"]["ops"]
    assert [(o["kind"], o["comm"]) for o in ops] == [("compute", ""), ("compute", ""), ("collective", "ALL_REDUCE"),
                                                      ("p2p", "SEND_RECV")]
    spans = w["trace"]["spans"]
    first = {op: (start, end) for it, op, start, end in zip(*(spans[k] for k in ("iteration", "op", "start_s",
                                                                                 "end_s")), strict=True) if it == 0}
    assert first[0] == (0.0, 0.025) and first[1] == (0.0, 0.025)  # both ranks compute at once
    assert first[2][0] == 0.025 and first[3][0] == first[2][1]  # the all-reduce after both, the send after it
    # the all-reduce: 128 KiB a rank, two ring phases of half of it each way at 8 Mbit: at least 2 x 65 ms
    assert first[2][1] - first[2][0] >= 2 * 65536 * 8 / 8e6
    it0, it1 = w["iterations"]
    assert it1["start_s"] >= it0["start_s"] + it0["time_s"] and it0["compute_s"] == 0.025
    assert it0["time_s"] == pytest.approx(first[3][1], abs=1e-6)
    p2p = [c for c in w["collectives"] if c["comm"] == "SEND_RECV"]
    assert len(p2p) == 2 and p2p[0]["bytes"] == 512 and p2p[0]["algorithm"] == "p2p"


def test_involved_dim_picks_the_ranks_that_share_the_other_coordinates(tmp_path):
    """4 ranks over dims [2, 2] (the first fastest): a collective over dimension 0 runs in {0, 1} and {2, 3}, one
    over dimension 1 in {0, 2} and {1, 3}; without `dims` the node's two dimensions are refused by name."""
    for r in range(4):
        nodes = [pb.Node(id=i, name=f"c{i}", type=pb.COMM_COLL_NODE,
                         attr=[etfile.attribute("comm_type", pb.ALL_REDUCE), etfile.attribute("comm_size", 64),
                               etfile.attribute("involved_dim", dims)])
                 for i, dims in enumerate(([True, False], [False, True]))]
        (tmp_path / f"d.{r}.et").write_bytes(etfile.encode("0.0.4", {}, nodes))
    trace = graph.load(str(tmp_path), dims=(2, 2))
    assert sorted(op.ranks for op in trace.ops) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    with pytest.raises(TraceError, match=r"d.0.et: node 0: involved_dim: 2 dimensions, the ranks are laid out "
                                         r"over 1 \(4\): give the workload's `dims`"):
        graph.load(str(tmp_path))
