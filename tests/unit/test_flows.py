"""The static flow tables, checked without OVS: counts, matches, no flooding, and every path of
clos-2p-2l-2s walked through a small interpreter of the flow actions (which must agree with
`addressing.shift` at every hop)."""
from __future__ import annotations

import ipaddress
from itertools import product

import pytest

from mrclab import addressing
from mrclab import layout as layout_mod
from mrclab.controller.flows import COOKIE_MISS, COOKIE_SHIFT, ETH_TYPE_IPV6, IN_PORT, PRIORITY_MISS, flows_for
from mrclab.spec.topology import from_mapping

TOPO = from_mapping({"name": "clos-2p-2l-2s", "planes": 2, "leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "test")
LAYOUT = layout_mod.build(TOPO, "mab1")
TABLES = {name: flows_for(name, s.ports) for name, s in LAYOUT.switches.items()}
MASK128 = (1 << 128) - 1


def _bits(n: int) -> int:
    return (1 << n) - 1


def run_switch(flows, in_port: int, dst: int) -> tuple[int | None, int, str | None]:
    """(output port or None for drop, new destination, eth_dst set) for one packet."""
    regs, eth_dst, table = {"ipv6_dst": dst, "xxreg0": 0}, None, 0
    while True:
        matching = [f for f in flows if f.table == table and _matches(f, in_port, regs["ipv6_dst"])]
        top = max(f.priority for f in matching)
        best = [f for f in matching if f.priority == top]
        assert len(best) == 1, f"ambiguous match in table {table}: {best}"
        flow = best[0]
        for action in flow.actions:
            kind = action[0]
            if kind == "move":
                _, src, so, dst_field, do, n = action
                value = (regs[src] >> so) & _bits(n)
                regs[dst_field] = (regs[dst_field] & ~(_bits(n) << do) & MASK128) | (value << do)
            elif kind == "load":
                _, dst_field, ofs, n, value = action
                regs[dst_field] = (regs[dst_field] & ~(_bits(n) << ofs) & MASK128) | (value << ofs)
            elif kind == "set_field":
                eth_dst = action[2]
            elif kind == "output":
                return (in_port if action[1] == IN_PORT else action[1]), regs["ipv6_dst"], eth_dst
        if flow.goto is None:
            return None, regs["ipv6_dst"], eth_dst
        table = flow.goto


def _matches(flow, in_port: int, dst: int) -> bool:
    for key, value in flow.match:
        if key == "ipv6_dst":
            net, mask = (int(ipaddress.IPv6Address(x)) for x in value)
            if dst & mask != net:
                return False
        elif key == "in_port" and value != in_port or key == "eth_type" and value != ETH_TYPE_IPV6:
            return False
    return True


def test_flow_counts_and_matches():
    leaf, spine = TABLES["p0l1"], TABLES["p1s0"]
    # leaf: own uSID + miss in table 0; 2 spines + 2 hosts + miss in table 1
    assert [len([f for f in leaf if f.table == t]) for t in (0, 1)] == [2, 5]
    # spine: own uSID + miss; 2 leaves, each with its hairpin twin, + miss
    assert [len([f for f in spine if f.table == t]) for t in (0, 1)] == [2, 5]
    assert sum(len(t) for t in TABLES.values()) == 56
    shift = next(f for f in leaf if f.cookie == COOKIE_SHIFT)
    assert dict(shift.match)["ipv6_dst"] == ("fcbb:0:1001::", "ffff:ffff:ffff::") and shift.goto == 1
    assert shift.to_ofctl().startswith("table=0,priority=100,cookie=0x1,ipv6,ipv6_dst=fcbb:0:1001::/ffff:ffff:ffff::")
    assert "move:NXM_NX_IPV6_DST[0..79]->NXM_NX_XXREG0[0..79]" in shift.to_ofctl()


def test_no_flooding_and_misses_drop():
    for flows in TABLES.values():
        for f in flows:
            for action in f.actions:
                assert action[0] != "output" or action[1] == IN_PORT or isinstance(action[1], int)
            assert "flood" not in f.to_ofctl().lower() and "controller" not in f.to_ofctl().lower()
        misses = [f for f in flows if f.cookie == COOKIE_MISS]
        assert [(f.table, f.priority, f.actions, f.goto) for f in misses] == [(0, PRIORITY_MISS, (), None),
                                                                             (1, PRIORITY_MISS, (), None)]


def test_unknown_destinations_are_dropped():
    assert run_switch(TABLES["p0l0"], 1, int(addressing.encode(0, (addressing.leaf_usid(1),))))[0] is None
    assert run_switch(TABLES["p0l0"], 1, int(addressing.encode(1, (addressing.leaf_usid(0),))))[0] is None
    spine_then_host = addressing.encode(0, (addressing.spine_usid(0), addressing.host_usid(1)))
    assert run_switch(TABLES["p0s0"], 1, int(spine_then_host))[0] is None


@pytest.mark.parametrize("src,dst,plane,spine", [c for c in product(range(4), range(4), range(2), range(2))
                                                 if c[0] != c[1]])
def test_every_path_reaches_its_host_through_its_spine(src, dst, plane, spine):
    plan = TOPO.plan
    address = int(plan.path_address(src, dst, plane, spine))
    nic = LAYOUT.hosts[f"h{src}"].nics[plane]
    node, in_port, hops = nic.leaf, LAYOUT.port(nic.leaf, f"h{src}").number, []
    while node.startswith("p"):
        out, new, eth_dst = run_switch(TABLES[node], in_port, address)
        assert out is not None, f"{node} dropped {ipaddress.IPv6Address(address)}"
        assert new == int(addressing.shift(address)), "the flow's shift must equal addressing.shift"
        hops.append(node)
        peer = next(p for p in LAYOUT.switches[node].ports.values() if p.number == out)
        if peer.peer.startswith("h"):
            assert eth_dst == peer.peer_mac
            node = peer.peer
        else:
            node, in_port = peer.peer, LAYOUT.port(peer.peer, node).number
        address = new
    assert hops == [f"p{plane}l{plan.leaf_of(src)}", f"p{plane}s{spine}", f"p{plane}l{plan.leaf_of(dst)}"]
    assert node == f"h{dst}" and address == int(plan.host_address(plane, dst))


def test_layout_names_are_prefixed_short_unique_and_ports_fixed():
    names = LAYOUT.bridges + LAYOUT.switch_ifnames + [n.ifname for h in LAYOUT.hosts.values() for n in h.nics]
    assert len(set(names)) == len(names)
    assert all(n.startswith("mab1") and len(n) <= 15 for n in names)
    assert LAYOUT.ifname("p0l1", "p0s1") == "mab1p0l1-s1" and LAYOUT.ifname("p0s1", "p0l1") == "mab1p0s1-l1"
    assert LAYOUT.ifname("h3", "p1l1") == "mab1h3-p1" and LAYOUT.port("p1l1", "h3").number == 2
    assert LAYOUT.port("p1l1", "p1s0").number == 3 and LAYOUT.port("p1s0", "p1l1").number == 2
    for shape in ({"planes": 2, "leaves": 64, "spines": 64, "hosts_per_leaf": 1},
                  {"planes": 16, "leaves": 8, "spines": 8, "hosts_per_leaf": 8}):
        layout_mod.build(from_mapping(shape, "t"), "mzzz")  # raises if a name would not fit
    assert layout_mod.Layout.from_dict(LAYOUT.to_dict()) == LAYOUT
    assert layout_mod.build(TOPO, "m000").link_group != LAYOUT.link_group
