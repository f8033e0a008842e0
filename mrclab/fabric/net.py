"""Build and tear down one run's fabric: Mininet hosts, switches of the chosen datapath, veth cables, shaping,
controller.

`Fabric` is a context manager. The switches are those of the run's datapath (`datapath`
chooses, `auto` included): Open vSwitch bridges (`ovs.OvsSwitches`) or Linux SRv6 routers
(`linux.LinuxRouters`); everything else is shared. Entering it builds everything in an
order chosen for speed and for cleanliness (each step is one batch where it can be):

1. the layout is computed and every name that lives in the root namespace is recorded in
   the RunState *before* anything is created;
2. host shells (Mininet `Host`, one network namespace each; PIDs recorded) get their
   IPv6 sysctls before any NIC exists, so NICs are born without link-local addresses;
3. the switches and the veth cables are made and configured (host cables through the run's
   cable namespace, `cables`), each host's NICs by one command per host, sent to all hosts in
   parallel;
4. the switches start and the controller programs them, once;
5. every port and every host NIC is shaped through `Egress`, and the host cables' patches joined;
6. it returns once the controller has programmed every switch.

Leaving it (normally, by exception, SIGINT or SIGTERM) removes exactly what was built,
and works after a partial build. What outlives a SIGKILL is in the RunState for
`mrclab clean`.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mininet.node import Host

from .. import layout as layout_mod
from ..cluster.share import Share
from ..controller.process import Controller
from ..errors import Terminated, UsageError
from ..routing import DEFAULT as ROUTING_DEFAULT
from ..routing import ROUTINGS
from ..runstate import RunState
from ..spec.topology import Topology
from . import datapath as datapath_mod
from . import hostconf
from .cables import HostCables
from .egress import CSUM_CARRIER, CSUM_MAKE_FINAL, Ecn, Egress
from .faults import Faults
from .shells import check_outputs, in_parallel

HOST_NIC_QUEUE = 4 << 20
Part = TypeVar("Part")


def default_egress(state: RunState) -> Egress:
    return Egress(state)


class Fabric:
    """One run's emulated fabric. Attributes a runner uses once built:

    topology, layout, state, datapath (the `datapath.Datapath` row that runs it: `.name` is
    "ovs" or "linux"), datapath_detail (which flavour, and why `auto` chose it), hosts (SPEC
    name -> Mininet Host, whose `.pid` is its namespace and `.popen()` runs a process in it),
    switches (the datapath's `Switches`), controller (`stats()`), egress, faults (link and
    switch faults, link counters)."""

    def __init__(self, topology: Topology, state: RunState | None = None, directory: Path | None = None,
                 routing: str = ROUTING_DEFAULT, convergence_delay: float = 2.0,
                 egress_factory: Callable[[RunState], Egress] = default_egress, *, datapath: str = "auto",
                 seed: int = 1, share: Share | None = None) -> None:
        if routing not in ROUTINGS:
            raise UsageError(f"routing {routing!r} is not available (available: {', '.join(ROUTINGS)})")
        self.topology = topology
        self.share = share  # one server's part of a lab over several (None: the whole fabric, here)
        self.nodes = share.nodes() if share is not None else frozenset((*topology.host_names, *topology.switch_names))
        self.datapath, why = datapath_mod.choose(datapath)
        if share is not None:  # before anything exists
            _check_share(topology, share, self.datapath.split_cables, ROUTINGS[routing].source_routed)
        self.owns_state = state is None
        self.state = state or RunState.create(f"fabric {topology.name}")
        # controller log, layout and stats: the run's results directory, else the run's private one (removed at
        # teardown)
        self.directory = directory or self.state.private_dir()
        self.layout = layout_mod.build(topology, self.state.prefix, split_cables=self.datapath.split_cables)
        self.egress_factory, self.routing = egress_factory, ROUTINGS[routing]
        self.convergence_delay = convergence_delay  # how long ecmp-reconverge waits before reprogramming
        self.seed = seed  # the kernel ECMP hash seed derives from it, so reruns hash alike
        self.hosts: dict[str, Host] = {}
        self.cables = HostCables(self)
        self.switches = self.datapath.switches(self)
        self.datapath_detail = f"{self.switches.describe()} ({why})"
        self.controller: Controller | None = None
        self.egress: Egress | None = None
        self.faults: Faults | None = None
        self._closed = False
        self._old_handlers: dict[int, Any] = {}  # what signal.signal returned: a handler, SIG_DFL or None

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> Fabric:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self._old_handlers[sig] = signal.signal(sig, _terminate)
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
        self.switches.record()
        if self.datapath.controller_first:  # its start-up (os-ken's imports) overlaps with the build
            self.controller = self._controller()
        self._make_hosts()
        self.switches.make()
        self.switches.cable()
        self.switches.configure()
        check_outputs(in_parallel({self.hosts[name]: hostconf.nic_script(host, self.topology.mtu)
                                   for name, host in self.layout.hosts.items() if name in self.hosts}))
        if self.controller is None:
            self.controller = self._controller()
        self.switches.start()
        self.egress = self.egress_factory(self.state)
        self._shape(self.egress)
        self.faults = self.datapath.faults(self)
        self.controller.wait_programmed()

    def _controller(self) -> Controller:
        return Controller(self.state, self.layout, self.directory, self.routing.app, self.convergence_delay,
                          datapath=self.datapath.name, netns=self.switches.netns_pids())

    def _make_hosts(self) -> None:
        for name, host in self.layout.hosts.items():
            if name not in self.nodes:
                continue
            node = Host(host.node, inNamespace=True)
            self.hosts[name] = node
            self.state.add_process(node.pid, f"host {name}")
        self.cables.make()
        in_parallel({node: hostconf.namespace_script() for node in self.hosts.values()})

    def _shape(self, egress: Egress) -> None:
        """Switch ports get the topology's buffer; a host NIC gets a deep one, because a real NIC
        pushes back on its host rather than dropping, and a drop there would read to MRC as a
        path failure (the host's socket buffers are the back-pressure). Where the switches leave
        L4 checksums alone, a host NIC makes its host's checksums those of the final destination."""
        t, queue, mtu = self.topology, self.topology.queue_bytes, self.topology.mtu
        csum = self.datapath.csum
        ecn = Ecn(t.ecn_min_bytes, t.ecn_max_bytes) if t.ecn else None
        for link in t.links:
            rate = t.link_rate_bps(link)
            for node, peer in ((link.a, link.b), (link.b, link.a)):
                if node not in self.nodes:
                    continue
                ifname = self.layout.ifname(node, peer)
                if node in self.hosts:
                    egress.attach(ifname, rate, max(queue, HOST_NIC_QUEUE), mtu, trim=False,
                                  netns_pid=self.hosts[node].pid,
                                  csum_mode=CSUM_CARRIER if csum == CSUM_CARRIER else CSUM_MAKE_FINAL)
                else:  # a leaf's port towards a host is the last hop and never marks, as in MRC's fabric
                    egress.attach(ifname, rate, queue, mtu, trim=t.trim, netns_pid=self.netns_pid(node),
                                  csum_mode=csum, ecn=ecn if link.kind == "fabric" else None)
        self.cables.join(egress, mtu)

    # -- what a runner uses -----------------------------------------------------------------

    def host(self, name: str) -> Host:
        """The Mininet host: `.pid` names its network namespace, `.popen(argv)` runs a process in it."""
        return self.hosts[name]

    def netns_pid(self, node: str) -> int | None:
        """A process whose network namespace holds `node`'s interfaces (enter it with
        `nsenter --net=/proc/PID/ns/net`); None: the root namespace, where OVS switch ports live."""
        if node in self.hosts:
            return self.hosts[node].pid
        return self.switches.netns_pid(node)

    def apply(self, action: str, target: str, *, loss_probability: float | None = None,
              rate_bps: float | None = None) -> float:
        """One scenario event (SPEC action names) on a link or switch; the monotonic time it took effect."""
        return self._built(self.faults).apply(action, target, loss_probability=loss_probability, rate_bps=rate_bps)

    def start_counting(self) -> None:
        """The workload starts: what the emulator fails to send counts from here."""
        self._built(self.faults).start_counting()

    def link_counters(self) -> list[dict]:
        return self._built(self.faults).link_counters()

    def queue_waits(self) -> tuple[float, float]:
        return self._built(self.faults).queue_waits()

    def queue_totals(self) -> tuple[int, int, int, int]:
        return self._built(self.faults).queue_totals()

    def controller_stats(self) -> dict:
        """results.json `controller`: flow-mods at boot and after it (static routing: always 0), and the
        reconvergences of a routing that has them."""
        doc = self._built(self.controller).stats() or {}
        out = {"flow_mods_boot": doc.get("flow_mods_boot", 0),
               "flow_mods_after_boot": doc.get("flow_mods_after_boot", 0)}
        if "reconvergences" in doc:  # ecmp-reconverge: when the control plane rewrote which switches
            out["reconvergences"] = doc["reconvergences"]
        return out

    def packet_pids(self) -> dict[int, str]:
        """Processes that move the fabric's packets (for the CPU fidelity sampler): pid -> label."""
        return self.switches.packet_pids()

    def nic(self, host: str, plane: int) -> str:
        """Interface name of `host`'s NIC on `plane` (inside the host's namespace)."""
        return self.layout.hosts[host].nics[plane].ifname

    @staticmethod
    def _built(part: Part | None) -> Part:
        """The controller or faults, which build() makes: asking for them before it is a bug."""
        if part is None:
            raise RuntimeError("the fabric is not built")
        return part

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
            self.switches.close()
            self.cables.close()
            for node in self.hosts.values():
                node.terminate()
            if self.owns_state:
                self.state.teardown()
        finally:
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def _terminate(signum, _frame) -> None:
    """SIGTERM/SIGHUP while a fabric exists unwinds like Ctrl-C, so every teardown runs."""
    raise Terminated(signal.Signals(signum).name)


def _check_share(topology: Topology, share: Share, split_cables: bool, source_routed: bool) -> None:
    """What a fabric spread over servers needs: every cable between two servers one of switches, each of its
    directions on its own interface (the linux datapath), and routes that never change (each server's
    controller sees only its own links)."""
    if not split_cables:
        raise UsageError("a lab over several servers needs the linux datapath (a cable between servers is a "
                         "VXLAN tunnel per direction)")
    if not source_routed:
        raise UsageError("a lab over several servers routes statically (static-srv6): a reconverging control "
                         "plane would need every server's link states")
    crossing = [link.name for link in topology.links
                if link.kind == "host" and share.server_of[link.a] != share.server_of[link.b]]
    if crossing:
        raise UsageError(f"host cable {crossing[0]} would run between two servers: place each host with its "
                         "leaves (placement: pods)")
