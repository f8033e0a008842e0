"""What the lab's processes cost per delivered byte: CPU seconds per delivered MiB.

Read from ``/proc/<pid>/stat`` (utime + stime of the whole process, every thread, living
or exited) when the workload starts and when it ends, so the figure covers exactly the
workload and needs no cooperation from the processes measured. Each agent is one end;
``agents`` is all of them, ``lab`` adds the processes that move the fabric's packets
(ovs-vswitchd, ksoftirqd) and the runner itself.

The kernel forwards an emulated packet through every hop of the fabric in softirq context,
mostly at once inside the ``sendto`` that sent it, and the scheduler's tick charges that time
to whichever process the CPU was running: on Linux routers about a third of what ``/proc``
says the agents used is the emulated network's forwarding, not the agents' work.
``softirq`` is the machine's softirq time (``/proc/stat``) over the workload, and
``agents_less_softirq`` takes from the agents every softirq tick that ksoftirqd did not
account for: a lower bound of the agents' own work, close to it when the agents keep the
CPUs busy (softirq served while a CPU idles is charged to nobody's process).

``wakeups_per_mib`` counts how often the agents went to sleep, hence woke up (their voluntary
context switches). Paced by emulated links, an agent wakes for a few packets at a time, and
every wake-up has a price of its own whatever it carries: the sleep, the wake-up, epoll and
the loop around them (``benchmarks/agent_pairs.py`` measures it).
"""
from __future__ import annotations

import os

from ..runstate import proc_text

MIB = 1 << 20
TICKS = os.sysconf("SC_CLK_TCK")
SOFTIRQ_FIELD = 7
"""Of /proc/stat's ``cpu`` line: cpu user nice system idle iowait irq softirq ..."""


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds a process has used so far (None once it is gone)."""
    try:
        fields = proc_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def voluntary_switches(pid: int) -> int | None:
    """How often a process's main thread, where an agent's loop runs, has gone to sleep of its own accord so
    far (None once it is gone)."""
    try:
        status = proc_text(f"/proc/{pid}/status")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return None


def softirq_s() -> float:
    """Softirq seconds every CPU has served so far, whatever process they were charged to."""
    with open("/proc/stat") as lines:
        return int(lines.readline().split()[SOFTIRQ_FIELD]) / TICKS


class CpuMeter:
    """CPU seconds of labelled processes between :meth:`start` and :meth:`stop`; labels starting with
    ``agent `` are the agents (one per host)."""

    def __init__(self, pids: dict[int, str]) -> None:
        self._pids = dict(pids)
        self._start: dict[int, float] = {}
        self._softirq_start = 0.0
        self._sleeps_start: dict[int, int] = {}
        self.used: dict[str, float] = {}
        self.softirq = 0.0
        self.agent_wakeups = 0

    def start(self) -> None:
        self._start = {pid: cpu for pid in self._pids if (cpu := process_cpu_s(pid)) is not None}
        self._softirq_start = softirq_s()
        self._sleeps_start = {pid: n for pid in self._agents() if (n := voluntary_switches(pid)) is not None}

    def stop(self) -> dict[str, float]:
        self.used = {}
        for pid, label in self._pids.items():
            end = process_cpu_s(pid)
            if end is not None and pid in self._start:
                self.used[label] = self.used.get(label, 0.0) + end - self._start[pid]
        self.softirq = softirq_s() - self._softirq_start
        self.agent_wakeups = 0
        for pid, before in self._sleeps_start.items():
            end = voluntary_switches(pid)
            if end is not None:
                self.agent_wakeups += end - before
        return self.used

    def _agents(self) -> list[int]:
        return [pid for pid, label in self._pids.items() if label.startswith("agent ")]

    def per_mib(self, delivered_bytes: int) -> dict:
        """``cpu_s_per_mib`` of the results: the agents together, the whole lab, each agent (its host's name),
        the machine's softirq and the agents less it, the agents' wake-ups; None where nothing was delivered."""
        mib = delivered_bytes / MIB
        agents = {label.removeprefix("agent "): cpu for label, cpu in self.used.items() if label.startswith("agent ")}
        ksoftirqd = sum(cpu for label, cpu in self.used.items() if label.startswith("ksoftirqd"))
        charged = max(0.0, self.softirq - ksoftirqd)  # the most the agents can have been charged
        total = sum(agents.values())

        def ratio(cpu: float, digits: int = 5) -> float | None:
            return round(cpu / mib, digits) if mib > 0 else None

        return {"agents": ratio(total), "lab": ratio(sum(self.used.values())),
                "softirq": ratio(self.softirq), "agents_less_softirq": ratio(max(0.0, total - charged)),
                "wakeups_per_mib": ratio(self.agent_wakeups, 1),
                "hosts": {host: ratio(cpu) for host, cpu in sorted(agents.items())},
                "cpu_s": {label: round(cpu, 3) for label, cpu in sorted(self.used.items())},
                "delivered_mib": round(mib, 3)}
