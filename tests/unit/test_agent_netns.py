"""Two real agent processes, real sockets, no fabric: two network namespaces wired back to back
(:mod:`mrclab.agent.backtoback`). Needs root (namespaces); everything is run-prefixed and removed by
the fixture.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mrclab.addressing import Plan
from mrclab.agent import backtoback
from mrclab.agent.backtoback import ip
from mrclab.agent.messages import Completed, Delivered, Done, Failed, Ping, Post, Quit, Stats
from mrclab.agents import AgentClient, AgentError, command
from mrclab.runstate import RunState

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")

PLAN = Plan(2, 2, 2, 2)
HOSTS = (0, 3)  # different leaves


class BackToBack:
    """The namespaces, and agents started in them (recorded in the run state, so teardown kills them)."""

    def __init__(self, state: RunState, tmp: Path) -> None:
        self.state, self.tmp = state, tmp
        self.ns = {h: f"{state.prefix}h{h}" for h in HOSTS}
        self.procs: dict[int, subprocess.Popen] = {}
        backtoback.wire(state, PLAN, self.ns)

    def start(self, host: int, transport: str = "mrc", options: dict | None = None, mtu: int = 9000):
        control, log = str(self.tmp / f"h{host}.sock"), str(self.tmp / f"h{host}.log")
        argv = ["ip", "netns", "exec", self.ns[host],
                *command(host, PLAN, control=control, log=log, transport=transport, mtu=mtu, options=options)]
        proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
        self.state.add_process(proc.pid, f"agent h{host}")
        self.procs[host] = proc
        return AgentClient(control, timeout=15)

    def log(self, host: int) -> list[dict]:
        return [json.loads(line) for line in (self.tmp / f"h{host}.log").read_text().splitlines()]


@pytest.fixture
def net(tmp_path):
    state = RunState.create("test_agent_netns")
    try:
        yield BackToBack(state, tmp_path)
    finally:
        state.teardown()


def exchange(net, transport, sizes, options=None, timeout=30.0):
    """Post messages from HOSTS[0] to HOSTS[1] and back; wait for completion and delivery of all."""
    a, b = HOSTS
    clients = {h: net.start(h, transport, options) for h in HOSTS}
    for h, c in clients.items():
        assert c.request(Ping).host == h
    for h, peer in ((a, b), (b, a)):
        for msg, size in enumerate(sizes):
            clients[h].request(Post, conn=10 + h, peer=peer, msg=msg, size=size)
    for c in clients.values():
        c.wait(lambda ev: sum(isinstance(e, Completed) for e in ev) == len(sizes)
               and sum(isinstance(e, Delivered) for e in ev) == len(sizes), timeout)
    return clients


@pytest.mark.parametrize("transport", ["mrc", "single-path", "tcp"])
def test_two_agents_move_and_verify_messages(net, transport):
    sizes = [2 << 20, 1, 0, 100000]
    clients = exchange(net, transport, sizes)
    a, b = HOSTS
    for h, peer in ((a, b), (b, a)):
        events = clients[h].events
        delivered = [e for e in events if isinstance(e, Delivered)]
        assert sorted((e.msg, e.bytes) for e in delivered) == list(enumerate(sizes))
        assert all(e.verified and e.peer == peer and e.conn == 10 + peer for e in delivered)
        assert not [e for e in events if isinstance(e, Failed)]
        completed = [e for e in events if isinstance(e, Completed)]
        assert all(e.peer == peer and e.conn == 10 + h for e in completed)
        assert all(abs(e.t - time.monotonic()) < 60 for e in events)  # the shared monotonic clock
        stats = clients[h].request(Stats).stats
        counters = stats["counters"]
        assert counters["bytes_verified"] == counters["bytes_delivered"] == sum(sizes)
        assert counters["bytes_sent"] == sum(sizes) and counters["messages_completed"] == len(sizes)
        assert counters["messages_failed"] == 0 and counters["data_sent"] > 0
        assert stats["cpu_s"] > 0 and stats["base_rtt_s"] > 0
        evs_used = stats["last_send"][str(peer)]
        if transport == "mrc":
            assert len(evs_used) == 64
            assert {PLAN.ev_path(int(ev)) for ev in evs_used} == {(0, 0), (0, 1), (1, 0), (1, 1)}
            states = stats["ev_states"]  # a loaded machine may retire an EV spuriously: only require all in use
            assert states["GOOD"] + states["SKIP"] == 64 and states["DENIED"] == 0
            assert states["UNKNOWN"] == 64  # as many in reserve, never used
        else:
            assert len(evs_used) == 1
    for h, c in clients.items():
        assert isinstance(c.request(Quit), Done)
        assert net.procs[h].wait(10) == 0
        log = net.log(h)
        assert log[0]["kind"] == "start" and log[-1] == {**log[-1], "kind": "exit", "status": 0}
        assert {"request", "event", "stop"} <= {r["kind"] for r in log}
        assert not Path(net.tmp / f"h{h}.sock").exists()


def test_agent_exits_when_the_runner_goes_away(net):
    client = net.start(HOSTS[0])
    client.request(Ping)
    client.close()
    assert net.procs[HOSTS[0]].wait(10) == 0
    assert net.log(HOSTS[0])[-2]["reason"] == "runner closed the control connection"


def test_agent_exits_on_sigterm_and_serves_one_runner(net):
    h = HOSTS[0]
    client = net.start(h)
    client.request(Ping)
    path = str(net.tmp / f"h{h}.sock")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with pytest.raises(AgentError):
        AgentClient(path, timeout=0.2)  # the listener closed once the runner connected
    os.kill(net.procs[h].pid, signal.SIGTERM)
    assert net.procs[h].wait(10) == 0
    assert net.log(h)[-2]["reason"] == "signal SIGTERM"
    client.close()


def test_tcp_mode_installs_and_removes_its_routes(net):
    h = HOSTS[0]
    client = net.start(h, "tcp")
    client.request(Ping)
    routes = ip("-n", net.ns[h], "-6", "route", "show")
    assert routes.count("encap seg6 mode inline") == PLAN.planes * (PLAN.hosts - 1)
    client.request(Quit)
    assert net.procs[h].wait(10) == 0
    assert "seg6" not in ip("-n", net.ns[h], "-6", "route", "show")


def test_unreachable_port_does_not_kill_the_sender(net):
    """A peer with no agent answers ICMP port unreachable; the agent counts it and keeps serving."""
    client = net.start(HOSTS[0], options={"max_retransmits": 3, "rto_min": 0.01, "rto_initial": 0.01, "rto_max": 0.02})
    client.request(Post, conn=1, peer=HOSTS[1], msg=1, size=50000)
    client.wait(lambda ev: any(isinstance(e, Failed) for e in ev), 15)
    assert client.request(Ping).host == HOSTS[0]
    assert client.request(Stats).stats["counters"]["messages_failed"] == 1
