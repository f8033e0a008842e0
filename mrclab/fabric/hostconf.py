"""A host's network stack, as shell commands run inside its namespace (pure: easy to read and test).

Hosts speak only the fabric's uSID space: each NIC gets the host's own address on its
plane (``/128``, no DAD), and the plane's ``/32`` block is routed out of that NIC via
``fe80::1``, a permanent neighbour with the leaf port's MAC (a Linux router accepts only
frames addressed to it; OVS matches on the IPv6 destination alone), so no ND, RA, DAD or
link-local chatter ever reaches a switch. There is no default route and no IPv4 address, so
nothing a host sends can leave the fabric. TX checksum/segmentation offloads are off
because the userspace datapath does not complete them (TCP breaks otherwise).
"""
from __future__ import annotations

import shlex

from ..addressing import block
from ..layout import GATEWAY_IP, HostLayout, Nic

# Set before any interface exists, so interfaces are born with them: no link-local address
# (addr_gen_mode=1), no autoconfiguration, DAD or router solicitation. Routers start from these too.
QUIET_IPV6 = {
    "net.ipv6.conf.default.addr_gen_mode": 1,
    "net.ipv6.conf.default.accept_ra": 0,
    "net.ipv6.conf.default.autoconf": 0,
    "net.ipv6.conf.default.accept_dad": 0,
    "net.ipv6.conf.default.dad_transmits": 0,
    "net.ipv6.conf.default.router_solicitations": 0,
}
SYSCTLS = {
    **QUIET_IPV6,
    "net.ipv6.conf.all.accept_ra": 0,
    "net.ipv6.conf.all.forwarding": 0,
}


def namespace_script() -> str:
    """Run in a fresh host namespace before its NICs are created."""
    return "sysctl -qw " + " ".join(f"{key}={value}" for key, value in SYSCTLS.items()) + " && ip link set lo up"


def nic_lines(nic: Nic) -> list[str]:
    """`ip -batch` lines that give a NIC its address, gateway neighbour and plane route (idempotent). A pulled
    cable leaves all three in place (see `cables`)."""
    dev = nic.ifname
    return [f"addr replace {nic.address}/128 dev {dev} nodad",
            f"neigh replace {GATEWAY_IP} lladdr {nic.leaf_mac} dev {dev} nud permanent",
            f"route replace {block(nic.plane)} via {GATEWAY_IP} dev {dev}"]


def batch_script(lines: list[str]) -> str:
    """A shell command that runs `ip -batch` lines in one process."""
    return "printf '%s\\n' " + " ".join(shlex.quote(line) for line in lines) + " | ip -batch -"


def nic_script(host: HostLayout, mtu: int) -> str:
    """Run once the host's NICs exist: bring them up with the plane address and route."""
    lines = []
    for nic in host.nics:
        lines += [f"link set dev {nic.ifname} mtu {mtu} up", *nic_lines(nic)]
    batch = batch_script(lines)
    offloads = " && ".join(f"ethtool -K {nic.ifname} tx off sg off tso off gso off >/dev/null" for nic in host.nics)
    return f"{batch} && {offloads} && echo ok"
