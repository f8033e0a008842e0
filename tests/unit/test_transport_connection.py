"""Connection driven by hand, packet by packet: the protocol rules one at a time."""
import math

import pytest

from mrclab.transport import (
    Connection,
    EvState,
    MessageCompleted,
    MessageDelivered,
    MessageFailed,
    TransportConfig,
    wire,
)
from mrclab.transport.departures import NIC_BURST, Departures

PLANES = 4


def plane(ev):
    return ev % PLANES


def pair(evs=range(64), **options):
    config = TransportConfig(**{"sack_every": 1, **options})
    return Connection(1, list(evs), plane, config=config), Connection(1, list(evs), plane, config=config)


def exchange(a, b, now, tamper=lambda ev, d: d, rounds=50):
    """Shuttle datagrams both ways until quiet; ``tamper`` sees a->b datagrams and may change or drop them."""
    for _ in range(rounds):
        moved = False
        for ev, d in a.datagrams_to_send(now):
            d = tamper(ev, d)
            if d is not None:
                b.receive(d, None, now)
                moved = True
        for _, d in b.datagrams_to_send(now):
            a.receive(d, None, now)
            moved = True
        if not moved:
            return
        now += 1e-4


def kinds(events):
    return [type(e) for e in events]


def test_message_arrives_intact_and_both_ends_report_it():
    a, b = pair()
    data = bytes(range(256)) * 200
    a.send_message(5, data)
    exchange(a, b, 1.0)
    delivered = [e for e in b.pop_events() if isinstance(e, MessageDelivered)]
    assert [(e.msg_id, bytes(e.data)) for e in delivered] == [(5, data)]
    assert MessageCompleted(5) in a.pop_events() and not a.busy
    assert b.counters.bytes_delivered == len(data) and a.counters.data_sent == -(-len(data) // a.config.mss)


def test_empty_message_is_delivered():
    a, b = pair()
    a.send_message(1, b"")
    exchange(a, b, 0.0)
    assert MessageDelivered(1, bytearray()) in b.pop_events() and MessageCompleted(1) in a.pop_events()


def test_each_packet_takes_the_next_ev_walking_the_planes():
    a, _ = pair(evs=range(128), ev_count=16, mss=100, cc_init_window=1 << 20)
    a.send_message(1, bytes(3200))
    sent = a.datagrams_to_send(0.0)
    evs = [ev for ev, _ in sent]
    assert len(evs) == 32 and evs[:16] == evs[16:] and len(set(evs[:16])) == 16
    assert [plane(ev) for ev in evs[:8]] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert all(wire.decode(d).ev == ev for ev, d in sent)


def test_out_of_order_duplicated_arrival_is_placed_by_offset():
    a, b = pair(mss=100, cc_init_window=1 << 20)
    data = bytes(range(250)) * 4
    a.send_message(9, data)
    sent = [d for _, d in a.datagrams_to_send(0.0)]
    for d in reversed(sent + sent[:3]):
        b.receive(d, None, 0.001)
    assert b.counters.duplicates == 3
    assert [bytes(e.data) for e in b.pop_events() if isinstance(e, MessageDelivered)] == [data]
    exchange(a, b, 0.002)
    assert MessageCompleted(9) in a.pop_events()


def test_trimmed_packet_is_nacked_and_resent_first_on_another_ev_which_only_skips_a_turn():
    a, b = pair(mss=100, cc_init_window=1 << 20)
    a.send_message(1, bytes(1000))
    sent = a.datagrams_to_send(0.0)
    trimmed_ev, first = sent[0]
    b.receive(wire.trim(first), None, 0.001)
    (nack_ev, nack), = b.datagrams_to_send(0.001)
    assert wire.decode(nack) == wire.Nack(0, 1, 0, 0, trimmed_ev, wire.NACK_TRIMMED, wire.decode(first).ts)
    a.receive(nack, None, 0.002)
    assert a.ev_state(trimmed_ev) == EvState.SKIP
    a.send_message(2, bytes(100))
    resent = a.datagrams_to_send(0.003)
    d = wire.decode(resent[0][1])
    assert d.psn == 0 and d.flags & wire.RETX and resent[0][0] != trimmed_ev
    assert trimmed_ev not in [ev for ev, _ in resent]
    assert a.counters.trimmed == 1 and b.counters.nacks == 1 and a.counters.ev_retired == 0
    for _, datagram in sent[1:]:
        b.receive(datagram, None, 0.004)
    for _, datagram in resent:
        b.receive(datagram, None, 0.004)
    assert kinds(e for e in b.pop_events() if not hasattr(e, "ev")) == [MessageDelivered, MessageDelivered]


def test_corrupted_payload_is_never_delivered():
    a, b = pair()
    a.send_message(3, b"x" * 20000)

    def corrupt(ev, d):
        if wire.decode(d).offset == 0:
            d = bytearray(d)
            d[60] ^= 0x40
        return d

    exchange(a, b, 0.0, tamper=corrupt)
    events = b.pop_events()
    assert MessageFailed(3, "digest_mismatch") in events
    assert not any(isinstance(e, MessageDelivered) for e in events) and b.counters.digest_failures == 1


def test_malformed_or_foreign_datagrams_are_counted_not_raised():
    a, b = pair()
    for junk in (b"", b"\x01\x01", b"\x07" * 60, wire.encode_probe(99, 1, 1, 1)):
        b.receive(junk, None, 0.0)
    assert b.counters.malformed == 4 and b.datagrams_to_send(0.0) == []


def test_loss_retires_the_ev_and_retransmits_elsewhere_replacing_it_from_the_same_plane():
    a, b = pair(evs=range(128), mss=100, cc_init_window=1 << 20)
    a.send_message(1, bytes(2000))
    victim = a.datagrams_to_send(0.0)[0][0]
    a2, b2 = pair(evs=range(128), mss=100, cc_init_window=1 << 20)
    a2.send_message(1, bytes(2000))
    exchange(a2, b2, 0.0, tamper=lambda ev, d: None if ev == victim else d)
    for t in (0.01, 0.02, 0.03):  # RACK deadlines pass; the lost packet goes out again
        a2.on_timer(t)
        exchange(a2, b2, t, tamper=lambda ev, d: None if ev == victim else d)
    assert a2.ev_state(victim) == EvState.ASSUMED_BAD and a2.counters.ev_retired == 1
    assert victim not in a2.active_evs()
    assert [plane(ev) for ev in a2.active_evs()] == [plane(ev) for ev in range(64)]
    assert MessageCompleted(1) in a2.pop_events() and a2.counters.timeouts == 0


def test_retired_ev_comes_back_after_consecutive_probe_replies():
    a, b = pair(probe_interval=0.001, probe_successes=3)
    a.send_message(1, bytes(10))
    ev, d = a.datagrams_to_send(0.0)[0]
    t = a.next_timer()
    a.on_timer(t)  # the only packet times out: loss without trim
    assert a.ev_state(ev) == EvState.ASSUMED_BAD and a.counters.timeouts == 1
    replies = 0
    while a.ev_state(ev) == EvState.ASSUMED_BAD:
        t = a.next_timer()
        a.on_timer(t)
        for pev, p in a.datagrams_to_send(t):
            if wire.decode(p).__class__ is wire.Probe:
                assert pev == ev
                b.receive(p, None, t)
                for _, reply in b.datagrams_to_send(t):
                    a.receive(reply, None, t)
                    replies += 1
        assert t < 1.0
    assert replies == 3 and a.ev_state(ev) == EvState.GOOD and a.counters.ev_restored == 1


def test_retirement_keeps_ev_min_active():
    a, _ = pair(evs=range(8), ev_count=8, ev_min_active=3)
    a.send_message(1, bytes(8 * a.config.mss))
    a.datagrams_to_send(0.0)
    a.on_timer(a.next_timer())  # everything lost
    usable = [ev for ev in range(8) if a.ev_state(ev) in (EvState.GOOD, EvState.UNKNOWN, EvState.SKIP)]
    assert len(usable) == 3 and a.counters.ev_retired == 5 and a.counters.loss_at_min_active == 3
    out = a.datagrams_to_send(a.next_timer())
    assert {ev for ev, d in out if wire.decode(d).__class__ is wire.Data} <= set(usable)


def test_denied_ev_is_never_used_and_is_replaced_from_its_plane():
    a, _ = pair(evs=range(128), mss=10, cc_init_window=1 << 20)
    a.deny_ev(4, 0.0)
    assert a.ev_state(4) == EvState.DENIED and 4 not in a.active_evs() and 64 in a.active_evs()  # plane 0's spare
    a.send_message(1, bytes(2000))
    assert 4 not in {ev for ev, _ in a.datagrams_to_send(0.0)}
    a.allow_ev(4, 0.1)
    assert a.ev_state(4) == EvState.UNKNOWN


def test_single_path_uses_one_ev_and_never_retires_it():
    a, b = pair(single_path=True, mss=100, cc_init_window=1 << 20)
    a.send_message(1, bytes(5000))
    first = a.datagrams_to_send(0.0)
    assert {ev for ev, _ in first} == {0} and a.active_evs() == [0]
    a.on_timer(a.next_timer())
    assert a.ev_state(0) != EvState.ASSUMED_BAD and a.counters.timeouts == 1
    assert {ev for ev, _ in a.datagrams_to_send(1.0)} == {0} and a.next_timer() is not None


def test_retries_exhausted_fails_every_message_and_the_connection():
    a, _ = pair(max_retransmits=2, rto_initial=0.01, rto_min=0.01)
    a.send_message(1, bytes(10))
    a.send_message(2, bytes(10))
    t = 0.0
    while t is not None and t < 60.0:
        a.datagrams_to_send(t)
        t = a.next_timer()
        if t is not None:
            a.on_timer(t)
    events = a.pop_events()
    assert MessageFailed(1, "retries_exhausted") in events and MessageFailed(2, "retries_exhausted") in events
    assert a.failed and a.next_timer() is None
    a.send_message(3, b"x")  # a message posted to the failed connection fails at once, as the others did
    assert a.pop_events() == [MessageFailed(3, "retries_exhausted")] and a.counters.messages_failed == 3
    assert a.datagrams_to_send(t or 60.0) == [] and a.next_timer() is None


def test_send_message_validation_and_idle_timer():
    a, _ = pair()
    assert a.next_timer() is None and a.datagrams_to_send(0.0) == []
    a.send_message(1, b"x")
    with pytest.raises(ValueError):
        a.send_message(1, b"y")
    with pytest.raises(ValueError):
        a.send_message(1 << 32, b"y")


def path_of(ev):
    return ev % PLANES, (ev // PLANES) % 4  # 16 paths; 64 EVs -> 4 EVs per path


def test_knowing_the_paths_one_loss_retires_every_ev_of_its_path_and_resends_elsewhere():
    config = TransportConfig(sack_every=1, mss=100, cc_init_window=1 << 20, ev_count=32)
    a2, b2 = (Connection(1, list(range(64)), plane, config=config, ev_path=path_of) for _ in range(2))
    a2.send_message(1, bytes(3200))
    dead = path_of(0)
    drop = lambda ev, d: None if path_of(ev) == dead else d  # noqa: E731
    exchange(a2, b2, 0.0, tamper=drop)
    for t in (0.01, 0.02, 0.03):
        a2.on_timer(t)
        exchange(a2, b2, t, tamper=drop)
    same = [ev for ev in range(64) if path_of(ev) == dead]
    assert all(a2.ev_state(ev) == EvState.ASSUMED_BAD for ev in same)  # in slots and in reserve alike
    assert a2.counters.paths_retired == 1 and a2.counters.ev_retired == len(same) == 4
    assert a2.bad_paths() == [dead] and not set(same) & set(a2.active_evs())
    assert [plane(ev) for ev in a2.active_evs()] == [plane(ev) for ev in range(32)]  # spares of the same plane
    assert MessageCompleted(1) in a2.pop_events() and a2.counters.timeouts == 0


def test_a_bad_path_gets_one_probe_per_interval_and_comes_back_whole():
    config = TransportConfig(sack_every=1, probe_interval=0.005, probe_successes=3)
    a = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    b = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    a.send_message(1, bytes(10))
    ev, _ = a.datagrams_to_send(0.0)[0]
    a.on_timer(a.next_timer())  # the only packet times out: its path is bad
    same = [e for e in range(64) if path_of(e) == path_of(ev)]
    assert {a.ev_state(e) for e in same} == {EvState.ASSUMED_BAD}
    probes, t = [], a.next_timer()
    while a.ev_state(ev) == EvState.ASSUMED_BAD and t < 1.0:
        a.on_timer(t)
        sent = [(pev, p) for pev, p in a.datagrams_to_send(t) if wire.decode(p).__class__ is wire.Probe]
        probes += [(t, pev) for pev, _ in sent]
        for _, p in sent:
            b.receive(p, None, t)
            for _, reply in b.datagrams_to_send(t):
                a.receive(reply, None, t)
        t = a.next_timer()
    assert len(probes) == 3 and all(path_of(pev) == path_of(ev) for _, pev in probes)
    assert [round(t2 - t1, 6) for (t1, _), (t2, _) in zip(probes, probes[1:], strict=False)] == [0.005, 0.005]
    assert {a.ev_state(e) for e in same} == {EvState.GOOD} and a.counters.paths_restored == 1


def _condemn_by_a_late_packet(a, b, packets):
    """Send ``packets`` packets; all but the first arrive at 1 ms, so RACK condemns the first one's path."""
    a.send_message(1, bytes(100 * packets))
    (ev0, late), *rest = a.datagrams_to_send(0.0)
    for _, d in rest:
        b.receive(d, None, 0.001)
    for _, s in b.datagrams_to_send(0.001):
        a.receive(s, None, 0.001)
    a.on_timer(a.next_timer() + 1e-6)  # RACK gives up on the first (a timer is good to a microsecond)
    assert a.ev_state(ev0) == EvState.ASSUMED_BAD and a.counters.paths_retired == 1
    t = a.next_timer()
    b.receive(late, None, t)  # ... which was only late
    for _, s in b.datagrams_to_send(t):
        a.receive(s, None, t)
    assert a.counters.spurious_losses == 1
    return ev0


@pytest.mark.parametrize("packets, revived", [(20, True), (4, False)])
def test_a_late_packet_that_condemned_its_path_restores_it_only_if_the_path_delivered_since(packets, revived):
    """With 20 packets over 16 paths, packet 16 took packet 0's path after it and arrived: the path
    works, the loss was a false alarm, and the path comes back at once. With 4 packets nothing left
    on that path after the late one, which may have slipped through just before the path died:
    the path stays retired until probes bring it back."""
    config = TransportConfig(sack_every=1, mss=100, cc_init_window=1 << 20, reorder_window=0.002,
                             reorder_window_max=0.002, hold_window=0.002)  # packet 16 leaves before any hold
    a = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    b = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    ev0 = _condemn_by_a_late_packet(a, b, packets)
    assert a.counters.retirements_undone == int(revived)
    assert (a.ev_state(ev0) == EvState.GOOD) is revived and (a.bad_paths() == []) is revived


def test_a_path_back_from_a_false_alarm_carries_data_again():
    """One slot per path (16 of 64 EVs active). Packet 0's path is condemned by a late packet and its slot
    handed to a spare of another path of plane 0; when the false alarm is undone the path takes a slot back,
    so the next message sprays over all 16 paths again. Left in reserve, it would carry nothing until another
    path's retirement, and a failure on it would go unnoticed until then."""
    config = TransportConfig(sack_every=1, mss=100, cc_init_window=1 << 20, ev_count=16, reorder_window=0.002,
                             reorder_window_max=0.002, hold_window=0.002)
    a = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    b = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    ev0 = _condemn_by_a_late_packet(a, b, 20)
    assert a.counters.retirements_undone == 1 and a.bad_paths() == []
    assert sorted(path_of(ev) for ev in a.active_evs()) == sorted(path_of(ev) for ev in range(16))
    a.send_message(2, bytes(1600))
    assert path_of(ev0) in {path_of(ev) for ev, _ in a.datagrams_to_send(1.0)}


def test_a_resend_arriving_as_a_duplicate_tells_that_the_first_copy_was_delivered():
    """The original is late, declared lost and resent. A SACK then covers its PSN but echoes some
    other packet: either copy may have arrived. An unflagged echo of the resend settles nothing (it
    may be an older SACK that was overtaken); the resend's duplicate SACK (DUP_ECHO) does: the
    original had arrived, the loss was none."""
    a, b = pair(mss=100, reorder_window=0.002, reorder_window_max=0.002, hold_window=0.002)
    a.send_message(1, bytes(300))
    (_, late), *rest = a.datagrams_to_send(1.0)
    for _, d in rest:
        b.receive(d, None, 1.001)
    for _, s in b.datagrams_to_send(1.001):
        a.receive(s, None, 1.001)
    a.on_timer(a.next_timer())
    t = a.next_timer()
    (resend,) = [wire.decode(d) for _, d in a.datagrams_to_send(t) if wire.decode(d).__class__ is wire.Data]
    assert a.counters.lost == 1 and resend.psn == wire.decode(late).psn

    def sack(ts_echo, flags=0):
        return wire.encode_sack(flags=flags, conn_id=1, cum_psn=3, sack_base=3, bitmap=0, ack_psn=0, ev=resend.ev,
                                ecn_count=0, ts_echo=ts_echo, ack_delay=0)

    a.receive(sack(ts_echo=12345), None, t + 0.001)  # all acknowledged, by a SACK about another packet
    assert a.counters.spurious_losses == 0
    a.receive(sack(ts_echo=resend.ts), None, t + 0.002)  # an older SACK about the resend, overtaken: no news
    assert a.counters.spurious_losses == 0
    a.receive(sack(ts_echo=resend.ts, flags=wire.DUP_ECHO), None, t + 0.003)  # the resend arrived second
    assert a.counters.spurious_losses == 1


def test_every_transmission_carries_its_own_timestamp_even_within_one_burst():
    a, _ = pair(mss=100)
    a.send_message(1, bytes(1000))
    stamps = [wire.decode(d).ts for _, d in a.datagrams_to_send(2.0)]
    assert len(stamps) == 10 and len(set(stamps)) == 10 and stamps == sorted(stamps)
    assert stamps[-1] - stamps[0] < 1000  # within a microsecond of the clock: RTT samples unchanged


def paced_send_times(packets, share=1.0):
    """When a paced sender (1000-byte payloads, 1048 on the wire, 104800 B/s, a bucket of two packets)
    puts each of ``packets`` packets out, driven by its own timer from t = 5 s."""
    a, _ = pair(mss=1000, cc_init_window=1 << 20, pace_rate=104_800.0, pace_depth=2 * 1048)
    if share != 1.0:
        a.set_pace_share(share)
    a.send_message(1, bytes(1000 * packets))
    sent, t = [], 5.0
    while len(sent) < packets:
        sent += [t] * len(a.datagrams_to_send(t))
        t = a.next_timer()
        a.on_timer(t)
    return sent


def test_the_pacer_sends_a_bucket_at_once_then_at_its_rate_and_wakes_itself_up():
    sent = paced_send_times(10)  # one packet per 10 ms after a bucket of two
    assert sent[:2] == [5.0, 5.0]
    gaps = [round(b - a_, 6) for a_, b in zip(sent[1:], sent[2:], strict=False)]
    assert gaps == [0.01] * 8


BURST_SIZE = 8192 + wire.DATA_HEADER_LEN
NIC_RATE = BURST_SIZE / 0.004  # a packet every 4 ms per NIC: one per ms over four


def burst_sends(packets, ahead, share=1.0, cc=False):
    """A paced sender woken by its own timers rounded up to whole milliseconds (as the agent's loop), with
    bursts of ``ahead`` s: (wake-ups that sent, each DATA packet's (handed at, timestamp s, plane))."""
    a = Connection(1, list(range(64)), plane, departures=Departures(PLANES, rate=NIC_RATE),
                   config=TransportConfig(mss=8192, cc=cc, cc_init_window=1 << 20, pace_rate=PLANES * NIC_RATE,
                                          pace_depth=BURST_SIZE, pace_slack=0.001, pace_ahead=ahead,
                                          nic_rate=NIC_RATE))
    if share != 1.0:
        a.set_pace_share(share)
    a.send_message(1, bytes(8192 * packets))
    sent, wakeups, t = [], 0, 5.0
    while len(sent) < packets:
        out = [wire.decode(d) for _, d in a.datagrams_to_send(t)]
        wakeups += bool(out)
        sent += [(t, d.ts * 1e-9, plane(d.ev)) for d in out]
        t = math.ceil(a.next_timer() * 1000 - 1e-9) / 1000
        a.on_timer(t)
    return wakeups, sent


def test_paced_bursts_wake_up_less_and_date_each_packet_by_when_its_nic_sends_it():
    """Without bursts the pacer wakes its owner for about every packet; with 4 ms bursts, once per ~3 ms for
    three or four packets. Either way the packets leave at the pacer's rate, and with bursts each carries the time
    its NIC puts it on the wire: one packet per NIC per 4 ms, however early it was handed over (the first two a
    NIC's burst closer)."""
    plain, sent = burst_sends(40, ahead=0.0)
    bursty, burst = burst_sends(40, ahead=0.004)
    assert bursty < plain / 2
    assert max(len([s for s in burst if s[0] == t]) for t in {s[0] for s in burst}) >= 3
    for handed, stamp, _nic in burst:
        assert handed <= stamp + 1e-9 < handed + 0.004 + 1e-3  # never before it was handed, within a burst after
    early = round(0.004 - NIC_BURST / NIC_RATE, 6)  # the second packet of a NIC that was idle
    gaps = []
    for nic in range(PLANES):
        stamps = [stamp for _, stamp, k in burst if k == nic]
        gaps += [round(b - a_, 6) for a_, b in zip(stamps, stamps[1:], strict=False)]
    assert set(gaps) == {0.004, early} and gaps.count(early) == 1
    assert len({round(stamp * 1e9) for _, stamp, _ in burst}) == len(burst)  # every timestamp is the host's own
    rate = len(sent) / (sent[-1][0] - sent[0][0])
    assert burst[-1][1] - burst[0][1] == pytest.approx(len(burst) / rate, rel=0.1)  # the same rate on the wire


def test_a_burst_at_a_share_of_the_rate_leaves_as_fast_as_its_nics_send_and_is_dated_so():
    """Sharing the NICs with another connection, the pacer hands out half the rate; a burst's packets still leave
    back to back on their NICs (nothing else was handed to them here), and carry those times."""
    _, burst = burst_sends(20, ahead=0.004, share=0.5)
    first = [stamp for handed, stamp, _ in burst if handed == burst[0][0]]
    assert len(first) >= 2 and first[0] == pytest.approx(burst[0][0], abs=1e-8)
    assert max(first) - min(first) < 0.004


def test_departures_are_each_nics_fifo_at_its_rate_with_a_burst_after_idling():
    nics = Departures(2, rate=1e6)  # 9 ms per 9000-byte packet; the burst is 1.6 ms of sending
    assert nics.depart(0, 9000, 1.0) == 1.0
    assert nics.depart(0, 9000, 1.0) == pytest.approx(1.0074)  # a burst sooner than the rate after idling
    assert nics.depart(0, 9000, 1.0) == pytest.approx(1.0164)  # then at the rate
    assert nics.depart(1, 9000, 1.0) == 1.0  # another NIC: its own queue
    assert nics.depart(0, 9000, 3.0) == 3.0  # idle since: at once
    assert nics.stamp(0, 1.0) != nics.stamp(1, 1.0) and abs(nics.stamp(1, 1.0) - 1e9) < 2
    with pytest.raises(ValueError):
        Departures(2, rate=0.0)


def test_warm_up_probes_every_path_once_and_counts_apart_from_path_probes():
    a = Connection(1, list(range(64)), plane, config=TransportConfig(), ev_path=path_of)
    b = Connection(1, list(range(64)), plane, config=TransportConfig(), ev_path=path_of)
    assert a.warm() == 16
    probes = [wire.decode(d) for _, d in a.datagrams_to_send(1.0)]
    assert {p.seq for p in probes} == {wire.WARM_SEQ} and len({path_of(p.ev) for p in probes}) == 16
    for p in probes:
        b.receive(wire.encode_probe(1, p.ev, p.seq, p.ts), None, 1.001)
    for _, d in b.datagrams_to_send(1.001):
        a.receive(d, None, 1.002)
    c = a.counters
    assert (c.warm_probes, c.warm_replies, c.probes, c.probe_replies) == (16, 16, 0, 0)
    assert {a.ev_state(ev) for ev in range(64)} == {EvState.UNKNOWN} and a.datagrams_to_send(1.002) == []


def test_a_pace_share_splits_the_rate_among_connections():
    sent = paced_send_times(4, share=0.5)  # half the rate, and a bucket of one packet
    assert [round(x - 5.0, 6) for x in sent] == [0.0, 0.02, 0.04, 0.06]
    a, _ = pair(pace_rate=1e6, pace_depth=1 << 16)
    with pytest.raises(ValueError):
        a.set_pace_share(0)


def test_the_receiver_flags_the_sack_that_answers_a_duplicate():
    a, b = pair(mss=100)
    a.send_message(1, bytes(50))
    (_, d), = a.datagrams_to_send(1.0)
    sacks = []
    for _ in range(2):
        b.receive(d, None, 1.001)
        sacks += [wire.decode(s) for _, s in b.datagrams_to_send(1.001)]
    assert [s.flags & wire.DUP_ECHO for s in sacks] == [0, wire.DUP_ECHO] and b.counters.duplicates == 1


@pytest.mark.parametrize("same_plane_later_delivered", [True, False])
def test_a_later_packet_through_the_same_nic_queue_exposes_a_loss_before_slow_planes_would(
        same_plane_later_delivered):
    """Packet 0 (plane 0) is lost. Packet 4 went through the same plane after it and came back in
    1 ms; the other planes answer after 30 ms. Judged against plane 0's own later packet (and the
    smoothed RTT), packet 0 is overdue at 30 ms; judged against the slow planes' latest RTT it
    would not be before 32 ms."""
    config = TransportConfig(sack_every=1, mss=100, cc_init_window=1 << 20, reorder_window=0.002,
                             reorder_window_max=0.002)
    a = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    b = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    a.send_message(1, bytes(800))
    sent = a.datagrams_to_send(0.0)
    assert [plane(ev) for ev, _ in sent] == [0, 1, 2, 3, 0, 1, 2, 3]
    if same_plane_later_delivered:
        b.receive(sent[4][1], None, 0.001)
        for _, s in b.datagrams_to_send(0.001):
            a.receive(s, None, 0.001)
    for i in (1, 2, 3, 5, 6, 7):
        b.receive(sent[i][1], None, 0.030)
    for _, s in b.datagrams_to_send(0.030):
        a.receive(s, None, 0.030)
    lost = a.ev_state(sent[0][0]) == EvState.ASSUMED_BAD
    assert lost is same_plane_later_delivered and a.counters.lost == int(same_plane_later_delivered)


@pytest.mark.parametrize("hold_window", [0.002, 1.0])
def test_an_overdue_packet_holds_its_path_before_any_loss_is_declared(hold_window):
    """Packet 0 (path (0, 0)) is missing when packet 4, sent after it on the same plane, comes back in
    10 ms. Two ms later its path gets no new data, though the loss itself is not due before 30 ms (a
    20 ms reorder window): nothing is resent, nothing retired. When packet 0 turns up, the path is used
    again. With the hold turned off (hold_window 1 s) the path keeps getting data until the loss."""
    config = TransportConfig(sack_every=1, mss=100, cc_init_window=1 << 20, ev_count=16, reorder_window=0.02,
                             reorder_window_max=0.02, hold_window=hold_window)
    a = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    b = Connection(1, list(range(64)), plane, config=config, ev_path=path_of)
    a.send_message(1, bytes(1600))
    sent = a.datagrams_to_send(0.0)
    assert [ev for ev, _ in sent] == list(range(16))  # one packet down each of the 16 paths
    b.receive(sent[4][1], None, 0.010)
    for _, s in b.datagrams_to_send(0.010):
        a.receive(s, None, 0.010)
    a.on_timer(0.013)
    a.send_message(2, bytes(1600))
    evs = [ev for ev, _ in a.datagrams_to_send(0.013)]
    held = hold_window < 0.01
    assert (path_of(0) not in {path_of(ev) for ev in evs}) is held and len(evs) == 16
    assert a.counters.paths_held == int(held) and a.counters.lost == a.counters.retransmitted == 0
    assert a.ev_state(0) != EvState.ASSUMED_BAD and a.bad_paths() == []
    b.receive(sent[0][1], None, 0.014)  # it was only late
    for _, s in b.datagrams_to_send(0.014):
        a.receive(s, None, 0.014)
    a.send_message(3, bytes(1600))
    assert path_of(0) in {path_of(ev) for ev, _ in a.datagrams_to_send(0.014)}
    assert a.counters.spurious_losses == 0 and a.counters.paths_retired == 0


def test_held_paths_still_carry_data_when_every_path_is_held():
    """Holds never stop a connection: packet 3, the last of four over two paths, is the only one
    back, so both paths are held; new data still goes out."""
    config = TransportConfig(sack_every=1, mss=100, cc_init_window=1 << 20, ev_count=2, reorder_window=0.02,
                             reorder_window_max=0.02)
    a, b = (Connection(1, [0, 4], plane, config=config, ev_path=path_of) for _ in range(2))
    a.send_message(1, bytes(400))
    sent = a.datagrams_to_send(0.0)
    assert [ev for ev, _ in sent] == [0, 4, 0, 4]
    b.receive(sent[3][1], None, 0.010)
    for _, s in b.datagrams_to_send(0.010):
        a.receive(s, None, 0.010)
    a.on_timer(0.013)
    assert a.counters.paths_held == 2 and a.counters.lost == 0
    a.send_message(2, bytes(200))
    assert len(a.datagrams_to_send(0.013)) == 2


def test_a_packet_arriving_far_behind_the_newest_is_acknowledged_at_once():
    """PSNs 5 and 10 are missing when 0..99 have come back; then 10 arrives, 89 behind the newest, and
    100 right after it. A SACK covers the newest 64 PSNs, so 10 needs one of its own: found in the agent
    test, where the hole at 5 kept 10 unacknowledged until RACK declared it lost. Only 5 is lost."""
    a, b = pair(mss=100, cc_init_window=1 << 20, reorder_window=0.002, reorder_window_max=0.002, sack_every=4)
    a.send_message(1, bytes(10100))
    sent = a.datagrams_to_send(0.0)
    for i, (_, d) in enumerate(sent):
        if i not in (5, 10, 100):
            b.receive(d, None, 0.001)
    b.receive(sent[10][1], None, 0.002)
    b.receive(sent[100][1], None, 0.002)
    b.on_timer(0.003)
    for _, s in b.datagrams_to_send(0.003):
        a.receive(s, None, 0.003)
    a.on_timer(0.01)
    assert a.counters.lost == 1 and a.counters.spurious_losses == 0


def test_a_pacing_wake_up_is_asked_for_once():
    """An owner that cannot send when the pacer's time comes (its NIC queue is full) is not asked to wake
    for it again and again: the timer is served, and the next send sets it anew."""
    a, _ = pair(pace_rate=1e6, pace_depth=2 * 8240, mss=8192)
    a.send_message(1, bytes(100_000))
    assert len(a.datagrams_to_send(0.0)) == 2  # the bucket's two packets
    due = a.next_timer()
    assert 0.0 < due < 0.02
    a.on_timer(due)  # the owner is blocked: no datagrams_to_send
    assert a.next_timer() > due
    assert len(a.datagrams_to_send(due)) == 1 and a.next_timer() > due


def test_sacks_are_coalesced_but_holes_and_tails_are_answered_at_once():
    """Four in-order packets taken together get one SACK; a packet that opens a hole, or a message's last
    one, makes a SACK due even below sack_every; a duplicate gets its own at once (DUP_ECHO)."""
    a, b = pair(sack_every=4, sack_delay=0.001, mss=100)
    a.send_message(1, bytes(1000))
    sent = a.datagrams_to_send(0.0)
    for _, d in sent[:4]:
        b.receive(d, None, 0.001)
    sacks = [wire.decode(s) for _, s in b.datagrams_to_send(0.001)]
    assert [s.cum_psn for s in sacks] == [4]
    b.receive(sent[4][1], None, 0.002)
    assert b.datagrams_to_send(0.002) == [] and b.next_timer() == pytest.approx(0.003)
    b.receive(sent[6][1], None, 0.0025)  # 5 is missing: a hole
    sacks = [wire.decode(s) for _, s in b.datagrams_to_send(0.0025)]
    assert [(s.cum_psn, s.bitmap & 0b1) for s in sacks] == [(5, 0)] and b.next_timer() is None
    b.receive(sent[9][1], None, 0.003)  # the tail (and another hole)
    b.receive(sent[9][1], None, 0.003)  # a duplicate: answered at once, covering what is pending
    sacks = [wire.decode(s) for _, s in b.datagrams_to_send(0.003)]
    assert [s.flags & wire.DUP_ECHO for s in sacks] == [wire.DUP_ECHO]
    for i in (5, 7):  # fill holes: nothing urgent, so the delay holds the SACK
        b.receive(sent[i][1], None, 0.004)
    assert b.datagrams_to_send(0.004) == [] and b.next_timer() == pytest.approx(0.005)
    b.receive(sent[8][1], None, 0.0045)  # the message is complete: the sender's completion waits on this SACK
    sacks = [wire.decode(s) for _, s in b.datagrams_to_send(0.0045)]
    assert [s.cum_psn for s in sacks] == [10] and b.counters.sacks == 4


def test_pace_slack_sends_what_falls_due_before_the_next_wake_up_and_keeps_the_rate():
    """An owner woken every millisecond: without slack each packet waits for the tick after its time and a
    one-packet bucket loses that wait (rate lost); with slack a packet due before the next tick goes now."""
    size = 8192 + wire.DATA_HEADER_LEN
    gap = size / 1e6  # 8.2 ms between packets at 1 MB/s
    for slack, early in ((0.0, 0), (0.002, 1)):
        a, _ = pair(pace_rate=1e6, pace_depth=size, mss=8192, pace_slack=slack, cc=False)
        a.send_message(1, bytes(8192 * 60))
        assert len(a.datagrams_to_send(0.0)) == 1
        assert len(a.datagrams_to_send(gap - 0.0015)) == early  # 1.5 ms early: inside a 2 ms slack only
        sent = 1 + early + sum(len(a.datagrams_to_send(i * 0.001)) for i in range(int(gap * 1000), 400))
        if slack:
            assert sent == pytest.approx(1 + 0.4 / gap, abs=1)  # the rate is kept
        else:
            assert sent < 0.4 / gap - 2
