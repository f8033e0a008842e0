"""What the lab's processes cost per delivered byte: CPU seconds per delivered MiB.

Read from ``/proc/<pid>/stat`` (utime + stime of the whole process, every thread, living
or exited) when the workload starts and when it ends, so the figure covers exactly the
workload and needs no cooperation from the processes measured. Each agent is one end;
``agents`` is all of them, ``lab`` adds the processes that move the fabric's packets
(ovs-vswitchd) and the runner itself.
"""
from __future__ import annotations

import os
from pathlib import Path

MIB = 1 << 20
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds a process has used so far (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


class CpuMeter:
    """CPU seconds of labelled processes between :meth:`start` and :meth:`stop`; labels starting with
    ``agent `` are the agents (one per host)."""

    def __init__(self, pids: dict[int, str]) -> None:
        self._pids = dict(pids)
        self._start: dict[int, float] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self._start = {pid: cpu for pid in self._pids if (cpu := process_cpu_s(pid)) is not None}

    def stop(self) -> dict[str, float]:
        self.used = {}
        for pid, label in self._pids.items():
            end = process_cpu_s(pid)
            if end is not None and pid in self._start:
                self.used[label] = self.used.get(label, 0.0) + end - self._start[pid]
        return self.used

    def per_mib(self, delivered_bytes: int) -> dict:
        """``cpu_s_per_mib`` of the results: the agents together, the whole lab, and each agent (its host's
        name); None where nothing was delivered."""
        mib = delivered_bytes / MIB
        agents = {label.removeprefix("agent "): cpu for label, cpu in self.used.items() if label.startswith("agent ")}

        def ratio(cpu: float) -> float | None:
            return round(cpu / mib, 5) if mib > 0 else None

        return {"agents": ratio(sum(agents.values())), "lab": ratio(sum(self.used.values())),
                "hosts": {host: ratio(cpu) for host, cpu in sorted(agents.items())},
                "cpu_s": {label: round(cpu, 3) for label, cpu in sorted(self.used.items())},
                "delivered_mib": round(mib, 3)}
