"""The hosts of a simulated run: the agents' endpoints (`agent.endpoint`) without sockets, in one process, on the
simulated clock, behind the same runner-side interface as the lab's agent processes (`agents.Agents`).

Each host is an `MrcEndpoint`, as each lab agent's datapath is: the same connections, EVs, pacing shares,
payload checks, events and stats. The network services a connection whenever a datagram, a timer or a
post reaches it, infinitely fast (no endpoint CPU is modelled), and ships what it sends at once. `SimAgents`
answers the runner as `Agents` does, except that a request is answered at once and `poll` moves the
simulated clock on instead of waiting for sockets.
"""
from __future__ import annotations

import functools

from .. import build
from ..addressing import Plan
from ..agent.endpoint import MrcEndpoint, Peer, configure
from ..agent.messages import A, Event, Failed, NicChanged, Report, Request, Stats, answer_to
from ..agent.payload import Payloads
from ..agents import Agents, effective_options, qp_options
from ..spec import Scenario
from ..transport.sim import Endpoint, Network
from ..transports import TRANSPORTS


class SimHost(MrcEndpoint):
    """One host's connections, each an endpoint of the network."""

    def __init__(self, net: Network, plan: Plan, host: int, emit, *, scenario: Scenario, payloads: Payloads) -> None:
        mtu = scenario.topology.mtu
        config = configure(effective_options(scenario), mtu, TRANSPORTS[scenario.transport].single_path,
                           pace_slack=0.0, pace_ahead=0.0)
        qp_configs = [(first, end, configure(options, mtu, single_path=False, pace_slack=0.0, pace_ahead=0.0))
                      for first, end, options in qp_options(scenario)]
        super().__init__(plan, host, config, payloads, emit, qp_configs=qp_configs, clock=lambda: net.now)
        self.net = net
        self._ends: dict[tuple[int, int], Endpoint] = {}

    def _peer_of(self, peer: int, conn_id: int) -> Peer:
        key = (peer, conn_id)
        p = self._peers.get(key)
        if p is None:
            p = super()._peer_of(peer, conn_id)
            end = self._ends[key] = self.net.attach(self._host, peer, p.conn)
            end.events = None
            end.on_service = functools.partial(self._serviced, p)
        return p

    def accept(self, peer: int, conn_id: int) -> None:
        """Have the connection ready before its first datagram comes (a lab agent makes it on that datagram)."""
        self._peer_of(peer, conn_id)

    def _mark(self, p: Peer) -> None:
        self.net.service(self._ends[p.peer, p.conn.conn_id])

    def _serviced(self, p: Peer, net: Network, end: Endpoint) -> None:
        events = p.conn.pop_events()
        if events:
            self._dispatch(p, events)
        c = p.conn.counters
        seen = (c.trimmed, c.retransmitted, c.timeouts)
        if seen != p.recovery:
            self._note_recovery(p, seen, net.now)

    def nic(self, plane: int, down: bool) -> None:
        """This host's NIC on ``plane`` lost or regained its link, as the agent's netlink watch reports it."""
        planes = self._nic_down | 1 << plane if down else self._nic_down & ~(1 << plane)
        self.set_nic_down(planes, self.net.now)
        self._emit(NicChanged(plane, "down" if down else "up", self.net.now))


class SimAgents(Agents):
    """Every host of a simulated run, answering the runner as the lab's agents do."""

    def __init__(self, net: Network, scenario: Scenario, sampled: tuple[str, ...] = ()) -> None:
        super().__init__(sampled=sampled)
        self.net = net
        topo = scenario.topology
        payloads = Payloads(scenario.seed)
        self.hosts = {name: SimHost(net, topo.plan, topo.host_index(name), functools.partial(self._event, name),
                                    scenario=scenario, payloads=payloads) for name in scenario.hosts}
        self.by_index = {topo.host_index(name): host for name, host in self.hosts.items()}
        self.builds = {name: build.running() for name in self.hosts}

    def nic(self, host: str, plane: int, down: bool) -> None:
        """The fabric cut or mended ``host``'s cable on ``plane`` (a host no workload uses is not simulated)."""
        if host in self.hosts:
            self.hosts[host].nic(plane, down)

    @property
    def answering(self) -> bool:
        return True

    def _event(self, host: str, event: Event) -> None:
        self.events.append((host, event))

    def post(self, host: str, conn: int, peer: int, msg: int, size: int) -> None:
        sender = self.hosts[host]
        self.by_index[peer].accept(sender.host, conn)
        try:
            sender.post(conn, peer, msg, size)
        except ValueError as exc:  # as an agent refuses a post
            self.events.append((host, Failed(conn, peer, msg, f"refused: {exc}", self.net.now)))

    def warm(self, pairs: list[tuple[str, int, int]], timeout: float = 3.0) -> bool:
        """Nothing to warm: the lab warms paths for its software switches' first-packet slow path, and a simulated
        switch forwards a flow's first packet like its last."""
        return True

    def sample(self) -> int:
        round_no = len(self.samples) // self._width
        self.samples.extend([0] * self._width)
        for report in self.call_all(Stats).values():
            self._add_sample(round_no, report.stats)
        return round_no

    def call(self, host: str, op: type[Request[A]], timeout: float = 10.0, **fields) -> A:
        """A simulated host answers stats only: anything else raises ProtocolError."""
        report = Report(None, self.hosts[host].stats())
        answer = answer_to(op, report)
        self._merge_marks(report.stats)
        return answer

    def call_all(self, op: type[Request[A]], timeout: float = 10.0) -> dict[str, A]:
        return {name: self.call(name, op) for name in self.hosts}

    def poll(self, timeout: float) -> None:
        """Run the network for ``timeout`` simulated seconds, or until a host reports an event."""
        events = self.events
        self.net.run(until=self.net.now + timeout, stop=lambda: bool(events))

    def stop(self, timeout: float = 5.0) -> None:
        """Nothing runs outside this process."""

    def pids(self) -> dict[int, str]:
        return {}
