"""The runner's side of the control protocol, blocking and simple: for tests, benchmarks and tools.

``command()`` builds the agent's command line; ``AgentClient`` connects to its control
socket, sends requests and collects the events that arrive between answers.
"""
from __future__ import annotations

import json
import socket
import sys
import time
from typing import Callable

from ..addressing import Plan


def command(host: int, plan: Plan, control: str, log: str, transport: str = "mrc", mtu: int = 9000,
            options: dict | None = None, seed: int = 1, python: str = sys.executable) -> list[str]:
    return [python, "-m", "mrclab.agent", "--host", str(host), "--planes", str(plan.planes),
            "--leaves", str(plan.leaves), "--spines", str(plan.spines), "--hosts-per-leaf", str(plan.hosts_per_leaf),
            "--mtu", str(mtu), "--control", control, "--log", log, "--transport", transport,
            "--options", json.dumps(options or {}), "--seed", str(seed)]


class AgentError(RuntimeError):
    pass


class AgentClient:
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
        self.events: list[dict] = []
        self._buffer = b""
        self._next_id = 0

    def request(self, op: str, timeout: float = 10.0, **args) -> dict:
        """Send one request and return its answer; AgentError if the answer is not ok."""
        self._next_id += 1
        request_id = self._next_id
        self.sock.sendall(json.dumps({"id": request_id, "op": op, **args}).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            reply = None
            for message in self._read(deadline):
                if "event" in message:
                    self.events.append(message)
                elif message.get("id") == request_id:
                    reply = message
            if reply is not None:
                if not reply.get("ok"):
                    raise AgentError(f"{op}: {reply.get('error')}")
                return reply
            if time.monotonic() > deadline:
                raise AgentError(f"no answer to {op} within {timeout:g} s")

    def wait(self, done: Callable[[list[dict]], bool], timeout: float) -> list[dict]:
        """Read events until ``done(events)`` holds; AgentError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not done(self.events):
            if time.monotonic() > deadline:
                raise AgentError(f"events not complete after {timeout:g} s ({len(self.events)} received)")
            self.events.extend(m for m in self._read(deadline) if "event" in m)
        return self.events

    def close(self) -> None:
        self.sock.close()

    def _read(self, deadline: float) -> list[dict]:
        self.sock.settimeout(max(0.001, min(0.2, deadline - time.monotonic())))
        try:
            chunk = self.sock.recv(1 << 16)
        except socket.timeout:
            return []
        if not chunk:
            raise AgentError("agent closed the control connection")
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

