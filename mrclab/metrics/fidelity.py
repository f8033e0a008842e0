"""Was the emulated network the bottleneck, or this machine's CPU?

Two honest signals, sampled from /proc while the workload runs:
- the whole machine's busy share (all CPUs): past `MACHINE_BUSY_LIMIT` there is no idle
  time left, so a workload short of line rate was held back by the CPU: the agents could
  not send faster, or the switches forward faster, even where the round trips show no delay
  (a kernel datapath forwards promptly while the agents wait for a core);
- the hottest single thread among the processes that move packets (ovs-vswitchd's
  threads, every agent): one that is saturated is a serial bottleneck even when the
  machine as a whole still has idle time. Saturated means busy for at least
  `SATURATED_PCT` of a `WINDOW_S` window, and the thread counts as the bottleneck when
  that held in at least `SATURATED_SHARE` of the workload's windows (the bursts). An
  average over the run cannot tell a thread that is 75% busy all along (it keeps up,
  with a quarter of its time to spare) from one saturated in every burst and idle
  between them; the windows can.
A third signal is exact rather than sampled: packets the emulator itself failed to send
(`emulator_drops`: ovs-vswitchd's, or a veth's whose peer's backlog was full). The emulated
network never made those losses, yet an MRC sender reads them as path failures.
The fourth is the RTT under load (`latency_split`): what the agents measured on average,
against what the emulated network accounts for - the base RTT plus the time packets waited
in the links' own queues, which the egress program adds up per port. The rest is the
emulator's: the switches and the kernel forwarding late because the CPU is busy. When that
rest is more than `EMULATOR_SHARE_LIMIT` of the RTT under load, reaction times (avoid_s) and
the congestion window are set by the CPU more than by the network, whatever the throughput says.
Any one makes `fidelity.ok` false and the notes say which, with the figures.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MACHINE_BUSY_LIMIT = 90.0
WINDOW_S = 0.2  # 20 clock ticks: a busy share resolved to 5%
SATURATED_PCT = 90.0
SATURATED_SHARE = 0.25
TICKS = os.sysconf("SC_CLK_TCK")
EMULATOR_SHARE_LIMIT = 0.5
PATH_HOPS = 4  # egress ports on every path of a two-tier Clos: host NIC, leaf up, spine down, leaf down


def latency_split(rtt_mean_s: float | None, base_rtt_s: float | None, data_wait_s: float,
                  control_wait_s: float) -> dict | None:
    """The mean RTT under load in three parts: the base RTT, the emulated links' queueing (a data packet's
    waits on its way out, its SACK's on the way back, each a per-port mean), and the emulator's own delay;
    None without RTT samples (TCP agents report none)."""
    if rtt_mean_s is None or base_rtt_s is None:
        return None
    links = PATH_HOPS * (data_wait_s + control_wait_s)
    return {"rtt_mean_s": round(rtt_mean_s, 6), "base_s": round(base_rtt_s, 6), "links_s": round(links, 6),
            "emulator_s": round(max(0.0, rtt_mean_s - base_rtt_s - links), 6)}


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def _thread_ticks(pids: dict[int, str]) -> dict[str, int]:
    """utime+stime per thread, keyed `label/tid`."""
    out = {}
    for pid, label in pids.items():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[f"{label}/{tid}"] = int(stat[11]) + int(stat[12])
    return out


OUTSIDE_PCT = 10.0  # a process outside the lab that used this much of a core is named in the notes


def _process_ticks() -> dict[int, tuple[int, str, int]]:
    """pid -> (utime+stime, command name, parent pid) of every process on the machine."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
        out[int(entry)] = (int(rest[11]) + int(rest[12]), name, int(rest[1]))
    return out


def outside_processes(before: dict, after: dict, lab: set[int], elapsed_s: float) -> list[dict]:
    """The processes outside the lab (neither `lab` nor descended from this one) that used at least
    OUTSIDE_PCT of a core while the workload ran, busiest first."""
    def in_lab(pid: int) -> bool:
        seen = set()
        while pid > 1 and pid not in seen:
            if pid in lab or pid == os.getpid():
                return True
            seen.add(pid)
            pid = after.get(pid, (0, "", 0))[2]
        return False
    out = []
    for pid, (ticks, name, _) in after.items():
        pct = 100.0 * (ticks - before.get(pid, (0,))[0]) / TICKS / elapsed_s
        if pct >= OUTSIDE_PCT and not in_lab(pid):
            out.append({"pid": pid, "name": name, "cpu_pct": round(pct, 1)})
    return sorted(out, key=lambda p: -p["cpu_pct"])


@dataclass
class CpuSampler:
    """Start before the workload, stop after; pids maps process id -> label (e.g. 'ovs-vswitchd', 'agent h3')."""

    pids: dict[int, str] = field(default_factory=dict)
    _start: tuple | None = None
    _result: dict | None = None

    def start(self) -> None:
        self._start = (time.monotonic(), _machine_ticks(), _thread_ticks(self.pids))
        self._processes = _process_ticks()
        self._windows = 0
        self._saturated: dict[str, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        """Count, per thread, the windows it spent saturated."""
        t, ticks = time.monotonic(), _thread_ticks(self.pids)
        while not self._done.wait(WINDOW_S):
            t1, ticks1 = time.monotonic(), _thread_ticks(self.pids)
            limit = SATURATED_PCT / 100.0 * TICKS * (t1 - t)
            for key, value in ticks1.items():
                if value - ticks.get(key, value) >= limit:
                    self._saturated[key] = self._saturated.get(key, 0) + 1
            self._windows += 1
            t, ticks = t1, ticks1

    def stop(self, emulator_drops: int = 0, goodput_fraction: float | None = None,
             latency: dict | None = None) -> dict:
        self._done.set()
        self._thread.join()
        t0, (busy0, total0), threads0 = self._start
        elapsed = max(time.monotonic() - t0, 1e-6)
        busy1, total1 = _machine_ticks()
        threads1 = _thread_ticks(self.pids)
        machine = 100.0 * (busy1 - busy0) / max(total1 - total0, 1)
        hottest, hottest_pct = None, 0.0
        for key, ticks in threads1.items():
            pct = 100.0 * (ticks - threads0.get(key, 0)) / TICKS / elapsed  # born mid-run: all of it
            if pct > hottest_pct:
                hottest, hottest_pct = key, pct
        share = max(self._saturated.values(), default=0) / self._windows if self._windows else 0.0
        most = max(self._saturated, key=self._saturated.get, default=hottest)
        outside = outside_processes(self._processes, _process_ticks(), set(self.pids), elapsed)
        self._result = verdict(machine, hottest, hottest_pct, emulator_drops, goodput_fraction, most, share, latency,
                               outside=outside)
        return self._result


NETWORK_BUSY_FRACTION = 0.7


def verdict(machine_pct: float, hottest: str | None, hottest_pct: float, emulator_drops: int = 0,
            goodput_fraction: float | None = None, saturated_thread: str | None = None,
            saturated_share: float = 0.0, latency: dict | None = None, outside: list[dict] = ()) -> dict:
    """A busy CPU alone does not prove the CPU set the pace: ovs-vswitchd's one forwarding thread
    polls ~200 ports and stays busy at any link rate. It did when the CPU was saturated *and* the
    workload got well short of what the emulated links allow (`goodput_fraction`, the ideal
    time over the actual one); a saturated network next to a busy CPU is a faithful run."""
    notes = []
    if emulator_drops:
        notes.append(f"the emulator dropped {emulator_drops} packets it could not send (socket buffer or CPU): "
                     "losses the emulated network never made")
    saturated = []
    cpu_delayed = latency is not None and latency["emulator_s"] > EMULATOR_SHARE_LIMIT * latency["rtt_mean_s"]
    if machine_pct >= MACHINE_BUSY_LIMIT:
        saturated.append(f"machine CPU {machine_pct:.0f}% busy (limit {MACHINE_BUSY_LIMIT:.0f}%)")
    if saturated_share >= SATURATED_SHARE:
        saturated.append(f"thread {saturated_thread} saturated (>= {SATURATED_PCT:.0f}% of a core) in "
                         f"{saturated_share:.0%} of {WINDOW_S:g} s windows (limit {SATURATED_SHARE:.0%})")
    network_busy = goodput_fraction is not None and goodput_fraction >= NETWORK_BUSY_FRACTION
    others = ", ".join(f"{p['name']} (pid {p['pid']}) {p['cpu_pct']:.0f}%" for p in outside[:4])
    advice = (f"stop what else runs on this machine ({others}) or run again when it is idle" if others
              else "lower link rates or fewer hosts")
    if saturated and not network_busy:
        reach = "" if goodput_fraction is None else f" while the workload reached only {goodput_fraction:.0%} of line rate"
        notes.append("; ".join(saturated) + reach + f": the CPU, not the emulated network, set the pace; {advice}")
    if latency is not None:
        split = (f"RTT under load {latency['rtt_mean_s'] * 1e3:.1f} ms on average: {latency['base_s'] * 1e3:.1f} ms "
                 f"base, {latency['links_s'] * 1e3:.1f} ms queueing in the emulated links, "
                 f"{latency['emulator_s'] * 1e3:.1f} ms added by the emulator itself")
        if cpu_delayed:
            notes.append(split + f" (limit {EMULATOR_SHARE_LIMIT:.0%} of the RTT): the CPU, not the emulated "
                                 "network, set the round trip, so reaction times (avoid_s) and the congestion "
                                 f"window are the CPU's; {advice}")
    ok = not notes
    if ok:
        notes.append(f"no sign that the CPU limited this run: machine CPU {machine_pct:.0f}% busy, hottest thread "
                     f"{hottest or '-'} at {hottest_pct:.0f}% of a core, saturated in {saturated_share:.0%} of "
                     f"{WINDOW_S:g} s windows"
                     + (f"; the workload used {goodput_fraction:.0%} of line rate, the rest is the transport's and "
                        "the workload's own pace (windows, step barriers)" if goodput_fraction is not None else ""))
        if latency is not None:
            notes.append(split)
    if others:
        notes.append(f"busy outside the lab while the workload ran: {others} (% of a core)")
    return {"cpu_busy_pct": round(machine_pct, 1), "hottest_thread": hottest,
            "hottest_thread_pct": round(hottest_pct, 1), "saturated_thread": saturated_thread,
            "saturated_share": round(saturated_share, 3), "emulator_drops": emulator_drops,
            **({"latency": latency} if latency is not None else {}), "outside_processes": list(outside),
            "ok": ok, "notes": notes}
