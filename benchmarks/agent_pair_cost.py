"""Two MRC datapaths in one process, one sending to the other: CPU and wake-ups per delivered MiB, unpaced, paced
and paced in bursts, on each build (mrclab/build.py), over an in-memory wire and over kernel sockets.

    sudo .venv/bin/python benchmarks/agent_pair_cost.py [--rounds 5] [--mib 32] [--wires memory,veth]

Host 0 sends ``--mib`` 1 MiB messages to host 3, two in flight at a time, as in a collective's steps (plan 4
planes x 4 leaves x 4 spines, quickstart's). The figure is the process's CPU (user + system, getrusage) per
delivered MiB, both ends together, payload generation and checks included, and its voluntary context
switches (wake-ups) per MiB. Every byte is checked.

- wire ``memory``: the datagrams never leave the process (no system call), so the figure is the interpreter's
  and the compiled code's work; the loop services both datapaths, then sleeps until the next timer or
  delivery, rounded up to a millisecond as the agent's epoll loop.
- wire ``veth`` (root): each host in a network namespace of its own, wired back to back (one veth per plane,
  MTU 9000, `mrclab.agent.backtoback`), the datapaths' kernel UDP sockets opened inside them, one epoll loop
  (`mrclab.agent.loop.Reactor`) for both: the agent's own loop and system calls without a fabric. On the
  compiled build datagrams move by ``sendmmsg``/``recvmmsg`` (`mrclab.agent.batchio`).
- pacing ``unpaced``: the transport's defaults, nothing shaped; ``paced``: a quickstart host's pacing (the
  options the runner derives from 4 NICs at 25 Mbit, ``TransportConfig.link_defaults``) one packet per
  wake-up (``pace_ahead`` 0); ``bursts``: the same with the agent's bursts (``endpoint.PACE_AHEAD``). Paced,
  each NIC sends at 25 Mbit as the lab's host links do: HTB on each veth, or the memory wire holding each
  datagram until its NIC would have sent it.

Each measure runs in a fresh process, MRCLAB_PURE=1 for the pure build, every measure once per round in turn
(interleaved), so a machine that slows down in the middle slows them all; the reference is the pure build in
the same run, and the figures printed are medians of the rounds and compiled / pure.
"""
from __future__ import annotations

import argparse
import ctypes
import heapq
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mrclab.addressing import HOST_BASE, Plan, decode  # noqa: E402
from mrclab.transport.config import TransportConfig  # noqa: E402

PLAN = Plan(4, 4, 4, 2)
HOSTS = (0, 3)  # different leaves, as in the fabric
MIB = 1 << 20
MTU = 9000  # the shipped fabrics'
LINK_BPS = 25_000_000  # quickstart's host links
LINKS = TransportConfig.link_defaults(LINK_BPS, MTU, PLAN.planes)
PACINGS = {"unpaced": {}, "paced": {**LINKS, "pace_ahead": 0.0}, "bursts": LINKS}
CLONE_NEWNET = 0x40000000
LIMIT_S = 120.0
WINDOW = 2
"""Messages in flight at once, as in a collective's step: a message's buffers are those of one before it."""


class MemoryWire:
    """Datagrams between the two hosts' plane sockets, each delivered to the host its path address ends at; with a
    NIC rate, each plane of each host a FIFO at that rate (as the lab's shaped host links), else at once."""

    def __init__(self, nic_rate: float) -> None:
        self.nic_rate = nic_rate
        self.sockets: dict[int, list[MemorySocket]] = {}
        self.pending: list[tuple[float, int, MemorySocket, bytes, tuple]] = []  # a heap by delivery time
        self._free: dict[tuple[int, int], float] = {}
        self._seq = 0

    def carry(self, src: MemorySocket, datagram: bytes, dst: int) -> None:
        target = self.sockets[dst][src.plane]
        if not self.nic_rate:
            target.inbox.append((datagram, src.source))
            return
        now = time.monotonic()
        at = max(now, self._free.get((src.host, src.plane), 0.0))
        self._free[src.host, src.plane] = at + len(datagram) / self.nic_rate
        self._seq += 1
        heapq.heappush(self.pending, (at, self._seq, target, datagram, src.source))

    def deliver(self, now: float) -> float | None:
        """Hand over what has arrived by ``now``; when the next datagram arrives (None: none in flight)."""
        pending = self.pending
        while pending and pending[0][0] <= now:
            _, _, target, datagram, source = heapq.heappop(pending)
            target.inbox.append((datagram, source))
        return pending[0][0] if pending else None


class MemorySocket:
    """A plane socket on the memory wire: what MrcDatapath uses of one (through `batchio.PythonIo`)."""

    def __init__(self, wire: MemoryWire, host: int, plane: int) -> None:
        self.wire, self.host, self.plane, self.inbox, self.hosts = wire, host, plane, [], {}
        self.source = (str(PLAN.host_address(plane, host)), 0, 0, 0)

    def sendto(self, datagram, addr) -> None:
        host = self.hosts.get(addr[0])
        if host is None:  # the wire's own work, kept out of the figure after the first packet of a path
            host = self.hosts[addr[0]] = decode(addr[0])[1][-1] - HOST_BASE
        self.wire.carry(self, bytes(datagram), host)

    def recvmsg_into(self, buffers, _ancsize):
        if not self.inbox:
            raise BlockingIOError
        datagram, source = self.inbox.pop(0)
        buffers[0][:len(datagram)] = datagram
        return len(datagram), [], 0, source

    def close(self) -> None:
        pass


def enter(path: str) -> None:
    """This process's network namespace becomes the one at ``path`` (sockets opened since stay in theirs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


class Transfer:
    """Host 0's messages to host 3, ``WINDOW`` at a time, counted as the datapaths report them."""

    def __init__(self, mib: int) -> None:
        self.mib, self.posted, self.delivered, self.completed = mib, 0, 0, 0
        self.dps: dict = {}

    def emit(self, event) -> None:
        kind = type(event).__name__
        if kind == "Delivered":
            self.delivered += 1
        elif kind == "Completed":
            self.completed += 1

    def done(self) -> bool:
        """Whether every message arrived; posts the next while fewer than WINDOW are in flight."""
        a, b = HOSTS
        while self.posted < self.mib and self.posted - self.completed < WINDOW:
            self.dps[a].post(1, b, self.posted, MIB)
            self.posted += 1
        return self.delivered == self.completed == self.mib

    def tick(self, now: float) -> float | None:
        """Service both datapaths; the next deadline (now, when what they reported lets more be posted)."""
        completed = self.completed
        deadline = min((d for d in (dp.tick(now) for dp in self.dps.values()) if d is not None), default=None)
        return now if self.completed != completed else deadline


def run_memory(transfer: Transfer, config, nic_rate: float) -> None:
    from mrclab.agent.batchio import PythonIo
    from mrclab.agent.mrc import MrcDatapath
    from mrclab.agent.payload import Payloads

    wire = MemoryWire(nic_rate)
    for h in HOSTS:
        wire.sockets[h] = [MemorySocket(wire, h, k) for k in range(PLAN.planes)]
        transfer.dps[h] = MrcDatapath(wire.sockets[h], None, PLAN, h, config, Payloads(1), transfer.emit,
                                      io=PythonIo())
    start = time.monotonic()
    while True:
        now = time.monotonic()
        if now - start > LIMIT_S:
            raise SystemExit("agent_pair_cost: the transfer did not finish")
        arrival = wire.deliver(now)
        if transfer.done():
            return
        deadline = transfer.tick(now)
        ready = [(h, sock) for h, socks in wire.sockets.items() for sock in socks if sock.inbox]
        if not ready:
            wake = min((t for t in (deadline, arrival) if t is not None), default=None)
            wait = (wake - time.monotonic()) if wake is not None else 0.0
            if wait > 0:  # as epoll: a whole number of milliseconds, rounded up
                time.sleep(math.ceil(wait * 1000) / 1000)
        for h, sock in ready:
            transfer.dps[h].on_readable(sock)


def run_veth(transfer: Transfer, config, namespaces: dict[str, str]) -> None:
    from mrclab.agent.loop import Reactor
    from mrclab.agent.mrc import MrcDatapath, open_sockets
    from mrclab.agent.payload import Payloads

    home_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    for h in HOSTS:
        enter(f"/run/netns/{namespaces[str(h)]}")
        planes, wildcard = open_sockets(PLAN, h)
        transfer.dps[h] = MrcDatapath(planes, wildcard, PLAN, h, config, Payloads(1), transfer.emit)
    enter(f"/proc/self/fd/{home_fd}")
    os.close(home_fd)
    reactor = Reactor()
    for dp in transfer.dps.values():
        dp.attach(reactor)
    start = time.monotonic()

    def tick(now: float) -> float | None:
        if transfer.done():  # completions reported since the last tick make room for the next posts
            reactor.stop("done")
        elif now - start > LIMIT_S:
            reactor.stop("limit")
        return transfer.tick(now)
    if reactor.run(tick) != "done":
        raise SystemExit("agent_pair_cost: the transfer did not finish")


def child(wire: str, pacing: str, mib: int, namespaces: dict[str, str]) -> dict:
    """One measure, in this process: the datapaths, the transfer, the figures."""
    from mrclab import build
    from mrclab.agent.batchio import PythonIo, default
    from mrclab.agent.endpoint import configure

    config = configure(PACINGS[pacing], MTU, single_path=False)
    transfer = Transfer(mib)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    if wire == "memory":
        run_memory(transfer, config, LINKS["nic_rate"] if pacing != "unpaced" else 0.0)
    else:
        run_veth(transfer, config, namespaces)
    seconds = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    a, b = HOSTS
    verified = transfer.dps[b].stats()["counters"]["bytes_verified"]
    if verified != mib * MIB:
        raise SystemExit(f"agent_pair_cost: {verified} bytes verified of {mib * MIB}")
    sender, receiver = (transfer.dps[h].stats()["counters"] for h in HOSTS)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"build": build.running()["build"], "io": default().name if wire == "veth" else PythonIo.name,
            "cpu_s_per_mib": cpu / mib, "wakeups_per_mib": (after.ru_nvcsw - before.ru_nvcsw) / mib,
            "sacks_per_mib": receiver["sacks"] / mib, "goodput_mbps": mib * MIB * 8 / seconds / 1e6,
            "retransmitted": sender["retransmitted"]}


def shape(namespaces: dict[str, str], on: bool) -> None:
    """HTB at LINK_BPS on every NIC of both namespaces, as the lab's host links (or none)."""
    for ns in namespaces.values():
        for k in range(PLAN.planes):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", f"p{k}", "root"], check=False,
                           capture_output=True)
            if on:
                batch = (f"qdisc add dev p{k} root handle 1: htb default 1\n"
                         f"class add dev p{k} parent 1: classid 1:1 htb rate {LINK_BPS}bit quantum {MTU + 14}\n")
                subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", "-"], input=batch, text=True, check=True)


def measure(pure: bool, wire: str, pacing: str, mib: int, namespaces: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MRCLAB_PURE"} | ({"MRCLAB_PURE": "1"} if pure else {})
    env["OPENBLAS_NUM_THREADS"] = "1"  # numpy's BLAS threads spin for a while after start: not the datapaths' work
    if wire == "veth":
        shape(namespaces, pacing != "unpaced")
    spec = json.dumps({"wire": wire, "pacing": pacing, "mib": mib, "namespaces": namespaces})
    out = subprocess.run([sys.executable, __file__, "--child", spec], env=env, capture_output=True, text=True,
                         timeout=LIMIT_S + 60)
    if out.returncode:
        raise SystemExit(f"agent_pair_cost: {wire} {pacing} failed: {out.stderr[-800:]}")
    result = json.loads(out.stdout)
    if result["build"] != ("pure" if pure else "compiled"):
        raise SystemExit(f"agent_pair_cost: the {result['build']} build ran (see `mrclab check`; `make build`)")
    return result


def report(rows: dict[tuple[str, str, str], list[dict]]) -> None:
    print(f"{'wire':7s} {'pacing':8s} {'build':9s} {'I/O':18s} {'CPU s/MiB':>10s} {'x pure':>7s} {'wake-ups/MiB':>13s} "
          f"{'SACKs/MiB':>10s} {'Mbit/s':>7s} {'retx':>5s}")
    for (wire, pacing, build), results in rows.items():
        def median(key: str, of: list[dict] = results) -> float:
            return statistics.median(r[key] for r in of)
        cpu = median("cpu_s_per_mib")
        ratio = cpu / median("cpu_s_per_mib", rows[(wire, pacing, "pure")])
        retransmitted = max(r["retransmitted"] for r in results)
        print(f"{wire:7s} {pacing:8s} {build:9s} {results[0]['io']:18s} {cpu:10.5f} {ratio:7.2f} "
              f"{median('wakeups_per_mib'):13.1f} {median('sacks_per_mib'):10.1f} {median('goodput_mbps'):7.0f} "
              f"{retransmitted:5d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=32, help="1 MiB messages")
    parser.add_argument("--wires", default="memory,veth", help="memory, veth (root) or both")
    parser.add_argument("--pacings", default=",".join(PACINGS), help=f"of {', '.join(PACINGS)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(child(spec["wire"], spec["pacing"], spec["mib"], spec["namespaces"])))
        return
    wires, pacings = args.wires.split(","), args.pacings.split(",")
    namespaces: dict[str, str] = {}
    state = None
    if "veth" in wires:
        from mrclab.agent import backtoback
        from mrclab.runstate import RunState
        state = RunState.create("benchmark agent_pair_cost")
        namespaces = {str(h): f"{state.prefix}h{h}" for h in HOSTS}
        backtoback.wire(state, PLAN, {h: namespaces[str(h)] for h in HOSTS}, mtu=MTU)
    load = os.getloadavg()[0]
    rows: dict[tuple[str, str, str], list[dict]] = {}
    try:
        for _ in range(args.rounds):
            for wire in wires:
                for pacing in pacings:
                    for build in ("pure", "compiled"):
                        result = measure(build == "pure", wire, pacing, args.mib, namespaces)
                        rows.setdefault((wire, pacing, build), []).append(result)
    finally:
        if state is not None:
            state.teardown()
    print(f"two MRC datapaths in one process, {args.mib} x 1 MiB, medians of {args.rounds} interleaved rounds "
          f"(load average {load:.2f} before, {os.getloadavg()[0]:.2f} after)")
    report(rows)


if __name__ == "__main__":
    main()
