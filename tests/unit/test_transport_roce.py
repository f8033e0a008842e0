"""The RoCE baseline's parts: congestion controls behind one table, DCQCN's rate law, go-back-N reliability."""
import pytest

from mrclab.addressing import Plan
from mrclab.transport import Connection, MessageDelivered, TransportConfig, wire
from mrclab.transport.congestion import CONGESTION_CONTROLS, create
from mrclab.transport.congestion.dcqcn import FAST_RECOVERY, Dcqcn
from mrclab.transport.congestion.nscc import Nscc
from mrclab.transport.rtt import RttEstimator
from mrclab.transport.sim import Network, clos, stream

ROCE = {"go_back_n": True, "single_path": True, "cc_algorithm": "dcqcn"}


def test_cc_algorithm_names_a_row_of_the_table():
    assert set(CONGESTION_CONTROLS) == {"nscc", "dcqcn"}
    assert isinstance(create(TransportConfig()), Nscc)
    assert isinstance(create(TransportConfig(cc_algorithm="dcqcn")), Dcqcn)
    with pytest.raises(ValueError, match="cc_algorithm='cubic': must be one of nscc, dcqcn"):
        TransportConfig(cc_algorithm="cubic")


def test_dcqcn_cuts_once_per_period_and_climbs_back():
    cc = Dcqcn(TransportConfig(cc_algorithm="dcqcn", dcqcn_period=0.001, dcqcn_g=0.5, dcqcn_ai=0.1))
    rtt = RttEstimator()
    cc.on_ack(1000, rtt, 0.0)
    cc.on_congestion(0.0001, rtt)
    assert cc.rate == pytest.approx(0.5)  # alpha starts at 1: the first cut halves
    cc.on_congestion(0.0005, rtt)
    assert cc.rate == pytest.approx(0.5)  # the same period: no second cut
    cc.on_ack(1000, rtt, 0.0011)  # the period with the CNP ended: alpha rises, no increase
    assert cc.rate == pytest.approx(0.5)
    cc.on_ack(1000, rtt, 0.0021)  # one quiet period: halfway back to the target (1.0)
    assert cc.rate == pytest.approx(0.75)
    cc.on_ack(1000, rtt, 0.0001 + 0.001 * (FAST_RECOVERY + 1.5))
    assert 0.95 < cc.rate < 1.0
    cc.on_ack(1000, rtt, 1.0)
    assert cc.rate == pytest.approx(1.0)
    assert cc.cwnd == TransportConfig().cc_max_window  # a rate control: the window stays open


def test_dcqcn_cuts_deeper_while_congestion_persists():
    cc = Dcqcn(TransportConfig(cc_algorithm="dcqcn", dcqcn_period=0.001, dcqcn_g=0.25))
    rtt = RttEstimator()
    rates = []
    for k in range(12):
        cc.on_congestion(0.001 * k + 0.0001, rtt)
        rates.append(cc.rate)
    assert rates[-1] < 0.05 and all(b <= a for a, b in zip(rates, rates[1:], strict=False))


def test_go_back_n_receiver_takes_packets_in_order_only_and_naks_each_gap_once():
    config = TransportConfig(**ROCE, sack_delay=0.0)
    a, b = (Connection(7, [0], lambda ev: 0, config=config) for _ in range(2))
    a.send_message(1, bytes(6 * config.mss))
    data = [d for _, d in a.datagrams_to_send(0.0)]
    assert len(data) == 6
    for d in data[1:]:  # the first packet is lost
        b.receive(d, None, 0.001)
    answers = [wire.decode(d) for _, d in b.datagrams_to_send(0.001)]
    naks = [n for n in answers if isinstance(n, wire.Nack)]
    assert len(naks) == 1 and naks[0].reason == wire.NACK_SEQUENCE and naks[0].psn == 0
    assert b.counters.out_of_order == 5 and b.counters.data_received == 0
    a.receive(wire.encode_nack(conn_id=7, psn=0, cum_psn=0, ev=0, ts_echo=wire.decode(data[1]).ts,
                               reason=wire.NACK_SEQUENCE), None, 0.002)
    resent = [d for _, d in a.datagrams_to_send(0.002)]
    assert [wire.decode(d).psn for d in resent] == [0, 1, 2, 3, 4, 5]  # everything from the gap, in order
    assert a.counters.go_backs == 1 and a.counters.lost == 0  # a NAK is not a loss: no retry counted
    for d in resent:
        b.receive(d, None, 0.003)
    assert [e.msg_id for e in b.pop_events()] == [1]


def test_a_stale_nak_does_not_send_the_sender_back_again():
    config = TransportConfig(**ROCE)
    a = Connection(7, [0], lambda ev: 0, config=config)
    a.send_message(1, bytes(4 * config.mss))
    first = [wire.decode(d) for _, d in a.datagrams_to_send(0.0)]
    nak = wire.encode_nack(conn_id=7, psn=0, cum_psn=0, ev=0, ts_echo=first[1].ts, reason=wire.NACK_SEQUENCE)
    a.receive(nak, None, 0.001)
    assert len(a.datagrams_to_send(0.001)) == 4
    a.receive(nak, None, 0.002)  # the same gap NAKed again by a packet of the first round: already resent
    assert a.datagrams_to_send(0.002) == [] and a.counters.go_backs == 1


def roce_fabric(**link_options):
    plan = Plan(planes=1, leaves=2, spines=2, hosts_per_leaf=2)
    links, route = clos(plan, 100e6, 100e6, delay=5e-6, **link_options)
    return plan, links, Network(route, seed=3)


def test_roce_delivers_every_byte_through_random_loss_by_going_back():
    plan, links, net = roce_fabric(loss=0.01)
    a, b = net.connect(0, 2, 1, [0], lambda ev: 0, TransportConfig(**ROCE), plan.ev_path)
    sent: dict[int, bytes] = {}
    stream(net, a, 128 << 10, sent=sent)
    net.run(until=1.0)
    delivered = {e.msg_id: bytes(e.data) for _, e in b.events if isinstance(e, MessageDelivered)}
    assert len(delivered) > 20 and all(sent[m] == d for m, d in delivered.items())
    assert a.conn.counters.go_backs > 0 and b.conn.counters.out_of_order > 0
    assert not a.conn.failed


def test_roce_is_dropped_not_trimmed_and_dcqcn_slows_it_under_ecn():
    """Two RoCE flows hashed onto one spine uplink: what does not fit is dropped (never trimmed), and ECN marks
    bring the DCQCN rates down so that both flows progress."""
    plan, links, net = roce_fabric(ecn_min=8 << 10, ecn_max=48 << 10)
    ends = [net.connect(src, src + 2, 10 + src, [0], lambda ev: 0, TransportConfig(**ROCE, pace_rate=12.5e6,
                                                                                   pace_depth=20000), plan.ev_path)
            for src in (0, 1)]
    for a, _ in ends:
        stream(net, a, 256 << 10)
    net.run(until=1.0)
    assert sum(link.trims for link in links.values()) == 0
    assert min(a.conn.counters.messages_completed for a, _ in ends) > 5
    assert sum(b.conn.counters.ce_received for _, b in ends) > 10
    assert all(a.conn.counters.trimmed == 0 for a, _ in ends)
