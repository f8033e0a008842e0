"""The agent's event loop: one thread, epoll over a handful of sockets, one deadline.

The loop sleeps until a socket is ready or the earliest timer is due, and never earlier:
epoll takes its timeout in whole milliseconds, rounded up, which makes the millisecond
the loop's timer granularity. Timers that fall due within one granularity are served by
one wake-up (pacing then releases every packet due by then as one burst; the transport's
token bucket holds more than a millisecond of line rate, so the rate is kept), and every
callback ready at once runs before the next ``tick``. A socket is watched for writability
only while its owner has output queued on it (:meth:`Reactor.add_writer` when a send
would block, :meth:`Reactor.remove_writer` once drained), so a writable socket never
wakes the loop for nothing. Signals reach the loop through a wakeup socket, so SIGTERM
interrupts a wait at once and is handled between two callbacks, never in the middle of one.
"""
from __future__ import annotations

import contextlib
import select
import signal
import socket
import time
from collections.abc import Callable

Callback = Callable[[], None]
TIMER_GRANULARITY = 0.001
"""epoll's: a timeout is a whole number of milliseconds, rounded up."""


class Reactor:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._readers: dict[int, Callback] = {}
        self._writers: dict[int, Callback] = {}
        self._masks: dict[int, int] = {}
        self._fds: dict[socket.socket, int] = {}
        self.stop_reason: str | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)
        self.add_reader(self._wake_r, self._drain_wakeups)

    def add_reader(self, sock: socket.socket, callback: Callback) -> None:
        fd = self._fds.setdefault(sock, sock.fileno())
        self._readers[fd] = callback
        self._watch(sock, fd)

    def remove_reader(self, sock: socket.socket) -> None:
        fd = self._fds.get(sock)
        if fd is not None and self._readers.pop(fd, None) is not None:
            self._watch(sock, fd)

    def add_writer(self, sock: socket.socket, callback: Callback) -> None:
        fd = self._fds.setdefault(sock, sock.fileno())
        if fd not in self._writers:
            self._writers[fd] = callback
            self._watch(sock, fd)

    def remove_writer(self, sock: socket.socket) -> None:
        fd = self._fds.get(sock)
        if fd is not None and self._writers.pop(fd, None) is not None:
            self._watch(sock, fd)

    def _watch(self, sock: socket.socket, fd: int) -> None:
        """Tell epoll what ``fd`` is watched for now (one system call, only when that changed). Sockets are
        remembered by object, with the descriptor they had when first watched: one closed meanwhile (which
        epoll has already forgotten) is let go."""
        mask = (select.EPOLLIN if fd in self._readers else 0) | (select.EPOLLOUT if fd in self._writers else 0)
        old = self._masks.get(fd, 0)
        if mask == old:
            return
        if not mask:
            del self._masks[fd], self._fds[sock]
            with contextlib.suppress(OSError):  # closed already
                self._epoll.unregister(fd)
            return
        self._masks[fd] = mask
        if old:
            self._epoll.modify(fd, mask)
        else:
            self._epoll.register(fd, mask)

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def stop_on_signals(self, *signums: int) -> None:
        """Turn each signal into :meth:`stop`, waking the loop through the wakeup socket."""
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for signum in signums:
            signal.signal(signum, lambda number, _frame: self.stop(f"signal {signal.Signals(number).name}"))

    def run(self, tick: Callable[[float], float | None]) -> str:
        """Until :meth:`stop`: ``tick(now)`` (timers, output; returns the next deadline), then wait for I/O."""
        monotonic = time.monotonic
        poll = self._epoll.poll
        readers, writers = self._readers, self._writers
        error = select.EPOLLERR | select.EPOLLHUP
        while self.stop_reason is None:
            deadline = tick(monotonic())
            if self.stop_reason is not None:
                break
            timeout = -1 if deadline is None else max(0.0, deadline - monotonic())
            for fd, events in poll(timeout):
                if events & (select.EPOLLIN | error):
                    callback = readers.get(fd)
                    if callback is not None:
                        callback()
                if events & (select.EPOLLOUT | error):
                    callback = writers.get(fd)
                    if callback is not None:
                        callback()
        return self.stop_reason

    def close(self) -> None:
        signal.set_wakeup_fd(-1)
        self._epoll.close()
        self._wake_r.close()
        self._wake_w.close()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(256):
                pass
        except BlockingIOError:
            pass


class Attached:
    """What a datapath does with the loop it is attached to, before which it has no sockets to watch."""

    _reactor: Reactor | None = None

    @property
    def reactor(self) -> Reactor:
        if self._reactor is None:
            raise RuntimeError("the datapath is not attached to a loop")
        return self._reactor
