from collections import Counter

import pytest

from mrclab.spec import Workload
from mrclab.spec import topology as topology_mod
from mrclab.workload import ideal_step_seconds, step_transfers

TOPO = topology_mod.load("clos-4p-4l-4s")
HOSTS = tuple(TOPO.host_names)


def test_ring_sends_each_host_message_to_its_successor():
    transfers = step_transfers(Workload("ring-allreduce", HOSTS, 1000, 3), 0, 1)
    assert [(t.src, t.dst) for t in transfers][:2] == [("h0", "h1"), ("h1", "h2")]
    assert transfers[-1].dst == "h0" and {t.size for t in transfers} == {1000}


def test_all_to_all_spreads_exactly_the_message():
    transfers = step_transfers(Workload("all-to-all", HOSTS, 1000, 3), 0, 1)
    sent = Counter()
    for t in transfers:
        sent[t.src] += t.size
        assert t.src != t.dst
    assert set(sent.values()) == {1000} and len(transfers) == 8 * 7


def test_incast_targets_the_receiver():
    w = Workload("incast", HOSTS[:6], 500, 2, receiver="h0", senders=HOSTS[1:6])
    assert {(t.dst, t.size) for t in step_transfers(w, 0, 1)} == {("h0", 500)}


def test_permutation_is_a_seeded_derangement_that_changes_per_step():
    w = Workload("permutation", HOSTS, 100, 5)
    steps = [step_transfers(w, s, 7) for s in range(5)]
    for transfers in steps:
        assert sorted(t.dst for t in transfers) == sorted(HOSTS)
        assert all(t.src != t.dst for t in transfers)
    assert steps[0] == step_transfers(w, 0, 7)
    assert len({tuple(t.dst for t in s) for s in steps}) > 1


def test_ideal_time_is_the_busiest_nic():
    # ring: every host sends and receives 1 MiB over 4 planes x 100 Mbit
    transfers = step_transfers(Workload("ring-allreduce", HOSTS, 1 << 20, 1), 0, 1)
    nics = TOPO.planes * TOPO.host_rate_bps
    assert ideal_step_seconds(transfers, TOPO) == pytest.approx((1 << 20) * 8 / nics)
    # incast of 5 into one receiver: 5x the bytes through its NICs
    w = Workload("incast", HOSTS[:6], 1 << 20, 1, receiver="h0", senders=HOSTS[1:6])
    assert ideal_step_seconds(step_transfers(w, 0, 1), TOPO) == pytest.approx(5 * (1 << 20) * 8 / nics)
