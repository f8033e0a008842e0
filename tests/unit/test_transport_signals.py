"""What the fabric tells a connection besides loss: ECN marks, its own NICs going down, the far end's NICs
(the bitmap in its SACKs), and trims that never count as a dead path."""
from mrclab.addressing import Plan
from mrclab.transport import Connection, EvState, MessageFailed, NicStateChanged, TransportConfig, wire
from mrclab.transport.sim import Network, cable, clos, pull_nic, stream

RATE = 100e6


def fabric(planes=1, spines=2, hosts=4, hosts_per_leaf=2, seed=1, **link_options):
    plan = Plan(planes=planes, leaves=hosts // hosts_per_leaf, spines=spines, hosts_per_leaf=hosts_per_leaf)
    links, route = clos(plan, RATE, RATE, delay=5e-6, **link_options)
    return plan, links, Network(route, seed=seed)


def connect(net, plan, src, dst, evs, conn_id=None, **options):
    return net.connect(src, dst, conn_id if conn_id is not None else 100 * src + dst, list(evs),
                       lambda ev: plan.ev_path(ev)[0], TransportConfig(**options), plan.ev_path)


def test_ecn_moves_a_flow_off_the_ev_it_shares_with_a_pinned_flow():
    """Fig. 14's shape: flow A may use both spines, flow B is pinned to spine 0. With marking, A's EV on spine 0
    sits out and A moves to spine 1, so both flows run near line rate; without it, only trims push A away."""
    def run(ecn):
        marking = {"ecn_min": 8 << 10, "ecn_max": 48 << 10} if ecn else {}
        plan, links, net = fabric(**marking)
        a, ra = connect(net, plan, 0, 2, evs=[0, 1], ev_count=2)  # EV 0: spine 0, EV 1: spine 1
        b, rb = connect(net, plan, 1, 3, evs=[0], ev_count=1, ev_min_active=1)
        stream(net, a, 256 << 10)
        stream(net, b, 256 << 10)
        net.run(until=0.3)
        sent = [a.conn.ev_sent(ev) for ev in (0, 1)]
        got = [r.conn.counters.bytes_delivered for r in (ra, rb)]
        net.run(until=1.3)
        sent = [a.conn.ev_sent(ev) - before for ev, before in zip((0, 1), sent, strict=True)]
        rates = [(r.conn.counters.bytes_delivered - before) * 8 for r, before in zip((ra, rb), got, strict=True)]
        return sent[0] / sum(sent), min(rates) / RATE, a.conn.counters.ecn_skips

    marked_share, marked_rate, skips = run(ecn=True)
    share, rate, no_skips = run(ecn=False)
    assert skips > 10 and no_skips == 0
    assert marked_share < 0.6 * share and marked_share < 0.15, (marked_share, share)
    assert marked_rate > 0.9 and marked_rate > rate, (marked_rate, rate)


def test_ce_is_echoed_at_once_naming_the_marked_packets_ev():
    """A SACK names one EV: the CE-marked packet gets a SACK of its own, so the echo is about its path, not about
    whichever packet of the same wake-up came last; the sender's EV then skips."""
    config = TransportConfig(sack_every=4, sack_delay=0.0)
    a, b = (Connection(1, list(range(8)), lambda ev: ev % 2, config=config) for _ in range(2))
    a.send_message(1, bytes(8 * config.mss))
    data = a.datagrams_to_send(0.0)
    (marked_ev, marked), (_, later) = data[2], data[3]
    for _, datagram in data[:2]:
        b.receive(datagram, None, 0.001)
    b.receive(marked, None, 0.001, ce=True)
    b.receive(later, None, 0.001)
    sacks = [wire.decode(d) for _, d in b.datagrams_to_send(0.001)]
    echoed = [s for s in sacks if s.flags & wire.ECN_ECHO]
    assert len(echoed) == 1 and echoed[0].ev == marked_ev and b.counters.ce_received == 1
    for sack in sacks:
        a.receive(wire.encode_sack(**sack._asdict()), None, 0.002)
    assert a.counters.ecn_skips == 1 and a.ev_state(marked_ev) == EvState.SKIP


def test_last_hop_to_a_host_never_marks():
    plan, links, net = fabric(ecn_min=0, ecn_max=1)
    assert links["p0l1->h2"].ecn_min is None and links["p0l0->p0s0"].ecn_min == 0


def nic_lab():
    plan = Plan(planes=4, leaves=2, spines=2, hosts_per_leaf=2)
    links, route = clos(plan, RATE, RATE, delay=5e-6)
    net = Network(route, seed=3)
    a, b = net.connect(0, 2, 7, list(range(64)), lambda ev: plan.ev_path(ev)[0], TransportConfig(), plan.ev_path)
    return plan, links, net, a, b


def test_own_nic_down_stops_sending_on_its_plane_within_the_call_and_loses_nothing():
    plan, links, net, a, b = nic_lab()
    sent = {}
    stream(net, a, 256 << 10, sent=sent)
    net.run(until=0.05)
    inflight_before = a.conn.counters.data_sent
    pull_nic(net, links, plan, 0, 1, down=True)
    after = a.conn.datagrams_to_send(net.now)  # nothing more may go to plane 1 from this call on
    assert all(plan.ev_path(ev)[0] != 1 for ev, _ in after)
    nics = {k: links[f"h0->p{k}l0"] for k in range(4)}
    before = {k: (nic.tx_packets, nic.drops) for k, nic in nics.items()}
    net.run(until=0.25)
    assert nics[1].drops == before[1][1]  # nothing went into the pulled cable
    assert all(nics[k].tx_packets > before[k][0] for k in (0, 2, 3))
    assert a.conn.counters.data_sent > inflight_before
    assert a.conn.counters.paths_retired == 0  # the NIC failed, not a path: nothing condemned
    assert not [e for _, e in a.events if isinstance(e, MessageFailed)]
    assert a.conn.planes_down == (0b10, 0)


def test_far_end_nic_down_reaches_the_sender_in_the_next_sack_and_both_undo():
    plan, links, net, a, b = nic_lab()
    stream(net, a, 256 << 10)
    net.run(until=0.05)
    pull_nic(net, links, plan, 2, 3, down=True)  # the receiver's NIC on plane 3
    t_cut = net.now
    net.run(until=0.06)
    learned = [(t, e) for t, e in a.events if isinstance(e, NicStateChanged) and e.remote]
    assert learned and learned[0][1].remote == 0b1000
    assert learned[0][0] - t_cut < 0.002  # the next SACK (the base RTT here is ~2.5 ms at most)
    before = {ev: a.conn.ev_sent(ev) for ev in range(64)}
    net.run(until=0.2)
    on_plane3 = sum(a.conn.ev_sent(ev) - before[ev] for ev in range(64) if plan.ev_path(ev)[0] == 3)
    assert on_plane3 == 0
    pull_nic(net, links, plan, 2, 3, down=False)
    net.run(until=0.4)
    assert a.conn.planes_down == (0, 0) and b.conn.planes_down == (0, 0)
    assert sum(a.conn.ev_sent(ev) - before[ev] for ev in range(64) if plan.ev_path(ev)[0] == 3) > 0
    assert not a.conn.failed and a.conn.counters.paths_retired == 0


def test_answers_never_go_to_a_plane_whose_nic_is_down():
    """The receiver's own NIC on plane 1 is down: the SACKs of what arrived just before on plane 1 leave on
    another plane (a SACK sent into the dead NIC would be lost, and its data resent for nothing)."""
    plan, links, net, a, b = nic_lab()
    a.conn.send_message(1, bytes(8 * a.conn.config.mss))
    data = a.conn.datagrams_to_send(0.0)
    on_plane1 = [(ev, d) for ev, d in data if plan.ev_path(ev)[0] == 1]
    assert on_plane1
    b.conn.set_nic_down(0b10, 0.001)
    for _, d in on_plane1:
        b.conn.receive(d, None, 0.001)
    answers = b.conn.datagrams_to_send(0.001)
    assert answers and all(plan.ev_path(ev)[0] != 1 for ev, _ in answers)


def test_trims_never_exhaust_retries_but_losses_do():
    """Four single-path senders into one receiver behind a small queue: every packet is trimmed again and again.
    A trim is congestion, so even max_retransmits 1 fails nothing; a blackholed path does fail."""
    plan, links, net = fabric(hosts=6, hosts_per_leaf=6, queue=12 << 10)
    flows = [connect(net, plan, src, 5, evs=[src % 2], ev_count=1, ev_min_active=1, single_path=True, max_retransmits=1,
                     cc_init_window=1 << 20, cc=False) for src in range(4)]
    for a, _ in flows:
        stream(net, a, 128 << 10, depth=1)
    net.run(until=0.5)
    trims = [a.conn.counters.trimmed for a, _ in flows]
    assert min(trims) > 100 and not any(a.conn.failed for a, _ in flows), trims

    plan, links, net = fabric(hosts=2, hosts_per_leaf=1)
    a, _ = connect(net, plan, 0, 1, evs=[0], ev_count=1, ev_min_active=1, single_path=True, max_retransmits=1)
    for link in cable(links, "p0l0-p0s0"):
        link.blackhole = True
    stream(net, a, 64 << 10, depth=1)
    net.run(until=5.0)
    assert a.conn.failed


def test_transmissions_kept_to_tell_copies_apart_hold_no_message_bytes():
    """A long run resends now and then; the resent transmissions it keeps (up to a thousand, to learn from late
    duplicates) must not keep their messages' bytes alive, or every resend pins a whole message."""
    plan, links, net = fabric(reorder=0.05)
    for link in links.values():
        link.reorder_delay = 0.004
    a, b = connect(net, plan, 0, 2, evs=range(16), ev_count=16)
    stream(net, a, 256 << 10)
    net.run(until=1.0)
    kept = list(a.conn._tx._ambiguous.values())
    assert a.conn.counters.retransmitted > 0 and kept, "no resend: the test proves nothing"
    assert all(p.msg.length == 0 for p in kept)
