"""The agent as the runner sees it: control requests in, answers and events out, a log of both.

It owns no sockets of the data path; the datapath (MRC over UDP or the TCP baseline)
posts messages, runs its timers and reports events through :meth:`Agent.emit`, and the
agent forwards each event to the runner and the log. It tells the datapath when one of the
host's NICs goes down or comes back (`nics.NicWatch`) and reports each change as a ``nic``
event. Its life is the runner's
connection: it waits up to ``ACCEPT_TIMEOUT`` for the runner to connect and exits when
that connection closes, on ``quit``, or on SIGTERM.
"""
from __future__ import annotations

import os
import time
from typing import Protocol

from .. import build
from .control import ControlChannel
from .eventlog import EventLog
from .loop import Reactor
from .messages import (
    Answer,
    Done,
    Event,
    NicChanged,
    Ping,
    Pong,
    Post,
    ProtocolError,
    Quit,
    Refused,
    Report,
    Request,
    Stats,
    Warm,
    Warmed,
    decode,
    to_dict,
)
from .nics import NicWatch

ACCEPT_TIMEOUT = 60.0


class Datapath(Protocol):
    def attach(self, reactor: Reactor) -> None: ...
    def post(self, conn_id: int, peer: int, msg: int, size: int) -> None: ...
    def tick(self, now: float) -> float | None: ...
    def warm(self, conn_id: int, peer: int) -> int: ...
    def stats(self) -> dict: ...
    def set_nic_down(self, planes: int, now: float) -> None: ...
    def close(self) -> None: ...


class Agent:
    def __init__(self, host: int, reactor: Reactor, log: EventLog) -> None:
        self.host = host
        self._reactor = reactor
        self._control: ControlChannel  # both given by run(): the agent serves nothing before
        self.datapath: Datapath
        self._log = log
        self._accept_deadline = time.monotonic() + ACCEPT_TIMEOUT
        self._writing = False  # watching the control socket for writability

    def run(self, datapath: Datapath, control: ControlChannel, nics: NicWatch | None = None) -> str:
        """Serve until stopped; the reason it stopped. The control socket must open only once the
        datapath is ready, so that a runner that finds the socket finds a working agent."""
        self.datapath = datapath
        self._control = control
        datapath.attach(self._reactor)
        if nics is not None:
            nics.attach(self._reactor, self._nics_changed, time.monotonic())
        if control.listener is not None:
            self._reactor.add_reader(control.listener, self._on_accept)
        reason = self._reactor.run(self._tick)
        self._log.write("stop", reason=reason, **self._stats())
        return reason

    def emit(self, event: Event) -> None:
        """A datapath event: to the runner and into the log."""
        self._log.write("event", **to_dict(event))
        self._control.send(event)

    def _nics_changed(self, down: int, changes: list[tuple[int, bool]], now: float) -> None:
        """Within the wake-up that heard of it: the datapath stops using (or uses again) those planes."""
        self.datapath.set_nic_down(down, now)
        for plane, up in changes:
            self.emit(NicChanged(plane, "up" if up else "down", now))

    def handle(self, line: bytes) -> Answer:
        """Answer one request line (and act on it)."""
        try:
            request = decode(line)
            if not isinstance(request, Request):
                raise ProtocolError(f"{request.TYPE!r} is not a request")
        except ProtocolError as err:
            self._log.write("request", line=line.decode(errors="replace"), ok=False, error=str(err))
            return Refused(err.request_id, str(err))
        try:
            answer = self._answer(request)
        except (ValueError, RuntimeError) as err:
            answer = Refused(request.id, str(err))
        error = {"error": answer.error} if isinstance(answer, Refused) else {}
        self._log.write("request", **to_dict(request), ok=not error, **error)
        return answer

    def _answer(self, request: Request) -> Answer:
        if isinstance(request, Ping):
            return Pong(request.id, self.host, os.getpid(), build.running())
        if isinstance(request, Post):
            self.datapath.post(request.conn, request.peer, request.msg, request.size)
        elif isinstance(request, Warm):
            return Warmed(request.id, self.datapath.warm(request.conn, request.peer))
        elif isinstance(request, Stats):
            return Report(request.id, self._stats())
        elif isinstance(request, Quit):
            self._reactor.stop("quit")
        return Done(request.id)

    def _stats(self) -> dict:
        stats = self.datapath.stats()
        stats["cpu_s"] = time.process_time()
        return stats

    def _tick(self, now: float) -> float | None:
        deadline = self.datapath.tick(now)
        if self._control.wants_write and not self._writing:
            self._control.flush()  # this wake-up's events and answers, in one write
            self._watch_control_output()
        if now >= self._log.next_flush():
            self._log.flush(now)
        candidates = [self._log.next_flush()]
        if self._control.peer is None:
            if now >= self._accept_deadline:
                self._reactor.stop(f"no runner connected within {ACCEPT_TIMEOUT:g} s")
            candidates.append(self._accept_deadline)
        if deadline is not None:
            candidates.append(deadline)
        return min(candidates)

    def _on_accept(self) -> None:
        listener = self._control.listener
        peer = self._control.accept()
        if listener is not None and peer is not None:
            self._reactor.remove_reader(listener)
            self._reactor.add_reader(peer, self._on_control)
            self._log.write("runner_connected")
            self._control.flush()
            self._watch_control_output()

    def _on_control(self) -> None:
        try:
            lines = self._control.read_lines()
        except ProtocolError as err:
            self._log.write("error", error=str(err))
            self._reactor.stop(f"control protocol: {err}")
            return
        if lines is None:
            self._reactor.stop("runner closed the control connection")
            return
        for line in lines:
            self._control.send(self.handle(line))

    def _watch_control_output(self) -> None:
        """Wait for writability only while the runner has not taken everything (it is not reading)."""
        peer = self._control.peer
        if peer is None:
            return
        self._writing = self._control.wants_write
        if self._writing:
            self._reactor.add_writer(peer, self._on_control_writable)
        else:
            self._reactor.remove_writer(peer)

    def _on_control_writable(self) -> None:
        self._control.flush()
        self._watch_control_output()
