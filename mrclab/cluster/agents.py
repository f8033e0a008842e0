"""The runner's side of the agents of a lab over servers: each server's share starts the agents of its hosts
(`run_part`), and the runner talks to every agent as on one machine (`agents.Agents`), over its control socket
when the server is this machine, else over an SSH channel of that server's connection into a relay joined to the
socket (`cluster.relay`). Every time an agent reports is put on the runner's clock (its server's offset, read
when the shares were built), and a server that goes away shows as `ServerLost` naming it, not as its agents'
failure.
"""
from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import time
from typing import Any

from ..agent.endpoint import MARK_BIN_S
from ..agent.messages import Event, Message, Report
from ..agents import AgentControl, AgentError, Agents
from ..spec import Scenario
from . import messages as msg
from .run_part import KILL_WAIT_S
from .servers import CONNECTION_CLOSED, LIVENESS_S, Channel, Cluster, ServerLost


class RemoteProcess:
    """An agent's process that a server's share started, handled through that share (`agents.Process`)."""

    def __init__(self, channel: Channel, host: str, pid: int) -> None:
        self.channel, self.host, self.pid = channel, host, pid

    def poll(self) -> int | None:
        """How it ended (None: still running); ServerLost when its server is gone."""
        return self.channel.ask(msg.Reap(self.host, 0.0), msg.Reaped).code

    def wait(self, timeout: float | None = None) -> int:
        reaped = self.channel.ask(msg.Reap(self.host, timeout or 0.0), msg.Reaped, (timeout or 0.0) + LIVENESS_S)
        if reaped.code is None:
            raise subprocess.TimeoutExpired(f"agent {self.host}", timeout or 0.0)
        return reaped.code

    def kill(self) -> None:
        self.channel.ask(msg.Kill(self.host), msg.Reaped, KILL_WAIT_S + LIVENESS_S)


class Relayed:
    """An agent's control connection over SSH (`agents.Connection`): a send that fails because the server's
    connection is gone says so."""

    def __init__(self, chan: Any, channel: Channel, host: str) -> None:
        self.chan, self.channel, self.host = chan, channel, host

    def sendall(self, data: bytes) -> None:
        try:
            self.chan.sendall(data)
        except EOFError:  # paramiko: its connection failed under the send (broken, closed, or its peer silent)
            raise self.channel.lose(CONNECTION_CLOSED) from None
        except OSError as exc:
            if self.channel.connection_closed():
                raise self.channel.lose(CONNECTION_CLOSED) from None
            raise AgentError(f"agent {self.host}: its channel closed ({exc})") from None

    def recv(self, size: int) -> bytes:
        return self.chan.recv(size)

    def fileno(self) -> int:
        return self.chan.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):  # a lost server's connection can fail under the close
            self.chan.close()


class ClusterAgents(Agents):
    """All agents of a run over servers."""

    def __init__(self, cluster: Cluster, sampled: tuple[str, ...] = ()) -> None:
        super().__init__(sampled)
        self.cluster = cluster
        self.server: dict[str, int] = {}   # host -> its server's index
        self.shift: dict[str, float] = {}  # host -> its server's clock offset (seconds ahead of the runner's)

    def start_over(self, scenario: Scenario, timeout: float = 30.0) -> None:
        """Every server starts its hosts' agents at once; then each is joined and answers a ping."""
        cluster, topo = self.cluster, scenario.topology
        deadline = time.monotonic() + timeout
        launched = cluster.ask_all({i: msg.Launch(scenario.to_dict()) for i in cluster.live()}, msg.Launched,
                                   timeout)
        for i, answer in launched.items():
            channel = cluster.channels[i]
            for host, (pid, path) in answer.agents.items():
                self.join(AgentControl(host, topo.host_index(host), self._connect(channel, host, path),
                                       RemoteProcess(channel, host, pid)))
                self.server[host] = i
                self.shift[host] = cluster.shift(i)
        self.greet(deadline)

    @staticmethod
    def _connect(channel: Channel, host: str, path: str) -> Any:
        if channel.chan is None:  # this machine: its socket
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            return sock
        return Relayed(channel.relay(path), channel, host)

    def poll(self, timeout: float) -> None:
        try:
            self.cluster.check()
            super().poll(timeout)
        except ServerLost:
            self.forget_lost()
            raise

    def forget_lost(self) -> None:
        """Stop talking to the agents of servers that are gone (their shares' ends take them)."""
        for host, agent in list(self.controls.items()):
            if self.cluster.channels[self.server[host]].lost is not None:
                self.hang_up(agent)
                del self.controls[host]

    def _received(self, agent: AgentControl, message: Message) -> Message:
        shift = self.shift.get(agent.host)
        if not shift:
            return message
        if isinstance(message, Event):
            event: Any = message  # every event has its time, t
            return dataclasses.replace(event, t=round(event.t - shift, 6))
        if isinstance(message, Report):
            return dataclasses.replace(message, stats=on_runner_clock(message.stats, shift))
        return message

    def stop(self, timeout: float = 5.0) -> None:
        self.forget_lost()
        try:
            super().stop(timeout)
        except ServerLost:  # a server went away meanwhile: its share's end takes its agents
            for agent in self.controls.values():
                self.hang_up(agent)
            self.controls.clear()


def on_runner_clock(stats: dict, shift: float) -> dict:
    """An agent's stats report with its times (last sends, recovery marks) moved onto the runner's clock."""
    out = dict(stats)
    out["last_send"] = {peer: {ev: t - shift for ev, t in evs.items()}
                        for peer, evs in stats.get("last_send", {}).items()}
    slots = round(shift / MARK_BIN_S)
    out["marks"] = {key: {str(int(slot) - slots): n for slot, n in bins.items()}
                    for key, bins in stats.get("marks", {}).items()}
    return out

