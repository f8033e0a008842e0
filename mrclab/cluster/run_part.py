"""A run's part on one server, in its share process: the agents of the server's hosts (started in their
namespaces, recorded in the share's run record, their logs in its run directory), the faults on the ends it
holds, its counters, and the watch over its own CPU (`metrics.fidelity`, `metrics.cost`), each judged here
and gathered by the runner (`cluster.run`)."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import time
from pathlib import Path

from .. import agents as agents_mod
from ..metrics.cost import CpuMeter
from ..metrics.fidelity import CpuSampler
from ..runstate import live_runs, proc_text
from ..spec import scenario as scenario_mod
from . import messages as msg

KILL_WAIT_S = 5.0  # how long a killed agent is waited for


class RunPart:
    """What one server runs of a run; `fabric` is its built share."""

    def __init__(self, fabric, log_dir: Path, session: int | None) -> None:
        self.fabric, self.log_dir, self.session = fabric, log_dir, session
        self.procs: dict[str, subprocess.Popen] = {}
        self.sampler: CpuSampler | None = None
        self.meter: CpuMeter | None = None

    def launch(self, request: msg.Launch, timeout: float = 20.0) -> msg.Launched:
        scenario = scenario_mod.from_mapping(request.scenario, "the runner's scenario")
        hosts = {name: host for name, host in self.fabric.hosts.items() if name in scenario.hosts}
        started = agents_mod.launch(scenario, hosts, self.fabric.state, self.log_dir)
        self.procs = {name: proc for name, (_, _, proc) in started.items()}
        deadline = time.monotonic() + timeout
        for name, (_, path, proc) in started.items():
            agents_mod.listening(path, proc, deadline, self._stderr(name))
        return msg.Launched({name: [proc.pid, str(path)] for name, (_, path, proc) in started.items()})

    def _stderr(self, host: str) -> Path:
        return self.log_dir / f"agent-{host}.stderr"

    def reap(self, host: str, timeout: float, kill: bool = False) -> msg.Reaped:
        proc = self.procs[host]
        if kill and proc.poll() is None:
            proc.kill()
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        return msg.Reaped(code)

    def watch(self, request: msg.Watch) -> msg.Watching:
        """The workload starts: count the emulator's drops from here, and sample this server's CPU (what its
        agents cost, and what carries their channels: this share, its SSH session and the relays under it)."""
        self.fabric.start_counting()
        agents = {proc.pid: f"agent {name}" for name, proc in self.procs.items()}
        packets = self.fabric.packet_pids()
        self.sampler = CpuSampler({**agents, **packets}, others=functools.partial(live_runs, *request.runs),
                                  lab=frozenset(request.lab))
        self.sampler.start()
        self.meter = CpuMeter({**agents, **packets, os.getpid(): "share", **channel_pids(self.session)})
        self.meter.start()
        return msg.Watching()

    def quiesce(self) -> msg.Spent:
        if self.meter is None:
            return msg.Spent({}, 0.0, 0)
        used = self.meter.stop()
        return msg.Spent(used, self.meter.softirq, self.meter.agent_wakeups)

    def read(self) -> msg.Readings:
        return msg.Readings(self.fabric.link_counters(), list(self.fabric.queue_totals()),
                            self.fabric.controller_stats())

    def judge(self, request: msg.Judge) -> msg.Judged:
        if self.sampler is None:
            return msg.Judged({"cpu_busy_pct": None, "ok": False, "notes": ["not measured"]})
        verdict = self.sampler.stop(emulator_drops=request.emulator_drops, goodput_fraction=request.goodput_fraction,
                                    latency=request.latency,
                                    link_load=None if request.link_load is None else
                                    (request.link_load[0], request.link_load[1]))
        self.sampler = None
        return msg.Judged(verdict.to_dict())

    def logs(self) -> msg.Logged:
        return msg.Logged({path.name: path.read_text(errors="replace") for path in sorted(self.log_dir.glob("agent-*"))
                           if path.stat().st_size})

    def close(self) -> None:
        """Agents that are still there end (the runner has asked them to quit by now, or it is gone)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def channel_pids(session: int | None) -> dict[int, str]:
    """The SSH session carrying this share and what runs under it besides this share (the agents' relays, and
    any sudo between), labelled for `CpuMeter`; none for a share of this machine."""
    if session is None:
        return {}
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = proc_text(f"/proc/{entry}/stat")
            except OSError:
                continue
            names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    out = {session: "ssh session"}
    for pid in names:
        chain, up = [], pid
        while up in parents and up not in (session, os.getpid(), 1):
            chain.append(up)
            up = parents[up]
        if up == session and chain:
            try:
                argv = proc_text(f"/proc/{pid}/cmdline").split("\0")
            except OSError:
                continue
            relay = "cluster-relay" in argv and argv.index("cluster-relay") + 1 < len(argv)
            out[pid] = f"relay {Path(argv[argv.index('cluster-relay') + 1]).stem}" if relay else names[pid]
    return out
