"""The runner's side of the agent control protocol: start one agent per host, talk to them all.

Agents speak newline-delimited JSON over a Unix socket (see mrclab/agent). Replies carry
the request's id; everything else an agent writes is an event (`completed`, `delivered`,
`failed`, `ev_state`), queued here in arrival order for the runner's loop.
"""
from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from . import lifeline
from .errors import MrclabError
from .runstate import RunState
from .spec import Scenario
from .transport.config import TransportConfig


class AgentError(MrclabError):
    pass


@dataclass
class AgentLink:
    host: str
    index: int
    sock: socket.socket
    proc: subprocess.Popen
    buffer: bytearray = field(default_factory=bytearray)
    replies: dict = field(default_factory=dict)
    unawaited: dict = field(default_factory=dict)  # request id -> (conn, msg) of a post
    sampling: dict = field(default_factory=dict)   # request id -> sample round
    next_id: int = 1

    def send(self, op: str, **fields) -> int:
        request_id = self.next_id
        self.next_id += 1
        self.sock.sendall(json.dumps({"id": request_id, "op": op, **fields}).encode() + b"\n")
        return request_id


def effective_options(scenario: Scenario) -> dict:
    """The scenario's transport options over the defaults that follow from its links (MRC transports only)."""
    if scenario.transport == "tcp":
        return dict(scenario.transport_options)
    topo = scenario.topology
    return {**TransportConfig.link_defaults(topo.host_rate_bps, topo.mtu, topo.planes), **scenario.transport_options}


class Agents:
    """All agents of a run; `events` fills as `poll` reads their sockets."""

    def __init__(self):
        self.links: dict[str, AgentLink] = {}
        self.events: deque = deque()
        self.samples: dict[int, dict[str, dict]] = {}   # round -> host -> stats reply
        self.marks: dict[str, dict[int, int]] = {}      # counter -> millisecond slot -> count, over all agents
        self.selector = selectors.DefaultSelector()

    def start(self, scenario: Scenario, hosts: dict, state: RunState, log_dir: Path, timeout: float = 20.0) -> None:
        """`hosts` maps host name -> Mininet host; each agent is started inside its namespace."""
        topo = scenario.topology
        sock_dir = state.private_dir()
        pending = {}
        for name, host in hosts.items():
            index = topo.host_index(name)
            control = sock_dir / f"{name}.sock"
            argv = [sys.executable, "-m", "mrclab.agent", "--host", str(index), "--planes", str(topo.planes),
                    "--leaves", str(topo.leaves), "--spines", str(topo.spines),
                    "--hosts-per-leaf", str(topo.hosts_per_leaf), "--mtu", str(topo.mtu),
                    "--control", str(control), "--log", str(log_dir / f"agent-{name}.jsonl"),
                    "--transport", scenario.transport, "--options", json.dumps(effective_options(scenario)),
                    "--routing", scenario.routing,
                    "--seed", str(scenario.seed)]
            stderr = open(log_dir / f"agent-{name}.stderr", "wb")
            proc = host.popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT,
                              cwd=str(log_dir), preexec_fn=lifeline.die_with_parent())
            stderr.close()
            state.add_process(proc.pid, f"agent {name}")
            pending[name] = (index, control, proc)
        deadline = time.monotonic() + timeout
        for name, (index, control, proc) in pending.items():
            sock = _connect(control, proc, deadline, log_dir / f"agent-{name}.stderr")
            link = AgentLink(name, index, sock, proc)
            self.links[name] = link
            self.selector.register(sock, selectors.EVENT_READ, link)
        for link in self.links.values():
            self.call(link.host, "ping", timeout=max(deadline - time.monotonic(), 1.0))

    def post(self, host: str, conn: int, peer: int, msg: int, size: int) -> None:
        """Start a message without waiting; an agent that refuses it yields a `failed` event."""
        link = self.links[host]
        link.unawaited[link.send("post", conn=conn, peer=peer, msg=msg, size=size)] = (conn, msg)

    def warm(self, pairs: list[tuple[str, int, int]], timeout: float = 3.0) -> bool:
        """Every path of every (host, conn, peer) carries a probe and its answer before the clock starts
        (see ``Connection.warm``); False when some answers were still missing at the timeout."""
        expected = sum(self.call(host, "warm", conn=conn, peer=peer)["probes"] for host, conn, peer in pairs)
        deadline = time.monotonic() + timeout
        while True:
            replies = sum(r["counters"].get("warm_replies", 0) for r in self.call_all("stats").values())
            if replies >= expected:
                return True
            if time.monotonic() >= deadline:
                return False
            self.poll(0.02)

    def sample(self, round_no: int) -> None:
        """Ask every agent for its stats without waiting; replies land in `samples[round_no]`."""
        self.samples[round_no] = {}
        for link in self.links.values():
            link.sampling[link.send("stats")] = round_no

    def call(self, host: str, op: str, timeout: float = 10.0, **fields) -> dict:
        link = self.links[host]
        request_id = link.send(op, **fields)
        deadline = time.monotonic() + timeout
        while request_id not in link.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(f"agent {host} did not answer {op!r} within {timeout:g}s")
            self.poll(left)
        reply = link.replies.pop(request_id)
        if not reply.get("ok"):
            raise AgentError(f"agent {host} refused {op!r}: {reply.get('error')}")
        return reply

    def call_all(self, op: str, timeout: float = 10.0) -> dict[str, dict]:
        ids = {name: link.send(op) for name, link in self.links.items()}
        deadline = time.monotonic() + timeout
        while any(i not in self.links[n].replies for n, i in ids.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                slow = [n for n, i in ids.items() if i not in self.links[n].replies]
                raise AgentError(f"agents {', '.join(slow)} did not answer {op!r} within {timeout:g}s")
            self.poll(left)
        return {n: self.links[n].replies.pop(i) for n, i in ids.items()}

    def poll(self, timeout: float) -> None:
        for key, _ in self.selector.select(max(timeout, 0.0)):
            link: AgentLink = key.data
            chunk = link.sock.recv(1 << 20)
            if not chunk:
                self.selector.unregister(link.sock)
                raise AgentError(f"agent {link.host} exited (code {link.proc.poll()}); see its log")
            link.buffer += chunk
            while (newline := link.buffer.find(b"\n")) >= 0:
                message = json.loads(link.buffer[:newline])
                del link.buffer[:newline + 1]
                if "id" in message:
                    for key, bins in message.pop("marks", {}).items():  # each reply has only what is new
                        merged = self.marks.setdefault(key, {})
                        for slot, n in bins.items():
                            merged[int(slot)] = merged.get(int(slot), 0) + n
                    if message["id"] in link.sampling:
                        self.samples[link.sampling.pop(message["id"])][link.host] = message
                    elif message["id"] in link.unawaited:
                        conn, msg = link.unawaited.pop(message["id"])
                        if not message.get("ok"):
                            self.events.append({"event": "failed", "conn": conn, "msg": msg, "host": link.host,
                                                "reason": f"refused: {message.get('error')}"})
                    else:
                        link.replies[message["id"]] = message
                else:
                    message["host"] = link.host
                    self.events.append(message)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask every agent to quit, then make sure by PID; safe to call twice."""
        for link in self.links.values():
            try:
                link.send("quit")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for link in self.links.values():
            try:
                link.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                link.proc.kill()
                link.proc.wait()
            if link.sock.fileno() in self.selector.get_map():
                self.selector.unregister(link.sock)
            link.sock.close()
        self.links.clear()

    def pids(self) -> dict[int, str]:
        return {link.proc.pid: f"agent {name}" for name, link in self.links.items()}


def _connect(path: Path, proc: subprocess.Popen, deadline: float, log: Path) -> socket.socket:
    while True:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise AgentError(f"agent {path.stem} exited with code {proc.returncode}: {' '.join(tail) or 'no output'}")
        if path.exists():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                return sock
            except OSError:
                sock.close()
        if time.monotonic() > deadline:
            raise AgentError(f"agent {path.stem} did not open its control socket {path}")
        time.sleep(0.02)
