"""Build and tear down one run's fabric: Mininet hosts, OVS switches, veth cables, shaping, controller.

`Fabric` is a context manager. Entering it builds everything in an order chosen for
speed and for cleanliness (each step is one batch where it can be):

1. the layout is computed and every bridge and root-namespace interface name is
   recorded in the RunState *before* anything is created; the controller process is
   started first so its import time overlaps with the build;
2. host shells (Mininet `Host`, one network namespace each; PIDs recorded) get their
   IPv6 sysctls before any NIC exists, so NICs are born without link-local addresses;
3. veth cables are made by Mininet's `Link` with explicit names, MACs and port numbers,
   but left unconfigured; then one `ip -batch` brings every switch side up (IPv6 off,
   MTU set) and one command per host, sent to all hosts in parallel, configures its NICs;
4. all switches start in one ovsdb transaction (Mininet's batch startup): OpenFlow13,
   fail_mode=secure, controller at 127.0.0.1:<port>, datapath `kernel` when the
   openvswitch module is loaded, else userspace (`netdev`);
5. every port and every host NIC is shaped through `Egress` (after the ports joined
   their bridges, so OVS cannot clear the qdiscs);
6. it returns once the controller has programmed every switch (barrier replies).

Leaving it (normally, by exception, SIGINT or SIGTERM) removes exactly what was built,
and works after a partial build. What outlives a SIGKILL is in the RunState for
`mrclab clean`.
"""
from __future__ import annotations

import signal
import threading
import types
from pathlib import Path
from typing import Callable

from mininet.link import Intf, Link
from mininet.node import Host, OVSSwitch

from ..check import kernel_datapath_available
from ..controller.flows import COOKIE_MISS
from ..controller.process import Controller
from ..errors import UsageError
from ..runstate import RunState
from ..spec.topology import Topology
from . import hostconf, layout as layout_mod, ovs
from .faults import Faults


# routing (SPEC name) -> controller app
APPS = {"static-srv6": "static_srv6", "ecmp-reconverge": "ecmp_reconverge"}
OVS_PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"


class BareIntf(Intf):
    """A Mininet interface that configures nothing: the fabric configures all of them in batches."""

    def config(self, **_params) -> dict:
        return {}


HOST_NIC_QUEUE = 4 << 20


def default_egress(state: RunState):
    from .egress import Egress
    return Egress(state)


class Fabric:
    """One run's emulated fabric. Attributes a runner uses once built:

    topology, layout, state, datapath ("kernel" | "user"), hosts (SPEC name -> Mininet Host,
    whose `.pid` is its namespace and `.popen()` runs a process in it), controller
    (`stats()`), egress, faults (`Faults`: link and switch faults, link counters)."""

    def __init__(self, topology: Topology, state: RunState | None = None, directory: Path | None = None,
                 routing: str = "static-srv6", convergence_delay: float = 2.0,
                 egress_factory: Callable[[RunState], object] = default_egress) -> None:
        if routing not in APPS:
            raise UsageError(f"routing {routing!r} is not available yet (available: {', '.join(APPS)})")
        self.topology = topology
        self.owns_state = state is None
        self.state = state or RunState.create(f"fabric {topology.name}")
        # controller log, layout and stats: the run's results directory, else the run's private one (removed at teardown)
        self.directory = directory or self.state.private_dir()
        self.layout = layout_mod.build(topology, self.state.prefix)
        self.datapath = "kernel" if kernel_datapath_available() else "user"
        self.egress_factory, self.app = egress_factory, APPS[routing]
        self.convergence_delay = convergence_delay  # how long ecmp-reconverge waits before reprogramming
        self.hosts: dict[str, Host] = {}
        self.switches: dict[str, OVSSwitch] = {}
        self.controller: Controller | None = None
        self.egress = None
        self.faults: Faults | None = None
        self._closed = False
        self._old_handlers: dict[int, object] = {}

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> "Fabric":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self._old_handlers[sig] = signal.signal(sig, _raise_exit)
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- build ----------------------------------------------------------------------------

    def build(self) -> None:
        lay, state = self.layout, self.state
        for bridge in lay.bridges:
            state.add_bridge(bridge)
        for ifname in lay.switch_ifnames:
            state.add_interface(ifname)
        self.controller = Controller(state, lay, self.directory, self.app, self.convergence_delay)
        self._make_hosts()
        self._make_switches()
        self._make_links()
        self._configure_interfaces()
        self._start_switches()
        self.egress = self.egress_factory(state)
        self._shape()
        self.faults = Faults(self.topology, self.layout, self.egress,
                             {name: node.pid for name, node in self.hosts.items()})
        self.controller.wait_programmed()

    def _make_hosts(self) -> None:
        for name, host in self.layout.hosts.items():
            node = Host(host.node, inNamespace=True)
            self.hosts[name] = node
            self.state.add_process(node.pid, f"host {name}")
        self._in_parallel({node: hostconf.namespace_script() for node in self.hosts.values()})

    def _make_switches(self) -> None:
        OVSSwitch.setup()
        for name, switch in self.layout.switches.items():
            node = OVSSwitch(switch.bridge, dpid=f"{switch.dpid:016x}", failMode="secure", datapath=self.datapath,
                             protocols="OpenFlow13", batch=True, inNamespace=False)
            self.switches[name] = node
            self.state.add_process(node.pid, f"switch shell {name}")

    def _make_links(self) -> None:
        for link in self.topology.links:
            if link.kind == "host":
                node1, port1 = self.hosts[link.a], self.layout.hosts[link.a].nics[link.plane]
                port2 = self.layout.port(link.b, link.a)
                Link(node1, self.switches[link.b], port1=link.plane, port2=port2.number, intfName1=port1.ifname,
                     intfName2=port2.ifname, addr1=port1.mac, addr2=port2.mac, intf=BareIntf)
            else:
                port1, port2 = self.layout.port(link.a, link.b), self.layout.port(link.b, link.a)
                Link(self.switches[link.a], self.switches[link.b], port1=port1.number, port2=port2.number,
                     intfName1=port1.ifname, intfName2=port2.ifname, addr1=port1.mac, addr2=port2.mac,
                     intf=BareIntf)

    def _configure_interfaces(self) -> None:
        lines = []
        for ifname in self.layout.switch_ifnames:
            Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
            lines.append(f"link set dev {ifname} group {self.layout.link_group} mtu {self.topology.mtu} up")
        ovs.ip_batch(lines)
        outputs = self._in_parallel({self.hosts[name]: hostconf.nic_script(host, self.topology.mtu)
                                     for name, host in self.layout.hosts.items()})
        for node, output in outputs.items():
            if not output.strip().endswith("ok"):
                raise RuntimeError(f"configuring {node.name} failed: {output.strip()}")

    def _start_switches(self) -> None:
        target = types.SimpleNamespace(name="c0", protocol="tcp", port=self.controller.port, IP=lambda: "127.0.0.1")
        for node in self.switches.values():
            node.start([target])
        OVSSwitch.batchStartup(list(self.switches.values()))

    def _shape(self) -> None:
        """Switch ports get the topology's buffer; a host NIC gets a deep one, because a real NIC
        pushes back on its host rather than dropping, and a drop there would read to MRC as a
        path failure (the host's socket buffers are the back-pressure)."""
        t, queue, mtu = self.topology, self.topology.queue_bytes, self.topology.mtu
        for link in t.links:
            rate = t.link_rate_bps(link)
            for node, peer in ((link.a, link.b), (link.b, link.a)):
                ifname = self.layout.ifname(node, peer)
                if node in self.hosts:
                    self.egress.attach(ifname, rate, max(queue, HOST_NIC_QUEUE), mtu, trim=False,
                                       netns_pid=self.hosts[node].pid)
                else:
                    self.egress.attach(ifname, rate, queue, mtu, trim=t.trim)

    @staticmethod
    def _in_parallel(scripts: dict[Host, str]) -> dict[Host, str]:
        """Send one shell command to each node at once, then collect every output."""
        for node, script in scripts.items():
            node.sendCmd(script)
        return {node: node.waitOutput() for node in scripts}

    # -- what a runner uses -----------------------------------------------------------------

    def host(self, name: str) -> Host:
        """The Mininet host: `.pid` names its network namespace, `.popen(argv)` runs a process in it."""
        return self.hosts[name]

    def apply(self, action: str, target: str, rate: float | None = None) -> float:
        """One scenario event (SPEC action names) on a link or switch; the monotonic time it took effect."""
        return self.faults.apply(action, target, rate)

    def link_counters(self) -> list[dict]:
        return self.faults.link_counters()

    def queue_waits(self) -> tuple[float, float]:
        return self.faults.queue_waits()

    def controller_stats(self) -> dict:
        """results.json `controller`: flow-mods at boot and after it (static routing: always 0), and the
        reconvergences of a routing that has them."""
        doc = self.controller.stats() or {}
        out = {"flow_mods_boot": doc.get("flow_mods_boot", 0), "flow_mods_after_boot": doc.get("flow_mods_after_boot", 0)}
        if "reconvergences" in doc:  # ecmp-reconverge: when the control plane rewrote which switches
            out["reconvergences"] = doc["reconvergences"]
        return out

    def packet_pids(self) -> dict[int, str]:
        """Processes that move the fabric's packets (for the CPU fidelity sampler): pid -> label."""
        pids = {}
        try:
            pids[int(Path(OVS_PIDFILE).read_text().strip())] = "ovs-vswitchd"
        except (OSError, ValueError):
            pass
        return pids

    def netns_pid(self, node: str) -> int | None:
        """A process whose network namespace holds `node`'s interfaces (enter it with
        `nsenter --net=/proc/PID/ns/net`); None for the root namespace, where OVS switch ports live."""
        host = self.hosts.get(node)
        return None if host is None else host.pid

    def nic(self, host: str, plane: int) -> str:
        """Interface name of `host`'s NIC on `plane` (inside the host's namespace)."""
        return self.layout.hosts[host].nics[plane].ifname

    def flow_tables(self) -> dict[str, list[ovs.FlowStat]]:
        """Every switch's flow entries with counters, by SPEC name."""
        by_bridge = ovs.dump_flows(self.layout.bridges)
        return {name: by_bridge[s.bridge] for name, s in self.layout.switches.items()}

    def table_miss_drops(self) -> int:
        """Packets every switch dropped for want of a route (table-miss entries)."""
        return sum(f.n_packets for flows in self.flow_tables().values() for f in flows if f.cookie == COOKIE_MISS)

    # -- teardown -------------------------------------------------------------------------

    def close(self) -> None:
        """Remove everything this fabric made; safe to call twice and after a partial build."""
        if self._closed:
            return
        self._closed = True
        blocked = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}  # a second Ctrl-C must not cut teardown short
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            if self.controller is not None:
                self.controller.stop()
            if self.egress is not None:
                self.egress.close()
            if not ovs.delete_group(self.layout.link_group, self.state.prefix):
                ovs.ip_batch([f"link del dev {name}" for name in self.layout.switch_ifnames
                              if Path(f"/sys/class/net/{name}").exists()])
            ovs.del_bridges(self.layout.bridges)
            for node in [*self.switches.values(), *self.hosts.values()]:
                node.terminate()
            if self.owns_state:
                self.state.teardown()
        finally:
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def _raise_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)
