"""The Linux routers' routes, checked without namespaces: every path of clos-2p-2l-2s walked through a small
longest-prefix-match interpreter whose End shift is `addressing.shift`; the ECMP baseline's multipath
routes and reroutes; the netlink parsing of the route monitor."""
from __future__ import annotations

import ipaddress
import socket
import struct
from itertools import product

from mrclab import addressing
from mrclab import layout as layout_mod
from mrclab.controller import kernel
from mrclab.controller.routes import END, Route, ecmp_routes, reroute, static_routes
from mrclab.spec.keys import DATAPATHS
from mrclab.spec.topology import from_mapping

TOPO = from_mapping({"name": "clos-2p-2l-2s", "planes": 2, "leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "test")
LAYOUT = layout_mod.build(TOPO, "mab1", split_cables=True)
STATIC = {name: static_routes(s, s.anchor) for name, s in LAYOUT.switches.items()}


def lookup(routes: list[Route], dst: ipaddress.IPv6Address) -> Route | None:
    matching = [r for r in routes if dst in ipaddress.IPv6Network(r.prefix)]
    return max(matching, key=lambda r: ipaddress.IPv6Network(r.prefix).prefixlen, default=None)


def walk(tables: dict[str, list[Route]], src: int, dst: ipaddress.IPv6Address, plane: int,
         choose=lambda ports: ports[0]) -> tuple[str, ipaddress.IPv6Address, list[str]]:
    """Forward from host `src`'s NIC on `plane` until a host or a drop: (where, address, routers crossed)."""
    node = LAYOUT.hosts[f"h{src}"].nics[plane].leaf
    hops = [node]
    while node.startswith("p"):
        route = lookup(tables[node], dst)
        if route is None or (not route.ports and not route.end_on):
            return "dropped", dst, hops
        if route.end_on:
            dst = addressing.shift(dst)
            continue  # the shifted address is routed again by the same router
        port = next(p for p in LAYOUT.switches[node].ports.values() if p.ifname == choose(route.ports))
        node = port.peer
        hops.append(node)
    return node, dst, hops[:-1]


def test_every_static_path_arrives_shifted_through_its_spine():
    plan = TOPO.plan
    for src, dst, plane, spine in product(range(4), range(4), range(2), range(2)):
        if src == dst:
            continue
        where, address, hops = walk(STATIC, src, plan.path_address(src, dst, plane, spine), plane)
        assert where == f"h{dst}" and address == plan.host_address(plane, dst)
        assert hops[1] == f"p{plane}s{spine}" and len(hops) == 3


def test_static_routes_are_an_end_then_one_route_per_neighbour_over_the_sending_interface():
    leaf = LAYOUT.switches["p1l0"]
    routes = static_routes(leaf, leaf.anchor)
    assert routes[0].end_on == leaf.anchor and routes[0].prefix == "fcbb:1:1000::/48"
    assert len(routes) == 1 + len(leaf.ports) and all(len(r.ports) == 1 for r in routes[1:])
    assert {r.ports[0] for r in routes[1:]} == {p.ifname for p in leaf.ports.values()}
    assert routes[0].to_ip() == f"route replace fcbb:1:1000::/48 {END} dev {leaf.anchor}"
    assert "nexthop" not in routes[1].to_ip() and "via fe80::1" in routes[1].to_ip()


def test_anything_else_has_no_route():
    stray = addressing.encode(0, (addressing.leaf_usid(0), 0x3000))
    assert walk(STATIC, 0, stray, 0)[0] == "dropped"


def test_ecmp_spreads_over_every_spine_and_reroutes_only_leaves():
    tables = {name: ecmp_routes(LAYOUT, s) for name, s in LAYOUT.switches.items()}
    plan = TOPO.plan
    for src, dst, plane in product(range(4), range(4), range(2)):
        if plan.leaf_of(src) == plan.leaf_of(dst):
            continue
        for pick in (0, 1):
            where, address, hops = walk(tables, src, plan.host_address(plane, dst), plane,
                                        choose=lambda ports, pick=pick: ports[pick % len(ports)])
            assert where == f"h{dst}" and hops[1] == f"p{plane}s{pick}"
    dead = frozenset({("p0l1", "p0s0")})
    changes = reroute(LAYOUT, frozenset(), dead)
    assert sorted(changes) == ["p0l0", "p0l1"]
    for leaf, routes in changes.items():
        assert all(len(r.ports) == 1 and r.ports[0] == LAYOUT.port(leaf, "p0s1").ifname for r in routes)
    both = frozenset({("p0l1", "p0s0"), ("p0l1", "p0s1")})
    assert all(r.to_ip().startswith("route replace blackhole") for r in reroute(LAYOUT, frozenset(), both)["p0l0"])


def test_split_cables_land_on_the_peers_receive_interface():
    up, down = LAYOUT.port("p0l0", "p0s1"), LAYOUT.port("p0s1", "p0l0")
    assert up.split and up.peer_ifname == down.rx_ifname and down.peer_ifname == up.rx_ifname
    assert up.peer_mac == down.rx_mac and len({up.ifname, up.rx_ifname, down.ifname, down.rx_ifname}) == 4
    host = LAYOUT.port("p0l0", "h1")
    assert not host.split and host.receive_ifname == host.ifname
    assert not layout_mod.build(TOPO, "mab1").switches["p0l0"].ports["p0s1"].split


def test_spec_names_every_datapath_of_the_fabric_table():
    from mrclab.fabric.datapath import CHOICES

    assert DATAPATHS == CHOICES


def _nlmsg(kind: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def _attr(kind: int, data: bytes) -> bytes:
    padded = data + b"\0" * (-len(data) % 4)
    return struct.pack("=HH", 4 + len(data), kind) + padded


def test_the_monitor_counts_main_table_route_changes_and_reads_carrier():
    dst = socket.inet_pton(socket.AF_INET6, "fcbb:0:2001::")
    main = struct.pack("=BBBBBBBBI", socket.AF_INET6, 48, 0, 0, 254, 4, 0, 1, 0) + _attr(kernel.RTA_DST, dst)
    local = struct.pack("=BBBBBBBBI", socket.AF_INET6, 8, 0, 0, 255, 2, 0, 5, 0)
    link = struct.pack("=BxHiII", 0, 1, 7, 0x1043, 0) + _attr(kernel.IFLA_IFNAME, b"mab1p0l0-s1\0")
    data = _nlmsg(kernel.RTM_DELROUTE, main) + _nlmsg(kernel.RTM_NEWROUTE, local) + _nlmsg(kernel.RTM_NEWLINK, link)
    (k1, b1), (k2, b2), (k3, b3) = kernel.messages(data)
    assert kernel.route_change(k1, b1) == "deleted fcbb:0:2001::/48"
    assert kernel.route_change(k2, b2) is None  # the kernel's multicast entry in table local
    assert kernel.link_state(b3) == ("mab1p0l0-s1", False)  # 0x1043: up and running, but no LOWER_UP
