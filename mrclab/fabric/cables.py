"""Host cables: a host's NIC and its leaf's port, joined through a patch, so that pulling the cable takes the
carrier from both ends.

A veth end loses carrier only when its peer goes down, so one veth pair cannot be pulled like a
cable: one of its ends has to go administratively down, and Linux takes the routes of an
interface that is administratively down (the host's own route to its plane, or a router's to the
host). A host cable is therefore two veth pairs: the host's NIC (in the host's namespace) with its
patch end ``h3-p0l1.h``, and the leaf's port (in the leaf router's namespace, or the root one where
OVS bridges live) with its patch end ``h3-p0l1.l``. Both patch ends live in the run's cable
namespace, where IPv6 is off, and a tc ingress program on each (``patch`` in ``bpf/egress.c``)
hands what arrives to the other end's peer with ``bpf_redirect_peer``: straight into that
interface's ingress, in its own namespace, with no queue between (the egress program of the
sending NIC or port is the cable's only queue, as before). Each patch end carries the MAC of the
interface across the cable from it, so a frame arrives addressed to the interface that receives
it. The patch ends get fixed interface indexes (``FIRST_INDEX`` on), which the programs are given.

Pulling the cable downs its two patch ends. The host's NIC and the leaf's port lose carrier at
once and stay administratively up with their addresses, neighbours and routes (which the kernel
flags ``linkdown``), as with a real cable. What the host sees: the NIC's ``IFF_LOWER_UP`` goes
(``ip link``: NO-CARRIER, state DOWN), netlink tells every RTMGRP_LINK listener at once, and what
the host still sends out of that NIC is dropped (the NIC's egress program counts it as sent into
the cut). Plugging it back brings both patch ends up. A leaf-spine cable has no patch: cutting it
stays invisible to the hosts.
"""
from __future__ import annotations

from mininet.node import Host

from ..layout import Layout
from ..netns import ip_batches
from ..spec.topology import Link

FIRST_INDEX = 16  # patch ends' interface indexes in the cable namespace: FIRST_INDEX + 2i (host side) and + 1
SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1}


class HostCables:
    """Every host cable of a fabric: the cable namespace, the veth pairs, the patches, and pulling them."""

    def __init__(self, fabric) -> None:
        self.fabric = fabric
        self.layout: Layout = fabric.layout
        self.links = [link for link in fabric.topology.links if link.kind == "host" and link.a in fabric.nodes]
        self.node: Host | None = None

    def make(self) -> None:
        """The cable namespace (a Mininet host node, recorded in the run state); IPv6 off before any interface."""
        self.node = Host(f"{self.layout.prefix}cab", inNamespace=True)
        self.fabric.state.add_process(self.node.pid, "cable namespace")
        self.node.cmd("sysctl -qw " + " ".join(f"{key}={value}" for key, value in SYSCTLS.items()))

    @property
    def pid(self) -> int:
        if self.node is None:
            raise RuntimeError("the cable namespace is not made")
        return self.node.pid

    def ends(self, link: Link) -> tuple[str, str]:
        """The patch ends of a host cable: the host's side, the leaf's side."""
        return f"{link.name}.h", f"{link.name}.l"

    def _indexes(self, i: int) -> tuple[int, int]:
        return FIRST_INDEX + 2 * i, FIRST_INDEX + 2 * i + 1

    def lines(self, leaf_netns: dict[str, int] | None) -> list[str]:
        """``ip -batch`` lines (root namespace) that make both veth pairs of every host cable, MACs included;
        `leaf_netns`: each leaf's namespace (a pid), None where leaf ports live in the root namespace."""
        out = []
        for i, link in enumerate(self.links):
            nic = self.layout.hosts[link.a].nics[link.plane]
            host_end, leaf_end = self.ends(link)
            host_index, leaf_index = self._indexes(i)
            leaf = "" if leaf_netns is None else f" netns {leaf_netns[link.b]}"
            out += [f"link add name {host_end} index {host_index} address {nic.leaf_mac} netns {self.pid} type veth "
                    f"peer name {nic.ifname} address {nic.mac} netns {self.fabric.hosts[link.a].pid}",
                    f"link add name {leaf_end} index {leaf_index} address {nic.mac} netns {self.pid} type veth "
                    f"peer name {nic.leaf_ifname} address {nic.leaf_mac}{leaf}"]
        return out

    def join(self, egress, mtu: int) -> None:
        """Bring every patch end up and patch each cable's two ends together (once the egress program is
        loaded)."""
        ends = []
        lines = []
        for i, link in enumerate(self.links):
            (host_end, leaf_end), (host_index, leaf_index) = self.ends(link), self._indexes(i)
            ends.append((host_end, host_index, leaf_end, leaf_index))
            lines += [f"link set dev {host_end} mtu {mtu} up", f"link set dev {leaf_end} mtu {mtu} up"]
        egress.patch(ends, self.pid)
        ip_batches({self.pid: lines})

    def state_lines(self, links: list[Link], state: str) -> list[str]:
        """``ip -batch`` lines (cable namespace) that pull these host cables (``down``) or plug them back (``up``)."""
        return [f"link set dev {end} {state}" for link in links for end in self.ends(link)]

    def close(self) -> None:
        """End the cable namespace; every patch end and, with it, its peer goes."""
        if self.node is not None:
            self.node.terminate()
