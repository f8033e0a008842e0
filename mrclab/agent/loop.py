"""The agent's event loop: one thread, ``select()`` over a handful of sockets, one deadline.

``select`` rather than ``selectors``/epoll because Python's epoll wrapper rounds every
timeout up to a whole millisecond, and the transport's timers (SACK delay 200 us, RACK
reorder window 500 us) live below that; ``select`` takes microseconds, and an agent
watches only a few sockets (MRC: one UDP socket and the control socket; TCP: one per
peer). Signals reach the loop through a wakeup socket, so SIGTERM interrupts a wait at
once and is handled between two callbacks, never in the middle of one.
"""
from __future__ import annotations

import select
import signal
import socket
import time
from typing import Callable

Callback = Callable[[], None]


class Reactor:
    def __init__(self) -> None:
        self._readers: dict[socket.socket, Callback] = {}
        self._writers: dict[socket.socket, Callback] = {}
        self._rlist: list[socket.socket] = []
        self._wlist: list[socket.socket] = []
        self.stop_reason: str | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)
        self.add_reader(self._wake_r, self._drain_wakeups)

    def add_reader(self, sock: socket.socket, callback: Callback) -> None:
        self._readers[sock] = callback
        self._rlist = list(self._readers)

    def remove_reader(self, sock: socket.socket) -> None:
        if self._readers.pop(sock, None) is not None:
            self._rlist = list(self._readers)

    def add_writer(self, sock: socket.socket, callback: Callback) -> None:
        if sock not in self._writers:
            self._writers[sock] = callback
            self._wlist = list(self._writers)

    def remove_writer(self, sock: socket.socket) -> None:
        if self._writers.pop(sock, None) is not None:
            self._wlist = list(self._writers)

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
        readers, writers = self._readers, self._writers
        while self.stop_reason is None:
            deadline = tick(monotonic())
            if self.stop_reason is not None:
                break
            timeout = None if deadline is None else max(0.0, deadline - monotonic())
            ready_r, ready_w, _ = select.select(self._rlist, self._wlist, (), timeout)
            for sock in ready_r:
                callback = readers.get(sock)
                if callback is not None:
                    callback()
            for sock in ready_w:
                callback = writers.get(sock)
                if callback is not None:
                    callback()
        return self.stop_reason

    def close(self) -> None:
        signal.set_wakeup_fd(-1)
        self._wake_r.close()
        self._wake_w.close()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(256):
                pass
        except BlockingIOError:
            pass
