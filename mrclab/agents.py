"""The runner's side of the agent control protocol: the agent's command line, and two clients of it.

Agents speak `mrclab.agent.messages` over a Unix socket, a line each: answers carry the request's
id; everything else an agent writes is an event (`Completed`, `Delivered`, `Failed`, `EvChanged`,
`NicChanged`). `Agents` starts one agent per host of a run and talks to them all at once, queueing
(host, event) pairs in arrival order for the runner's loop; `AgentClient` talks to one agent and
blocks until each answer, for tests, benchmarks and tools.
"""
from __future__ import annotations

import contextlib
import json
import selectors
import signal
import socket
import subprocess
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from . import lifeline
from .addressing import Plan
from .agent.messages import (
    A,
    Answer,
    Event,
    Failed,
    Message,
    Ping,
    Post,
    ProtocolError,
    Quit,
    Refused,
    Report,
    Request,
    RequestId,
    Stats,
    Warm,
    answer_to,
    decode,
    encode,
)
from .engines import ENGINES
from .errors import MrclabError
from .routing import DEFAULT as ROUTING_DEFAULT
from .runstate import RunState
from .spec import Scenario, Workload
from .transport.config import TransportConfig
from .transport.ev import EvState
from .transports import DEFAULT as TRANSPORT_DEFAULT
from .transports import TRANSPORTS

R = TypeVar("R", bound=Request)
EV_STATES = tuple(state.name for state in EvState)  # the columns of a sampling round's EV state sums


def exit_text(code: int | None) -> str:
    """How a process ended, in words: "was killed by SIGKILL", "exited with code 2", "is still running"."""
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class AgentError(MrclabError):
    """An agent refused a request, did not answer it in time, or exited."""


def command(host: int, plan: Plan, *, control: str, log: str, transport: str = TRANSPORT_DEFAULT,
            routing: str = ROUTING_DEFAULT, mtu: int = 9000, options: dict | None = None, seed: int = 1,
            qp_options: list | None = None, python: str = sys.executable) -> list[str]:
    """The agent's command line (``python -m mrclab.agent``, whose options are documented there)."""
    return [python, "-m", "mrclab.agent", "--host", str(host), "--planes", str(plan.planes),
            "--leaves", str(plan.leaves), "--spines", str(plan.spines), "--hosts-per-leaf", str(plan.hosts_per_leaf),
            "--mtu", str(mtu), "--control", control, "--log", log, "--transport", transport,
            "--options", json.dumps(options or {}), "--routing", routing, "--seed", str(seed)] + (
            ["--qp-options", json.dumps(qp_options)] if qp_options else [])


class Process(Protocol):
    """An agent's process as the runner handles it: a `subprocess.Popen` here, or one a server's share started."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Connection(Protocol):
    """An agent's control connection: its Unix socket, or an SSH channel to a relay into it (`cluster.relay`)."""

    def sendall(self, data: bytes, /) -> Any: ...

    def recv(self, size: int, /) -> bytes: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


@dataclass
class AgentControl:
    """One agent's control connection, as `Agents` multiplexes it."""

    host: str
    index: int
    sock: Connection
    proc: Process
    buffer: bytearray = field(default_factory=bytearray)
    replies: dict[RequestId, Answer] = field(default_factory=dict)
    unawaited: dict[RequestId, Post] = field(default_factory=dict)  # request id -> a post nobody waits for
    sampling: dict[RequestId, int] = field(default_factory=dict)   # request id -> sample round
    next_id: int = 1

    def send(self, op: type[R], **fields) -> R:
        request = op(self.next_id, **fields)
        self.next_id += 1
        self.sock.sendall(encode(request))
        return request


def effective_options(scenario: Scenario, workload: Workload | None = None) -> dict:
    """The scenario's transport options over the defaults that follow from its links (and, on an engine of simulated
    time, its round trip), with what the transport's row fixes (MRC transports only); with a workload, its own
    transport and options over the scenario's."""
    row = TRANSPORTS[workload.transport if workload is not None and workload.transport else scenario.transport]
    if not row.mrc:
        return dict(scenario.transport_options)
    topo = scenario.topology
    own = workload.transport_options if workload is not None else {}
    defaults = TransportConfig.link_defaults(topo.host_rate_bps, topo.mtu, topo.planes)
    if not ENGINES[scenario.engine].lab:  # simulated time keeps the timers as many round trips long as the lab's
        from .simulation.fabric import timer_defaults
        defaults.update(timer_defaults(topo))
    return {**defaults, **scenario.transport_options, **own, **row.options, "single_path": row.single_path}


def qp_options(scenario: Scenario) -> list[list]:
    """[first QP, QP past the last, options] of each workload that runs the MRC protocol: what an agent builds the
    connections of those QPs from."""
    out, base = [], 0
    for w in scenario.workloads:
        if TRANSPORTS[w.transport or scenario.transport].mrc:
            out.append([base, base + w.connections, effective_options(scenario, w)])
        base += w.connections
    return out


class Agents:
    """All agents of a run; `events` fills as `poll` reads their sockets."""

    def __init__(self, sampled: tuple[str, ...] = ()):
        """``sampled``: the counters a sampling round keeps (summed over agents); the rest of a reply is dropped."""
        self.sampled = sampled
        self.controls: dict[str, AgentControl] = {}
        self.events: deque[tuple[str, Event]] = deque()
        # one row per sampling round, [replies, replies with EV states, each `sampled` counter, each EV state],
        # summed as the replies come into one flat array: a long run keeps a few bytes per round, not every
        # agent's whole reply (`sample_row` reads one)
        self._width = 2 + len(sampled) + len(EV_STATES)
        self.samples = array("q")
        self.marks: dict[str, dict[int, int]] = {}      # counter -> millisecond slot -> count, over all agents
        self.selector = selectors.DefaultSelector()
        self.builds: dict[str, dict] = {}  # host -> the build its agent runs (its ping's answer)

    def start(self, scenario: Scenario, hosts: dict, state: RunState, log_dir: Path, timeout: float = 20.0) -> None:
        """`hosts` maps host name -> Mininet host; each agent is started inside its namespace."""
        deadline = time.monotonic() + timeout
        for name, (index, sock_path, proc) in launch(scenario, hosts, state, log_dir).items():
            self.join(AgentControl(name, index, _connect(sock_path, proc, deadline, log_dir / f"agent-{name}.stderr"),
                                   proc))
        self.greet(deadline)

    def join(self, agent: AgentControl) -> None:
        """Talk to an agent over its connection from now on."""
        self.controls[agent.host] = agent
        self.selector.register(agent.sock, selectors.EVENT_READ, agent)

    def greet(self, deadline: float) -> None:
        """Every agent answers a ping (with the build it runs) before the deadline."""
        for agent in self.controls.values():
            self.builds[agent.host] = self.call(agent.host, Ping, timeout=max(deadline - time.monotonic(), 1.0)).build

    @property
    def answering(self) -> bool:
        """Whether agents are there to ask (none once stopped, or if they never started)."""
        return bool(self.controls)

    def build(self) -> dict:
        """The transport build the agents ran (`mrclab.build`): one, or "mixed" naming each agent's."""
        kinds = {b.get("build") for b in self.builds.values()}
        if len(kinds) == 1:
            return {"transport": kinds.pop(), "why": next(iter(self.builds.values())).get("why")}
        return {"transport": "mixed" if kinds else None,
                "why": ", ".join(f"{host} {b.get('build')}" for host, b in self.builds.items()) or None}

    def post(self, host: str, conn: int, peer: int, msg: int, size: int) -> None:
        """Start a message without waiting; an agent that refuses it yields a `failed` event."""
        agent = self.controls[host]
        request = agent.send(Post, conn=conn, peer=peer, msg=msg, size=size)
        agent.unawaited[request.id] = request

    def warm(self, pairs: list[tuple[str, int, int]], timeout: float = 3.0) -> bool:
        """Every path of every (host, conn, peer) carries a probe and its answer before the clock starts
        (see ``Connection.warm``); False when some answers were still missing at the timeout."""
        expected = sum(self.call(host, Warm, conn=conn, peer=peer).probes for host, conn, peer in pairs)
        deadline = time.monotonic() + timeout
        while True:
            replies = sum(r.stats["counters"].get("warm_replies", 0) for r in self.call_all(Stats).values())
            if replies >= expected:
                return True
            if time.monotonic() >= deadline:
                return False
            self.poll(0.02)

    def _merge_marks(self, stats: dict) -> None:
        """Take a stats report's `marks` into the run's: each report has only what is new since the last."""
        for key, bins in stats.pop("marks", {}).items():
            merged = self.marks.setdefault(key, {})
            for slot, n in bins.items():
                merged[int(slot)] = merged.get(int(slot), 0) + n

    def _add_sample(self, round_no: int, stats: dict) -> None:
        row, counters, states = self.samples, stats.get("counters", {}), stats.get("ev_states")
        at = round_no * self._width
        row[at] += 1
        for i, name in enumerate(self.sampled, at + 2):
            if isinstance(counters.get(name), int):
                row[i] += counters[name]
        if isinstance(states, dict):
            row[at + 1] += 1
            for i, name in enumerate(EV_STATES, at + 2 + len(self.sampled)):
                if isinstance(states.get(name), int):
                    row[i] += states[name]

    def sample_row(self, round_no: int) -> tuple[int, dict[str, int], dict[str, int]] | None:
        """(agents that answered, counters summed over them, EV states summed: none when no agent has EVs) of a
        sampling round."""
        at = round_no * self._width
        if not 0 <= round_no < len(self.samples) // self._width:
            return None
        row = self.samples[at:at + self._width]
        counters = dict(zip(self.sampled, row[2:2 + len(self.sampled)], strict=True))
        states = dict(zip(EV_STATES, row[2 + len(self.sampled):], strict=True)) if row[1] else {}
        return row[0], counters, states

    def sample(self) -> int:
        """Ask every agent for its stats without waiting; returns the round's number (the next row), where the
        replies are summed."""
        round_no = len(self.samples) // self._width
        self.samples.extend([0] * self._width)
        for agent in self.controls.values():
            agent.sampling[agent.send(Stats).id] = round_no
        return round_no

    def call(self, host: str, op: type[Request[A]], timeout: float = 10.0, **fields) -> A:
        agent = self.controls[host]
        request_id = agent.send(op, **fields).id
        deadline = time.monotonic() + timeout
        while request_id not in agent.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(f"agent {host} did not answer {op.TYPE!r} within {timeout:g}s")
            self.poll(left)
        return _answer(f"agent {host}", op, agent.replies.pop(request_id))

    def call_all(self, op: type[Request[A]], timeout: float = 10.0) -> dict[str, A]:
        ids = {name: agent.send(op).id for name, agent in self.controls.items()}
        deadline = time.monotonic() + timeout
        while any(i not in self.controls[n].replies for n, i in ids.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                slow = [n for n, i in ids.items() if i not in self.controls[n].replies]
                raise AgentError(f"agents {', '.join(slow)} did not answer {op.TYPE!r} within {timeout:g}s")
            self.poll(left)
        return {n: _answer(f"agent {n}", op, self.controls[n].replies.pop(i)) for n, i in ids.items()}

    def poll(self, timeout: float) -> None:
        for key, _ in self.selector.select(max(timeout, 0.0)):
            agent: AgentControl = key.data
            chunk = agent.sock.recv(1 << 20)
            if not chunk:
                self.selector.unregister(agent.sock)
                raise AgentError(f"agent {agent.host} {exit_text(agent.proc.poll())}; see its log")
            agent.buffer += chunk
            while (newline := agent.buffer.find(b"\n")) >= 0:
                message = self._received(agent, _decode(f"agent {agent.host}", agent.buffer[:newline]))
                del agent.buffer[:newline + 1]
                if isinstance(message, Event):
                    self.events.append((agent.host, message))
                    continue
                if not isinstance(message, Answer):
                    raise AgentError(f"agent {agent.host} sent a request ({message.TYPE!r})")
                if isinstance(message, Report):
                    self._merge_marks(message.stats)
                if message.id in agent.sampling:
                    round_no = agent.sampling.pop(message.id)
                    if isinstance(message, Report):
                        self._add_sample(round_no, message.stats)
                elif message.id in agent.unawaited:
                    post = agent.unawaited.pop(message.id)
                    if isinstance(message, Refused):
                        self.events.append((agent.host, Failed(post.conn, post.peer, post.msg,
                                                               f"refused: {message.error}", time.monotonic())))
                else:
                    agent.replies[message.id] = message

    def _received(self, agent: AgentControl, message: Message) -> Message:
        """A message as it arrived; an agent whose clock is not the runner's has its times put on the runner's."""
        return message

    def stop(self, timeout: float = 5.0) -> None:
        """Ask every agent to quit, then make sure by PID; safe to call twice."""
        for agent in self.controls.values():
            with contextlib.suppress(OSError):
                agent.send(Quit)
        deadline = time.monotonic() + timeout
        for agent in self.controls.values():
            try:
                agent.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait()
            self.hang_up(agent)
        self.controls.clear()

    def hang_up(self, agent: AgentControl) -> None:
        """Close an agent's connection (its agent exits when it sees it close)."""
        if agent.sock.fileno() in self.selector.get_map():
            self.selector.unregister(agent.sock)
        agent.sock.close()

    def pids(self) -> dict[int, str]:
        return {agent.proc.pid: f"agent {name}" for name, agent in self.controls.items()}


def launch(scenario: Scenario, hosts: dict, state: RunState, log_dir: Path
           ) -> dict[str, tuple[int, Path, subprocess.Popen]]:
    """Start the agent of each of `hosts` (name -> Mininet host) in its namespace, recorded in `state`, its log and
    stderr in `log_dir`: host -> (its index, its control socket's path, its process)."""
    topo = scenario.topology
    sock_dir = state.private_dir()
    pending: dict[str, tuple[int, Path, subprocess.Popen]] = {}
    for name, host in hosts.items():
        index = topo.host_index(name)
        sock_path = sock_dir / f"{name}.sock"
        argv = command(index, topo.plan, control=str(sock_path), log=str(log_dir / f"agent-{name}.jsonl"),
                       transport=scenario.transport, routing=scenario.routing, mtu=topo.mtu,
                       options=effective_options(scenario), seed=scenario.seed, qp_options=qp_options(scenario))
        with open(log_dir / f"agent-{name}.stderr", "wb") as stderr:
            proc = host.popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT,
                              cwd=str(log_dir), preexec_fn=lifeline.die_with_parent())
        state.add_process(proc.pid, f"agent {name}")
        pending[name] = (index, sock_path, proc)
    return pending


def listening(path: Path, proc: Process, deadline: float, log: Path) -> None:
    """Wait until the agent's control socket is in place (it is renamed there once it listens); AgentError if the
    agent exits or the deadline passes first."""
    while not path.exists():
        if proc.poll() is not None:
            raise AgentError(f"agent {path.stem} {exit_text(proc.poll())}: {last_line(log) or 'no output'}")
        if time.monotonic() > deadline:
            raise AgentError(f"agent {path.stem} did not open its control socket {path}")
        time.sleep(0.02)


def last_line(path: Path) -> str:
    """The last line an agent wrote to its stderr ("" when none)."""
    lines = path.read_text(errors="replace").strip().splitlines()[-1:] if path.exists() else []
    return " ".join(lines)


def _decode(who: str, line: bytes | bytearray) -> Message:
    try:
        return decode(line)
    except ProtocolError as err:
        raise AgentError(f"{who} sent what is not a message: {err}") from None


def _answer(who: str, op: type[Request[A]], answer: Answer) -> A:
    """What answers a request of type ``op``; AgentError if the agent refused it or answered something else."""
    if isinstance(answer, Refused):
        raise AgentError(f"{who} refused {op.TYPE!r}: {answer.error}")
    try:
        return answer_to(op, answer)
    except ProtocolError as err:
        raise AgentError(f"{who}: {err}") from None


def _connect(path: Path, proc: Process, deadline: float, log: Path) -> socket.socket:
    while True:
        listening(path, proc, deadline, log)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except OSError:
            sock.close()
        if time.monotonic() > deadline:
            raise AgentError(f"agent {path.stem} did not open its control socket {path}")
        time.sleep(0.02)


class AgentClient:
    """One agent's control connection, blocking: each request waits for its answer."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        """Connect to an agent's control socket, waiting up to ``timeout`` for the agent to create it."""
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise AgentError(f"no agent listening at {path} after {timeout:g} s") from None
                time.sleep(0.02)
        self.sock = sock
        self.events: list[Event] = []
        self._buffer = b""
        self._next_id = 0

    def request(self, op: type[Request[A]], timeout: float = 10.0, **args) -> A:
        """Send one request and return its answer; AgentError if the agent refuses it."""
        self._next_id += 1
        request_id = self._next_id
        self.sock.sendall(encode(op(request_id, **args)))
        deadline = time.monotonic() + timeout
        while True:
            answer = None
            for message in self._read(deadline):
                if isinstance(message, Event):
                    self.events.append(message)
                elif isinstance(message, Answer) and message.id == request_id:
                    answer = message
            if answer is not None:
                return _answer("agent", op, answer)
            if time.monotonic() > deadline:
                raise AgentError(f"no answer to {op.TYPE!r} within {timeout:g} s")

    def wait(self, done: Callable[[list[Event]], bool], timeout: float) -> list[Event]:
        """Read events until ``done(events)`` holds; AgentError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not done(self.events):
            if time.monotonic() > deadline:
                raise AgentError(f"events not complete after {timeout:g} s ({len(self.events)} received)")
            self.events.extend(m for m in self._read(deadline) if isinstance(m, Event))
        return self.events

    def close(self) -> None:
        self.sock.close()

    def _read(self, deadline: float) -> list[Message]:
        self.sock.settimeout(max(0.001, min(0.2, deadline - time.monotonic())))
        try:
            chunk = self.sock.recv(1 << 16)
        except TimeoutError:
            return []
        if not chunk:
            raise AgentError("agent closed the control connection")
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return [_decode("agent", line) for line in lines if line.strip()]

