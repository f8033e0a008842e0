"""The routes of one Linux SRv6 router, static uSID and ECMP baseline, as plain data (no namespaces, no netlink).

The `linux` datapath's counterpart of `flows` and `ecmp_flows`: the same forwarding, said as
kernel routes. Every next hop is ``fe80::1`` on a port, a permanent neighbour whose MAC is
the peer's (see `fabric.linux`).

Static SRv6 (installed once; nothing here depends on link state):

* the router's own uSID ``fcbb:k:<own>::/48`` is a ``seg6local End`` with the next-csid
  flavour: shift the uSIDs left by 16 bits, then route the new destination;
* a leaf routes each spine's uSID up to that spine and each of its hosts' uSIDs down to the host;
* a spine routes each leaf's uSID down to that leaf (a pair on one leaf turns around there).

Anything else has no route and is dropped (the kernel counts it in ``Ip6InNoRoutes``).

ECMP (the baseline; routes host addresses, no uSID is shifted): a spine routes each host's
``/48`` to the host's leaf; a leaf routes its own hosts down and every other host over a
multipath route across the spines that still reach that host's leaf, hashed on the 5-tuple.
A leaf with no such spine left drops that host's traffic (a ``blackhole`` route).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..addressing import host_usid, leaf_usid, spine_usid, usid_prefix
from ..layout import GATEWAY_IP, Layout, Port, SwitchLayout
from ..spec.topology import node_parts
from .ecmp_flows import DeadLinks, live_spines, plan_of

END = "encap seg6local action End flavors next-csid lblen 32 nflen 16 count"


@dataclass(frozen=True)
class Route:
    prefix: str
    ports: tuple[str, ...] = ()  # next-hop interfaces; several: a multipath route
    end_on: str = ""  # the uSID End behaviour, hung on this interface (the router's anchor)

    def to_ip(self) -> str:
        """The route as an `ip -6 -batch` line; `replace` makes installing it idempotent."""
        if self.end_on:
            return f"route replace {self.prefix} {END} dev {self.end_on}"
        if not self.ports:
            return f"route replace blackhole {self.prefix}"
        if len(self.ports) == 1:
            return f"route replace {self.prefix} via {GATEWAY_IP} dev {self.ports[0]}"
        return f"route replace {self.prefix} " + " ".join(f"nexthop via {GATEWAY_IP} dev {p}" for p in self.ports)


def _prefix(plane: int, usid: int) -> str:
    return str(usid_prefix(plane, usid))


def _own_usid(switch: SwitchLayout) -> int:
    return leaf_usid(switch.index) if switch.kind == "leaf" else spine_usid(switch.index)


def static_routes(switch: SwitchLayout, anchor: str) -> list[Route]:
    """Every route of `switch` under static SRv6: its End, then one per neighbour."""
    routes = [Route(_prefix(switch.plane, _own_usid(switch)), end_on=anchor)]
    for peer, port in sorted(switch.ports.items(), key=lambda item: item[1].number):
        kind, _, index = node_parts(peer)
        usid = {"host": host_usid, "spine": spine_usid, "leaf": leaf_usid}[kind](index)
        routes.append(Route(_prefix(switch.plane, usid), (port.ifname,)))
    return routes


def ecmp_routes(layout: Layout, switch: SwitchLayout, dead: DeadLinks = frozenset()) -> list[Route]:
    """Every route of `switch` under ECMP, for the given dead leaf-spine links."""
    plan = plan_of(layout)
    ports: dict[str, Port] = switch.ports
    live = live_spines(layout, switch.name, dead) if switch.kind == "leaf" else {}
    routes = []
    for host in range(plan.hosts):
        leaf = plan.leaf_of(host)
        prefix = _prefix(switch.plane, host_usid(host))
        if switch.kind == "spine":
            routes.append(Route(prefix, (ports[f"p{switch.plane}l{leaf}"].ifname,)))
        elif leaf == switch.index:
            routes.append(Route(prefix, (ports[f"h{host}"].ifname,)))
        else:
            routes.append(Route(prefix, tuple(ports[spine].ifname for spine in live[leaf])))
    return routes


def reroute(layout: Layout, before: DeadLinks, after: DeadLinks) -> dict[str, list[Route]]:
    """Leaf -> the ECMP routes that differ between two sets of dead links (only leaves change: a
    spine's one route to a host is through that host's leaf)."""
    changes = {}
    for name, switch in sorted(layout.switches.items()):
        if switch.kind != "leaf":
            continue
        old = set(ecmp_routes(layout, switch, before))
        new = [route for route in ecmp_routes(layout, switch, after) if route not in old]
        if new:
            changes[name] = new
    return changes
