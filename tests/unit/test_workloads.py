"""Streams, concurrent workloads and QPs per pair: the spec, the QP ids, and the figures read per workload."""
import json

import pytest
import yaml

from mrclab.addressing import conn_hosts, conn_id, conn_qp
from mrclab.errors import UsageError
from mrclab.execution import qp_bases, warm_pairs
from mrclab.metrics import expectations
from mrclab.metrics import workloads as wl
from mrclab.metrics.outcome import Bins, Delivery, MessageKey, Outcome
from mrclab.spec import scenario as scenario_mod

STREAM = {"pattern": "stream", "pairs": [["h0", "h2"]], "bidirectional": True, "duration": "1s",
          "connections": 2}
BASE = {"name": "t", "topology": "clos-2p-2l-2s"}


def load(tmp_path, data):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps({**BASE, **data}))))  # no YAML aliases
    return scenario_mod.load(path)


def error(tmp_path, data):
    with pytest.raises(UsageError) as info:
        load(tmp_path, data)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_stream_reads_its_pairs_and_writes_back_what_it_read(tmp_path):
    s = load(tmp_path, {"workload": STREAM})
    w = s.workload
    assert w.stream and w.flows == (("h0", "h2"), ("h2", "h0")) and w.connections == 2
    assert (w.duration_s, w.bin_s, w.message_bytes) == (1.0, 0.1, 64 << 10)
    again = load(tmp_path, yaml.safe_load(s.to_yaml()))
    assert again.workloads == s.workloads


def test_a_stream_without_pairs_pairs_its_hosts_by_a_seeded_permutation(tmp_path):
    s = load(tmp_path, {"workload": {"pattern": "stream", "hosts": "all"}, "seed": 5})
    assert sorted(a for a, _ in s.workload.pairs) == sorted(b for _, b in s.workload.pairs) == ["h0", "h1", "h2", "h3"]
    assert all(a != b for a, b in s.workload.pairs)


@pytest.mark.parametrize("data, message", [
    ({"workload": {**STREAM, "pairs": [["h0", "h0"]]}}, "workload.pairs: h0 cannot stream to itself"),
    ({"workload": {**STREAM, "pairs": [["h0", "h9"]]}}, "workload.pairs: unknown host 'h9'"),
    ({"workload": {**STREAM, "bin": "2s"}}, "workload.bin: must be at least 1ms and at most the duration"),
    ({"workload": {**STREAM, "connections": 0}}, "workload.connections:"),
    ({"workload": {**STREAM, "steps": 3}}, "workload.steps: unknown key"),
    ({"workload": {**STREAM, "expect": {"max_jitter": 1}}}, "workload.expect.max_jitter: unknown key"),
    ({"workloads": [{**STREAM, "name": "a"}, {**STREAM, "name": "a"}]},
     "workloads[1].name: 'a' names an earlier workload too"),
    ({"workloads": []}, "workloads: expected a non-empty list of workloads"),
    ({"workload": STREAM, "workloads": [STREAM]}, "workloads: give one of `workload`"),
    ({"workload": STREAM, "events": [{"at_step": 1, "action": "link_down", "target": "h0-p0l0"}]},
     "events[0].at_step: the first workload is a stream"),
])
def test_bad_workloads_get_one_line_naming_the_key(tmp_path, data, message):
    assert message in error(tmp_path, data)


def test_concurrent_workloads_use_qps_of_their_own(tmp_path):
    incast = {"name": "incast", "pattern": "incast", "hosts": ["h0", "h1", "h2"], "receiver": "h0", "steps": 2,
              "connections": 3}
    victim = {"name": "victim", "pattern": "stream", "pairs": [["h3", "h1"]], "duration": "1s"}
    s = load(tmp_path, {"workloads": [incast, victim]})
    assert qp_bases(s) == [0, 3] and s.hosts == ("h0", "h1", "h2", "h3")
    qps = {(host, conn_qp(conn)) for host, conn, _ in warm_pairs(s)}
    assert qps == {("h1", 0), ("h1", 1), ("h1", 2), ("h2", 0), ("h2", 1), ("h2", 2), ("h3", 3)}
    assert {conn_hosts(conn) for _, conn, _ in warm_pairs(s)} == {(1, 0), (2, 0), (3, 1)}


def test_timeseries_bins_verified_bytes_by_delivery_time_and_per_workload_checks_read_them(tmp_path):
    s = load(tmp_path, {"workload": {**STREAM, "connections": 1, "expect": {"min_bin_fraction": 0.5}}})
    o = Outcome(t0=100.0, t_end=101.0, binning={0: Bins(0.1, 10, 1.0)})
    there, back = conn_id(0, 2), conn_id(2, 0)
    for msg, (conn, t, verified) in enumerate([(there, 100.05, True), (there, 100.15, True), (back, 100.15, True),
                                               (back, 100.55, False), (there, 101.2, True)]):
        key = MessageKey(conn, msg)
        o.post(key, 1000, 100.0, 0)
        o.deliver(key, Delivery(t, 1000, verified), *conn_hosts(conn))
        o.complete(key, t)
    series = wl.timeseries(s, o)
    assert series["bin_s"] == 0.1 and len(series["total"]) == 10
    assert series["h0>h2"][:2] == [80000.0, 80000.0] and series["h2>h0"][1] == 80000.0
    assert series["total"][1] == 160000.0 and series["total"][5] == 0.0  # an unverified transfer counts nothing
    row = wl.rows(s, o, series)[0]
    assert row["messages"] == {"sent": 5, "completed": 4, "failed": 1}  # bytes that did not match: failed
    assert row["min_bin_fraction"] == 0.0
    (check,) = expectations.evaluate_workload(s.workload.expect, row)
    assert check["name"] == "stream.min_bin_fraction" and check["ok"] is False
    assert expectations.bound_text(check) == "≥ 50% of ideal"
