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

The per-packet path is kept short: receives are drained in batches of ``RECV_BATCH``
(then timers run and answers go out, so SACKs are never held behind a long drain), a
connection touched in a batch is flushed once per batch, and each (connection, EV) caches
its ready ``(sendto, address)`` pair, each source address its peer.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import heapq
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence

from ..addressing import HOST_BASE, Plan, conn_qp, decode
from ..transport import (
    Connection,
    EvState,
    EvStateChanged,
    MessageCompleted,
    MessageDelivered,
    MessageFailed,
    NicStateChanged,
    TransportConfig,
    WireError,
)
from ..transport.config import for_mtu
from ..transport.wire import MRC_UDP_PORT, peek_conn_id
from . import ecn
from .ecmp import flow_hash
from .loop import TIMER_GRANULARITY, Attached, Reactor
from .payload import Payloads

RECV_BATCH = 64
CONNECTION_KEYS = ("data_sent", "retransmitted", "trimmed", "ce_received", "ecn_skips", "bytes_delivered")
"""The counters each connection reports on its own (stats `connections`): what a researcher compares between
the connections of a run, ECN's signal and the EV turns it cost among them."""
RECOVERY_KEYS = ("trimmed", "retransmitted", "timeouts")
MARK_BIN_S = 0.001
"""When each of RECOVERY_KEYS grew, in bins of MARK_BIN_S of the monotonic clock, so the report plots
loss recovery at the time it happened rather than at the runner's 0.25 s samples."""
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
SPARE_FACTOR = 2  # EVs in a connection's pool per active EV (the MRC paper's QPs pick 128-256)

Emit = Callable[[dict], None]


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


class _Peer:
    """One connection with one peer, and what the datapath keeps beside it."""

    __slots__ = ("peer", "conn", "evs", "addrs", "timer", "queued", "sending", "recovery")

    def __init__(self, peer: int, conn: Connection, evs: list[int]) -> None:
        self.peer = peer
        self.conn = conn
        self.evs = evs
        self.addrs: dict[int, tuple] = {}
        self.timer: float | None = None
        self.queued = False  # in the datapath's dirty list
        self.sending = False  # this end has posted messages on it
        self.recovery = (0, 0, 0)  # RECOVERY_KEYS as last seen


class MrcDatapath(Attached):
    """With `entropy` (ECMP routing: [plane][entropy] sending sockets), EVs become (plane, entropy) and
    packets go to host addresses; without it, EVs are uSID paths sent through the plane sockets."""

    def __init__(self, plane_sockets: list[socket.socket], wildcard: socket.socket | None, plan: Plan, host: int,
                 config: TransportConfig, payloads: Payloads, emit: Emit,
                 entropy: list[list[socket.socket]] | None = None, port: int = MRC_UDP_PORT,
                 qp_configs: Sequence[tuple[int, int, TransportConfig]] = ()) -> None:
        self._planes = plane_sockets
        self._port = port
        self._qp_configs = list(qp_configs)  # (first QP, QP past the last, config): a workload's own
        self._entropy = entropy
        self._plane_senders = [[sock] for sock in plane_sockets] if entropy is None else entropy
        senders = [sock for plane in self._plane_senders for sock in plane]
        readers = plane_sockets if entropy is None else plane_sockets + senders  # senders too: their error queues
        self._sockets = readers + ([wildcard] if wildcard is not None else [])
        self._plan = plan
        self._host = host
        self._config = config
        self.ev_path = plan.ev_path  # EVs name whole paths (SRv6), so losses condemn paths; None where ECMP hides them
        self._payloads = payloads
        self._emit = emit
        paths = plan.paths_per_pair
        # every path equally often, and as many again in reserve: a retired path's slots go to spares on the good
        # paths of its plane, so each NIC keeps its share of the packets (its plane's link is the bottleneck)
        most = max([config.ev_count] + [c.ev_count for _, _, c in qp_configs])
        self._hashed = -(-most // paths) * paths  # the EVs a single-path QP's flow hash picks among
        self._ev_pool = list(range(SPARE_FACTOR * self._hashed))
        self._peers: dict[tuple[int, int], _Peer] = {}
        self._sources: dict[str, int] = {}  # source address -> peer host, -1 for a stranger
        self._dirty: list[_Peer] = []
        self._timers: list[tuple[float, int, _Peer]] = []
        self._timer_seq = 0
        self._backlogs: dict[socket.socket, deque] = {sock: deque() for sock in senders}  # (address, datagram)
        self._blocked = 0  # backlogs holding datagrams
        self._starved: list[_Peer] = []  # peers not flushed while a backlog was blocked
        self._rx_buffer = bytearray(65535)  # every datagram is read into this one (see on_readable)
        self._rx_view = memoryview(self._rx_buffer)
        self._retry_at: float | None = None
        self._busy: set[_Peer] = set()  # peers with messages in flight: they share the host's pacing rate
        self._nic_down = 0  # bitmap of the planes whose NIC is down
        self._far_down: dict[int, int] = {}  # peer -> its planes whose NIC is down, as its SACKs said
        self._marks: dict[str, dict[int, int]] = {key: {} for key in RECOVERY_KEYS}
        self.counters = dict(messages_sent=0, bytes_sent=0, bytes_verified=0, verify_failures=0,
                             send_retries=0, socket_errors=0, strangers=0, nic_down_discards=0)

    def attach(self, reactor: Reactor) -> None:
        self._reactor = reactor
        for sock in self._sockets:
            reactor.add_reader(sock, functools.partial(self.on_readable, sock))

    # -- application side ------------------------------------------------------------------------

    def post(self, conn_id: int, peer: int, msg: int, size: int) -> None:
        """Start sending message ``msg`` of ``size`` bytes to ``peer`` on connection ``conn_id``."""
        self._plan.check_peer(self._host, peer)
        limit = self._config_of(conn_id).max_message
        if size > limit:
            raise ValueError(f"message of {size} bytes exceeds max_message {limit}")
        p = self._peer_of(peer, conn_id)
        p.conn.send_message(msg, self._payloads.message(self._host, peer, msg, size))
        p.sending = True
        if p not in self._busy:
            self._busy.add(p)
            self._share_pacing()
        self.counters["messages_sent"] += 1
        self.counters["bytes_sent"] += size
        self._mark(p)

    def warm(self, conn_id: int, peer: int) -> int:
        """One probe down every path to ``peer`` (see ``Connection.warm``); how many."""
        self._plan.check_peer(self._host, peer)
        p = self._peer_of(peer, conn_id)
        self._mark(p)
        return p.conn.warm()

    # -- network side --------------------------------------------------------------------------------

    def on_readable(self, sock: socket.socket) -> None:
        """Read what is ready (up to RECV_BATCH datagrams) into the one reused buffer: a connection reads a
        datagram during ``receive`` and keeps nothing of it (payload bytes are copied into their message), so no
        datagram costs an allocation of its own, which would also fragment the heap of a long run."""
        now = time.monotonic()
        recv = sock.recvmsg_into
        into = [self._rx_buffer]
        view = self._rx_view
        congested = ecn.congestion_experienced
        ancillary = ecn.ANCILLARY_SIZE
        sources = self._sources
        peers = self._peers
        dirty = self._dirty
        for _ in range(RECV_BATCH):
            try:
                size, ancdata, _flags, addr = recv(into, ancillary)
                data = view[:size]
            except BlockingIOError:
                return
            except OSError as err:
                self._socket_error(sock, err)
                return
            peer = sources.get(addr[0])
            if peer is None:
                peer = self._learn_source(addr[0])
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
            p.conn.receive(data, None, now, ce=congested(ancdata))
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

    def _send(self, p: _Peer, out: list) -> None:
        routes = p.addrs
        backlogs = self._backlogs
        for ev, datagram in out:
            route = routes.get(ev)
            if route is None:
                route = self._route(p, ev)
            sock, addr = route
            if self._blocked and backlogs[sock]:
                backlogs[sock].append((addr, datagram))  # keep the plane's order
                continue
            try:
                sock.sendto(datagram, addr)
            except OSError as err:
                if self._full(sock, err):
                    self._blocked += 1
                    backlogs[sock].append((addr, datagram))
                else:
                    self._send_again(sock, addr, datagram)

    def _send_backlog(self, sock: socket.socket) -> None:
        backlog = self._backlogs[sock]
        if not backlog:
            return
        sendto = sock.sendto
        while backlog:
            addr, datagram = backlog[0]
            try:
                sendto(datagram, addr)
            except OSError as err:
                if self._full(sock, err):
                    return
                self._send_again(sock, addr, datagram)
            backlog.popleft()
        self._unblocked()

    def _unblocked(self) -> None:
        """A backlog emptied: once none holds datagrams, the connections held back meanwhile send again."""
        self._blocked -= 1
        if not self._blocked:
            for p in self._starved:
                self._mark(p)
            self._starved.clear()

    def _full(self, sock: socket.socket, err: OSError) -> bool:
        """Whether a failed ``sendto`` means "not now": the socket is full (``EAGAIN``: this NIC's share
        of the send buffer is used up; retried when writable) or a qdisc refused it (``ENOBUFS``;
        retried after ``ENOBUFS_RETRY``). Any other error is counted and answered with False."""
        if isinstance(err, BlockingIOError):
            self.reactor.add_writer(sock, lambda: self._on_writable(sock))
        elif err.errno == errno.ENOBUFS:
            if self._retry_at is None:
                self._retry_at = time.monotonic() + ENOBUFS_RETRY
        else:
            self._socket_error(sock, err)
            return False
        self.counters["send_retries"] += 1
        return True

    def _send_again(self, sock: socket.socket, addr: tuple, datagram) -> None:
        """After an error that was about an earlier datagram (an ICMP error reported on this call, so this
        one never left): one more try; if that fails too, the datagram is lost like on a wire."""
        try:
            sock.sendto(datagram, addr)
        except OSError:
            self.counters["socket_errors"] += 1

    def _on_writable(self, sock: socket.socket) -> None:
        self.reactor.remove_writer(sock)
        self._send_backlog(sock)

    def _socket_error(self, sock: socket.socket, err: OSError) -> None:
        """An error the kernel queued on a socket (IPV6_RECVERR): count it and drain the error queue."""
        self.counters["socket_errors"] += 1
        while True:
            try:
                sock.recvmsg(1, 1024, socket.MSG_ERRQUEUE)
            except OSError:
                return

    # -- the host's NICs -----------------------------------------------------------------------------

    def set_nic_down(self, planes: int, now: float) -> None:
        """The host's NICs of ``planes`` (a bitmap; 0: all up) are down. Every connection stops sending on those
        planes at once and tells its peers in its SACKs; what waited for a downed NIC's socket is dropped, as
        the dead link would; connections made later start from the same state."""
        gone = planes & ~self._nic_down
        self._nic_down = planes
        for p in self._peers.values():
            p.conn.set_nic_down(planes, now)
            self._mark(p)
        self._share_pacing()
        for plane, sockets in enumerate(self._plane_senders):
            if gone >> plane & 1:
                for sock in sockets:
                    backlog = self._backlogs[sock]
                    if backlog:
                        self.counters["nic_down_discards"] += len(backlog)
                        backlog.clear()
                        self.reactor.remove_writer(sock)
                        self._unblocked()

    # -- events and state --------------------------------------------------------------------------

    def _dispatch(self, p: _Peer, events: list) -> None:
        conn_id, peer = p.conn.conn_id, p.peer
        for event in events:
            kind = event.__class__
            if kind is EvStateChanged:
                self._emit({"event": "ev_state", "conn": conn_id, "peer": peer, "ev": event.ev,
                            "old": event.old.name, "new": event.new.name, "t": event.now})
            elif kind is MessageDelivered:
                self._delivered(conn_id, peer, event.msg_id, event.data)
            elif kind is MessageCompleted:
                self._emit({"event": "completed", "conn": conn_id, "peer": peer, "msg": event.msg_id,
                            "t": time.monotonic()})
            elif kind is MessageFailed:
                self._emit({"event": "failed", "conn": conn_id, "peer": peer, "msg": event.msg_id,
                            "reason": event.reason, "t": time.monotonic()})
            elif kind is NicStateChanged:
                self._far_nics(peer, event.remote, event.now)
        if p in self._busy and not p.conn.busy:
            self._busy.discard(p)
            self._share_pacing()

    def _far_nics(self, peer: int, down: int, now: float) -> None:
        """A connection heard from ``peer``'s SACKs which of its NICs are down: report each plane that changed, once
        per peer (its other connections hear the same)."""
        changed = down ^ self._far_down.get(peer, 0)
        if not changed:
            return
        self._far_down[peer] = down
        for plane in range(self._plan.planes):
            if changed >> plane & 1:
                self._emit({"event": "nic", "of": peer, "plane": plane, "state": "down" if down >> plane & 1 else "up",
                            "t": now})

    def _note_recovery(self, p: _Peer, seen: tuple, now: float) -> None:
        slot = int(now / MARK_BIN_S)
        for key, new, old in zip(RECOVERY_KEYS, seen, p.recovery, strict=True):
            if new != old:
                bins = self._marks[key]
                bins[slot] = bins.get(slot, 0) + new - old
        p.recovery = seen

    def _share_pacing(self) -> None:
        """The pacing rate is the host's line rate: connections sending at once split it evenly, as a
        NIC's scheduler would, so that together they never outrun the NICs into the host backlog. A
        single-path connection (QP) has one NIC: it splits that NIC's rate with the others on its plane. NICs
        that are down carry nothing, so sprayed connections share the rate of those left."""
        planes = self._plan.planes
        if any(not p.conn.config.single_path for p in self._busy):  # sprayed ones over every NIC: an even share
            up = planes - bin(self._nic_down & ((1 << planes) - 1)).count("1")
            share = max(up, 1) / planes / max(1, len(self._busy))
            for p in self._busy:
                p.conn.set_pace_share(share)
            return
        on_plane: dict[int, list[_Peer]] = {}
        for p in self._busy:
            on_plane.setdefault(self._plane_of(p.evs[0]), []).append(p)
        for peers in on_plane.values():
            for p in peers:
                p.conn.set_pace_share(1.0 / (planes * len(peers)))

    def _delivered(self, conn_id: int, peer: int, msg: int, data: bytearray) -> None:
        verified = self._payloads.matches(peer, self._host, msg, data)
        now = time.monotonic()
        self._emit({"event": "delivered", "conn": conn_id, "peer": peer, "msg": msg, "bytes": len(data),
                    "verified": verified, "t": now})
        if verified:
            self.counters["bytes_verified"] += len(data)
        else:
            self.counters["verify_failures"] += 1
            self._emit({"event": "failed", "conn": conn_id, "peer": peer, "msg": msg,
                        "reason": "payload_mismatch", "t": now})

    def stats(self) -> dict:
        """Counters summed over connections, and some of each on its own (`CONNECTION_KEYS`); EV states, last
        DATA send and DATA packets per (peer, EV) of sending ones."""
        totals: dict[str, int] = {}
        ev_states = {state.name: 0 for state in EvState}
        last_send: dict[str, dict[str, float]] = {}
        ev_sent: dict[str, dict[str, int]] = {}  # peer -> EV -> DATA packets, over connections
        rtts = []
        hist: dict[int, int] = {}
        connections = []
        for p in self._peers.values():
            conn = p.conn
            mine = conn.counters.as_dict()
            for name, value in mine.items():
                totals[name] = totals.get(name, 0) + value
            connections.append({"conn": conn.conn_id, "peer": p.peer, **{k: mine.get(k, 0) for k in CONNECTION_KEYS}})
            if not p.sending:
                continue
            per_ev = last_send.setdefault(str(p.peer), {})
            sent = ev_sent.setdefault(str(p.peer), {})
            for ev in p.evs:
                ev_states[conn.ev_state(ev).name] += 1
                t = conn.ev_last_send(ev)
                if t is not None and t > per_ev.get(str(ev), 0.0):
                    per_ev[str(ev)] = t
                n = conn.ev_sent(ev)
                if n:
                    sent[str(ev)] = sent.get(str(ev), 0) + n
            if conn.min_rtt is not None:
                rtts.append(conn.min_rtt)
            for bucket, n in conn.rtt_histogram.items():
                hist[bucket] = hist.get(bucket, 0) + n
        own = self.counters
        counters = {
            "data_sent": totals.get("data_sent", 0),
            "retransmitted": totals.get("retransmitted", 0),
            "trimmed": totals.get("trimmed", 0),
            "timeouts": totals.get("timeouts", 0),
            "nacks": totals.get("nacks", 0),
            "probes": totals.get("probes", 0),
            "warm_probes": totals.get("warm_probes", 0),
            "warm_replies": totals.get("warm_replies", 0),
            "bytes_sent": own["bytes_sent"],
            "bytes_delivered": totals.get("bytes_delivered", 0),
            "bytes_verified": own["bytes_verified"],
            "messages_sent": own["messages_sent"],
            "messages_completed": totals.get("messages_completed", 0),
            "messages_failed": (totals.get("messages_failed", 0) + totals.get("digest_failures", 0)
                                + own["verify_failures"]),
            "wire_payload_bytes": totals.get("bytes_sent", 0),
        }
        for name in ("sacks", "lost", "ev_retired", "ev_restored", "paths_retired", "paths_restored",
                     "retirements_undone",
                     "paths_held", "skips", "duplicates", "malformed", "digest_failures", "ce_received", "ecn_skips"):
            counters[name] = totals.get(name, 0)
        for name in ("verify_failures", "send_retries", "socket_errors", "strangers", "nic_down_discards"):
            counters[name] = own[name]
        marks = {key: {str(slot): n for slot, n in bins.items()} for key, bins in self._marks.items() if bins}
        self._marks = {key: {} for key in RECOVERY_KEYS}  # each stats reply carries what is new since the last
        return {"counters": counters, "ev_states": ev_states, "last_send": last_send, "ev_sent": ev_sent,
                "marks": marks, "connections": connections,
                "base_rtt_s": min(rtts) if rtts else None, "rtt_hist": {str(b): n for b, n in hist.items()}}

    def close(self) -> None:
        for sock in self._sockets:
            if self._reactor is not None:
                self._reactor.remove_reader(sock)
                self._reactor.remove_writer(sock)
            sock.close()

    # -- internals -------------------------------------------------------------------------------------

    def _peer_of(self, peer: int, conn_id: int) -> _Peer:
        key = (peer, conn_id)
        p = self._peers.get(key)
        if p is None:
            config = self._config_of(conn_id)
            evs = self._evs_for(peer, conn_id, config)
            conn = Connection(conn_id, evs, self._plane_of, config=config, ev_path=self.ev_path)
            if self._nic_down:
                conn.set_nic_down(self._nic_down, time.monotonic())
            p = self._peers[key] = _Peer(peer, conn, evs)
        return p

    def _config_of(self, conn_id: int) -> TransportConfig:
        """The configuration of a connection: its workload's (by its QP index), else the agent's."""
        qp = conn_qp(conn_id)
        return next((config for first, end, config in self._qp_configs if first <= qp < end), self._config)

    def _evs_for(self, peer: int, conn_id: int, config: TransportConfig) -> list[int]:
        """The pool's first ``ev_count + ev_spares`` EVs; in single-path mode the one a flow hash of (src, dst, conn)
        picks."""
        pool = self._ev_pool
        if config.single_path:
            return [pool[flow_hash(self._host, peer, conn_id) % self._hashed]]
        return pool[:config.ev_count + config.ev_spares]

    def _plane_of(self, ev: int) -> int:
        return self._plan.ev_path(ev)[0]

    def _route(self, p: _Peer, ev: int) -> tuple[socket.socket, tuple]:
        """The sending socket and the destination of one EV towards the peer: the plane socket and the
        uSID path, or (ECMP) the EV's entropy socket and the peer's host address."""
        plane, spine = self._plan.ev_path(ev)
        if self._entropy is None:
            sock, address = self._planes[plane], self._plan.ev_address(self._host, p.peer, ev)
        else:
            sock, address = self._entropy[plane][spine], self._plan.host_address(plane, p.peer)
        route = p.addrs[ev] = (sock, (str(address), self._port, 0, 0))
        return route

    def _learn_source(self, address: str) -> int:
        """The peer host behind a source address ``fcbb:<plane>:<host uSID>::``; -1 if it is none of ours."""
        try:
            plane, usids = decode(address)
        except ValueError:
            usids = ()
            plane = -1
        peer = usids[0] - HOST_BASE if len(usids) == 1 else -1
        if not (0 <= plane < self._plan.planes and 0 <= peer < self._plan.hosts and peer != self._host):
            peer = -1
        self._sources[address] = peer
        return peer

    def _mark(self, p: _Peer) -> None:
        if not p.queued:
            p.queued = True
            self._dirty.append(p)


def configure(options: dict, mtu: int, single_path: bool) -> TransportConfig:
    """The transport's configuration: the scenario's options over the agent's defaults. ``mss`` fills the
    MTU. ``sack_delay`` is 0: the agent takes its answers once per wake-up, which already coalesces the SACKs
    of what one wake-up received, while a delay below the loop's timer granularity would only cost a wake-up
    of its own per SACK. ``pace_slack`` is that granularity: a wake-up sends what the pacer would release
    before the loop could wake again."""
    config = for_mtu({"sack_delay": 0.0, "pace_slack": TIMER_GRANULARITY, **options}, mtu)
    return dataclasses.replace(config, single_path=True) if single_path else config
