"""The ECMP baseline's tables, checked without OVS: what every switch of clos-2p-2l-2s gets at boot,
and which leaves and member-table entries a link or spine fault reprograms (and nothing else)."""
from __future__ import annotations

from collections import Counter

from mrclab import layout as layout_mod
from mrclab.addressing import host_usid, usid_prefix
from mrclab.controller.ecmp_flows import SLOTS_PER_SPINE, dead_links, entries_for, leaf_members, members, reprogram
from mrclab.controller.flows import COOKIE_FORWARD, COOKIE_MISS, Flow
from mrclab.spec.topology import from_mapping


def _layout(planes, leaves, spines, hosts_per_leaf=2):
    topo = from_mapping({"name": "t", "planes": planes, "leaves": leaves, "spines": spines,
                         "hosts_per_leaf": hosts_per_leaf}, "test")
    return layout_mod.build(topo, "mab1")


SMALL = _layout(2, 2, 2)
LARGE = _layout(4, 4, 4)
SLOTS = 2 * SLOTS_PER_SPINE


def _routes(flows, plane) -> dict[int, tuple]:
    """host index -> (actions, goto) of its prefix in table 0."""
    prefixes = {str(usid_prefix(plane, host_usid(h)).network_address): h for h in range(4)}
    return {prefixes[dict(f.match)["ipv6_dst"][0]]: (f.actions, f.goto) for f in flows
            if f.table == 0 and f.cookie == COOKIE_FORWARD}


def _members(flows) -> dict[tuple[int, int], int | None]:
    """(destination leaf, slot) -> output port (None: drop) of table 1."""
    return {(dict(f.match)["reg1"], dict(f.match)["reg0"]): (f.actions[0][1] if f.actions else None)
            for f in flows if f.table == 1 and f.match}


def test_a_leaf_sends_its_hosts_down_and_hashes_the_rest_over_its_spines():
    flows = entries_for(SMALL, "p0l0")
    mac = {h: SMALL.port("p0l0", f"h{h}").peer_mac for h in (0, 1)}
    hashed = ((("dec_ttl",), ("load", "reg1", 0, 16, 1), ("multipath", SLOTS, "reg0")), 1)
    assert _routes(flows, 0) == {0: ((("dec_ttl",), ("set_field", "eth_dst", mac[0]), ("output", 1)), None),
                                 1: ((("dec_ttl",), ("set_field", "eth_dst", mac[1]), ("output", 2)), None),
                                 2: hashed, 3: hashed}
    # hosts on ports 1..2, spines p0s0, p0s1 on ports 3, 4: each spine owns every other slot
    assert _members(flows) == {(1, s): 3 + s % 2 for s in range(SLOTS)}
    assert [f for f in flows if f.cookie == COOKIE_MISS] == [Flow(0, 0, COOKIE_MISS, ()), Flow(1, 0, COOKIE_MISS, ())]
    remote = next(f for f in flows if f.goto == 1)
    assert remote.to_ofctl() == ("table=0,priority=100,cookie=0x2,ipv6,ipv6_dst=fcbb:0:4002::/ffff:ffff:ffff:: "
                                 "actions=dec_ttl,load:0x1->NXM_NX_REG1[0..15],"
                                 "multipath(symmetric_l3l4+udp,0,modulo_n,8,0,NXM_NX_REG0[0..15]),goto_table:1")


def test_a_spine_sends_each_host_to_its_leaf_and_the_fabric_has_no_other_entry():
    flows = entries_for(SMALL, "p1s1")
    assert _routes(flows, 1) == {h: ((("dec_ttl",), ("output", 1 + h // 2)), None) for h in range(4)}
    assert {f.table for f in flows} == {0}
    # per plane: 2 leaves x (4 hosts + 8 slots + 2 misses) + 2 spines x (4 hosts + miss)
    assert sum(len(entries_for(SMALL, name)) for name in SMALL.switches) == 2 * (2 * 14 + 2 * 5)


def test_dead_spines_hand_their_slots_evenly_to_the_live_ones():
    assert members([5, 6, 7, 8], [True] * 4) == (5, 6, 7, 8) * SLOTS_PER_SPINE
    table = members([5, 6, 7, 8], [True, True, False, True])
    assert [p for p, q in zip(table, (5, 6, 7, 8) * SLOTS_PER_SPINE, strict=True) if p != q] == [5, 6, 8, 5]
    assert Counter(table) == {5: 6, 6: 5, 8: 5}
    assert members([3, 4], [False, False]) == (None,) * SLOTS


def test_either_end_down_or_a_switch_gone_kills_the_link():
    assert dead_links(SMALL, (), ()) == frozenset()
    assert dead_links(SMALL, [("p0s0", "p0l1")], ()) == {("p0l1", "p0s0")}
    assert dead_links(SMALL, [("p0l1", "p0s0"), ("p0s0", "p0l1")], ()) == {("p0l1", "p0s0")}
    assert dead_links(SMALL, [("p0l0", "h0")], ()) == frozenset()  # host cables are not routed around
    assert dead_links(SMALL, (), ["p1s1"]) == {("p1l0", "p1s1"), ("p1l1", "p1s1")}


def test_a_link_down_rewrites_the_dead_spines_slots_on_both_leaves_and_nothing_else():
    dead = dead_links(SMALL, [("p0l1", "p0s0")], ())
    changes = reprogram(SMALL, frozenset(), dead)
    assert sorted(changes) == ["p0l0", "p0l1"]
    assert _members(changes["p0l0"]) == {(1, s): 4 for s in range(0, SLOTS, 2)}
    assert _members(changes["p0l1"]) == {(0, s): 4 for s in range(0, SLOTS, 2)}
    assert _members(entries_for(SMALL, "p0l1", dead)) == {(0, s): 4 for s in range(SLOTS)}
    back = reprogram(SMALL, dead, frozenset())
    assert _members(back["p0l0"]) == {(1, s): 3 for s in range(0, SLOTS, 2)}


def test_a_spine_down_rewrites_every_leaf_of_its_plane_and_both_down_drops():
    dead = dead_links(SMALL, (), ["p1s1"])
    changes = reprogram(SMALL, frozenset(), dead)
    assert {leaf: _members(flows) for leaf, flows in changes.items()} == {
        "p1l0": {(1, s): 3 for s in range(1, SLOTS, 2)}, "p1l1": {(0, s): 3 for s in range(1, SLOTS, 2)}}
    both = dead | dead_links(SMALL, (), ["p1s0"])
    dropped = reprogram(SMALL, dead, both)["p1l0"]
    assert len(dropped) == SLOTS and all(f.cookie == COOKIE_MISS and not f.actions for f in dropped)


def test_on_the_default_lab_a_link_down_touches_only_the_four_leaves_of_its_plane():
    dead = dead_links(LARGE, [("p0l1", "p0s2")], ())
    changes = reprogram(LARGE, frozenset(), dead)
    assert sorted(changes) == ["p0l0", "p0l1", "p0l2", "p0l3"]
    assert sorted({dict(f.match)["reg1"] for f in changes["p0l1"]}) == [0, 2, 3]
    assert all({dict(f.match)["reg1"] for f in changes[leaf]} == {1} for leaf in ("p0l0", "p0l2", "p0l3"))
    # the dead spine's 4 slots towards each affected destination, and nothing else
    assert {leaf: len(flows) for leaf, flows in changes.items()} == {"p0l0": 4, "p0l1": 12, "p0l2": 4, "p0l3": 4}
    spine_port = LARGE.port("p0l1", "p0s2").number
    assert spine_port not in leaf_members(LARGE, "p0l1", dead)[0]
    assert reprogram(LARGE, dead, dead) == {}
    spine = dead_links(LARGE, (), ["p2s3"])
    assert sum(len(flows) for flows in reprogram(LARGE, frozenset(), spine).values()) == 4 * 3 * SLOTS_PER_SPINE
