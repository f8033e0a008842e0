"""A seeded discrete-event network that drives :class:`Connection` objects, for tests and benchmarks.

It touches connections only through ``receive`` / ``on_timer`` / ``datagrams_to_send`` /
``next_timer``, exactly as an agent does, so whatever passes here is the protocol, not
a harness shortcut. Agents are infinitely fast; the network is what takes time.

A packet from host a to host b on EV e crosses the links ``route(a, b, e)`` returns,
one after another. Each :class:`Link` is one direction of a cable: a FIFO drained at
``rate`` behind a ``queue``-byte buffer, then ``delay`` seconds of propagation. A DATA
packet that does not fit is trimmed to its header (``trim=True``, as MRC switches do)
or dropped (a go-back-N connection's, RoCE's, always); trimmed headers and control
packets take a strict-priority lane that skips the queue. Links can also drop at random
(``loss``), add random delay that keeps packets in order (``jitter``: up to that many
seconds, as a busy software switch does), delay a packet further (``reorder``
probability, up to ``reorder_delay``, overtaking others), duplicate (``dup``), flip a payload
bit (``corrupt``, which only the end-to-end digest can catch), mark ECN CE on a
queued DATA packet with a probability rising from 0 at ``ecn_min`` to 1 at ``ecn_max``
bytes ahead of it (as the lab's egress program does; the mark travels beside the
datagram, as the IPv6 header would carry it, and reaches ``receive(ce=...)``), or drop
everything (``blackhole``, switch it with :meth:`Network.at`). :func:`clos` builds the
lab's multi-plane two-tier shape from :class:`~mrclab.addressing.Plan`, one link per
direction with SPEC link names; as in the lab, a leaf's port toward a host never marks.
:func:`pull_nic` pulls a host's cable on one plane: both directions drop and the host
is told its NIC is down (``Connection.set_nic_down``), as the agent's netlink watch does.
"""
from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from typing import Any

from ..addressing import Plan
from .config import TransportConfig
from .connection import Connection
from .events import MessageCompleted
from .wire import DATA, DATA_HEADER_LEN, IP_UDP_OVERHEAD, trim


class Link:
    __slots__ = ("name", "rate", "delay", "queue", "trim", "loss", "reorder", "reorder_delay", "dup", "corrupt",
                 "ecn_min", "ecn_max", "jitter", "blackhole", "busy_until", "last_arrival", "tx_packets", "tx_bytes",
                 "drops", "trims", "cut_drops", "loss_drops", "stranded", "ecn_marked", "queued", "priority_packets")

    def __init__(self, name: str, rate: float, delay: float = 0.0, queue: int = 65536, trim: bool = True,
                 loss: float = 0.0, reorder: float = 0.0, reorder_delay: float = 0.0, dup: float = 0.0,
                 corrupt: float = 0.0, ecn_min: int | None = None, ecn_max: int | None = None,
                 jitter: float = 0.0) -> None:
        self.name = name
        self.rate = rate  # bit/s
        self.delay = delay
        self.queue = queue
        self.trim = trim
        self.loss = loss
        self.reorder = reorder
        self.reorder_delay = reorder_delay
        self.dup = dup
        self.corrupt = corrupt
        self.ecn_min = ecn_min  # None: this port never marks
        self.ecn_max = ecn_max if ecn_max is not None else ecn_min
        self.jitter = jitter
        self.blackhole = False
        self.busy_until = 0.0
        self.last_arrival = 0.0
        self.tx_packets = self.tx_bytes = self.drops = self.trims = 0
        self.cut_drops = self.loss_drops = self.ecn_marked = self.priority_packets = 0  # drops: all, these among them
        self.stranded = 0  # accepted before the link was cut, and lost with it (queued or on the wire)
        self.queued = 0.0  # seconds bulk packets waited behind the bytes ahead of them, summed

    def transmit(self, datagram, now: float, rng: random.Random, trimmable: bool = True
                 ) -> tuple[float, bytes, bool] | None:
        """When ``datagram`` reaches the far end, what it looks like then and whether this port marked it CE; None
        if it is lost here. A packet that is not ``trimmable`` (RoCE's) is dropped where MRC's would be trimmed."""
        if self.blackhole:
            self.drops += 1
            self.cut_drops += 1
            return None
        if self.loss and rng.random() < self.loss:
            self.drops += 1
            self.loss_drops += 1
            return None
        size = len(datagram) + IP_UDP_OVERHEAD
        backlog = (self.busy_until - now) * self.rate / 8 if self.busy_until > now else 0.0
        priority = datagram[1] != DATA or len(datagram) <= DATA_HEADER_LEN
        if not priority and backlog + size > self.queue:
            if not (self.trim and trimmable):
                self.drops += 1
                return None
            datagram = trim(datagram)
            size = len(datagram) + IP_UDP_OVERHEAD
            self.trims += 1
            priority = True
        elapsed = size * 8 / self.rate
        marked = False
        if priority:  # strict priority: ahead of the queue, taking its share of the line all the same
            depart = now + elapsed
            self.busy_until = (self.busy_until if self.busy_until > now else now) + elapsed
            self.priority_packets += 1
        else:
            low, high = self.ecn_min, self.ecn_max
            if low is not None and high is not None and backlog > low:
                marked = backlog >= high or rng.random() * (high - low) < backlog - low
                self.ecn_marked += marked
            start = self.busy_until if self.busy_until > now else now
            self.queued += start - now
            depart = start + elapsed
            self.busy_until = depart
        if self.corrupt and len(datagram) > DATA_HEADER_LEN and rng.random() < self.corrupt:  # a payload bit
            datagram = bytearray(datagram)
            datagram[DATA_HEADER_LEN + rng.randrange(len(datagram) - DATA_HEADER_LEN)] ^= 1 << rng.randrange(8)
        self.tx_packets += 1
        self.tx_bytes += size
        arrive = depart + self.delay
        if self.jitter:  # random extra delay, in order: no packet overtakes the one before it
            arrive += rng.random() * self.jitter
            if arrive < self.last_arrival:
                arrive = self.last_arrival
            self.last_arrival = arrive
        if self.reorder and rng.random() < self.reorder:
            arrive += rng.random() * self.reorder_delay
        return arrive, datagram, marked


class Endpoint:
    """A connection at a host, talking to the same ``conn_id`` at ``peer``."""

    __slots__ = ("host", "peer", "conn", "timer_at", "events", "on_event", "on_service")

    def __init__(self, host, peer, conn: Connection) -> None:
        self.host = host
        self.peer = peer
        self.conn = conn
        self.timer_at = float("inf")
        self.events: list[tuple[float, object]] | None = []  # (time, event) of every event raised; None: not kept
        self.on_event: Callable[[Network, Endpoint, object], None] | None = None
        self.on_service: Callable[[Network, Endpoint], None] | None = None
        """Takes the connection's events itself, after each time the network serviced it (instead of `events` and
        `on_event`): how a host that owns many connections hears of them."""


Route = Callable[[Any, Any, int], Sequence[Link]]


class Network:
    """The event loop: packets hop link to link, timers fire, connections answer."""

    def __init__(self, route: Route, seed: int = 0) -> None:
        self.now = 0.0
        self.rng = random.Random(seed)
        self._route = route
        self._routes: dict[tuple, Sequence[Link]] = {}
        self._heap: list = []
        self._seq = 0
        self._endpoints: dict[tuple, Endpoint] = {}
        self._nic_down: dict[Any, int] = {}  # host -> its planes whose NIC is down

    @property
    def events(self) -> int:
        """Events scheduled so far (packet hops, timers, faults): the simulation's work."""
        return self._seq

    def at(self, when: float, fn: Callable, *args) -> None:
        """Call ``fn(*args)`` at simulated time ``when`` (faults, workload steps, measurements)."""
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, fn, args))

    def connect(self, a, b, conn_id: int, evs: list[int], ev_plane: Callable[[int], int],
                config: TransportConfig | None = None, ev_path: Callable[[int], object] | None = None
                ) -> tuple[Endpoint, Endpoint]:
        """A connection between hosts a and b: (a's end, b's end); ``ev_path`` as for :class:`Connection`."""
        ends = []
        for host, peer in ((a, b), (b, a)):
            if (host, conn_id) in self._endpoints:
                raise ValueError(f"host {host} already has connection {conn_id}")
            ep = Endpoint(host, peer, Connection(conn_id, evs, ev_plane, config=config, ev_path=ev_path))
            if self._nic_down.get(host):
                ep.conn.set_nic_down(self._nic_down[host], self.now)
            self._endpoints[host, conn_id] = ep
            ends.append(ep)
        return ends[0], ends[1]

    def attach(self, host, peer, conn: Connection) -> Endpoint:
        """One end of a connection made elsewhere (a host's own): the network delivers ``conn``'s datagrams from
        ``peer`` to it and ships what it sends."""
        if (host, conn.conn_id) in self._endpoints:
            raise ValueError(f"host {host} already has connection {conn.conn_id}")
        ep = self._endpoints[host, conn.conn_id] = Endpoint(host, peer, conn)
        return ep

    def reroute(self) -> None:
        """Forget the routes taken so far: the fabric's forwarding changed (ECMP reconverged)."""
        self._routes.clear()

    def service(self, ep: Endpoint) -> None:
        """Something happened to ``ep``'s connection outside the network (a post, a NIC): ship what it has."""
        self._service(ep)

    def send(self, ep: Endpoint, msg_id: int, data: bytes, when: float | None = None) -> None:
        """Post a message on ``ep`` now or at ``when``."""
        self.at(self.now if when is None else when, self._post, ep, msg_id, data)

    def set_nic_down(self, host, planes: int) -> None:
        """Tell every connection of ``host`` which of its planes' NICs are down (a bitmap), now."""
        self._nic_down[host] = planes
        for (owner, _), ep in list(self._endpoints.items()):
            if owner == host:
                ep.conn.set_nic_down(planes, self.now)
                self._service(ep)

    def run(self, until: float = float("inf"), stop: Callable[[], bool] | None = None) -> None:
        """Process events up to ``until`` or until ``stop()`` holds (checked after each event)."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            when, _, fn, args = heapq.heappop(heap)
            self.now = when
            fn(*args)
            if stop is not None and stop():
                return
        self.now = max(self.now, until) if until != float("inf") else self.now

    # -- internals -----------------------------------------------------------------------------------

    def _post(self, ep: Endpoint, msg_id: int, data: bytes) -> None:
        ep.conn.send_message(msg_id, data)
        self._service(ep)

    def _service(self, ep: Endpoint) -> None:
        """After anything happened to a connection: hand out its events, ship its datagrams, re-arm its timer."""
        conn = ep.conn
        now = self.now
        if ep.on_service is None:
            self._dispatch(ep)
        while True:
            for ev, datagram in conn.datagrams_to_send(now):
                key = (ep.host, ep.peer, ev)
                path = self._routes.get(key)
                if path is None:
                    path = self._routes[key] = tuple(self._route(ep.host, ep.peer, ev))
                self._hop(datagram, path, 0, (ep.peer, conn.conn_id), trimmable=not conn.config.go_back_n)
            if ep.on_service is not None:
                ep.on_service(self, ep)
                break
            if not self._dispatch(ep):  # an event handler may have posted more to send
                break
        t = conn.next_timer()
        if t is not None and t < ep.timer_at:
            ep.timer_at = t
            self.at(t if t > now else now, self._timer, ep, t)

    def _dispatch(self, ep: Endpoint) -> bool:
        events = ep.conn.pop_events()
        for event in events:
            if ep.events is not None:
                ep.events.append((self.now, event))
            if ep.on_event is not None:
                ep.on_event(self, ep, event)
        return bool(events)

    def _timer(self, ep: Endpoint, t: float) -> None:
        if t != ep.timer_at:
            return  # superseded by an earlier one
        ep.timer_at = float("inf")
        ep.conn.on_timer(self.now)
        self._service(ep)

    def _hop(self, datagram, path: Sequence[Link], index: int, dest: tuple, ce: bool = False,
             trimmable: bool = True) -> None:
        """One link of ``path``; switches trim MRC data only, never a go-back-N (RoCE) connection's. A packet that
        was queued on or crossing a link cut meanwhile is lost with it."""
        if index:
            came = path[index - 1]
            if came.blackhole:
                came.stranded += 1
                return
        if index == len(path):
            ep = self._endpoints.get(dest)
            if ep is not None:
                ep.conn.receive(datagram, None, self.now, ce=ce)
                self._service(ep)
            return
        link = path[index]
        result = link.transmit(datagram, self.now, self.rng, trimmable)
        if result is None:
            return
        arrive, datagram, marked = result
        ce = ce or marked
        self.at(arrive, self._hop, datagram, path, index + 1, dest, ce, trimmable)
        if link.dup and self.rng.random() < link.dup:
            self.at(arrive + link.delay, self._hop, datagram, path, index + 1, dest, ce, trimmable)


def stream(net: Network, ep: Endpoint, size: int, depth: int = 2, start: float = 0.0,
           sent: dict[int, bytes] | None = None) -> None:
    """A closed-loop bulk flow: keep ``depth`` messages of ``size`` random bytes outstanding on ``ep``.

    ``sent``, if given, records every message by msg_id so a test can compare what arrived.
    """
    next_id = iter(range(1 << 32))

    def post() -> None:
        msg_id = next(next_id)
        data = net.rng.randbytes(size)
        if sent is not None:
            sent[msg_id] = data
        ep.conn.send_message(msg_id, data)

    def refill(net: Network, ep: Endpoint, event) -> None:
        if isinstance(event, MessageCompleted):
            post()

    def begin() -> None:
        for _ in range(depth):
            post()
        net._service(ep)

    ep.on_event = refill
    net.at(start, begin)


def clos(plan: Plan, host_rate: float, fabric_rate: float, delay: float = 1e-6, queue: int = 65536,
         host_queue: int = 1 << 20, **link_options) -> tuple[dict[str, Link], Route]:
    """The lab's fabric: links named ``a->b`` with SPEC node names, and the EV route through them.

    Hosts are plan host indices; a packet on EV e goes host -> leaf -> spine -> leaf -> host in
    the plane and through the spine ``plan.ev_path(e)`` names. Switch ports have ``queue`` bytes
    and trim; a host's own NIC queue (its qdisc) is ``host_queue`` deep and drops, as a host does.
    """
    links: dict[str, Link] = {}

    def add(a: str, b: str, rate: float, depth: int, **options) -> None:
        links[f"{a}->{b}"] = Link(f"{a}->{b}", rate, delay, depth, **options)

    for p in range(plan.planes):
        for leaf in range(plan.leaves):
            for s in range(plan.spines):
                add(f"p{p}l{leaf}", f"p{p}s{s}", fabric_rate, queue, **link_options)
                add(f"p{p}s{s}", f"p{p}l{leaf}", fabric_rate, queue, **link_options)
        for h in range(plan.hosts):
            host_leaf = f"p{p}l{plan.leaf_of(h)}"
            host_side = {key: value for key, value in link_options.items() if not key.startswith("ecn_")}
            add(f"h{h}", host_leaf, host_rate, host_queue, **{**host_side, "trim": False})
            add(host_leaf, f"h{h}", host_rate, queue, **host_side)  # the last hop to a host never marks

    def route(src: int, dst: int, ev: int) -> list[Link]:
        p, s = plan.ev_path(ev)
        up, down, spine = f"p{p}l{plan.leaf_of(src)}", f"p{p}l{plan.leaf_of(dst)}", f"p{p}s{s}"
        return [links[f"h{src}->{up}"], links[f"{up}->{spine}"], links[f"{spine}->{down}"], links[f"{down}->h{dst}"]]

    return links, route


def pull_nic(net: Network, links: dict[str, Link], plan: Plan, host: int, plane: int, *, down: bool) -> None:
    """Pull (``down``) or plug back host ``host``'s cable on ``plane``, now: both directions drop everything
    meanwhile, and the host hears of it at once."""
    for link in cable(links, f"h{host}-p{plane}l{plan.leaf_of(host)}"):
        link.blackhole = down
    planes = net._nic_down.get(host, 0)
    net.set_nic_down(host, planes | 1 << plane if down else planes & ~(1 << plane))


def cable(links: dict[str, Link], name: str) -> tuple[Link, Link]:
    """Both directions of the SPEC link ``a-b``."""
    a, b = name.split("-")
    return links[f"{a}->{b}"], links[f"{b}->{a}"]
