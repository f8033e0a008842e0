"""The runner's side of a run over servers, without servers: clock readings and how far they bound a time, an
agent's report moved onto the runner's clock, which servers a fault goes to, the fidelity of a lab judged per
server, and a request to several servers when one is lost."""
from __future__ import annotations

import io

import pytest

from mrclab.agent.endpoint import MARK_BIN_S
from mrclab.cluster import clock
from mrclab.cluster import messages as msg
from mrclab.cluster.agents import on_runner_clock
from mrclab.cluster.fabric import ClusterFabric
from mrclab.cluster.placement import assign
from mrclab.cluster.servers import Channel, Cluster, ServerLost
from mrclab.metrics.fidelity import over_servers
from mrclab.spec import topology

TOPO = topology.load("clos-2p-2l-2s")


def test_the_shortest_round_trip_bounds_the_offset():
    readings = [(0.0, 10.0009, 0.002), (1.0, 11.00005, 1.0001), (2.0, 12.01, 2.02)]  # (sent, theirs, back)
    best = clock.best(readings)
    assert best == clock.Offset(10.0, 5e-05)


def test_a_time_is_off_by_its_reading_at_the_start_and_by_the_drift_at_the_end():
    start = clock.Offset(1.0, 2e-5)
    assert start.over(None) == 2e-5
    assert start.over(clock.Offset(1.0, 1e-5)) == 2e-5
    assert start.over(clock.Offset(1.0001, 1e-5)) == pytest.approx(1.1e-4)
    assert clock.Offset(0.5, 1e-3).then(clock.Offset(0.25, 2e-5)) == clock.Offset(0.75, 1.02e-3)


def test_a_responder_answers_its_peers_with_its_clock():
    responder = clock.Responder("::1", ["::1"])
    try:
        offset = clock.read("::1", responder.port, rounds=32)
    finally:
        responder.close()
    assert abs(offset.offset_s) <= offset.uncertainty_s < 0.01  # one clock: within its own uncertainty of 0


def test_a_responder_ignores_strangers():
    responder = clock.Responder("::1", ["fdcc::9"])
    try:
        with pytest.raises(OSError, match="no clock reading"):
            clock.read("::1", responder.port, rounds=2)
    finally:
        responder.close()


def test_a_report_moves_onto_the_runners_clock():
    shift = 0.25  # the server's clock is 250 ms ahead
    stats = {"last_send": {"3": {"17": 10.5}}, "marks": {"trimmed": {"10500": 2}}, "counters": {"data_sent": 9}}
    moved = on_runner_clock(stats, shift)
    assert moved["last_send"] == {"3": {"17": 10.25}}
    assert moved["marks"] == {"trimmed": {str(10500 - round(shift / MARK_BIN_S)): 2}}
    assert moved["counters"] == stats["counters"] and stats["last_send"]["3"]["17"] == 10.5  # the original is kept


class _Cluster:
    topology = TOPO
    server_of = assign(TOPO, ["a", "b"], "pods", source="test").server_of()


def test_a_fault_goes_to_every_server_holding_an_end():
    fabric = ClusterFabric(_Cluster())  # type: ignore[arg-type]
    where = _Cluster.server_of
    assert where["p0l0"] != where["p0s1"]
    assert fabric.holders("link_down", "p0l0-p0s1") == [0, 1]  # a crossing cable: both
    assert fabric.holders("loss", "p0l0-p0s0") == [where["p0l0"]]  # a local one: its server
    assert fabric.holders("link_down", "h0-p0l0") == [where["h0"]]
    assert fabric.holders("switch_down", "p0s1") == [0, 1]  # a spine's cables reach leaves on both


def verdict(ok: bool, busy: float, note: str) -> dict:
    return {"cpu_busy_pct": busy, "hottest_thread": "agent h0/1", "hottest_thread_pct": 40.0,
            "saturated_thread": None, "saturated_share": 0.0, "emulator_drops": 0, "outside_processes": [],
            "concurrent_runs": [], "ok": ok, "notes": [note]}


def test_a_lab_over_servers_is_faithful_only_if_every_server_is_and_names_the_one_that_is_not():
    good = over_servers({"local": verdict(True, 50, "calm"), "lab2": verdict(True, 60, "calm too")},
                        {"local": 0.0, "lab2": 1e-5}, 3e-4, [["local"], ["lab2"]])
    assert good["ok"] and good["cpu_busy_pct"] == 60 and good["hottest_thread"] == "lab2: agent h0/1"
    assert [s["server"] for s in good["servers"]] == ["local", "lab2"] and good["clock"]["limit_s"] == 3e-5
    bad = over_servers({"local": verdict(True, 50, "calm"), "lab2": verdict(False, 99, "the CPU set the pace")},
                       {"local": 0.0, "lab2": 1e-5}, 3e-4, [["local", "lab2"]])
    assert not bad["ok"] and bad["notes"][0] == "server lab2: the CPU set the pace"
    assert any("servers local, lab2 are one machine" in n for n in bad["notes"])
    late = over_servers({"local": verdict(True, 50, "calm"), "lab2": verdict(True, 50, "calm")},
                        {"local": 0.0, "lab2": 4e-5}, 3e-4, [["local"], ["lab2"]])
    assert not late["ok"] and late["notes"][0].startswith("server lab2: its times are on the runner's clock only")
    gone = over_servers({"local": verdict(True, 50, "calm"), "lab2": None}, {"local": 0.0, "lab2": None}, 3e-4,
                        [["local"], ["lab2"]])
    assert not gone["ok"] and "server lab2: not measured: it went away" in gone["notes"]


class _Broken(io.StringIO):
    """An SSH channel whose connection failed under a send: paramiko raises EOFError, not OSError."""

    def write(self, _text: str) -> int:
        raise EOFError


def test_a_server_lost_in_a_request_to_several_leaves_the_others_answers_read():
    cluster = Cluster(TOPO, ["local", "root@lab2"])
    answers = io.StringIO(msg.encode(msg.Applied(1.0)) + msg.encode(msg.Spent({}, 0.0, 0)))
    cluster.channels = [Channel("local", io.StringIO(), answers, io.StringIO()),
                        Channel("root@lab2", _Broken(), io.StringIO(), io.StringIO())]
    with pytest.raises(ServerLost, match=r"^server root@lab2: its SSH connection closed"):
        cluster.ask_all(dict.fromkeys([0, 1], msg.Apply("link_down", "p0l0-p0s1")), msg.Applied)
    assert cluster.live() == [0]
    assert cluster.ask_all({0: msg.Quiesce()}, msg.Spent) == {0: msg.Spent({}, 0.0, 0)}  # not the Applied
