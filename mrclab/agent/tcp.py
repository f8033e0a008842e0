"""The TCP baseline datapath: the same control protocol and events, messages over kernel TCP.

One TCP connection per QP (``conn``) of a (src, dst) pair, opened by the sender on first
use from its host address on the pair's hashed plane to the peer's (``seg6`` turns those
into one uSID path per pair; under ECMP routing the switches forward host addresses
themselves and hash each connection's 5-tuple onto a spine, so no host routes are
installed), port ``TCP_PORT``. Each message travels as a frame header then its bytes::

    kind u8 (MSG=1, ACK=2)   3 bytes 0   conn u32   msg u32   length u64   digest u64

The receiver checks the digest (the transport's XXH3-64) and every byte against the
regenerated payload, emits ``delivered`` and answers an ACK frame on the same
connection; the sender emits ``completed`` when that ACK arrives. A connection that
breaks fails the messages it still owed an ACK for; the next ``post`` opens a new one.

Counters come from the sockets' ``TCP_INFO`` (data segments out, retransmissions,
minimum RTT); what TCP cannot know (trims, EV states) stays zero. ``last_send`` keys the
pair's one path by the EV that names it (``seg6.tcp_ev``), stamped whenever payload
bytes are written to the socket.
"""
from __future__ import annotations

import errno
import functools
import socket
import struct
import time
from collections import deque

from ..addressing import HOST_BASE, Plan, decode
from ..transport.wire import message_digest
from .loop import Attached, Reactor
from .messages import Completed, Delivered, Emit, Failed
from .payload import Payloads
from .seg6 import HostRoutes, tcp_ev, tcp_path

TCP_PORT = 4794
FRAME = struct.Struct(">BxxxIIQQ")
MSG, ACK = 1, 2
MAX_MESSAGE = 1 << 30
SOCKET_BUFFER = 4 << 20
READ_BURST = 64



def check_options(options: dict) -> None:
    if options:
        raise ValueError(f"transport tcp takes no options, got {', '.join(sorted(options))}")


def _tcp_info(sock: socket.socket) -> tuple[int, int, int]:
    """(total retransmissions, data segments out, minimum RTT in us): offsets 100, 156, 148 of struct tcp_info."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 160)
    total_retrans = int.from_bytes(raw[100:104], "little")
    min_rtt = int.from_bytes(raw[148:152], "little")
    data_segs_out = int.from_bytes(raw[156:160], "little")
    return total_retrans, data_segs_out, min_rtt


class _Stream:
    """One TCP connection: a write queue of frames and bytes, a reader of frames."""

    def __init__(self, sock: socket.socket, peer: int, outbound: bool, conn: int = -1) -> None:
        self.sock = sock
        self.peer = peer
        self.conn = conn  # the QP an outbound stream carries
        self.outbound = outbound
        self.connected = not outbound
        self.queue: deque[memoryview] = deque()
        self.unacked: dict[int, int] = {}  # msg -> conn, sent and not yet acknowledged
        self.header = bytearray(FRAME.size)
        self.header_view = memoryview(self.header)
        self.header_got = 0
        self.frame: tuple[int, int, int, int] | None = None  # conn, msg, length, digest of the body in progress
        self.body: bytearray | None = None
        self.body_view: memoryview | None = None
        self.body_got = 0


class TcpDatapath(Attached):
    def __init__(self, listener: socket.socket, routes: HostRoutes | None, plan: Plan, host: int,
                 payloads: Payloads, emit: Emit) -> None:
        self._listener = listener
        self._routes = routes
        self._plan = plan
        self._host = host
        self._payloads = payloads
        self._emit = emit
        self._outbound: dict[int, _Stream] = {}  # conn -> its stream
        self._inbound: set[_Stream] = set()
        self._last_send: dict[int, float] = {}
        self._closed_info = [0, 0]  # retransmissions, data segments of connections already closed
        self._min_rtt_us: int | None = None
        self.counters = dict(messages_sent=0, bytes_sent=0, bytes_delivered=0, bytes_verified=0,
                             messages_completed=0, messages_failed=0, verify_failures=0, connections=0)

    @classmethod
    def open(cls, plan: Plan, host: int, payloads: Payloads, emit: Emit, seg6_routes: bool = True) -> TcpDatapath:
        """Install the host's seg6 routes (unless the fabric routes host addresses) and listen on ``[::]:TCP_PORT``."""
        routes = HostRoutes(plan, host) if seg6_routes else None
        if routes is not None:
            routes.install()
        try:
            listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("::", TCP_PORT))
            listener.listen(64)
            listener.setblocking(False)
        except OSError:
            if routes is not None:
                routes.remove()
            raise
        return cls(listener, routes, plan, host, payloads, emit)

    def attach(self, reactor: Reactor) -> None:
        self._reactor = reactor
        reactor.add_reader(self._listener, self._on_accept)

    # -- application side --------------------------------------------------------------------------

    def warm(self, conn_id: int, peer: int) -> int:
        """Open the stream to ``peer`` now, so its handshake warms the fabric's flows before the clock starts
        (no probes to wait for: 0)."""
        self._plan.check_peer(self._host, peer)
        if conn_id not in self._outbound:
            self._connect(peer, conn_id)
        return 0

    def post(self, conn_id: int, peer: int, msg: int, size: int) -> None:
        self._plan.check_peer(self._host, peer)
        if size > MAX_MESSAGE:
            raise ValueError(f"message of {size} bytes exceeds {MAX_MESSAGE}")
        stream = self._outbound.get(conn_id)
        if stream is None:
            stream = self._connect(peer, conn_id)
        if msg in stream.unacked:
            raise ValueError(f"message {msg} to peer {peer} is still in flight")
        data = self._payloads.message(self._host, peer, msg, size)
        stream.unacked[msg] = conn_id
        self._write(stream, FRAME.pack(MSG, conn_id, msg, size, message_digest(data)), data)
        self.counters["messages_sent"] += 1
        self.counters["bytes_sent"] += size

    def tick(self, now: float) -> float | None:
        return None

    def set_nic_down(self, planes: int, now: float) -> None:
        """Nothing: kernel TCP keeps its one path and learns of a dead NIC only by its own timeouts, as a
        TCP connection pinned to one port does."""

    def stats(self) -> dict:
        retrans, segs = self._closed_info
        for stream in self._outbound.values():
            if stream.connected:
                r, s, rtt = _tcp_info(stream.sock)
                retrans += r
                segs += s
                if rtt and (self._min_rtt_us is None or rtt < self._min_rtt_us):
                    self._min_rtt_us = rtt
        own = self.counters
        counters = {"data_sent": segs, "retransmitted": retrans, "trimmed": 0, "timeouts": 0, "nacks": 0,
                    "probes": 0}
        counters.update(own)
        counters["messages_failed"] = own["messages_failed"] + own["verify_failures"]
        last_send = {str(peer): {str(tcp_ev(self._plan, self._host, peer)): t} for peer, t in self._last_send.items()}
        return {"counters": counters, "ev_states": {}, "last_send": last_send,
                "base_rtt_s": None if self._min_rtt_us is None else self._min_rtt_us * 1e-6}

    def close(self) -> None:
        for stream in list(self._outbound.values()) + list(self._inbound):
            self._drop(stream)
        if self._reactor is not None:
            self._reactor.remove_reader(self._listener)
        self._listener.close()
        if self._routes is not None:
            self._routes.remove()

    # -- connections -----------------------------------------------------------------------------------

    def _connect(self, peer: int, conn_id: int) -> _Stream:
        plane, _ = tcp_path(self._plan, self._host, peer)
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self._tune(sock)
        sock.bind((str(self._plan.host_address(plane, self._host)), 0))
        err = sock.connect_ex((str(self._plan.host_address(plane, peer)), TCP_PORT))
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            raise OSError(err, f"connect to host {peer}: {errno.errorcode.get(err, err)}")
        stream = self._outbound[conn_id] = _Stream(sock, peer, outbound=True, conn=conn_id)
        self.counters["connections"] += 1
        self.reactor.add_reader(sock, lambda: self._on_readable(stream))
        self.reactor.add_writer(sock, lambda: self._on_writable(stream))
        return stream

    def _on_accept(self) -> None:
        while True:
            try:
                sock, addr = self._listener.accept()
            except BlockingIOError:
                return
            try:
                plane, usids = decode(addr[0])
                peer = usids[0] - HOST_BASE if len(usids) == 1 else -1
            except ValueError:
                peer = -1
            if not 0 <= peer < self._plan.hosts:
                sock.close()
                continue
            self._tune(sock)
            stream = _Stream(sock, peer, outbound=False)
            self._inbound.add(stream)
            # bound now: one call may accept several connections, each reader must keep its own stream
            self.reactor.add_reader(sock, functools.partial(self._on_readable, stream))

    @staticmethod
    def _tune(sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)

    def _drop(self, stream: _Stream, reason: str | None = None) -> None:
        """Close a connection; with a ``reason``, fail every message it still owed an ACK for."""
        self.reactor.remove_reader(stream.sock)
        self.reactor.remove_writer(stream.sock)
        if stream.outbound and stream.connected:
            r, s, _ = _tcp_info(stream.sock)
            self._closed_info[0] += r
            self._closed_info[1] += s
        stream.sock.close()
        if stream.outbound:
            self._outbound.pop(stream.conn, None)
        else:
            self._inbound.discard(stream)
        if reason is not None:
            now = time.monotonic()
            for msg, conn in stream.unacked.items():
                self.counters["messages_failed"] += 1
                self._emit(Failed(conn, stream.peer, msg, reason, now))
        stream.unacked.clear()

    # -- bytes out ---------------------------------------------------------------------------------------

    def _write(self, stream: _Stream, *chunks: bytes | memoryview) -> None:
        stream.queue.extend(memoryview(c) for c in chunks if c)
        if stream.connected:
            self._on_writable(stream)

    def _on_writable(self, stream: _Stream) -> None:
        sock = stream.sock
        if not stream.connected:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._drop(stream, f"tcp_connect: {errno.errorcode.get(err, err)}")
                return
            stream.connected = True
        queue = stream.queue
        sent_any = False
        while queue:
            chunk = queue[0]
            try:
                sent = sock.send(chunk)
            except BlockingIOError:
                break
            except OSError as err:
                self._drop(stream, f"tcp_send: {err.strerror}")
                return
            sent_any = True
            if sent < len(chunk):
                queue[0] = chunk[sent:]
                break
            queue.popleft()
        if sent_any and stream.outbound:  # outbound streams carry only messages (ACKs go back on inbound ones)
            self._last_send[stream.peer] = time.monotonic()
        if queue:
            self.reactor.add_writer(sock, lambda: self._on_writable(stream))
        else:
            self.reactor.remove_writer(sock)

    # -- bytes in ------------------------------------------------------------------------------------------

    def _on_readable(self, stream: _Stream) -> None:
        sock = stream.sock
        for _ in range(READ_BURST):
            try:
                if stream.body_view is None:
                    got = sock.recv_into(stream.header_view[stream.header_got:])
                else:
                    got = sock.recv_into(stream.body_view[stream.body_got:])
            except BlockingIOError:
                return
            except OSError as err:
                self._drop(stream, f"tcp_recv: {err.strerror}")
                return
            if got == 0:
                self._drop(stream, "tcp_closed" if stream.unacked else None)
                return
            if stream.body is None:
                stream.header_got += got
                if stream.header_got == FRAME.size:
                    stream.header_got = 0
                    if not self._on_header(stream):
                        return
            else:
                stream.body_got += got
                if stream.body_got == len(stream.body):
                    self._on_message(stream)

    def _on_header(self, stream: _Stream) -> bool:
        kind, conn, msg, length, digest = FRAME.unpack(stream.header)
        if kind == ACK:
            if stream.unacked.pop(msg, None) is not None:
                self.counters["messages_completed"] += 1
                self._emit(Completed(conn, stream.peer, msg, time.monotonic()))
            return True
        if kind != MSG or length > MAX_MESSAGE:
            self._drop(stream, "tcp_protocol")
            return False
        stream.frame = (conn, msg, length, digest)
        stream.body = bytearray(length)
        stream.body_view = memoryview(stream.body)
        stream.body_got = 0
        if length == 0:
            self._on_message(stream)
        return True

    def _on_message(self, stream: _Stream) -> None:
        assert stream.frame is not None and stream.body is not None, "called once a body is complete"
        conn, msg, length, digest = stream.frame
        data = stream.body
        stream.frame = stream.body = stream.body_view = None
        peer = stream.peer
        now = time.monotonic()
        if message_digest(data) != digest:
            self.counters["messages_failed"] += 1
            self._emit(Failed(conn, peer, msg, "digest_mismatch", now))
            return
        verified = self._payloads.matches(peer, self._host, msg, data)
        self.counters["bytes_delivered"] += length
        self._emit(Delivered(conn, peer, msg, length, verified, now))
        if verified:
            self.counters["bytes_verified"] += length
        else:
            self.counters["verify_failures"] += 1
            self._emit(Failed(conn, peer, msg, "payload_mismatch", now))
        self._write(stream, FRAME.pack(ACK, conn, msg, length, 0))
