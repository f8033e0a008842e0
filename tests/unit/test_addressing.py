"""The uSID plan: encode/decode/shift are exact inverses, paths have the documented shape, EVs spread evenly."""
from __future__ import annotations

import ipaddress
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrclab import addressing as a

usid = st.integers(min_value=1, max_value=0xFFFF)
plane = st.integers(min_value=0, max_value=0xFFFF)
plans = st.builds(a.Plan, planes=st.integers(1, 16), leaves=st.integers(1, 64), spines=st.integers(1, 64),
                  hosts_per_leaf=st.integers(1, 8))


@given(plane, st.lists(usid, max_size=6))
def test_decode_inverts_encode(k, usids):
    assert a.decode(a.encode(k, usids)) == (k, tuple(usids))


@given(plane, st.lists(usid, min_size=1, max_size=6))
def test_shift_drops_the_first_usid_and_keeps_the_block(k, usids):
    shifted = a.shift(a.encode(k, usids))
    assert a.decode(shifted) == (k, tuple(usids[1:]))
    assert shifted in a.block(k)


@given(plane, st.lists(usid, min_size=1, max_size=6))
def test_a_switch_prefix_matches_exactly_its_own_usid(k, usids):
    address = a.encode(k, usids)
    assert address in a.usid_prefix(k, usids[0])
    assert address not in a.usid_prefix(k, usids[0] ^ 1 or 2)


@given(plans, st.data())
def test_path_address_walks_leaf_spine_leaf_host(p, data):
    src, dst = data.draw(st.integers(0, p.hosts - 1)), data.draw(st.integers(0, p.hosts - 1))
    k, i = data.draw(st.integers(0, p.planes - 1)), data.draw(st.integers(0, p.spines - 1))
    address = p.path_address(src, dst, k, i)
    assert a.decode(address) == (k, (a.leaf_usid(p.leaf_of(src)), a.spine_usid(i), a.leaf_usid(p.leaf_of(dst)),
                                     a.host_usid(dst)))
    for _ in range(3):  # leaf, spine, leaf each shift once
        address = a.shift(address)
    assert address == p.host_address(k, dst)


def test_path_address_rejects_out_of_range():
    p = a.Plan(2, 2, 2, 2)
    with pytest.raises(ValueError, match="spine 2"):
        p.path_address(0, 1, 0, 2)
    assert str(p.path_address(0, 3, 1, 1)) == "fcbb:1:1000:2001:1001:4003::"
    assert isinstance(p.host_address(0, 0), ipaddress.IPv6Address)


@given(plans, st.integers(1, 4))
def test_ev_sets_that_are_multiples_of_the_path_count_cover_every_path_equally(p, rounds):
    counts = Counter(p.ev_path(ev) for ev in range(rounds * p.paths_per_pair))
    assert len(counts) == p.paths_per_pair and set(counts.values()) == {rounds}


@given(src=st.integers(0, a.MAX_HOSTS - 1), dst=st.integers(0, a.MAX_HOSTS - 1),
       qp=st.integers(0, a.MAX_CONNECTIONS - 1))
def test_a_conn_id_names_its_two_hosts_and_its_qp(src, dst, qp):
    conn = a.conn_id(src, dst, qp)
    assert a.conn_hosts(conn) == (src, dst) and a.conn_qp(conn) == qp and 0 <= conn < 1 << 32
