"""The agents alone: N MRC agent pairs on plain veth pairs (no switches), all at once, and what they cost.

    sudo .venv/bin/python benchmarks/agent_pairs.py [--pairs 8] [--mib 16] [--json]

Each pair is two network namespaces wired back to back, one veth per plane (2 planes), with
the plane's /32 routed out of its NIC and a local route for fcbb::/16, so a packet arrives
carrying its full path address and no switch forwards anything: every CPU cycle spent on
packets is the agents' or the kernel's. Every sender posts ``--mib`` 1 MiB messages at once
to its peer; goodput is all verified bytes over the time from the first post to the last
delivery, CPU the agents' (both ends, from /proc) per delivered MiB, and wake-ups the agents'
voluntary context switches per delivered MiB (a figure that a busy machine disturbs less than
CPU time). ``--options`` sets transport options, e.g. the pacing of a quickstart host
(``{"pace_rate": 3e6, "pace_depth": 35808}``: about the rate one quickstart agent reaches).

The reference, measured on the same veth pairs in the same run: a plain Python loop that
sends 8900-byte UDP datagrams (``sendto``) to a plain Python loop that receives them
(``recv``), one pair at a time, CPU of both per MiB received. It is the floor of any
Python agent (no protocol, no checks); the ratio printed is agents / floor. A second reference prices a
wake-up: two plain Python loops bouncing one such datagram between the namespaces, each asleep in epoll
until it arrives (CPU of both per wake-up). That price times the agents' wake-ups per MiB is what their
wake-ups alone cost: most of it when paced, where an agent wakes for about one packet at a time.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mrclab.addressing import Plan  # noqa: E402
from mrclab.agent import backtoback  # noqa: E402
from mrclab.agent.messages import Completed, Delivered, Ping, Post, Quit, Stats  # noqa: E402
from mrclab.agents import AgentClient, AgentError, command  # noqa: E402
from mrclab.metrics.cost import MIB, CpuMeter, voluntary_switches  # noqa: E402
from mrclab.runstate import RunState  # noqa: E402

PLAN = Plan(2, 2, 2, 2)
HOSTS = (0, 3)  # different leaves, as in the fabric
REPO = Path(__file__).resolve().parents[1]
FLOOR_DATAGRAM = 8900
FLOOR_MIB = 64
FLOOR_PORT = 9999

FLOOR_RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
want, got = int(sys.argv[3]), 0
s.settimeout(10.0)  # a loaded machine may starve the sender for a while
try:
    while got < want:
        n = len(s.recv(65535))
        if n == 1:  # the sender's end mark: what was lost stays lost
            break
        got += n
except socket.timeout:
    pass
print(got, flush=True)
"""
FLOOR_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
data, addr, n = bytes(int(sys.argv[3])), (sys.argv[1], int(sys.argv[2])), int(sys.argv[4])
for i in range(n):
    while True:
        try:
            s.sendto(data, addr)
            break
        except BlockingIOError:
            time.sleep(0)
    if i % 16 == 15:
        time.sleep(0.0002)  # a few packets at a time: do not overrun the receiver's buffer
for _ in range(3):
    time.sleep(0.01)
    s.sendto(b"x", addr)
"""


PINGPONG = """
import select, socket, sys
me = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
me.bind((sys.argv[1], int(sys.argv[3])))
me.setblocking(False)
peer, rounds, data = (sys.argv[2], int(sys.argv[3])), int(sys.argv[4]), bytes(int(sys.argv[5]))
poll = select.epoll()
poll.register(me.fileno(), select.EPOLLIN)
print("ready", flush=True)
if sys.stdin.readline() == "serve\\n":
    me.sendto(data, peer)
got = 0
while got < rounds:
    if not poll.poll(10.0):
        break  # the peer is gone
    try:
        while True:
            me.recvfrom(65535)
            got += 1
    except BlockingIOError:
        pass
    me.sendto(data, peer)
print(got, flush=True)
"""


class Pair:
    """Two namespaces wired back to back, one veth per plane (see :mod:`mrclab.agent.backtoback`)."""

    def __init__(self, state: RunState, index: int) -> None:
        self.ns = {h: f"{state.prefix}p{index}h{h}" for h in HOSTS}
        backtoback.wire(state, PLAN, self.ns)

    def popen(self, host: int, argv: list[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns[host], *argv], cwd=REPO, **kwargs)


def sleeps(pids) -> int:
    """Voluntary context switches of ``pids`` so far: how often they went to sleep, hence woke up."""
    return sum(voluntary_switches(pid) or 0 for pid in pids)


def floor(state: RunState, pair: Pair) -> float:
    """CPU seconds per MiB of a plain Python sendto/recv pair over one plane of ``pair``."""
    a, b = HOSTS
    address = str(PLAN.host_address(0, b))
    count = FLOOR_MIB * MIB // FLOOR_DATAGRAM
    receiver = pair.popen(b, [sys.executable, "-c", FLOOR_RECEIVER, address, str(FLOOR_PORT),
                              str(count * FLOOR_DATAGRAM)], stdout=subprocess.PIPE, text=True)
    state.add_process(receiver.pid, "floor receiver")
    assert receiver.stdout.readline() == "ready\n"
    sender = pair.popen(a, [sys.executable, "-c", FLOOR_SENDER, address, str(FLOOR_PORT), str(FLOOR_DATAGRAM),
                            str(count)])
    state.add_process(sender.pid, "floor sender")
    meter = CpuMeter({receiver.pid: "receiver", sender.pid: "sender"})
    meter.start()  # the interpreters' start-up is not counted: the receiver was ready, the sender is young
    sender.wait(120)
    got = int(receiver.stdout.readline())
    meter.stop()
    receiver.wait(10)
    if got < count * FLOOR_DATAGRAM // 2:
        raise RuntimeError(f"floor: only {got} of {count * FLOOR_DATAGRAM} bytes arrived")
    return sum(meter.used.values()) / (got / MIB)


def wakeup_floor(state: RunState, pair: Pair, rounds: int = 20000) -> tuple[float, float]:
    """CPU seconds per wake-up of a do-nothing Python loop, as /proc charges it and less the machine's softirq
    (the datagram's delivery): two processes bouncing one FLOOR_DATAGRAM between the namespaces of ``pair``
    (plane 0), each asleep in epoll until the other's datagram arrives, then draining its socket and
    answering. Each wake-up costs what every agent wake-up costs at least: the sleep and the wake-up, a
    receive, a send, and the Python loop around them."""
    a, b = HOSTS
    ends = {h: str(PLAN.host_address(0, h)) for h in HOSTS}
    procs = []
    for me, other in ((a, b), (b, a)):
        proc = pair.popen(me, [sys.executable, "-c", PINGPONG, ends[me], ends[other], str(FLOOR_PORT), str(rounds),
                               str(FLOOR_DATAGRAM)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        state.add_process(proc.pid, f"wake-up floor h{me}")
        assert proc.stdout.readline() == "ready\n"
        procs.append(proc)
    meter = CpuMeter({proc.pid: str(proc.pid) for proc in procs})
    before = sleeps([proc.pid for proc in procs])
    meter.start()
    for proc, serve in zip(procs, (True, False), strict=True):
        proc.stdin.write("serve\n" if serve else "wait\n")
        proc.stdin.flush()
    got = [int(proc.stdout.readline()) for proc in procs]
    meter.stop()
    wakeups = sleeps([proc.pid for proc in procs]) - before
    for proc in procs:
        proc.wait(10)
    if min(got) < rounds:
        raise RuntimeError(f"wake-up floor: the ball was dropped after {min(got)} of {rounds} rounds")
    cpu = sum(meter.used.values())
    return cpu / wakeups, max(0.0, cpu - meter.softirq) / wakeups


def run(pairs: int, mib: int, options: dict) -> dict:
    state = RunState.create("benchmark agent_pairs")
    tmp = Path(tempfile.mkdtemp(prefix="agent-pairs-"))
    clients: dict[tuple[int, int], AgentClient] = {}
    try:
        nets = [Pair(state, i) for i in range(pairs)]
        floor_s = floor(state, nets[0])
        wakeup_s, wakeup_own_s = wakeup_floor(state, nets[0])
        procs = {}
        for i, net in enumerate(nets):
            for h in HOSTS:
                control, log = str(tmp / f"p{i}h{h}.sock"), str(tmp / f"p{i}h{h}.log")
                proc = net.popen(h, command(h, PLAN, control=control, log=log, options=options),
                                 stderr=subprocess.PIPE, text=True)
                state.add_process(proc.pid, f"agent p{i}h{h}")
                procs[proc.pid] = f"agent p{i}h{h}"
                clients[i, h] = AgentClient(control, timeout=20)
        for client in clients.values():
            client.request(Ping)
        time.sleep(1.0)  # the first second after the answer still holds the tail of an agent's start
        idle = CpuMeter(procs)
        idle.start()
        time.sleep(2.0)
        idle_pct = max(idle.stop().values()) / 2.0 * 100
        a, b = HOSTS
        meter = CpuMeter(procs)
        meter.start()
        start = time.monotonic()
        for i in range(pairs):
            for msg in range(mib):
                clients[i, a].request(Post, conn=1, peer=b, msg=msg, size=MIB)
        for i in range(pairs):
            clients[i, b].wait(lambda ev: sum(isinstance(e, Delivered) for e in ev) == mib, 120 + 4 * mib)
            clients[i, a].wait(lambda ev: sum(isinstance(e, Completed) for e in ev) == mib, 60)
        meter.stop()
        wakeups = meter.agent_wakeups
        last = max(e.t for i in range(pairs) for e in clients[i, b].events if isinstance(e, Delivered))
        verified = delivered = retransmitted = 0
        for i in range(pairs):
            counters = clients[i, b].request(Stats).stats["counters"]
            verified += counters["bytes_verified"]
            delivered += counters["bytes_delivered"]
            retransmitted += clients[i, a].request(Stats).stats["counters"]["retransmitted"]
        if verified != pairs * mib * MIB or verified != delivered:
            raise RuntimeError(f"{verified} bytes verified, {delivered} delivered, of {pairs * mib * MIB} sent")
        cost = meter.per_mib(verified)
        senders = sum(cpu for label, cpu in meter.used.items() if label.endswith(f"h{a}")) / (verified / MIB)
        return {"pairs": pairs, "mib_per_pair": mib, "seconds": round(last - start, 3),
                "goodput_bps": round(verified * 8 / (last - start)), "cpu_s_per_mib": cost["agents"],
                "sender_cpu_s_per_mib": round(senders, 5), "receiver_cpu_s_per_mib": round(cost["agents"] - senders, 5),
                "floor_cpu_s_per_mib": round(floor_s, 5), "ratio_to_floor": round(cost["agents"] / floor_s, 2),
                "wakeups_per_mib": round(wakeups / (verified / MIB), 1), "wakeup_floor_us": round(wakeup_s * 1e6, 1),
                "wakeup_floor_less_softirq_us": round(wakeup_own_s * 1e6, 1),
                "idle_agent_max_cpu_pct": round(idle_pct, 2),
                "retransmitted": retransmitted,
                "load_before": os.getloadavg()[0]}
    finally:
        for client in clients.values():
            with contextlib.suppress(OSError, AgentError):  # teardown kills it by PID anyway
                client.request(Quit)
            client.close()
        state.teardown()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--mib", type=int, default=16, help="1 MiB messages per pair")
    parser.add_argument("--options", type=json.loads, default={}, help="MRC transport options (JSON)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    r = run(args.pairs, args.mib, args.options)
    r["load_before"] = load
    if args.json:
        print(json.dumps(r, indent=1))
        return
    print(f"{r['pairs']} MRC agent pairs on veth, {r['mib_per_pair']} MiB each, all at once (load {load:.2f}): "
          f"{r['goodput_bps'] / 1e6:.0f} Mbit/s aggregate in {r['seconds']:.2f} s, {r['retransmitted']} retransmitted")
    print(f"CPU s per delivered MiB: agents {r['cpu_s_per_mib']:.4f} (senders {r['sender_cpu_s_per_mib']:.4f}, "
          f"receivers {r['receiver_cpu_s_per_mib']:.4f}); Python sendto/recv floor {r['floor_cpu_s_per_mib']:.4f}; "
          f"ratio {r['ratio_to_floor']:.2f}")
    wakeups = r["wakeups_per_mib"] * r["wakeup_floor_us"] * 1e-6
    print(f"{r['wakeups_per_mib']:.0f} agent wake-ups per MiB; a do-nothing Python loop's wake-up costs "
          f"{r['wakeup_floor_us']:.1f} us ({r['wakeup_floor_less_softirq_us']:.1f} us less softirq), so wake-ups "
          f"alone cost at least {wakeups:.4f} CPU s per MiB ({wakeups / r['cpu_s_per_mib']:.0%} of the agents')")
    print(f"idle agents: at most {r['idle_agent_max_cpu_pct']:.2f}% of a core each over 2 s")


if __name__ == "__main__":
    main()
