"""The MRC datapath: one UDP socket per plane, the transport's connections, the uSID address of every packet.

Sending: each ``(ev, datagram)`` a connection hands out goes to ``Plan.ev_address(self,
peer, ev)`` through the socket of the EV's plane, which is bound to the host's address on
that plane (so the source address is right whatever the kernel's source selection) and
whose path address the kernel routes out of that plane's NIC. Receiving: the source
address ``fcbb:<plane>:<host uSID>::`` names the peer; with the connection id in the
datagram it selects the connection, created on the first packet of an unknown one
(connections are full duplex and symmetric, so the receiving end needs no set-up). The
fabric delivers a packet to the host address of its plane, hence to that plane's socket;
a wildcard socket on ``[::]`` takes whatever arrives to another local address (a path
address no switch has shifted, as between back-to-back namespaces).

Under ECMP routing (``--routing ecmp-reconverge``) the switches pick the path, so an EV
can no longer name a spine: it names a plane and an entropy value, carried as the UDP
source port (``ENTROPY_PORT_BASE`` + the EV's spine index), the way RoCE and UET NICs
feed entropy to ECMP. Each (plane, entropy) has its own sending socket bound to that
port, and packets go to the peer's host address on the plane; the plane sockets only
receive. The plane's send-buffer budget is split between its entropy sockets.

One socket per plane is the emulated NIC's per-port back-pressure: a real NIC never drops
its own host's packets, but the emulated host link has a finite egress queue (the fabric's
virtual queue, which drops silently, as on a wire). Each plane socket's send buffer
(``PLANE_SNDBUF``) is small enough that what the kernel holds for one NIC stays well under
that queue (64 KiB by default), so the socket says ``EAGAIN`` before the queue could
overflow, and the datagram waits in that plane's backlog, in order, until the socket is
writable again. No new data is generated while any backlog holds datagrams, so the
transport's clock (and its delay-driven window) sees the host's queueing. ``IPV6_RECVERR``
makes the kernel report a datagram a qdisc refused (``ENOBUFS``) instead of swallowing it;
it is retried after ``ENOBUFS_RETRY``. Nothing is dropped on the host without a trace.

The per-packet path is kept short (:mod:`.batchio`): a socket's receives are drained in batches of up
to ``batchio.BATCH`` datagrams into reused slots, one ``recvmmsg`` each in the compiled build (then
timers run and answers go out, so SACKs are never held behind a long drain); a connection touched in
a batch is flushed once per batch, and what it hands out leaves in one call in the order it was handed
out (``sendmmsg`` for each run through one plane socket), each datagram to its own address. Each
(connection, EV) caches its ready ``(socket, address)`` pair, each source address its peer.
"""
from __future__ import annotations

import errno
import functools
import heapq
import socket
import time
from collections.abc import Sequence

from ..addressing import HOST_BASE, Plan, decode
from ..transport import TransportConfig, WireError
from ..transport.wire import MRC_UDP_PORT, peek_conn_id
from . import batchio, ecn
from .endpoint import Emit, MrcEndpoint, Peer
from .loop import Attached, Reactor
from .payload import Payloads

RCVBUF = 8 << 20
PLANE_SNDBUF = 32 << 10
"""Requested SO_SNDBUF of a plane socket. The kernel doubles it and charges each datagram its
buffer's true size (about 1.8x the wire size at MTU 9000, 1.5x at 1500), so at most ~40 KB of
wire bytes wait in one NIC's queue: under the default 64 KiB host-port queue, and still
~3 ms of a 100 Mbit link to cover the agent's reaction time."""
ENOBUFS_RETRY = 0.0002
IPV6_RECVERR = 25  # linux/in6.h; the socket module does not export it
SO_RCVBUFFORCE = 33  # asm-generic/socket.h; root may exceed net.core.rmem_max
ENTROPY_PORT_BASE = 49152  # RoCEv2's range for source-port entropy


def open_sockets(plan: Plan, host: int, port: int = MRC_UDP_PORT) -> tuple[list[socket.socket], socket.socket]:
    """The plane sockets (index = plane), each on ``[host address on the plane]:port``, and the wildcard one."""
    planes = [_udp_socket((str(plan.host_address(k, host)), port), PLANE_SNDBUF) for k in range(plan.planes)]
    return planes, _udp_socket(("::", port), None)


def open_entropy_sockets(plan: Plan, host: int) -> list[list[socket.socket]]:
    """ECMP routing: per plane, one sending socket per entropy value (UDP source port), sharing the plane's
    send-buffer budget so the host's queue on that NIC stays as bounded as with one socket."""
    sndbuf = PLANE_SNDBUF // plan.spines
    return [[_udp_socket((str(plan.host_address(k, host)), ENTROPY_PORT_BASE + e), sndbuf) for e in range(plan.spines)]
            for k in range(plan.planes)]


def _udp_socket(address: tuple, sndbuf: int | None) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the wildcard and the plane sockets share the port
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
    ecn.enable(sock)
    sock.bind(address)
    sock.setblocking(False)
    return sock


class MrcDatapath(MrcEndpoint, Attached):
    """With `entropy` (ECMP routing: [plane][entropy] sending sockets), EVs become (plane, entropy) and
    packets go to host addresses; without it, EVs are uSID paths sent through the plane sockets. `io`: how the
    sockets are driven (:mod:`.batchio`; the build's own by default)."""

    def __init__(self, plane_sockets: list[socket.socket], wildcard: socket.socket | None, plan: Plan, host: int,
                 config: TransportConfig, payloads: Payloads, emit: Emit,
                 entropy: list[list[socket.socket]] | None = None, port: int = MRC_UDP_PORT,
                 qp_configs: Sequence[tuple[int, int, TransportConfig]] = (), io: batchio.PythonIo | None = None
                 ) -> None:
        super().__init__(plan, host, config, payloads, emit, qp_configs=qp_configs)
        self._planes = plane_sockets
        self._port = port
        self._entropy = entropy
        self._plane_senders = [[sock] for sock in plane_sockets] if entropy is None else entropy
        senders = [sock for plane in self._plane_senders for sock in plane]
        readers = plane_sockets if entropy is None else plane_sockets + senders  # senders too: their error queues
        self._sockets = readers + ([wildcard] if wildcard is not None else [])
        self._sources: dict[batchio.Source, int] = {}  # source address -> peer host, -1 for a stranger
        self._dirty: list[Peer] = []
        self._timers: list[tuple[float, int, Peer]] = []
        self._timer_seq = 0
        self._backlogs: dict[socket.socket, list] = {sock: [] for sock in senders}  # (sock, address, datagram)
        self._blocked = 0  # backlogs holding datagrams
        self._starved: list[Peer] = []  # peers not flushed while a backlog was blocked
        self._io = io or batchio.default()  # every datagram is read into its slots (see on_readable)
        self._retry_at: float | None = None

    def attach(self, reactor: Reactor) -> None:
        self._reactor = reactor
        for sock in self._sockets:
            reactor.add_reader(sock, functools.partial(self.on_readable, sock))


    def on_readable(self, sock: socket.socket) -> None:
        """Read what is ready (up to ``batchio.BATCH`` datagrams) into the I/O's reused slots: a connection reads a
        datagram during ``receive`` and keeps nothing of it (payload bytes are copied into their message), so no
        datagram costs an allocation of its own, which would also fragment the heap of a long run."""
        now = time.monotonic()
        try:
            batch = self._io.receive(sock)
        except OSError:
            self._socket_error(sock)
            return
        views = self._io.views
        sources = self._sources
        peers = self._peers
        dirty = self._dirty
        for slot, (size, source, ce) in enumerate(batch):
            data = views[slot][:size]
            peer = sources.get(source)
            if peer is None:
                peer = self._learn_source(source)
            try:
                key = (peer, peek_conn_id(data))
            except WireError:
                peer = -1
            if peer < 0:
                self.counters["strangers"] += 1
                continue
            p = peers.get(key)
            if p is None:
                p = self._peer_of(*key)
            p.conn.receive(data, None, now, ce)  # positional: the compiled call's fast path
            if not p.queued:
                p.queued = True
                dirty.append(p)

    def tick(self, now: float) -> float | None:
        """Fire due timers, send what the connections have, report their events; the next deadline."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            due, _, p = heapq.heappop(timers)
            if p.timer == due:
                p.timer = None
                p.conn.on_timer(now)
                self._mark(p)
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            for sock in self._backlogs:
                self._send_backlog(sock)
        self._flush(now)
        deadline = timers[0][0] if timers else None
        if self._retry_at is not None and (deadline is None or self._retry_at < deadline):
            deadline = self._retry_at
        return deadline

    def _flush(self, now: float) -> None:
        dirty = self._dirty
        if not dirty:
            return
        self._dirty = []
        for p in dirty:
            p.queued = False
            conn = p.conn
            if self._blocked:
                self._starved.append(p)
            else:
                out = conn.datagrams_to_send(now)
                if out:
                    self._send(p, out)
            events = conn.pop_events()
            if events:
                self._dispatch(p, events)
            c = conn.counters
            seen = (c.trimmed, c.retransmitted, c.timeouts)
            if seen != p.recovery:
                self._note_recovery(p, seen, now)
            timer = conn.next_timer()
            if timer != p.timer:
                p.timer = timer
                if timer is not None:
                    self._timer_seq += 1
                    heapq.heappush(self._timers, (timer, self._timer_seq, p))

    def _send(self, p: Peer, out: list) -> None:
        """In the order the connection handed them out; a plane whose backlog already holds datagrams queues its
        own behind them."""
        routes = p.addrs
        backlogs = self._backlogs
        batch = []
        for ev, datagram in out:
            route = routes.get(ev)
            if route is None:
                route = self._route(p, ev)
            sock, addr = route
            backlog = backlogs[sock]
            if backlog:
                backlog.append((sock, addr, datagram))  # keep the plane's order
            else:
                batch.append((sock, addr, datagram))
        if batch:
            self._send_all(batch)

    def _send_all(self, batch: list) -> None:
        """Send ``batch`` (socket, address, datagram each) in order. A socket that says "not now" (see `_full`) gets
        the datagram it refused, and every later one of its own, in its backlog; a datagram refused for another
        reason is tried once more (`_send_again`); the rest go on."""
        send = self._io.send
        start = 0
        while start < len(batch):
            sent, err = send(batch, start)
            start += sent
            if not err:
                return
            sock = batch[start][0]
            if self._full(sock, err):
                self._blocked += 1
                backlog = self._backlogs[sock]
                rest: list = []
                for item in batch[start:]:
                    (backlog if item[0] is sock else rest).append(item)
                batch, start = rest, 0
            else:
                self._send_again(*batch[start])
                start += 1

    def _send_backlog(self, sock: socket.socket) -> None:
        """Send what waits for ``sock``, in order; what the socket refuses again waits again."""
        backlog = self._backlogs[sock]
        if backlog:
            waiting = backlog[:]
            backlog.clear()
            self._unblocked()
            self._send_all(waiting)

    def _unblocked(self) -> None:
        """A backlog emptied: once none holds datagrams, the connections held back meanwhile send again."""
        self._blocked -= 1
        if not self._blocked:
            for p in self._starved:
                self._mark(p)
            self._starved.clear()

    def _full(self, sock: socket.socket, err: int) -> bool:
        """Whether a refused datagram (``err``, its errno) means "not now": the socket is full (``EAGAIN``: this
        NIC's share of the send buffer is used up; retried when writable) or a qdisc refused it (``ENOBUFS``;
        retried after ``ENOBUFS_RETRY``). Any other error is counted and answered with False."""
        if err in batchio.BLOCKED:
            self.reactor.add_writer(sock, lambda: self._on_writable(sock))
        elif err == errno.ENOBUFS:
            if self._retry_at is None:
                self._retry_at = time.monotonic() + ENOBUFS_RETRY
        else:
            self._socket_error(sock)
            return False
        self.counters["send_retries"] += 1
        return True

    def _send_again(self, sock: socket.socket, addr: batchio.Address, datagram) -> None:
        """After an error that was about an earlier datagram (an ICMP error reported on this call, so this
        one never left): one more try; if that fails too, the datagram is lost like on a wire."""
        sent, _err = self._io.send([(sock, addr, datagram)])
        if not sent:
            self.counters["socket_errors"] += 1

    def _on_writable(self, sock: socket.socket) -> None:
        self.reactor.remove_writer(sock)
        self._send_backlog(sock)

    def _socket_error(self, sock: socket.socket) -> None:
        """An error the kernel queued on a socket (IPV6_RECVERR): count it and drain the error queue."""
        self.counters["socket_errors"] += 1
        while True:
            try:
                sock.recvmsg(1, 1024, socket.MSG_ERRQUEUE)
            except OSError:
                return

    # -- the host's NICs -----------------------------------------------------------------------------

    def set_nic_down(self, planes: int, now: float) -> int:
        """As the endpoint's; what waited for a downed NIC's socket is dropped too, as the dead link would."""
        gone = super().set_nic_down(planes, now)
        for plane, sockets in enumerate(self._plane_senders):
            if gone >> plane & 1:
                for sock in sockets:
                    backlog = self._backlogs[sock]
                    if backlog:
                        self.counters["nic_down_discards"] += len(backlog)
                        backlog.clear()
                        self.reactor.remove_writer(sock)
                        self._unblocked()
        return gone

    def close(self) -> None:
        for sock in self._sockets:
            if self._reactor is not None:
                self._reactor.remove_reader(sock)
                self._reactor.remove_writer(sock)
            sock.close()

    def _route(self, p: Peer, ev: int) -> tuple[socket.socket, batchio.Address]:
        """The sending socket and the destination of one EV towards the peer: the plane socket and the
        uSID path, or (ECMP) the EV's entropy socket and the peer's host address."""
        plane, spine = self._plan.ev_path(ev)
        if self._entropy is None:
            sock, address = self._planes[plane], self._plan.ev_address(self._host, p.peer, ev)
        else:
            sock, address = self._entropy[plane][spine], self._plan.host_address(plane, p.peer)
        route = p.addrs[ev] = (sock, self._io.address(str(address), self._port))
        return route

    def _learn_source(self, source: batchio.Source) -> int:
        """The peer host behind a source address ``fcbb:<plane>:<host uSID>::``; -1 if it is none of ours."""
        try:
            plane, usids = decode(self._io.source_text(source))
        except ValueError:
            usids = ()
            plane = -1
        peer = usids[0] - HOST_BASE if len(usids) == 1 else -1
        if not (0 <= plane < self._plan.planes and 0 <= peer < self._plan.hosts and peer != self._host):
            peer = -1
        self._sources[source] = peer
        return peer

    def _mark(self, p: Peer) -> None:
        if not p.queued:
            p.queued = True
            self._dirty.append(p)
