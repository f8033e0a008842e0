"""Two hosts wired back to back in network namespaces, no fabric: the agents alone (tests, benchmarks).

Each namespace stands for one host: one veth per plane (NIC k, the host's plane-k address,
the plane's /32 routed out of it through a static neighbour, as the fabric does). Nothing
shifts uSIDs here, so a packet arrives still carrying its full path address: a policy
rule sends whatever comes in on a NIC to a table that accepts all of fcbb::/16 locally.
Needs root; the namespaces are recorded in the run state, whose teardown removes them.
"""
from __future__ import annotations

import json
import subprocess

from ..addressing import Plan, block
from ..runstate import RunState


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def wire(state: RunState, plan: Plan, namespaces: dict[int, str], mtu: int | None = None) -> None:
    """Create the two namespaces of ``namespaces`` (host index -> name, run-prefixed) and wire them; ``mtu``: the
    NICs' (the kernel's default, 1500, when None: a larger datagram then travels in fragments)."""
    for ns in namespaces.values():
        state.add_namespace(ns)
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "-6", "route", "add", "local", "fcbb::/16", "dev", "lo", "table", "100")
    (a, ns_a), (b, ns_b) = namespaces.items()
    for k in range(plan.planes):
        nic = f"p{k}"
        ip("-n", ns_a, "link", "add", nic, *(["mtu", str(mtu)] if mtu else []), "type", "veth", "peer", "name", nic,
           *(["mtu", str(mtu)] if mtu else []), "netns", ns_b)
        macs = {h: json.loads(ip("-n", ns, "-j", "link", "show", nic))[0]["address"] for h, ns in namespaces.items()}
        for h, other in ((a, b), (b, a)):
            ns = namespaces[h]
            ip("-n", ns, "link", "set", nic, "up")
            ip("-n", ns, "-6", "addr", "add", f"{plan.host_address(k, h)}/128", "dev", nic, "nodad")
            ip("-n", ns, "-6", "neigh", "add", "fe80::1", "lladdr", macs[other], "dev", nic, "nud", "permanent")
            ip("-n", ns, "-6", "route", "add", str(block(k)), "via", "fe80::1", "dev", nic)
            ip("-n", ns, "-6", "rule", "add", "iif", nic, "lookup", "100", "pref", "100")
