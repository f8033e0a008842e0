"""The agent's end of the runner's line: one Unix stream socket carrying `messages`, a line each.

The socket is created under a temporary name with mode 0600 and renamed into place
once listening, so a runner that sees the path can connect at once. It serves one
runner: the agent's life is bound to that connection (when it closes, the agent exits,
so a dead runner never leaves agents behind), and later connection attempts find the
listener closed.
"""
from __future__ import annotations

import contextlib
import os
import socket

from .messages import Message, ProtocolError, encode

MAX_LINE = 1 << 16


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

    def send(self, message: Message) -> None:
        """Queue one line; it leaves with the next :meth:`flush` (the owner flushes once per wake-up, so the
        events and answers of one wake-up share one write)."""
        self._outbox += encode(message)

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
