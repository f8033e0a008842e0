"""VXLAN ends of cables between servers, from the layout alone: both servers agree on every VNI without talking."""
from __future__ import annotations

import pytest

from mrclab.cluster import tunnel
from mrclab.cluster.placement import assign
from mrclab.layout import build
from mrclab.spec import topology

TOPO = topology.load("clos-4p-4l-4s")


def placed(servers: int, placement: str = "pods"):
    layout = build(TOPO, "mtst", split_cables=True)
    return layout, assign(TOPO, [f"s{i}" for i in range(servers)], placement, source="test").server_of()


@pytest.mark.parametrize("servers", [2, 3])
def test_each_crossing_direction_has_one_sending_and_one_receiving_end_with_one_vni(servers):
    layout, where = placed(servers)
    ends = [e for i in range(servers) for e in tunnel.ends(layout, where, i)]
    crossing = sum(1 for a, s in layout.switches.items() for b in s.ports
                   if b in layout.switches and where[a] != where[b])
    assert crossing and len(ends) == 2 * crossing  # each direction: its sender and its receiver
    sending = {e.vni for e in ends if e.sends}
    assert sending == {e.vni for e in ends if not e.sends} and len(sending) == crossing
    assert len({(e.node, e.ifname) for e in ends}) == len(ends)


def test_vnis_are_unique_and_the_same_for_any_prefix():
    a = tunnel.vnis(build(TOPO, "maaa", split_cables=True))
    assert len(set(a.values())) == len(a) == 2 * TOPO.planes * TOPO.leaves * TOPO.spines
    assert a == tunnel.vnis(build(TOPO, "mzzz", split_cables=True))
    assert min(a.values()) == tunnel.VNI_BASE and max(a.values()) < 1 << 24


def test_pods_put_no_tunnel_on_a_host_cable_and_planes_none_on_a_switch_cable():
    layout, where = placed(2, "planes")
    assert all(tunnel.ends(layout, where, i) == [] for i in range(2))


def test_a_cable_that_is_not_split_cannot_cross_servers():
    layout = build(TOPO, "mtst", split_cables=False)
    where = assign(TOPO, ["a", "b"], "pods", source="test").server_of()
    with pytest.raises(ValueError, match="one interface per direction"):
        tunnel.ends(layout, where, 0)


def test_link_lines_make_each_end_in_its_router_namespace_over_the_local_underlay():
    layout, where = placed(2)
    ends = tunnel.ends(layout, where, 1)
    underlays = {0: tunnel.Underlay("fdcc::1", "u0"), 1: tunnel.Underlay("fdcc::2", "u1")}
    lines = tunnel.link_lines(ends, pids={n: 100 + i for i, n in enumerate(layout.switches)}, underlays=underlays,
                              server=1, mtu=9000)
    assert len(lines) == len(ends)
    assert all("local fdcc::2 remote fdcc::1 dev u1 dstport 4789" in line and " mtu 9000 " in line for line in lines)
    assert tunnel.underlay_mtu(9000, 6) == 9070 and tunnel.underlay_mtu(9000, 4) == 9050
