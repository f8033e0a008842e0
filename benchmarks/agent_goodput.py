"""Agent goodput over a real fabric against iperf3 TCP on the same fabric, and CPU per delivered MiB.

    sudo .venv/bin/python benchmarks/agent_goodput.py [--topology clos-2p-2l-2s] [--mib 40]
        [--src 0] [--dst 3] [--profile DIR] [--json]

One fabric is built; then, between the same two hosts (on different leaves):

* iperf3: one TCP stream per plane at once (each bound to the plane's host address and
  carried by the agents' seg6 host routes), the best a kernel stack does when it uses
  every plane: the bottleneck is the links (planes x host rate);
* ``mrc``, ``single-path``, ``tcp``: a sender agent posts ``--mib`` 1 MiB messages at once
  to the receiver agent; goodput is the verified bytes over the time from the first post
  to the last delivery (the runner's own measure).

The ratio printed is agent goodput / iperf3 goodput (aim: mrc >= 0.8). CPU is the two
agents' process CPU seconds per delivered MiB (``send``/``recv``: each end; ``lab``: with
ovs-vswitchd), from /proc over the transfer. Link drops and trims over the run tell
whether the fabric or the host lost packets. ``--profile DIR`` records py-spy flame graphs
of both MRC agents (py-spy must be installed).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mrclab.agent.messages import Completed, Delivered, Post, Quit, Stats  # noqa: E402
from mrclab.agents import AgentClient, command  # noqa: E402
from mrclab.fabric.net import Fabric  # noqa: E402
from mrclab.metrics.cost import CpuMeter  # noqa: E402
from mrclab.spec import topology  # noqa: E402
from mrclab.transport import TransportConfig  # noqa: E402

MIB = 1 << 20
IPERF_SECONDS = 5
IPERF_PORT = 5201


class Agents:
    """A sender and a receiver agent of one transport, started in their hosts' namespaces."""

    def __init__(self, fabric: Fabric, topo, transport: str, src: int, dst: int, tmp: Path,
                 options: dict | None = None) -> None:
        self.procs, self.clients = {}, {}
        for host in (src, dst):
            control, log = str(tmp / f"{transport}-h{host}.sock"), str(tmp / f"{transport}-h{host}.log")
            argv = command(host, topo.plan, control=control, log=log, transport=transport, mtu=topo.mtu,
                           options=options)
            proc = fabric.host(f"h{host}").popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            fabric.state.add_process(proc.pid, f"agent h{host}")
            self.procs[host] = proc
            self.clients[host] = AgentClient(control, timeout=20)

    def close(self) -> None:
        for host, client in self.clients.items():
            client.request(Quit)
            client.close()
            if self.procs[host].wait(10) != 0:
                raise RuntimeError(f"agent h{host} failed: {self.procs[host].stderr.read()}")


def agent_goodput(fabric: Fabric, agents: Agents, src: int, dst: int, mib: int) -> dict:
    sender, receiver = agents.clients[src], agents.clients[dst]
    meter = CpuMeter({**{proc.pid: f"agent h{host}" for host, proc in agents.procs.items()},
                      **fabric.packet_pids()})
    links0 = _link_losses(fabric)
    meter.start()
    start = time.monotonic()
    for msg in range(mib):
        sender.request(Post, conn=1, peer=dst, msg=msg, size=MIB)
    receiver.wait(lambda ev: sum(isinstance(e, Delivered) for e in ev) == mib, 60 + mib)
    sender.wait(lambda ev: sum(isinstance(e, Completed) for e in ev) == mib, 30)
    meter.stop()
    last = max(e.t for e in receiver.events if isinstance(e, Delivered))
    stats = sender.request(Stats).stats
    rstats = receiver.request(Stats).stats
    verified = rstats["counters"]["bytes_verified"]
    assert verified == mib * MIB, f"only {verified} of {mib * MIB} bytes verified"
    cost = meter.per_mib(verified)
    drops, trims = (a - b for a, b in zip(_link_losses(fabric), links0, strict=True))
    c = stats["counters"]
    return {"goodput_bps": verified * 8 / (last - start), "seconds": last - start,
            "cpu_s_per_mib": cost["agents"], "sender_cpu_s_per_mib": cost["hosts"][f"h{src}"],
            "receiver_cpu_s_per_mib": cost["hosts"][f"h{dst}"], "lab_cpu_s_per_mib": cost["lab"],
            "link_drops": drops, "link_trims": trims,
            **{k: c.get(k, 0) for k in ("data_sent", "retransmitted", "trimmed", "timeouts", "lost", "ev_retired",
                                         "send_retries")}}


def _link_losses(fabric: Fabric) -> tuple[int, int]:
    counters = fabric.link_counters()
    return sum(c["drops"] for c in counters), sum(c["trims"] for c in counters)


def iperf_goodput(fabric: Fabric, topo, src: int, dst: int) -> float:
    """Sum of one iperf3 TCP stream per plane, all at once (needs the seg6 routes the tcp agents install)."""
    plan = topo.plan
    servers = [fabric.host(f"h{dst}").popen(["iperf3", "-s", "-1", "-p", str(IPERF_PORT + k)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for k in range(plan.planes)]
    time.sleep(0.5)
    clients = [fabric.host(f"h{src}").popen(
        ["iperf3", "-J", "-c", str(plan.host_address(k, dst)), "-B", str(plan.host_address(k, src)),
         "-p", str(IPERF_PORT + k), "-t", str(IPERF_SECONDS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for k in range(plan.planes)]
    total = 0.0
    for client in clients:
        out, err = client.communicate(timeout=IPERF_SECONDS + 30)
        total += json.loads(out)["end"]["sum_received"]["bits_per_second"]
    for server in servers:
        server.wait(10)
    return total


def profile(agents: Agents, directory: Path, seconds: float) -> list[subprocess.Popen]:
    """py-spy on both agents: collapsed stacks in DIR/agent-h<N>.txt (flamegraph.pl or speedscope read them)."""
    directory.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(["py-spy", "record", "--nonblocking", "-r", "250", "-d", str(max(1, int(seconds))),
                              "--format", "raw", "-o", str(directory / f"agent-h{host}.txt"), "--pid", str(proc.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for host, proc in agents.procs.items()]


def top_frames(path: Path, count: int = 10) -> list[tuple[str, float]]:
    """The functions where a profiled agent spent its samples (self time), as shares of all samples."""
    self_samples: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        self_samples[leaf] = self_samples.get(leaf, 0) + int(samples)
        total += int(samples)
    ranked = sorted(self_samples.items(), key=lambda item: -item[1])[:count]
    return [(frame, n / total) for frame, n in ranked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="clos-2p-2l-2s")
    parser.add_argument("--mib", type=int, default=40)
    parser.add_argument("--src", type=int, default=0)
    parser.add_argument("--dst", type=int, default=3)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--options", type=json.loads, default={},
                        help="MRC transport options (JSON), over the defaults a run derives from the links")
    parser.add_argument("--transports", default="tcp,mrc,single-path")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    topo = topology.load(args.topology)
    args.options = {**TransportConfig.link_defaults(topo.host_rate_bps, topo.mtu, topo.planes), **args.options}
    ideal = topo.planes * topo.host_rate_bps
    results: dict = {"topology": topo.name, "link_bound_bps": ideal, "mib": args.mib}
    tmp = Path(tempfile.mkdtemp(prefix="agent-goodput-"))
    try:
        with Fabric(topo) as fabric:
            for transport in args.transports.split(","):
                options = args.options if transport != "tcp" else None
                agents = Agents(fabric, topo, transport, args.src, args.dst, tmp, options)
                try:
                    if transport == "tcp":
                        results["iperf3_bps"] = iperf_goodput(fabric, topo, args.src, args.dst)
                    spies = profile(agents, args.profile, args.mib / 10) \
                        if args.profile and transport == "mrc" else []
                    results[transport] = agent_goodput(fabric, agents, args.src, args.dst, args.mib)
                    for spy in spies:
                        spy.wait(60)
                    if spies:
                        results["profile"] = {f"h{host}": top_frames(args.profile / f"agent-h{host}.txt")
                                              for host in (args.src, args.dst)}
                finally:
                    agents.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    transports = [t for t in ("mrc", "single-path", "tcp") if t in results]
    for transport in transports:
        results[transport]["ratio_to_iperf3"] = results[transport]["goodput_bps"] / results.get("iperf3_bps", ideal)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{topo.name}: link bound {ideal / 1e6:.0f} Mbit/s ({topo.planes} planes x "
          f"{topo.host_rate_bps / 1e6:.0f} Mbit), iperf3 one stream per plane "
          f"{results.get('iperf3_bps', float('nan')) / 1e6:.1f} Mbit/s; MRC options {json.dumps(args.options)}")
    print(f"{'agent':>12} {'goodput':>9} {'/iperf3':>8} {'cpu s/MiB':>10} {'send':>6} {'recv':>6} {'lab':>6} "
          f"{'retx':>5} {'lost':>5} {'timeouts':>8} "
          f"{'link drops':>10} {'trims':>6} {'sock full':>9}")
    for host, frames in results.get("profile", {}).items():
        print(f"profile {host} (mrc), self time: " + ", ".join(f"{f} {share:.0%}" for f, share in frames))
    for transport in transports:
        r = results[transport]
        print(f"{transport:>12} {r['goodput_bps'] / 1e6:>6.1f}Mb {r['ratio_to_iperf3']:>8.2f} "
              f"{r['cpu_s_per_mib']:>10.4f} "
              f"{r['sender_cpu_s_per_mib']:>6.4f} {r['receiver_cpu_s_per_mib']:>6.4f} {r['lab_cpu_s_per_mib']:>6.4f} "
              f"{r['retransmitted']:>5} {r['lost']:>5} {r['timeouts']:>8} {r['link_drops']:>10} {r['link_trims']:>6} "
              f"{r['send_retries']:>9}")


if __name__ == "__main__":
    main()
