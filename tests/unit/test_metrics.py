import os
import sys
from dataclasses import asdict

import pytest

from mrclab.metrics import avoid, expectations, fidelity
from mrclab.metrics.outcome import Delivery, EvChange, MessageKey, Outcome, Step
from mrclab.metrics.records import Records
from mrclab.routing import ROUTINGS
from mrclab.spec import topology as topology_mod

TOPO = topology_mod.load("clos-4p-4l-4s")  # 2 hosts per leaf: h0,h1 on leaf 0 ... h6,h7 on leaf 3


def ev_for(plane, spine):
    ev = next(e for e in range(64) if TOPO.plan.ev_path(e) == (plane, spine))
    return ev


@pytest.mark.parametrize("target,src,dst,plane,spine,hit", [
    ("p0l0-p0s2", 0, 7, 0, 2, True),    # up-link of the source leaf
    ("p0l3-p0s2", 0, 7, 0, 2, True),    # down-link to the destination leaf
    ("p0l1-p0s2", 0, 7, 0, 2, False),   # another leaf's link
    ("p0l0-p0s1", 0, 7, 0, 2, False),   # another spine
    ("p1l0-p1s2", 0, 7, 0, 2, False),   # another plane
    ("p0s2", 0, 7, 0, 2, True),
    ("p0s2", 0, 7, 1, 2, False),
    ("p0l3", 0, 7, 0, 0, True),
    ("h7-p0l3", 0, 7, 0, 1, True),
    ("h6-p0l3", 0, 7, 0, 1, False),
    ("p0l0-p0s2", 0, 1, 0, 2, True),    # same-leaf pairs climb to the spine too
])
def test_path_hits(target, src, dst, plane, spine, hit):
    assert avoid.path_hits(TOPO, target, src, dst, plane, spine) is hit


def test_avoid_is_last_affected_send_after_fault():
    hit, miss = ev_for(0, 2), ev_for(1, 2)
    last = {0: {7: {hit: 10.004, miss: 10.5}}, 2: {5: {hit: 9.0}}}
    assert avoid.avoid_seconds(TOPO, "p0l0-p0s2", 10.0, last) == pytest.approx(0.004)
    # nothing sent on the path after the fault: 0; path never used: None
    assert avoid.avoid_seconds(TOPO, "p0l0-p0s2", 11.0, last) == 0.0
    assert avoid.avoid_seconds(TOPO, "p3l2-p3s3", 10.0, last) is None


def test_revive_is_the_first_path_through_the_repair_brought_back():
    hit, miss = ev_for(0, 2), ev_for(1, 2)
    def change(t_s, host, ev, old, new):
        return EvChange(t_s, host, "h7", ev, 0, "", old, new)
    changes = [change(5.2, "h0", miss, "ASSUMED_BAD", "GOOD"),  # elsewhere
               change(4.0, "h0", hit, "ASSUMED_BAD", "GOOD"),   # before repair
               change(5.3, "h0", hit, "GOOD", "ASSUMED_BAD"),
               change(5.45, "h0", hit, "ASSUMED_BAD", "GOOD"),
               change(5.6, "h1", hit, "ASSUMED_BAD", "GOOD")]
    assert avoid.revive_seconds(TOPO, "p0l0-p0s2", 5.0, changes) == pytest.approx(0.45)
    assert avoid.revive_seconds(TOPO, "p3l2-p3s3", 5.0, changes) is None


def results(failed=0, p50=1.0, p100=1.5, goodput=0.7, avoid_s=(0.002,), mods=0, ok=True):
    return {"summary": {"messages": {"failed": failed}, "step_time_s": {"p50": p50, "p100": p100},
                        "goodput_fraction": goodput},
            "events": [{"action": "link_down", "avoid_s": a} for a in avoid_s],
            "controller": {"flow_mods_after_boot": mods},
            "fidelity": {"ok": ok}}


def test_expectations_pass_and_fail_with_bounds():
    expect = {"failed_messages": 0, "max_step_time_ratio": 2.0, "min_goodput_fraction": 0.5,
              "max_avoid_s": 0.05, "flow_mods_after_boot": 0, "fidelity_ok": True}
    assert all(c["ok"] for c in expectations.evaluate(expect, results()))
    bad = expectations.evaluate(expect, results(failed=2, p100=3.0, goodput=0.4, avoid_s=(0.2,), mods=4, ok=False))
    assert [c["ok"] for c in bad] == [False] * 6
    assert bad[1]["actual"] == 3.0
    # ECMP: the fabric hashed the paths, so no avoid_s was measured; the check cannot pass on nothing
    ecmp = results()
    del ecmp["events"][0]["avoid_s"]
    assert expectations.evaluate({"max_avoid_s": 0.05}, ecmp) == [
        {"name": "max_avoid_s", "expected": 0.05, "actual": None, "unit": "s", "ok": False}]
    assert ROUTINGS["static-srv6"].avoid_measurable and not ROUTINGS["ecmp-reconverge"].avoid_measurable


def test_a_check_that_measured_nothing_fails():
    """No fault at all, or faults that touched no path in use (avoid_s null): max_avoid_s is not measured."""
    for events in ([], [{"action": "link_down", "avoid_s": None}]):
        [check] = expectations.evaluate({"max_avoid_s": 0.05}, {**results(), "events": events})
        assert check["actual"] is None and check["ok"] is False
        assert expectations.value_text("max_avoid_s", check["actual"]) == "not measured"


def test_mrc_claims_do_not_apply_to_a_baseline_routing():
    expect = {"max_avoid_s": 0.05, "flow_mods_after_boot": 0, "failed_messages": 0}
    checks = expectations.evaluate(expect, {**results(mods=48), "routing": "ecmp-reconverge"})
    assert [(c["name"], c["ok"], c.get("note")) for c in checks] == [
        ("max_avoid_s", None, "n/a for routing ecmp-reconverge"),
        ("flow_mods_after_boot", None, "n/a for routing ecmp-reconverge"), ("failed_messages", True, None)]
    assert expectations.failed(checks) == []
    assert [c["ok"] for c in expectations.evaluate(expect, {**results(mods=48), "routing": "static-srv6"})] == [
        True, False, True]


def test_expected_values_carry_their_units():
    checks = expectations.evaluate({"max_avoid_s": 0.05, "min_goodput_fraction": 0.5, "max_step_time_ratio": 2.0,
                                    "fidelity_ok": True}, results())
    assert [expectations.bound_text(c) for c in checks] == ["≤ 50 ms", "≥ 50% of ideal", "≤ 2x", "= true"]
    assert [c["unit"] for c in checks] == ["s", "of ideal", "x", ""]
    assert expectations.value_text("max_avoid_s", 0.002) == "2 ms"


def test_fidelity_verdict():
    Reason = fidelity.Reason
    assert fidelity.verdict(40.0, "agent h0/1", 50.0, goodput_fraction=0.3).reasons == ()
    busy = fidelity.verdict(97.0, "agent h0/1", 50.0, goodput_fraction=0.3)
    assert busy.reasons == (Reason.CPU_SET_PACE,) and not busy.to_dict()["ok"]
    assert "machine CPU 97%" in busy.notes()[0] and "30% of line rate" in busy.notes()[0]
    hot = fidelity.verdict(60.0, "ovs-vswitchd/12", 99.0, goodput_fraction=0.3, saturated_thread="ovs-vswitchd/12",
                           saturated_share=0.8)
    assert hot.reasons == (Reason.CPU_SET_PACE,) and "ovs-vswitchd/12 saturated" in hot.notes()[0]
    assert "80% of 0.2 s windows" in hot.notes()[0]
    # busy on average but never saturated: it kept up, with time to spare
    assert fidelity.verdict(60.0, "ovs-vswitchd/12", 78.0, goodput_fraction=0.3, saturated_thread="ovs-vswitchd/12",
                            saturated_share=0.05).ok
    # a busy CPU next to a saturated network: the network set the pace
    assert fidelity.verdict(95.0, "ovs-vswitchd/12", 99.0, goodput_fraction=0.85, saturated_thread="ovs-vswitchd/12",
                            saturated_share=1.0).ok


def test_fidelity_tells_the_emulators_delay_from_the_networks():
    """Along a path, data waited 4 ms and SACKs 1 ms: 5 ms of the links' queueing. With a 4 ms base RTT, a
    17 ms mean leaves 8 ms to the emulator: reported, not flagged (under half of the RTT); a 19 ms mean leaves
    10 ms, more than half: the CPU set the round trip."""
    Reason = fidelity.Reason
    split = fidelity.latency_split(0.017, 0.004, 0.004, 0.001)
    assert split == {"rtt_mean_s": 0.017, "base_s": 0.004, "links_s": 0.005, "emulator_s": 0.008}
    gray = fidelity.verdict(60.0, "ovs-vswitchd/12", 70.0, goodput_fraction=0.5, latency=split).to_dict()
    assert gray["ok"] and gray["latency"] == split and "8 ms added by the emulator itself" in gray["notes"][-1]
    cpu = fidelity.verdict(60.0, "ovs-vswitchd/12", 70.0, goodput_fraction=0.5,
                           latency=fidelity.latency_split(0.019, 0.004, 0.004, 0.001))
    assert cpu.reasons == (Reason.CPU_SET_ROUND_TRIP,) and "set the round trip" in cpu.notes()[0]
    assert fidelity.latency_split(None, None, 0.0, 0.0) is None  # TCP agents sample no RTTs
    # a machine at 92% whose round trips the links explain still held the workload back (the agents waited
    # for a core), unless the network itself was busy
    explained = fidelity.latency_split(0.0046, 0.0009, 0.0032, 0.0004)
    assert explained["emulator_s"] == 0.0001
    held = fidelity.verdict(92.0, "agent h0/12", 70.0, goodput_fraction=0.5, latency=explained)
    assert held.reasons == (Reason.CPU_SET_PACE,) and "set the pace" in held.notes()[0]
    assert fidelity.verdict(92.0, "agent h0/12", 70.0, goodput_fraction=0.8, latency=explained).ok
    delayed = fidelity.latency_split(0.027, 0.004, 0.004, 0.001)  # 18 of 27 ms the emulator's
    assert fidelity.verdict(92.0, "ovs-vswitchd/12", 70.0, goodput_fraction=0.5, latency=delayed).reasons == (
        Reason.CPU_SET_PACE, Reason.CPU_SET_ROUND_TRIP)


def test_saturation_counts_the_windows_a_thread_was_saturated():
    """Readings one window apart of threads whose CPU time grows with the clock: one at a full core is saturated
    in every window, one at half a core in none; a thread born mid-run starts counting at its first reading."""
    saturation = fidelity.Saturation()
    for i in range(6):
        t = i * fidelity.WINDOW_S
        ticks = {"test/1": int(fidelity.TICKS * t), "test/2": int(fidelity.TICKS * t / 2)}
        saturation.observe(t, ticks if i < 3 else {**ticks, "test/3": int(fidelity.TICKS * t)})
    assert saturation.windows == 5 and saturation.saturated == {"test/1": 5, "test/3": 2}
    assert saturation.worst(default="x") == ("test/1", 1.0)
    assert fidelity.Saturation().worst(default="test/2") == ("test/2", 0.0)


def test_thread_ticks_reads_every_thread_of_a_process():
    import threading

    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        found = fidelity._thread_ticks({os.getpid(): "me"})
    finally:
        stop.set()
        worker.join()
    assert f"me/{os.getpid()}" in found and f"me/{worker.native_id}" in found
    assert all(isinstance(v, int) and v >= 0 for v in found.values())


def test_fidelity_flags_packets_the_emulator_dropped():
    v = fidelity.verdict(30.0, "agent h0/1", 20.0, emulator_drops=12)
    assert v.reasons == (fidelity.Reason.EMULATOR_DROPS,) and v.to_dict()["emulator_drops"] == 12
    assert "dropped 12 packets" in v.notes()[0]


def test_a_message_still_out_when_the_run_stops_counts_as_failed():
    from mrclab.metrics import results as results_mod
    rows = []
    o = Outcome(t0=0.0, t_end=1.0, steps=Records(Step, [Step(0, 0.0, 0.5, 0.25)]), rows=rows.append)
    for c in (1, 2, 3):
        o.post(MessageKey(c, 0), 100, 0.0)
    o.deliver(MessageKey(1, 0), Delivery(0.5, 100, True), 0, 1)
    o.deliver(MessageKey(3, 0), Delivery(0.6, 100, True), 0, 3)  # delivered but never acknowledged: still out
    o.complete(MessageKey(1, 0), 0.7)
    o.fail(MessageKey(2, 0), "retries_exhausted")
    assert [o.status(MessageKey(c, 0)) for c in (1, 2, 3)] == ["completed", "failed", "unfinished"]
    assert list(o.posted) == [MessageKey(3, 0)]  # what finished is forgotten, its row written
    s = results_mod.summary(o, {})
    assert s["messages"] == {"sent": 3, "completed": 1, "failed": 2}
    # a step ends when its last message is delivered and acknowledged: (1, 0)'s acknowledgement at 0.7
    assert o.ends == {MessageKey(1, 0): 0.7}
    assert s["bytes"] == {"sent": 300, "delivered": 200, "verified": 200}
    o.close()
    assert [r[-1] for r in rows] == ["completed", "failed", "unfinished"] and rows[0][5] == 0.5


def test_loaded_rtt_percentiles_come_from_every_agents_samples():
    """Two agents' RTT histograms add up: 90 samples at 2 ms on one, 10 at 40 ms on the other, so the
    run's median is 2 ms and its p99 40 ms, each within a bucket's half width (2.2%)."""
    from mrclab.metrics import results as results_mod
    from mrclab.transport.rtt import RttEstimator
    agents = {}
    for host, (rtt, n) in {"h0": (0.002, 90), "h1": (0.040, 10)}.items():
        est = RttEstimator()
        for _ in range(n):
            est.update(rtt)
        agents[host] = {"base_rtt_s": est.min_rtt, "rtt_hist": {str(b): c for b, c in est.hist.items()}}
    o = Outcome(t0=0.0, t_end=1.0, steps=Records(Step, [Step(0, 0.0, 0.5, 0.25)]))
    s = results_mod.summary(o, agents)
    assert s["rtt_p50_s"] == pytest.approx(0.002, rel=0.022) and s["rtt_p99_s"] == pytest.approx(0.040, rel=0.022)
    assert results_mod.summary(o, {})["rtt_p50_s"] is None  # no MRC samples (TCP agents): not known


def test_fidelity_names_busy_processes_outside_the_lab():
    """Advice names what else ran, instead of asking for fewer hosts; an ok verdict does not contradict itself."""
    outside = [{"pid": 4242, "name": "make", "cpu_pct": 80.0}]
    busy = fidelity.verdict(97.0, "agent h0/1", 50.0, goodput_fraction=0.3, outside=outside).to_dict()
    assert not busy["ok"] and "stop what else runs on this machine (make (pid 4242) 80%)" in busy["notes"][0]
    assert "fewer hosts" not in busy["notes"][0] and busy["outside_processes"] == outside
    ok = fidelity.verdict(40.0, "ovs-vswitchd/12", 50.0, goodput_fraction=0.28).to_dict()
    assert ok["ok"] and "no sign that the CPU limited this run" in ok["notes"][0]
    assert "not the CPU, set the pace" not in " ".join(ok["notes"])


def test_outside_processes_leave_out_the_lab_and_its_children():
    me = os.getpid()
    before = {100: (0, "ovs-vswitchd", 1), 200: (0, "stress", 1), 300: (0, "bash", me), 301: (0, "agent", 300)}
    ticks = fidelity.TICKS  # one second of a core
    after = {pid: (ticks, name, parent) for pid, (_, name, parent) in before.items()}
    after[me] = (ticks, "python", 1)
    after[2], after[7] = (0, "kthreadd", 0), (ticks, "ksoftirqd/0", 2)  # forwards the lab's packets: not outside
    found = fidelity.outside_processes(before, after, lab={100}, elapsed_s=1.0)
    assert found == [{"pid": 200, "name": "stress", "cpu_pct": 100.0}]


def test_outside_load_another_run_and_unreachable_link_rates_each_make_a_run_untrustworthy():
    hog = [{"pid": 99, "name": "python3", "cpu_pct": 98.0}]
    v = fidelity.verdict(70.0, "agent h0/1", 50.0, goodput_fraction=0.8, outside=hog).to_dict()
    assert not v["ok"] and v["notes"][0].startswith("processes outside the lab used 98% of a core")
    assert "python3 (pid 99) 98%" in v["notes"][0]
    small = [{"pid": 99, "name": "sshd", "cpu_pct": 12.0}]
    assert fidelity.verdict(40.0, "agent h0/1", 50.0, goodput_fraction=0.8, outside=small).ok
    other = fidelity.verdict(40.0, "agent h0/1", 50.0, goodput_fraction=0.8, concurrent=["run abc (q, pid 7)"])
    assert not other.ok and "another mrclab run was live" in other.notes()[0] and "run abc" in other.notes()[0]
    fast = fidelity.verdict(99.0, "agent h0/1", 99.0, goodput_fraction=0.01, link_load=(95e6, 10e9)).to_dict()
    assert not fast["ok"] and fast["notes"][0].startswith("this machine could not emulate 10Gbit links")
    assert "95Mbit on average" in fast["notes"][0] and len(fast["notes"]) == 1  # not also blamed on others


def test_a_busy_machine_with_an_ok_verdict_says_why_it_is_ok():
    v = fidelity.verdict(100.0, "agent h0/1", 60.0, goodput_fraction=0.85)
    assert v.ok and "100% busy, but the workload reached 85% of line rate" in v.notes()[0]


@pytest.mark.parametrize("target,src,dst,plane,spine,hop", [
    ("p0l0-p0s2", 0, 7, 0, 2, ("p0l0", "p0s2")),    # the source leaf's up-link: met going up
    ("p0l3-p0s2", 0, 7, 0, 2, ("p0s2", "p0l3")),    # the destination leaf's: met coming down
    ("p0l0-p0s2", 0, 1, 0, 2, ("p0l0", "p0s2")),    # same leaf: going up first
    ("p0s2", 0, 7, 0, 2, ("p0l0", "p0s2")),         # a dead spine: at the link into it
    ("p0l3", 0, 7, 0, 1, ("p0s1", "p0l3")),         # a dead destination leaf
    ("h0-p0l0", 0, 7, 0, 1, ("h0", "p0l0")),
    ("h7-p0l3", 0, 7, 0, 1, ("p0l3", "h7")),
    ("p0l1-p0s2", 0, 7, 0, 2, None),
])
def test_dead_hop_is_where_a_packet_meets_the_fault(target, src, dst, plane, spine, hop):
    assert avoid.dead_hop(TOPO, target, src, dst, plane, spine) == hop


def test_sends_into_a_downed_link_are_counted_on_it():
    """Between the cut and the repair h0 put 5 packets on a path through it and 9 elsewhere; h6 -> h0 met
    it coming down. The link's down_drops take the senders' count where OVS counted fewer."""
    from mrclab.metrics import results
    hit, miss = ev_for(0, 2), ev_for(1, 2)
    before = {0: {7: {hit: 10, miss: 10}}, 6: {0: {hit: 4}}}
    after = {0: {7: {hit: 15, miss: 19}}, 6: {0: {hit: 6}}}
    into = avoid.sent_into(TOPO, "p0l0-p0s2", before, after)
    assert into == {("p0l0", "p0s2"): 5, ("p0s2", "p0l0"): 2}
    links = [{"link": "p0l0-p0s2", "from": "p0l0", "to": "p0s2", "drops": 3, "down_drops": 1},
             {"link": "p0l0-p0s2", "from": "p0s2", "to": "p0l0", "drops": 0, "down_drops": 4}]
    up, down = results.with_sends_into_faults(links, into)
    assert (up["down_drops"], up["drops"]) == (5, 7) and (down["down_drops"], down["drops"]) == (4, 0)


def test_rtt_histogram_quantiles_and_mean_are_within_a_bucket_of_the_samples():
    from mrclab.metrics.rtt import rtt_bucket, rtt_mean, rtt_quantile
    samples = [0.001 * (1 + i / 100) for i in range(100)] + [0.05]  # 1-2 ms, and one 50 ms straggler
    hist: dict[int, int] = {}
    for sample in samples:
        hist[rtt_bucket(sample)] = hist.get(rtt_bucket(sample), 0) + 1
    assert rtt_quantile(hist, 0.0) == pytest.approx(0.001, rel=0.023)
    assert rtt_quantile(hist, 0.5) == pytest.approx(0.0015, rel=0.023)
    assert rtt_quantile(hist, 1.0) == pytest.approx(0.05, rel=0.023)
    assert rtt_mean(hist) == pytest.approx(sum(samples) / len(samples), rel=0.023)
    assert rtt_quantile({}, 0.5) is None and rtt_mean({}) is None


def test_nic_changes_are_recorded_with_their_host_and_time():
    """An agent's `nic` event becomes a `nic_changes` row, its time on the run's clock."""
    from collections import deque
    from types import SimpleNamespace

    from mrclab.agent.messages import NicChanged
    from mrclab.execution import Execution
    from mrclab.spec import scenario as scenario_mod

    execution = Execution(scenario_mod.load("smoke"), fabric=None, agents=SimpleNamespace(events=deque([
        ("h3", NicChanged(1, "down", 12.25)), ("h0", NicChanged(1, "down", 12.5, of=3)),
        ("h3", NicChanged(1, "up", 12.75))])))
    execution.outcome.t0 = 10.0
    execution._drain_events()
    rows = [asdict(c) for c in execution.outcome.nic_changes]
    assert rows == [{"t_s": 2.25, "host": "h3", "plane": 1, "state": "down", "seen_by": "h3"},
                    {"t_s": 2.5, "host": "h3", "plane": 1, "state": "down", "seen_by": "h0"},
                    {"t_s": 2.75, "host": "h3", "plane": 1, "state": "up", "seen_by": "h3"}]


def test_ecn_totals_and_connection_rows_come_from_links_and_agents():
    from mrclab.metrics import results as results_mod

    links = [{"ecn_marked": 5}, {"ecn_marked": 2}, {}]
    stats = {"h2": {"counters": {"ce_received": 6, "ecn_skips": 4},
                    "connections": [{"conn": 7, "peer": 0, "ce_received": 6, "ecn_skips": 0}]},
             "h0": {"counters": {"ce_received": 0, "ecn_skips": 4},
                    "connections": [{"conn": 7, "peer": 2, "ce_received": 0, "ecn_skips": 4},
                                    {"conn": 3, "peer": 2, "ce_received": 0, "ecn_skips": 0}]}}
    assert results_mod.ecn(links, stats) == {"marked": 7, "ce_received": 6, "ev_skips": 8}
    rows = results_mod.connections(stats, ["h0", "h1", "h2"])
    assert [(r["host"], r["peer"], r["conn"]) for r in rows] == [("h0", "h2", 3), ("h0", "h2", 7), ("h2", "h0", 7)]
    assert rows[1]["ecn_skips"] == 4


def test_records_give_back_what_was_stored_at_a_fraction_of_the_objects_memory():
    import tracemalloc
    hosts = [sys.intern(f"h{i}") for i in range(8)]  # as the runner keeps them
    tracemalloc.start()
    changes = [EvChange(i / 1000, hosts[i % 8], hosts[(i + 3) % 8], 40000 + i % 128, i % 4, "p0s1", "GOOD", "SKIP")
               for i in range(5000)]
    as_objects, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    tracemalloc.clear_traces()
    held = Records(EvChange, changes)
    compact, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert list(held) == changes and held[-1] == changes[-1] and len(held) == 5000
    assert held.column("host")[:3] == ["h0", "h1", "h2"] and held.column("t_s")[1] == 0.001
    assert compact < as_objects / 2.5, (compact, as_objects)  # about 45 bytes a record, against about 130
    with pytest.raises(TypeError, match="cannot hold"):
        Records(fidelity.Verdict)


def test_a_sampling_round_sums_every_reply_into_one_row():
    from mrclab.agents import Agents
    agents = Agents(sampled=("data_sent", "trimmed"))
    first, second = agents.sample(), agents.sample()
    assert (first, second) == (0, 1) and agents.sample_row(2) is None
    agents._add_sample(first, {"counters": {"data_sent": 5, "trimmed": 1}, "ev_states": {"GOOD": 3, "SKIP": 1}})
    agents._add_sample(first, {"counters": {"data_sent": 7, "other": 9}, "ev_states": {"GOOD": 2}})
    agents._add_sample(second, {"counters": {"data_sent": 1}})  # a TCP agent: no EVs
    n, counters, states = agents.sample_row(first)
    assert n == 2 and counters == {"data_sent": 12, "trimmed": 1} and states["GOOD"] == 5 and states["SKIP"] == 1
    assert agents.sample_row(second) == (1, {"data_sent": 1, "trimmed": 0}, {})


def test_step_time_leaves_the_warm_up_step_out_and_says_so():
    """Step 0 opens the connections and grows the windows from their first value: quickstart's headline
    max_step_time_ratio (1.68) was step 0's, before any fault. It is shown apart (warmup_s), unless a fault
    fired during it or it is the only step."""
    from mrclab.metrics.outcome import Fired
    from mrclab.metrics.results import step_times

    steps = Records(Step, [Step(0, 0.0, 0.17, 0.08), *(Step(i, 0.17 + 0.1 * (i - 1), 0.1, 0.08) for i in range(1, 9)),
                           Step(9, 0.97, 0.13, 0.08)])
    times = step_times(steps, [])
    assert (times["from_step"], times["warmup_s"], times["p50"], times["p100"]) == (1, 0.17, 0.1, 0.13)
    expect = expectations.evaluate({"max_step_time_ratio": 1.5}, {"summary": {"step_time_s": times},
                                                                  "routing": "static-srv6"})
    assert expect[0]["actual"] == 1.3 and expect[0]["ok"]
    in_warmup = step_times(steps, [Fired(0.05, "link_down", "p0l1-p0s2", 0)])
    assert (in_warmup["from_step"], in_warmup["p100"]) == (0, 0.17)
    later = step_times(steps, [Fired(0.5, "link_down", "p0l1-p0s2", 0)])
    assert later["from_step"] == 1
    only = step_times(Records(Step, [Step(0, 0.0, 0.17, 0.08)]), [])
    assert (only["from_step"], only["p100"]) == (0, 0.17)
