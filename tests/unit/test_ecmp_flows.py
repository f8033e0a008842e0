"""The ECMP baseline's tables, checked without OVS: what every switch of clos-2p-2l-2s gets at boot,
and which leaves and groups a link or spine fault reprograms (and nothing else)."""
from __future__ import annotations

from mrclab.addressing import host_usid, usid_prefix
from mrclab.controller.ecmp_flows import Group, dead_links, entries_for, group_id, reprogram
from mrclab.controller.flows import COOKIE_FORWARD, COOKIE_MISS, Flow
from mrclab.fabric import layout as layout_mod
from mrclab.spec.topology import from_mapping


def _layout(planes, leaves, spines, hosts_per_leaf=2):
    topo = from_mapping({"name": "t", "planes": planes, "leaves": leaves, "spines": spines,
                         "hosts_per_leaf": hosts_per_leaf}, "test")
    return layout_mod.build(topo, "mab1")


SMALL = _layout(2, 2, 2)
LARGE = _layout(4, 4, 4)


def _routes(entries) -> dict[int, tuple]:
    """host index -> the actions its prefix gets."""
    routes = {}
    for entry in entries:
        if isinstance(entry, Flow) and entry.cookie == COOKIE_FORWARD:
            (_, ipv6), = [m for m in entry.match if m[0] == "ipv6_dst"]
            host = next(h for h in range(4) for k in range(2) if str(usid_prefix(k, host_usid(h)).network_address)
                        == ipv6[0])
            routes[host] = entry.actions
    return routes


def test_a_leaf_sends_its_hosts_down_and_the_rest_to_one_group_per_remote_leaf():
    entries = entries_for(SMALL, "p0l0")
    groups = [e for e in entries if isinstance(e, Group)]
    assert entries.index(groups[-1]) < min(entries.index(e) for e in entries if isinstance(e, Flow))
    # hosts on ports 1..2, spines p0s0, p0s1 on ports 3, 4: one bucket per spine
    assert groups == [Group(group_id(1), (3, 4))]
    assert groups[0].to_ofctl() == "group_id=2,type=select,bucket=output:3,bucket=output:4"
    h1_mac = SMALL.port("p0l0", "h1").peer_mac
    assert _routes(entries) == {0: (("dec_ttl",), ("set_field", "eth_dst", SMALL.port("p0l0", "h0").peer_mac),
                                    ("output", 1)),
                                1: (("dec_ttl",), ("set_field", "eth_dst", h1_mac), ("output", 2)),
                                2: (("dec_ttl",), ("group", 2)), 3: (("dec_ttl",), ("group", 2))}
    assert entries[-1] == Flow(0, 0, COOKIE_MISS, ())


def test_a_spine_sends_each_host_to_its_leaf_and_the_fabric_has_no_other_entry():
    entries = entries_for(SMALL, "p1s1")
    assert _routes(entries) == {h: (("dec_ttl",), ("output", 1 + h // 2)) for h in range(4)}
    assert not any(isinstance(e, Group) for e in entries)
    # per plane: 2 leaves x (1 group + 4 hosts + miss) + 2 spines x (4 hosts + miss)
    assert sum(len(entries_for(SMALL, name)) for name in SMALL.switches) == 2 * (2 * 6 + 2 * 5)
    # the match is the host's /48, i.e. what Plan.host_address carries
    flow = next(e for e in entries if isinstance(e, Flow) and e.cookie == COOKIE_FORWARD)
    assert flow.to_ofctl() == ("table=0,priority=100,cookie=0x2,ipv6,ipv6_dst=fcbb:1:4000::/ffff:ffff:ffff::"
                               " actions=dec_ttl,output:1")


def test_either_end_down_or_a_switch_gone_kills_the_link():
    assert dead_links(SMALL, (), ()) == frozenset()
    assert dead_links(SMALL, [("p0s0", "p0l1")], ()) == {("p0l1", "p0s0")}
    assert dead_links(SMALL, [("p0l1", "p0s0"), ("p0s0", "p0l1")], ()) == {("p0l1", "p0s0")}
    assert dead_links(SMALL, [("p0l0", "h0")], ()) == frozenset()  # host cables are not routed around
    assert dead_links(SMALL, (), ["p1s1"]) == {("p1l0", "p1s1"), ("p1l1", "p1s1")}


def test_a_link_down_reprograms_both_leaves_of_the_link_and_nothing_else():
    dead = dead_links(SMALL, [("p0l1", "p0s0")], ())
    changes = reprogram(SMALL, frozenset(), dead)
    assert changes == {"p0l0": [Group(group_id(1), (4,), modify=True)],
                       "p0l1": [Group(group_id(0), (4,), modify=True)]}
    assert entries_for(SMALL, "p0l1", dead)[0] == Group(group_id(0), (4,))
    back = reprogram(SMALL, dead, frozenset())
    assert back == {"p0l0": [Group(group_id(1), (3, 4), modify=True)],
                    "p0l1": [Group(group_id(0), (3, 4), modify=True)]}


def test_a_spine_down_reprograms_every_leaf_of_its_plane():
    dead = dead_links(SMALL, (), ["p1s1"])
    assert reprogram(SMALL, frozenset(), dead) == {"p1l0": [Group(group_id(1), (3,), modify=True)],
                                                   "p1l1": [Group(group_id(0), (3,), modify=True)]}
    both = dead | dead_links(SMALL, (), ["p1s0"])
    assert reprogram(SMALL, dead, both) == {"p1l0": [Group(group_id(1), (), modify=True)],
                                            "p1l1": [Group(group_id(0), (), modify=True)]}


def test_on_the_default_lab_a_link_down_touches_four_leaves_and_six_groups():
    dead = dead_links(LARGE, [("p0l1", "p0s2")], ())
    changes = reprogram(LARGE, frozenset(), dead)
    assert sorted(changes) == ["p0l0", "p0l1", "p0l2", "p0l3"]
    assert [g.group_id for g in changes["p0l1"]] == [group_id(0), group_id(2), group_id(3)]
    assert all([g.group_id for g in changes[leaf]] == [group_id(1)] for leaf in ("p0l0", "p0l2", "p0l3"))
    spine_port = {name: LARGE.port(name, "p0s2").number for name in changes}
    assert all(spine_port[leaf] not in g.ports and len(g.ports) == 3 for leaf, gs in changes.items() for g in gs)
    assert reprogram(LARGE, dead, dead) == {}
    spine = dead_links(LARGE, (), ["p2s3"])
    assert sum(len(g) for g in reprogram(LARGE, frozenset(), spine).values()) == 4 * 3
