"""Open vSwitch switches of a fabric (`OvsSwitches`), and the few OVS and iproute2 calls they make, batched:
one process per job, not per object."""
from __future__ import annotations

import re
import subprocess
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..check import kernel_datapath_available
from ..controller.flows import COOKIE_SHIFT

OVS_PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"
REVALIDATOR_INTERVAL = 1.0  # s: OVS's default max-revalidator (500 ms) with a margin

_FLOW = re.compile(r"cookie=(0x[0-9a-f]+).*?table=(\d+).*?n_packets=(\d+), n_bytes=(\d+).*?priority=(\d+),?(\S*)"
                   r" actions=(\S+)")


@dataclass(frozen=True)
class FlowStat:
    cookie: int
    table: int
    priority: int
    match: str
    actions: str
    n_packets: int
    n_bytes: int

    @property
    def entry(self) -> str:
        """The flow without its counters: what must not change while a fabric runs."""
        return (f"table={self.table},priority={self.priority},cookie={self.cookie:#x},{self.match} "
                f"actions={self.actions}")


def del_bridges(bridges: list[str]) -> None:
    """Delete bridges in one ovsdb transaction."""
    if bridges:
        cmd = ["ovs-vsctl", "--timeout=30"]
        for bridge in bridges:
            cmd += ["--", "--if-exists", "del-br", bridge]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ip_batch(lines: list[str]) -> None:
    """Run iproute2 commands in the root namespace in one process; `-force` keeps going past errors."""
    if lines:
        subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", text=True, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def delete_group(group: int, prefix: str) -> bool:
    """Delete every root-namespace interface of device `group` in one kernel batch.

    Refuses (returns False, deletes nothing) if any member lacks `prefix`: the group is
    derived from the run's prefix, so such a member belongs to someone else.
    """
    out = subprocess.run(["ip", "-o", "link", "show", "group", str(group)], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    if any(not name.startswith(prefix) for name in names):
        return False
    if names:
        subprocess.run(["ip", "link", "del", "group", str(group)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return True


def _run_ofctl(command: str, bridge: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["ovs-ofctl", "-O", "OpenFlow13", command, bridge, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _dump_start(bridge: str, spec: str = "") -> subprocess.Popen:
    return _run_ofctl("dump-flows", bridge, *([spec] if spec else []))


def _dump_finish(process: subprocess.Popen) -> list[FlowStat]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(cast('list[str]', process.args))}: {err.strip()}")  # _run_ofctl's argv
    flows = []
    for line in out.splitlines():
        m = _FLOW.search(line)
        if m:
            cookie, table, packets, nbytes, priority, match, actions = m.groups()
            flows.append(FlowStat(int(cookie, 16), int(table), int(priority), match, actions, int(packets),
                                  int(nbytes)))
    return flows


def dump_flows(bridges: list[str], spec: str = "") -> dict[str, list[FlowStat]]:
    """Flow entries with counters of many bridges, read in parallel (one ovs-ofctl each)."""
    started = {bridge: _dump_start(bridge, spec) for bridge in bridges}
    return {bridge: _dump_finish(process) for bridge, process in started.items()}


_PORT_TX_DROP = re.compile(r"port\s+(\d+):.*?\n\s+tx pkts=\S+ bytes=\S+ drop=(\d+)")


def tx_dropped(ports: dict[str, tuple[str, int]]) -> dict[str, int]:
    """Packets ovs-vswitchd failed to send, per interface named in `ports` (ifname -> (bridge, port
    number)). Read live over OpenFlow, one ovs-ofctl per bridge in parallel: the Interface
    statistics in ovsdb are refreshed only every few seconds, too stale to tell a fault's window."""
    started = {bridge: _run_ofctl("dump-ports", bridge) for bridge in {b for b, _ in ports.values()}}
    by_port = {}
    for bridge, process in started.items():
        out, _ = process.communicate()
        if process.returncode == 0:
            by_port.update({(bridge, int(n)): int(d) for n, d in _PORT_TX_DROP.findall(out)})
    return {ifname: by_port[key] for ifname, key in ports.items() if key in by_port}


class OvsSwitches:
    """The `ovs` datapath's switches: one OVS bridge per switch in the root namespace, OpenFlow 1.3,
    fail_mode=secure, programmed by the os-ken controller at 127.0.0.1; the kernel datapath where the
    openvswitch module is loaded, else userspace (`netdev`). Cables between switches are Mininet veth links
    whose ends join the bridges; a host cable's leaf port is its patch's veth end in the root namespace (see
    `cables`). IPv6 is off on every port (OVS forwards, the kernel must not)."""

    def __init__(self, fabric) -> None:
        self.fabric = fabric
        self.kind = "kernel" if kernel_datapath_available() else "user"
        self.nodes: dict = {}

    def describe(self) -> str:
        return ("Open vSwitch, kernel datapath (openvswitch module)" if self.kind == "kernel"
                else "Open vSwitch, userspace datapath (netdev)")

    def record(self) -> None:
        for bridge in self.fabric.layout.bridges:
            self.fabric.state.add_bridge(bridge)
        for ifname in self.fabric.layout.switch_ifnames:
            self.fabric.state.add_interface(ifname)

    def make(self) -> None:
        from mininet.node import OVSSwitch

        OVSSwitch.setup()
        for name, switch in self.fabric.layout.switches.items():
            node = OVSSwitch(switch.bridge, dpid=f"{switch.dpid:016x}", failMode="secure", datapath=self.kind,
                             protocols="OpenFlow13", batch=True, inNamespace=False)
            self.nodes[name] = node
            self.fabric.state.add_process(node.pid, f"switch shell {name}")

    def cable(self) -> None:
        from mininet.link import Intf, Link

        class BareIntf(Intf):
            """A Mininet interface that configures nothing: the fabric configures all of them in batches."""

            def config(self, **_params) -> dict:
                return {}

        f = self.fabric
        result = subprocess.run(["ip", "-batch", "-"], input="\n".join(f.cables.lines(None)) + "\n",
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"making the host cables failed: {result.stderr.strip()[-400:]}")
        for link in f.topology.links:
            if link.kind == "host":  # made above (see `cables`); the bridge adds its end as the port's number
                port = f.layout.port(link.b, link.a)
                BareIntf(port.ifname, node=self.nodes[link.b], port=port.number)
            else:
                port1, port2 = f.layout.port(link.a, link.b), f.layout.port(link.b, link.a)
                Link(self.nodes[link.a], self.nodes[link.b], port1=port1.number, port2=port2.number,
                     intfName1=port1.ifname, intfName2=port2.ifname, addr1=port1.mac, addr2=port2.mac,
                     intf=BareIntf)

    def configure(self) -> None:
        lay, lines = self.fabric.layout, []
        for ifname in lay.switch_ifnames:
            Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
            lines.append(f"link set dev {ifname} group {lay.link_group} mtu {self.fabric.topology.mtu} up")
        ip_batch(lines)

    def start(self) -> None:
        from mininet.node import OVSSwitch

        port = self.fabric.controller.port
        target = types.SimpleNamespace(name="c0", protocol="tcp", port=port, IP=lambda: "127.0.0.1")
        for node in self.nodes.values():
            node.start([target])
        OVSSwitch.batchStartup(list(self.nodes.values()))

    def netns_pid(self, switch: str) -> None:
        """Every bridge port lives in the root namespace."""
        return None

    def netns_pids(self) -> None:
        return None

    def packet_pids(self) -> dict[int, str]:
        try:
            return {int(Path(OVS_PIDFILE).read_text().strip()): "ovs-vswitchd"}
        except (OSError, ValueError):
            return {}

    def tables(self) -> dict[str, list[str]]:
        """Every switch's forwarding entries without their counters, by SPEC name: what must not change."""
        by_bridge = dump_flows(self.fabric.layout.bridges)
        return {name: sorted(f.entry for f in by_bridge[s.bridge]) for name, s in self.fabric.layout.switches.items()}

    def spine_counts(self, spines: list[str]) -> dict[str, int]:
        """Packets each spine's own-uSID (table 0) flow has matched so far.

        OVS credits datapath-flow hits to OpenFlow rules in its revalidator rounds (every
        500 ms by default), so wait for one round first; `revalidator/wait` refuses when
        OVS runs both datapaths at once, and then a full interval is waited out instead."""
        if subprocess.run(["ovs-appctl", "revalidator/wait"], capture_output=True).returncode != 0:
            time.sleep(REVALIDATOR_INTERVAL)
        bridges = {name: self.fabric.layout.switches[name].bridge for name in spines}
        flows = dump_flows(list(bridges.values()), f"cookie={COOKIE_SHIFT:#x}/-1")
        return {name: sum(f.n_packets for f in flows[bridge]) for name, bridge in bridges.items()}

    def close(self) -> None:
        lay = self.fabric.layout
        if not delete_group(lay.link_group, self.fabric.state.prefix):
            ip_batch([f"link del dev {name}" for name in lay.switch_ifnames if Path(f"/sys/class/net/{name}").exists()])
        del_bridges(lay.bridges)
        for node in self.nodes.values():
            node.terminate()
