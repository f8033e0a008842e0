"""The floor under any agent: what moving quickstart's datagrams through its emulated fabric costs, with as
little user-space work per packet as Python allows.

    sudo .venv/bin/python benchmarks/fabric_floor.py [--seconds 6] [--rounds 3] [--topology clos-4p-4l-4s]
        [--shape HOSTSxPLANES]

Builds the topology (Linux routers; ``--shape``: 4 leaves and 4 spines per plane, H/4 hosts per leaf, the
topology's links), then runs in each host's namespace a mover instead of an agent: it
sends full-size datagrams (the MTU's UDP payload, 8952 bytes at MTU 9000) to the next host of the ring,
spraying over every path as MRC does (each datagram to its own uSID path address, through the plane's
socket, as the agent's datapath opens them), as fast as its NICs take them (a full socket waits for
writability), and reads whatever arrives. No protocol, no SACKs, no payload checks: per packet only the
system calls, in batches of 64 where the build has ``sendmmsg``/``recvmmsg`` (`mrclab.agent.batchio`;
``--io python`` for one call per datagram).

Over ``--seconds`` of steady traffic it reports, as a run's results do (`mrclab.metrics.cost`): the movers'
CPU s per delivered MiB from /proc, the machine's softirq per MiB, the movers less the softirq charged to
them, their wake-ups per MiB, and the goodput (delivered bytes counted by the leaves' ports towards the
hosts). Quickstart's agents move the same datagrams through the same fabric plus their SACKs: their figure
less this one is what the protocol, the checks and the interpreter cost on top.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mrclab.fabric.net import Fabric  # noqa: E402
from mrclab.metrics.cost import CpuMeter, process_cpu_s  # noqa: E402
from mrclab.spec import topology as topology_mod  # noqa: E402

MOVER = """
import os, select, signal, sys
from mrclab.addressing import Plan
from mrclab.agent import batchio
from mrclab.agent.mrc import open_sockets
planes, leaves, spines, per_leaf, host, peer, mtu = map(int, sys.argv[1:8])
io = batchio.PythonIo() if sys.argv[8] == "python" else batchio.default()
plan = Plan(planes, leaves, spines, per_leaf)
socks, wildcard = open_sockets(plan, host)
datagram = bytes(mtu - 48)  # IPv6 and UDP headers
# one batch per plane socket: every path of that plane in turn, as spraying walks them
paths = [[io.address(str(plan.ev_address(host, peer, ev)), 4793) for ev in range(plan.paths_per_pair)
          if plan.ev_path(ev)[0] == k] for k in range(planes)]
batches = [[(socks[k], addr, datagram) for addr in paths[k]] * 4 for k in range(planes)]
poll = select.epoll()
readers = {s.fileno(): s for s in socks + [wildcard]}
for fd in readers:
    poll.register(fd, select.EPOLLIN)
writers = {s.fileno(): (s, k) for k, s in enumerate(socks)}
pending = {k: 0 for k in range(planes)}  # where in its batch each plane socket stopped
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print("ready", flush=True)
sys.stdin.readline()
blocked = set()
while not stop:
    for k, s in enumerate(socks):
        if k in blocked:
            continue
        batch = batches[k]
        sent, err = io.send(batch, pending[k])
        pending[k] = (pending[k] + sent) % len(batch)
        if err:
            blocked.add(k)
            poll.modify(s.fileno(), select.EPOLLIN | select.EPOLLOUT)
    for fd, events in poll.poll(-1 if len(blocked) == planes else 0):
        if events & select.EPOLLOUT:
            s, k = writers[fd]
            blocked.discard(k)
            poll.modify(fd, select.EPOLLIN)
        if events & (select.EPOLLIN | select.EPOLLERR):
            sock = readers[fd]
            while True:
                try:
                    if not io.receive(sock):
                        break
                except OSError:
                    break
"""


def measure(topo, fabric: Fabric, seconds: float, io: str) -> dict:
    hosts = sorted(fabric.hosts, key=topo.host_index)
    procs, pids = [], {}
    for i, name in enumerate(hosts):
        peer = topo.host_index(hosts[(i + 1) % len(hosts)])
        argv = [sys.executable, "-c", MOVER, str(topo.planes), str(topo.leaves), str(topo.spines),
                str(topo.hosts_per_leaf), str(topo.host_index(name)), str(peer), str(topo.mtu), io]
        proc = fabric.host(name).popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       cwd=Path(__file__).resolve().parents[1])
        fabric.state.add_process(proc.pid, f"mover {name}")
        procs.append(proc)
        pids[proc.pid] = f"agent {name}"  # as the run's agents, for CpuMeter's split
    try:
        for proc in procs:
            assert proc.stdout.readline() == "ready\n"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        time.sleep(1.0)  # queues filled, steady state
        ksoftirqd = {pid: f"ksoftirqd/{cpu}" for cpu, pid in enumerate(_ksoftirqd())}
        meter = CpuMeter({**pids, **ksoftirqd})
        before = _delivered(fabric, hosts)
        meter.start()
        time.sleep(seconds)
        meter.stop()
        delivered = _delivered(fabric, hosts) - before
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(10)
    cost = meter.per_mib(delivered)
    return {"movers": cost["agents"], "softirq": cost["softirq"], "less_softirq": cost["agents_less_softirq"],
            "wakeups": cost["wakeups_per_mib"], "goodput_mbps": delivered * 8 / seconds / 1e6,
            "line_mbps": len(hosts) * topo.planes * topo.host_rate_bps / 1e6}


def _delivered(fabric: Fabric, hosts: list[str]) -> int:
    """UDP payload bytes the leaves' ports have sent to the hosts so far (every datagram is full size)."""
    assert fabric.egress is not None
    ports = [fabric.layout.ifname(link.b, link.a) for link in fabric.topology.links if link.a in hosts]
    packets = sum(fabric.egress.counters(port).tx_packets for port in ports)
    return packets * (fabric.topology.mtu - 48)


def _ksoftirqd() -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text()
        except OSError:
            continue
        if comm.startswith("ksoftirqd/") and process_cpu_s(int(pid)) is not None:
            pids.append(int(pid))
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="clos-4p-4l-4s")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--io", default="batched,python", help="batched (the build's), python, or both")
    parser.add_argument("--shape", help="HOSTSxPLANES on 4 leaves and 4 spines per plane, the topology's links")
    args = parser.parse_args()
    topo = topology_mod.load(args.topology)
    if args.shape:
        hosts, planes = (int(x) for x in args.shape.split("x"))
        topo = dataclasses.replace(topo, name=f"clos-{planes}p-{hosts}h", planes=planes, leaves=4, spines=4,
                                   hosts_per_leaf=hosts // 4)
    load = os.getloadavg()[0]
    rows: dict[str, list[dict]] = {}
    with Fabric(topo, datapath="linux") as fabric:
        fabric.start_counting()
        for _ in range(args.rounds):
            for io in args.io.split(","):
                rows.setdefault(io, []).append(measure(topo, fabric, args.seconds, io))
    print(f"movers on {topo.name} (linux datapath), {args.seconds:g} s each, medians of {args.rounds} interleaved "
          f"rounds (load average {load:.2f} before, {os.getloadavg()[0]:.2f} after)")
    print(f"{'I/O':8s} {'CPU s/MiB':>10s} {'softirq':>8s} {'less softirq':>13s} {'wake-ups/MiB':>13s} "
          f"{'Mbit/s':>8s} {'of line':>8s}")
    for io, results in rows.items():
        def median(key: str, of: list[dict] = results) -> float:
            return statistics.median(r[key] for r in of)
        share = median("goodput_mbps") / results[0]["line_mbps"]
        print(f"{io:8s} {median('movers'):10.5f} {median('softirq'):8.5f} {median('less_softirq'):13.5f} "
              f"{median('wakeups'):13.1f} {median('goodput_mbps'):8.0f} {share:8.0%}")


if __name__ == "__main__":
    main()
