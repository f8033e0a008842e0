"""The runner's line to an agent: newline-delimited JSON over one Unix stream socket.

Requests (runner -> agent) carry an ``id`` echoed in the answer::

    {"id": 1, "op": "ping"}          -> {"id": 1, "ok": true, "host": N, "pid": P, "build": {"build": B, "why": W}}
    {"id": 2, "op": "post", "conn": C, "peer": D, "msg": M, "size": B}
    {"id": 5, "op": "warm", "conn": C, "peer": D}   -> {"id": 5, "ok": true, "probes": N}  (one down every path)
    {"id": 3, "op": "stats"}                                  -> {"id": 3, "ok": true, "counters": {...}, ...}
    {"id": 4, "op": "quit"}

A request the agent cannot carry out is answered ``{"id": ..., "ok": false, "error": "..."}``
(``id`` is null when the line was not a JSON object with one). Events (agent -> runner)
are lines with an ``event`` key and no ``id``.

The socket is created under a temporary name with mode 0600 and renamed into place
once listening, so a runner that sees the path can connect at once. It serves one
runner: the agent's life is bound to that connection (when it closes, the agent exits,
so a dead runner never leaves agents behind), and later connection attempts find the
listener closed.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
from typing import Any, NamedTuple

FIELDS = {"ping": (), "post": ("conn", "peer", "msg", "size"), "warm": ("conn", "peer"), "stats": (), "quit": ()}
"""Each operation and the non-negative integer fields it takes."""

MAX_LINE = 1 << 16
U32 = 0xFFFFFFFF


class ProtocolError(ValueError):
    def __init__(self, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class Request(NamedTuple):
    id: Any
    op: str
    args: dict[str, int]


def parse_request(line: bytes | str) -> Request:
    """One request line -> Request; anything malformed raises ProtocolError naming what is wrong."""
    try:
        obj = json.loads(line)
    except ValueError as err:
        raise ProtocolError(f"request is not JSON: {err}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"request must be a JSON object, got {type(obj).__name__}")
    request_id = obj.get("id")
    if "id" not in obj:
        raise ProtocolError("request has no 'id'")
    op = obj.get("op")
    if op not in FIELDS:
        raise ProtocolError(f"unknown op {op!r}; allowed: {', '.join(FIELDS)}", request_id)
    unknown = sorted(set(obj) - {"id", "op", *FIELDS[op]})
    if unknown:
        raise ProtocolError(f"op {op!r} takes no {', '.join(map(repr, unknown))}", request_id)
    args = {}
    for name in FIELDS[op]:
        value = obj.get(name)
        if type(value) is not int or not 0 <= value <= U32:
            raise ProtocolError(f"op {op!r} needs {name!r} as an integer in 0..{U32}, got {value!r}", request_id)
        args[name] = value
    return Request(request_id, op, args)


def encode(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


class ControlChannel:
    """The listening socket, then the one runner connection, with buffered non-blocking output."""

    def __init__(self, path: str) -> None:
        self.path = path
        staging = f"{path}.{os.getpid()}.tmp"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(staging)
        finally:
            os.umask(old_umask)
        listener.listen(1)
        os.replace(staging, path)
        listener.setblocking(False)
        self.listener: socket.socket | None = listener
        self.peer: socket.socket | None = None
        self._inbox = bytearray()
        self._outbox = bytearray()

    def accept(self) -> socket.socket | None:
        """Take the runner's connection and stop listening; None if nobody was there after all."""
        if self.listener is None:
            return None
        try:
            peer, _ = self.listener.accept()
        except BlockingIOError:
            return None
        peer.setblocking(False)
        self.listener.close()
        self.listener = None
        self.peer = peer
        return peer

    def read_lines(self) -> list[bytes] | None:
        """Complete lines received so far; None once the runner has closed its end."""
        if self.peer is None:
            return []
        try:
            chunk = self.peer.recv(MAX_LINE)
        except BlockingIOError:
            return []
        except ConnectionError:
            return None
        if not chunk:
            return None
        self._inbox += chunk
        *lines, rest = self._inbox.split(b"\n")
        if len(rest) > MAX_LINE:
            raise ProtocolError(f"request line longer than {MAX_LINE} bytes")
        self._inbox = bytearray(rest)
        return [bytes(line) for line in lines if line.strip()]

    def send(self, obj: dict) -> None:
        """Queue one line; it leaves with the next :meth:`flush` (the owner flushes once per wake-up, so the
        events and answers of one wake-up share one write)."""
        self._outbox += encode(obj)

    def flush(self) -> None:
        """Write what the socket takes now; the rest waits for :meth:`wants_write` to clear (the owner calls
        flush again when the socket is writable)."""
        if self.peer is None or not self._outbox:
            return
        try:
            sent = self.peer.send(self._outbox)
        except BlockingIOError:
            sent = 0
        except ConnectionError:
            self._outbox.clear()  # the runner is gone; read_lines reports it
            return
        del self._outbox[:sent]

    @property
    def wants_write(self) -> bool:
        return bool(self.peer is not None and self._outbox)

    def close(self) -> None:
        """Push out what is buffered (briefly blocking), close, remove the socket path."""
        if self.peer is not None and self._outbox:
            try:
                self.peer.settimeout(1.0)
                self.peer.sendall(self._outbox)
            except OSError:
                pass
        for sock in (self.listener, self.peer):
            if sock is not None:
                sock.close()
        self.listener = self.peer = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
