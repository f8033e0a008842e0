"""Linux SRv6 routers as a fabric's switches: every switch a Mininet node, its own network namespace,
forwarding IPv6 with the kernel's own uSID End behaviour.

Each router's own uN is a ``seg6local action End flavors next-csid lblen 32 nflen 16 count``
route on its own /48, hung on an anchor veth pair that nothing ever downs (a route on a
downed interface is deleted, and one on ``lo`` would be a reject route). The shifted
destination is then routed like any other: to a neighbour's uSID (/48), or, on a leaf, to a
host's address, each through a link-local next hop ``fe80::1`` that is a permanent
neighbour entry with the peer's MAC, so no neighbour discovery ever runs. The controller
(`mrclab.controller.kernel`) installs those routes once, in one ``ip -batch`` per namespace,
and watches them over netlink for the rest of the run.

Cables are veth pairs made straight inside the namespaces (one ``ip -batch`` in the root
namespace, whose own interfaces never change); switch-to-switch cables are split per
direction (see `mrclab.layout`) so that a cut only takes carrier away from the routers' ports.
Interfaces have no addresses at all (``addr_gen_mode=1``) and hosts have only fabric
addresses, so nothing here can reach the machine's own network. Everything a run makes
lives in namespaces whose processes the RunState records: ending them removes it all.
"""
from __future__ import annotations

import os
import re
import subprocess

from mininet.node import Host

from ..addressing import leaf_usid, spine_usid, usid_prefix
from ..cluster import tunnel
from ..layout import GATEWAY_IP, SwitchLayout
from .hostconf import QUIET_IPV6, batch_script
from .shells import check_outputs, in_parallel

# Set before any interface exists, so every interface is born with them.
SYSCTLS = {
    **QUIET_IPV6,
    "net.ipv6.conf.all.forwarding": 1,
    "net.ipv6.conf.default.forwarding": 1,
}
# The ECMP baseline: hash the 5-tuple (UDP ports too), with a seed from the scenario so reruns hash alike,
# and skip a next hop whose port lost carrier, as a switch does for its own links.
ECMP_SYSCTLS = {
    "net.ipv6.fib_multipath_hash_policy": 1,
    "net.ipv6.conf.all.ignore_routes_with_linkdown": 1,
    "net.ipv6.conf.default.ignore_routes_with_linkdown": 1,
}
HASH_SEED_SYSCTL = "net.ipv4.fib_multipath_hash_seed"  # per namespace, for IPv6 too (Linux >= 6.11)
_PACKETS = re.compile(r"\bpackets (\d+)")


def own_usid(switch: SwitchLayout) -> int:
    return leaf_usid(switch.index) if switch.kind == "leaf" else spine_usid(switch.index)


def own_prefix(switch: SwitchLayout) -> str:
    return str(usid_prefix(switch.plane, own_usid(switch)))


def namespace_script(ecmp: bool, seed: int) -> str:
    settings = {**SYSCTLS, **(ECMP_SYSCTLS if ecmp else {})}
    script = "sysctl -qw " + " ".join(f"{key}={value}" for key, value in settings.items())
    if ecmp and os.path.exists("/proc/sys/" + HASH_SEED_SYSCTL.replace(".", "/")):
        script += f" && sysctl -qw {HASH_SEED_SYSCTL}={seed & 0xFFFFFFFF}"
    return script + " && ip link set lo up && echo ok"


def cable_lines(fabric, pids: dict[str, int]) -> list[str]:
    """`ip -batch` lines (root namespace) that make every veth inside its namespaces, MACs included (host cables:
    see `cables`); on one server of several, its own cables and a VXLAN end for each direction of a cable that
    leaves it (see `cluster.tunnel`)."""
    lay, lines = fabric.layout, fabric.cables.lines(pids)
    for link in fabric.topology.links:
        if link.kind == "fabric" and link.a in fabric.nodes and link.b in fabric.nodes:
            for node, peer in ((link.a, link.b), (link.b, link.a)):
                port = lay.port(node, peer)
                lines.append(f"link add name {port.ifname} address {port.mac} netns {pids[node]} type veth "
                             f"peer name {port.peer_ifname} address {port.peer_mac} netns {pids[peer]}")
    for name in pids:
        anchor = lay.switches[name].anchor
        lines.append(f"link add name {anchor} netns {pids[name]} type veth peer name {anchor}b netns {pids[name]}")
    share = fabric.share
    if share is not None:
        ends = tunnel.ends(lay, share.server_of, share.server)
        lines += tunnel.link_lines(ends, pids=pids, underlays=share.underlays, server=share.server,
                                   mtu=fabric.topology.mtu, port=share.port)
    return lines


def port_lines(switch: SwitchLayout, mtu: int) -> list[str]:
    """Inside the router: every interface up, and each port's next hop as a permanent neighbour."""
    lines = [f"link set dev {switch.anchor} up", f"link set dev {switch.anchor}b up"]
    for port in switch.ports.values():
        lines.append(f"link set dev {port.ifname} mtu {mtu} up")
        if port.split:
            lines.append(f"link set dev {port.rx_ifname} mtu {mtu} up")
        lines.append(f"neigh replace {GATEWAY_IP} lladdr {port.peer_mac} dev {port.ifname} nud permanent")
    return lines


class LinuxRouters:
    """The `linux` datapath's switches (see the module docstring)."""

    def __init__(self, fabric) -> None:
        self.fabric = fabric
        self.nodes: dict[str, Host] = {}

    def describe(self) -> str:
        return "Linux SRv6 routers (kernel seg6local End, next-csid)"

    def record(self) -> None:
        """Nothing of a router lives in the root namespace; its process, recorded at birth, holds it all."""

    def make(self) -> None:
        for name, switch in self.fabric.layout.switches.items():
            if name not in self.fabric.nodes:
                continue
            node = Host(switch.bridge, inNamespace=True)
            self.nodes[name] = node
            self.fabric.state.add_process(node.pid, f"router {name}")
        ecmp = not self.fabric.routing.source_routed
        check_outputs(in_parallel({node: namespace_script(ecmp, self.fabric.seed) for node in self.nodes.values()}))

    def cable(self) -> None:
        result = subprocess.run(["ip", "-batch", "-"], input="\n".join(cable_lines(self.fabric, self.netns_pids()))
                                + "\n", capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"making the cables failed: {result.stderr.strip()[-400:]}")

    def configure(self) -> None:
        mtu = self.fabric.topology.mtu
        switches = self.fabric.layout.switches
        check_outputs(in_parallel({node: batch_script(port_lines(switches[name], mtu)) + " && echo ok"
                                   for name, node in self.nodes.items()}))

    def start(self) -> None:
        """The routers forward from birth; the controller (started by the fabric) installs their routes."""

    def netns_pid(self, switch: str) -> int:
        return self.nodes[switch].pid

    def netns_pids(self) -> dict[str, int]:
        return {name: node.pid for name, node in self.nodes.items()}

    def packet_pids(self) -> dict[int, str]:
        """The kernel forwards in softirq context, charged to whichever process sent or to ksoftirqd."""
        pids = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if comm.startswith("ksoftirqd/"):
                    pids[int(entry.name)] = comm
        return pids

    def tables(self) -> dict[str, list[str]]:
        """Every router's main IPv6 routing table and neighbour entries, without counters, by SPEC name:
        what must not change."""
        outputs = in_parallel({node: "ip -6 route show table main; ip -6 neigh show nud permanent"
                               for node in self.nodes.values()})
        return {name: sorted(line.strip() for line in outputs[node].splitlines() if line.strip())
                for name, node in self.nodes.items()}

    def spine_counts(self, spines: list[str]) -> dict[str, int]:
        """Packets each spine's End route has shifted so far (its seg6local `count` counter)."""
        lay = self.fabric.layout
        outputs = in_parallel({self.nodes[name]: f"ip -6 -s route show {own_prefix(lay.switches[name])}"
                               for name in spines})
        counts = {}
        for name in spines:
            match = _PACKETS.search(outputs[self.nodes[name]])
            if match is None:
                raise RuntimeError(f"{name} has no counted End route: {outputs[self.nodes[name]].strip()!r}")
            counts[name] = int(match.group(1))
        return counts

    def close(self) -> None:
        for node in self.nodes.values():
            node.terminate()
