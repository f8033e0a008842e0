"""The protocol against a simulated multi-plane Clos: loss, reordering, duplication, trimming, failures, CC."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrclab.addressing import Plan
from mrclab.transport import EvState, MessageDelivered, TransportConfig
from mrclab.transport.sim import Network, cable, clos, stream

RATE = 100e6


def fabric(planes=4, spines=4, hosts=8, seed=1, **link_options):
    plan = Plan(planes=planes, leaves=hosts, spines=spines, hosts_per_leaf=1)
    links, route = clos(plan, RATE, RATE, delay=5e-6, **link_options)
    return plan, links, Network(route, seed=seed)


def connect(net, plan, src, dst, conn_id=1, evs=128, paths=True, **options):
    """As the agent does under SRv6: the connection knows each EV's path (``paths=False``: it does not, as under
    ECMP)."""
    return net.connect(src, dst, conn_id, list(range(evs)), lambda ev: plan.ev_path(ev)[0], TransportConfig(**options),
                       plan.ev_path if paths else None)


def delivered(ep):
    return {e.msg_id: bytes(e.data) for _, e in ep.events if isinstance(e, MessageDelivered)}


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def test_ten_thousand_packets_through_loss_reordering_duplication_trimming_and_corruption():
    plan, links, net = fabric(loss=0.01, reorder=0.05, reorder_delay=0.002, dup=0.01, queue=32768)
    for link in links.values():
        link.corrupt = 0.0005 if "->h1" in link.name else 0.0
    flows = [connect(net, plan, src, 1, conn_id=src, mss=1024, ev_min_active=16) for src in (0, 2)]  # 2 -> 1 trims
    sent = {}
    for a, _ in flows:
        sent[a] = {i: net.rng.randbytes(100_000) for i in range(55)}
        for i, data in sent[a].items():
            net.send(a, i, data)
    net.run(until=30.0, stop=lambda: not any(a.conn.busy for a, _ in flows))
    for a, b in flows:
        got = delivered(b)
        c, r = a.conn.counters, b.conn.counters
        assert c.data_sent >= 5_000 and c.retransmitted > 0 and c.trimmed > 0 and r.duplicates > 0
        assert all(got[m] == sent[a][m] for m in got)  # what is delivered is right ...
        assert len(got) + r.digest_failures == len(sent[a]) and not a.conn.busy
    assert sum(b.conn.counters.digest_failures for _, b in flows) > 0  # ... and corruption was caught, not delivered


@settings(derandomize=True, database=None, deadline=None, max_examples=12)
@given(loss=st.floats(0, 0.05), reorder=st.floats(0, 0.3), dup=st.floats(0, 0.05),
       sizes=st.lists(st.integers(0, 60_000), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_every_message_completes_intact_whatever_the_impairments(loss, reorder, dup, sizes, seed):
    plan, links, net = fabric(planes=2, spines=2, hosts=2, seed=seed, loss=loss, reorder=reorder,
                              reorder_delay=0.003, dup=dup)
    a, b = connect(net, plan, 0, 1, evs=16, ev_count=8, mss=2048)
    sent = {i: net.rng.randbytes(size) for i, size in enumerate(sizes)}
    for i, data in sent.items():
        net.send(a, i, data)
    net.run(until=20.0, stop=lambda: not a.conn.busy and len(delivered(b)) == len(sent))
    assert delivered(b) == sent and not a.conn.busy and not a.conn.failed


def flap_test(kind, paths=True):
    """A plane-0 spine link fails at 50 ms and heals at 100 ms under a bulk flow from h0 to h1."""
    plan, links, net = fabric()
    a, b = connect(net, plan, 0, 1, paths=paths)
    stream(net, a, 256 << 10)
    fwd, rev = cable(links, "p0l0-p0s2")
    if kind == "drop":
        hit = (fwd, rev)
        for link in hit:
            net.at(0.05, setattr, link, "loss", 1.0)
            net.at(0.10, setattr, link, "loss", 0.0)
    else:
        hit = (fwd,)  # silent: one direction only, nothing announces it
        net.at(0.05, setattr, fwd, "blackhole", True)
        net.at(0.10, setattr, fwd, "blackhole", False)
    dead = [ev for ev in range(128) if plan.ev_path(ev) == (0, 2)]
    net.run(until=0.05)
    probes_before = a.conn.counters.probes
    net.run(until=0.099)
    c = a.conn
    last = max(c.ev_last_send(ev) or 0.0 for ev in dead)
    active_planes = sorted(plan.ev_path(ev)[0] for ev in c.active_evs())
    states_down = {ev: c.ev_state(ev) for ev in dead if paths or c.ev_last_send(ev)}
    probes = c.counters.probes - probes_before
    before = b.conn.counters.bytes_delivered
    net.run(until=0.25)
    return c, dead, last, active_planes, states_down, b.conn.counters.bytes_delivered - before, probes


@pytest.mark.parametrize("kind", ["drop", "blackhole"])
@pytest.mark.parametrize("paths", [True, False])
def test_failed_path_is_retired_avoided_and_probed_back(kind, paths):
    c, dead, last, active_planes, states_down, after, _ = flap_test(kind, paths)
    assert set(states_down.values()) == {EvState.ASSUMED_BAD}
    assert c.counters.timeouts == 0
    assert last < 0.05 + 0.03  # no data put on the dead path 30 ms after the fault
    assert active_planes == [p for p in range(4) for _ in range(16)]  # replacements came from plane 0
    assert all(c.ev_state(ev) == EvState.GOOD for ev in states_down) and c.counters.ev_restored >= len(states_down)
    assert after > 0


@pytest.mark.parametrize("kind", ["drop", "blackhole"])
def test_knowing_the_paths_one_loss_retires_the_whole_path_and_one_probe_per_interval_tests_it(kind):
    c, dead, last, _, states_down, _, probes = flap_test(kind, paths=True)
    assert len(states_down) == len(dead) == 8  # every EV of the path, used since the fault or not
    assert c.counters.paths_retired == 1 and c.counters.paths_restored == 1  # the other 15 paths never suspected
    rtt = c.min_rtt
    assert last < 0.05 + 3 * rtt + c.config.reorder_window_max / 4  # within a few RTTs
    interval = c.config.probe_interval
    assert probes <= 0.049 / interval + 1  # one path probed, once per interval
    assert c.counters.lost <= 16  # what was in flight on the path when it failed


def test_not_knowing_the_paths_each_ev_must_lose_a_packet_and_is_probed_alone():
    c, dead, last, _, states_down, _, probes = flap_test("blackhole", paths=False)
    assert c.counters.paths_retired == len(states_down) >= 4
    assert probes >= 2 * c.counters.paths_retired  # every retired EV probed on its own, not one per path


@pytest.mark.parametrize("jitter, delay_filter", [(0.002, 1), (0.003, 1), (0.003, 16), (0.005, 16)])
def test_in_order_jitter_of_a_few_ms_retires_nothing_and_times_nothing_out(jitter, delay_filter):
    """Up to ``jitter`` s per link (so up to 4x that per path): noise, neither failure nor (filtered) queueing."""
    plan, links, net = fabric(jitter=jitter)
    flows = [connect(net, plan, s, (s + 1) % 4, conn_id=s, cc_delay_filter=delay_filter)[0] for s in range(4)]
    for a in flows:
        stream(net, a, 256 << 10)
    net.run(until=1.0)
    for a in flows:
        c = a.conn.counters
        assert c.timeouts == 0 and c.ev_retired == 0 and c.paths_retired == 0, c
    if delay_filter > 1:  # jitter is not read as queueing
        assert sum(a.conn.counters.bytes_sent for a in flows) * 8 >= 0.15 * 4 * 4 * RATE


def incast(senders=5, size=2 << 20, **options):
    plan, links, net = fabric()
    eps = [connect(net, plan, s, 0, conn_id=s, **options)[0] for s in range(1, senders + 1)]
    for ep in eps:
        net.send(ep, 1, net.rng.randbytes(size))
    net.run(until=10.0, stop=lambda: not any(ep.conn.busy for ep in eps))
    return net, links, eps, senders * size * 8 / net.now / (4 * RATE)


def test_incast_five_to_one_fills_the_receiver_without_timeouts_and_trims_retire_nothing():
    net, links, eps, utilisation = incast()
    assert utilisation >= 0.9
    assert sum(links[f"p{p}l0->h0"].trims for p in range(4)) > 0  # it was congested ...
    for ep in eps:  # ... and congestion is never failure
        c = ep.conn.counters  # a path suspected in the reordering of a full queue is restored at once by the late SACK
        assert c.timeouts == 0 and c.trimmed > 0 and c.paths_retired == c.retirements_undone, c


@pytest.mark.parametrize("planes", [4, 1])
def test_flows_sharing_a_bottleneck_share_it_fairly(planes):
    """With the base RTT configured network-wide, as NSCC does (a late starter measuring it into a standing queue
    would overestimate it and grab more than its share)."""
    options = {"cc_base_rtt": 4 * (8192 + 96) * 8 / RATE}
    plan, links, net = fabric(planes=planes)
    flows = [connect(net, plan, s, 0, conn_id=s, **options) for s in range(1, 5)]
    for i, (a, _) in enumerate(flows):
        stream(net, a, 256 << 10, start=0.05 * i)  # late starters must catch up
    snap = {}
    net.at(0.3, lambda: snap.setdefault(0, [b.conn.counters.bytes_received for _, b in flows]))
    net.run(until=1.0)
    rates = [b.conn.counters.bytes_received - s for (_, b), s in zip(flows, snap[0], strict=True)]
    assert jain(rates) >= 0.9
    assert sum(rates) * 8 / 0.7 >= 0.9 * planes * RATE


def test_single_path_uses_one_ev_and_stalls_while_its_path_is_down():
    plan, links, net = fabric()
    a, b = connect(net, plan, 0, 1, single_path=True)
    stream(net, a, 64 << 10)
    ev, = a.conn.active_evs()
    p, s = plan.ev_path(ev)
    fwd, rev = cable(links, f"p{p}l0-p{p}s{s}")
    for link in (fwd, rev):
        net.at(0.05, setattr, link, "blackhole", True)
        net.at(0.15, setattr, link, "blackhole", False)
    net.run(until=0.06)
    stalled_from = b.conn.counters.bytes_received
    net.run(until=0.15)
    assert b.conn.counters.bytes_received == stalled_from  # no rerouting around the dead path
    assert a.conn.counters.timeouts > 0 and a.conn.ev_state(ev) != EvState.ASSUMED_BAD
    net.run(until=0.6)
    assert b.conn.counters.bytes_received > stalled_from and not a.conn.failed
    used = {link.name for link in links.values() if link.tx_packets and link.name.startswith("h0->")}
    assert used == {f"h0->p{p}l0"}


def test_probing_of_a_path_that_stays_dead_backs_off():
    """A path dead for 2 s costs a bounded number of probes (interval doubling up to the ceiling),
    and the path is still found again within the ceiling once it heals."""
    plan, links, net = fabric()
    a, b = connect(net, plan, 0, 1)
    stream(net, a, 64 << 20)
    fwd, rev = cable(links, "p0l0-p0s2")
    for link in (fwd, rev):
        net.at(0.05, setattr, link, "loss", 1.0)
        net.at(2.05, setattr, link, "loss", 0.0)
    net.run(until=0.1)
    c, cfg = a.conn, a.conn.config
    probes_before = c.counters.probes
    net.run(until=2.05)
    probes = c.counters.probes - probes_before
    # at the fixed fast interval this would be ~390 probes; with the back-off it is ~ 1.95 s / ceiling
    assert c.counters.paths_retired == 1
    assert probes <= 1.95 / cfg.probe_interval_max + 8
    net.run(until=2.05 + cfg.probe_interval_max + 10 * cfg.probe_interval)
    assert c.counters.paths_restored == 1 and not c.bad_paths()
