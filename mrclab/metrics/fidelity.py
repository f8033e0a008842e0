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
in the links' own queues as the links' shapers make them wait, which the egress program adds
up per port (a SACK's: none while its priority class is within its guaranteed rate). The rest is the
emulator's: the switches and the kernel forwarding late because the CPU is busy. When that
rest is more than `EMULATOR_SHARE_LIMIT` of the RTT under load, reaction times (avoid_s) and
the congestion window are set by the CPU more than by the network, whatever the throughput says.
Any one makes `fidelity.ok` false and the notes say which, with the figures.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from ..runstate import proc_text
from ..units import format_rate, format_seconds

MACHINE_BUSY_LIMIT = 90.0
WINDOW_S = 0.2  # 20 clock ticks: a busy share resolved to 5%
SATURATED_PCT = 90.0
SATURATED_SHARE = 0.25
TICKS = os.sysconf("SC_CLK_TCK")
EMULATOR_SHARE_LIMIT = 0.5


def latency_split(rtt_mean_s: float | None, base_rtt_s: float | None, data_wait_s: float,
                  control_wait_s: float) -> dict | None:
    """The mean RTT under load in three parts: the base RTT, the emulated links' queueing (a data packet's
    waits on its way out, its SACK's on the way back, each along the path: the engine's ``queue_waits``), and
    the emulator's own delay; None without RTT samples (TCP agents report none)."""
    if rtt_mean_s is None or base_rtt_s is None:
        return None
    links = data_wait_s + control_wait_s
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
                stat = proc_text(f"/proc/{pid}/task/{tid}/stat").rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[f"{label}/{tid}"] = int(stat[11]) + int(stat[12])
    return out


OUTSIDE_PCT = 10.0  # a process outside the lab that used this much of a core is named in the notes
OUTSIDE_LOAD_LIMIT = 30.0  # ... and together, this much of a core makes the run untrustworthy
KTHREADD = 2  # the parent of every kernel thread
LINK_HELD_FRACTION = 0.5  # a saturated CPU with no link past this share of its rate: links too fast to emulate


def _process_ticks() -> dict[int, tuple[int, str, int]]:
    """pid -> (utime+stime, command name, parent pid) of every process on the machine."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = proc_text(f"/proc/{entry}/stat")
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
            if pid in lab or pid == os.getpid() or pid == KTHREADD:  # kernel threads (ksoftirqd) forward
                return True  # the lab's own packets
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
class Saturation:
    """Per thread, the windows it spent saturated; fed one reading (time, ticks per thread) per window."""

    windows: int = 0
    saturated: dict[str, int] = field(default_factory=dict)  # thread -> windows
    last: tuple[float, dict[str, int]] | None = None

    def observe(self, t: float, ticks: dict[str, int]) -> None:
        if self.last is not None:
            t0, ticks0 = self.last
            limit = SATURATED_PCT / 100.0 * TICKS * (t - t0)
            for key, value in ticks.items():
                if value - ticks0.get(key, value) >= limit:
                    self.saturated[key] = self.saturated.get(key, 0) + 1
            self.windows += 1
        self.last = (t, ticks)

    def worst(self, default: str | None) -> tuple[str | None, float]:
        """The thread saturated in the most windows (`default` when none was), and its share of the windows."""
        share = max(self.saturated.values(), default=0) / self.windows if self.windows else 0.0
        return max(self.saturated, key=lambda key: self.saturated[key], default=default), share


@dataclass
class CpuSampler:
    """Start before the workload, stop after; pids maps process id -> label (e.g. 'ovs-vswitchd', 'agent h3')."""

    pids: dict[int, str] = field(default_factory=dict)
    others: Callable[[], list[str]] = list  # other mrclab runs live now, each in words (polled while sampling)
    lab: frozenset[int] = frozenset()  # more of the lab's own processes (a lab over servers: its other parts here)
    _start: tuple | None = None

    def start(self) -> None:
        self._start = (time.monotonic(), _machine_ticks(), _thread_ticks(self.pids))
        self._processes = _process_ticks()
        self._saturation = Saturation()
        self._concurrent: dict[str, None] = dict.fromkeys(self.others())
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        """Count, per thread, the windows it spent saturated."""
        self._saturation.observe(time.monotonic(), _thread_ticks(self.pids))
        windows = 0
        while not self._done.wait(WINDOW_S):
            self._saturation.observe(time.monotonic(), _thread_ticks(self.pids))
            windows += 1
            if windows % OTHERS_EVERY == 0:
                self._concurrent.update(dict.fromkeys(self.others()))

    def stop(self, emulator_drops: int = 0, goodput_fraction: float | None = None,
             latency: dict | None = None, link_load: tuple[float, float] | None = None) -> Verdict:
        if self._start is None:
            raise RuntimeError("CpuSampler.stop() before start()")
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
        most, share = self._saturation.worst(default=hottest)
        outside = outside_processes(self._processes, _process_ticks(), set(self.pids) | self.lab, elapsed)
        self._concurrent.update(dict.fromkeys(self.others()))
        return verdict(machine, hottest, hottest_pct, emulator_drops, goodput_fraction, most, share, latency,
                       outside=outside, concurrent=tuple(self._concurrent), link_load=link_load)


NETWORK_BUSY_FRACTION = 0.7
OTHERS_EVERY = 5  # sampling windows between looks for other runs (1 s)


class Reason(Enum):
    """Why the machine, not the emulated network, limited a run: each makes `ok` false and writes a note."""

    EMULATOR_DROPS = "emulator_drops"  # the emulator failed to send packets the network never lost
    CPU_SET_PACE = "cpu_set_pace"  # a saturated CPU while the workload fell short of line rate
    CPU_SET_ROUND_TRIP = "cpu_set_round_trip"  # the emulator's delay past EMULATOR_SHARE_LIMIT of the RTT
    LINKS_TOO_FAST = "links_too_fast"  # a saturated CPU while no link carried LINK_HELD_FRACTION of its rate
    OUTSIDE_LOAD = "outside_load"  # processes outside the lab took OUTSIDE_LOAD_LIMIT of a core or more
    CONCURRENT_RUN = "concurrent_run"  # another mrclab run was live at the same time


@dataclass(frozen=True)
class Verdict:
    """The figures of `verdict`, the reasons they fail (none: a faithful run), and results.json's `fidelity`."""

    cpu_busy_pct: float
    hottest_thread: str | None
    hottest_thread_pct: float
    saturated_thread: str | None
    saturated_share: float
    emulator_drops: int
    goodput_fraction: float | None
    latency: dict | None
    outside_processes: tuple[dict, ...]
    reasons: tuple[Reason, ...]
    concurrent: tuple[str, ...] = ()
    link_load: tuple[float, float] | None = None  # (the most any link direction carried, the fastest configured), bit/s

    @property
    def ok(self) -> bool:
        return not self.reasons

    def notes(self) -> list[str]:
        """The reasons in words, with their figures; for a faithful run, the figures that show it."""
        notes = [_NOTES[reason](self) for reason in self.reasons]
        if self.ok:
            notes.append(_no_sign(self))
            if self.latency is not None:
                notes.append(_split(self.latency))
        if self.outside_processes and Reason.OUTSIDE_LOAD not in self.reasons:
            notes.append(f"busy outside the lab while the workload ran: {_others(self)} (% of a core)")
        return notes

    def to_dict(self) -> dict:
        return {"cpu_busy_pct": round(self.cpu_busy_pct, 1), "hottest_thread": self.hottest_thread,
                "hottest_thread_pct": round(self.hottest_thread_pct, 1), "saturated_thread": self.saturated_thread,
                "saturated_share": round(self.saturated_share, 3), "emulator_drops": self.emulator_drops,
                **({"latency": self.latency} if self.latency is not None else {}),
                "outside_processes": list(self.outside_processes), "concurrent_runs": list(self.concurrent),
                "ok": self.ok, "notes": self.notes()}


def verdict(machine_pct: float, hottest: str | None, hottest_pct: float, emulator_drops: int = 0,
            goodput_fraction: float | None = None, saturated_thread: str | None = None,
            saturated_share: float = 0.0, latency: dict | None = None, outside: Sequence[dict] = (),
            concurrent: Sequence[str] = (), link_load: tuple[float, float] | None = None) -> Verdict:
    """A busy CPU alone does not prove the CPU set the pace: ovs-vswitchd's one forwarding thread
    polls ~200 ports and stays busy at any link rate. It did when the CPU was saturated *and* the
    workload got well short of what the emulated links allow (`goodput_fraction`, the ideal
    time over the actual one); a saturated network next to a busy CPU is a faithful run."""
    saturated = machine_pct >= MACHINE_BUSY_LIMIT or saturated_share >= SATURATED_SHARE
    network_busy = goodput_fraction is not None and goodput_fraction >= NETWORK_BUSY_FRACTION
    too_fast = (saturated and not network_busy and link_load is not None
                and link_load[0] < LINK_HELD_FRACTION * link_load[1])
    reasons = [reason for reason, holds in (
        (Reason.EMULATOR_DROPS, bool(emulator_drops)),
        (Reason.LINKS_TOO_FAST, too_fast),
        (Reason.CPU_SET_PACE, saturated and not network_busy and not too_fast),
        (Reason.CPU_SET_ROUND_TRIP,
         latency is not None and latency["emulator_s"] > EMULATOR_SHARE_LIMIT * latency["rtt_mean_s"]),
        (Reason.OUTSIDE_LOAD, sum(p["cpu_pct"] for p in outside) >= OUTSIDE_LOAD_LIMIT),
        (Reason.CONCURRENT_RUN, bool(concurrent)),
    ) if holds]
    return Verdict(machine_pct, hottest, hottest_pct, saturated_thread, saturated_share, emulator_drops,
                   goodput_fraction, latency, tuple(outside), tuple(reasons), tuple(concurrent), link_load)


def _others(v: Verdict) -> str:
    return ", ".join(f"{p['name']} (pid {p['pid']}) {p['cpu_pct']:.0f}%" for p in v.outside_processes[:4])


def _advice(v: Verdict) -> str:
    others = _others(v)
    return (f"stop what else runs on this machine ({others}) or run again when it is idle" if others
            else "lower link rates or fewer hosts")


def _split(latency: dict) -> str:
    return (f"RTT under load {format_seconds(latency['rtt_mean_s'])} on average: {format_seconds(latency['base_s'])} "
            f"base, {format_seconds(latency['links_s'])} queueing in the emulated links, "
            f"{format_seconds(latency['emulator_s'])} added by the emulator itself")


def _emulator_drops(v: Verdict) -> str:
    return (f"the emulator dropped {v.emulator_drops} packets it could not send (socket buffer or CPU): "
            "losses the emulated network never made")


def _cpu_set_pace(v: Verdict) -> str:
    saturated = []
    if v.cpu_busy_pct >= MACHINE_BUSY_LIMIT:
        saturated.append(f"machine CPU {v.cpu_busy_pct:.0f}% busy (limit {MACHINE_BUSY_LIMIT:.0f}%)")
    if v.saturated_share >= SATURATED_SHARE:
        saturated.append(f"thread {v.saturated_thread} saturated (>= {SATURATED_PCT:.0f}% of a core) in "
                         f"{v.saturated_share:.0%} of {WINDOW_S:g} s windows (limit {SATURATED_SHARE:.0%})")
    reach = ("" if v.goodput_fraction is None
             else f" while the workload reached only {v.goodput_fraction:.0%} of line rate")
    return "; ".join(saturated) + reach + f": the CPU, not the emulated network, set the pace; {_advice(v)}"


def _cpu_set_round_trip(v: Verdict) -> str:
    assert v.latency is not None, "a reason only a latency split gives"
    return (_split(v.latency) + f" (limit {EMULATOR_SHARE_LIMIT:.0%} of the RTT): the CPU, not the emulated "
                                "network, set the round trip, so reaction times (avoid_s) and the congestion "
                                f"window are the CPU's; {_advice(v)}")


def _links_too_fast(v: Verdict) -> str:
    assert v.link_load is not None, "a reason only link loads give"
    held, rate = v.link_load
    return (f"this machine could not emulate {format_rate(rate)} links: the busiest link carried "
            f"{format_rate(held)} on average ({held / rate:.0%} of its rate) while the CPU was saturated "
            f"(machine {v.cpu_busy_pct:.0f}% busy); use lower link rates (the shipped labs run 25Mbit)")


def _outside_load(v: Verdict) -> str:
    total = sum(p["cpu_pct"] for p in v.outside_processes)
    return (f"processes outside the lab used {total:.0f}% of a core while the workload ran ({_others(v)}; limit "
            f"{OUTSIDE_LOAD_LIMIT:.0f}%): they took CPU the emulator needed, so the run's pace may be theirs; "
            "stop them or run again when the machine is idle")


def _concurrent_run(v: Verdict) -> str:
    return (f"another mrclab run was live on this machine at the same time ({', '.join(v.concurrent[:3])}): two labs "
            "share the CPU, so neither run's pace is the emulated network's alone; run them one after another")


def _no_sign(v: Verdict) -> str:
    if v.cpu_busy_pct >= MACHINE_BUSY_LIMIT:  # busy, yet the network set the pace: say why that is still ok
        return (f"the machine CPU was {v.cpu_busy_pct:.0f}% busy, but the workload reached "
                f"{v.goodput_fraction or 0:.0%} of line rate (at least {NETWORK_BUSY_FRACTION:.0%}): the emulated "
                "network, not the CPU, set the pace")
    return (f"no sign that the CPU limited this run: machine CPU {v.cpu_busy_pct:.0f}% busy, hottest thread "
            f"{v.hottest_thread or '-'} at {v.hottest_thread_pct:.0f}% of a core, saturated in "
            f"{v.saturated_share:.0%} of {WINDOW_S:g} s windows"
            + (f"; the workload used {v.goodput_fraction:.0%} of line rate, the rest is the transport's and "
               "the workload's own pace (windows, step barriers)" if v.goodput_fraction is not None else ""))


_NOTES = {Reason.EMULATOR_DROPS: _emulator_drops, Reason.CPU_SET_PACE: _cpu_set_pace,
          Reason.CPU_SET_ROUND_TRIP: _cpu_set_round_trip, Reason.LINKS_TOO_FAST: _links_too_fast,
          Reason.OUTSIDE_LOAD: _outside_load, Reason.CONCURRENT_RUN: _concurrent_run}


CLOCK_SHARE_LIMIT = 0.1  # a lab over servers: its servers' times are known to within this share of the base RTT


def over_servers(verdicts: dict[str, dict | None], time_uncertainty: dict[str, float | None],
                 base_rtt_s: float | None, machines: list[list[str]]) -> dict:
    """The fidelity of a lab over servers (results.json `fidelity`, with `servers` and `clock`): each server judges
    its own CPU and its own emulator drops (`verdicts`: server -> `Verdict.to_dict()`, None when it went away
    before it could), and the times the servers report are on the runner's clock to within `time_uncertainty`
    (server -> seconds). It is ok only when every server's verdict is and every server's times are known to within
    CLOCK_SHARE_LIMIT of the base RTT; the notes name each server that is not. `machines` groups the servers that
    turned out to be one machine (one kernel): their CPU figures are that machine's, shared."""
    measured = {server: v for server, v in verdicts.items() if v is not None}
    notes = [f"server {server}: not measured: it went away" for server, v in verdicts.items() if v is None]
    for server, v in measured.items():
        if not v.get("ok"):
            notes += [f"server {server}: {note}" for note in v["notes"]]
    limit = None if base_rtt_s is None else CLOCK_SHARE_LIMIT * base_rtt_s
    late = {server: u for server, u in time_uncertainty.items() if limit is not None and (u is None or u > limit)}
    for server, u in late.items():
        assert limit is not None
        notes.append(f"server {server}: its times are on the runner's clock only to within "
                     + ("an unknown margin" if u is None else format_seconds(u))
                     + f", more than {CLOCK_SHARE_LIMIT:.0%} of the base RTT ({format_seconds(limit)}): reaction times "
                       "(avoid_s) and step times across servers are that uncertain; run the runner on the first server "
                       "(local) and keep the underlay between the servers short")
    ok = not notes
    if ok:
        notes += [f"server {server}: {note}" for server, v in measured.items() for note in v["notes"]]
    for group in machines:
        if len(group) > 1:
            notes.append(f"servers {', '.join(group)} are one machine (one kernel): they share its CPUs, so each one's "
                         "CPU figures are the whole machine's")
    busiest = max(measured.items(), key=lambda item: item[1].get("cpu_busy_pct") or 0.0, default=None)
    top = busiest[1] if busiest is not None else {}
    return {"cpu_busy_pct": top.get("cpu_busy_pct"),
            "hottest_thread": f"{busiest[0]}: {top.get('hottest_thread')}" if busiest is not None else None,
            "hottest_thread_pct": top.get("hottest_thread_pct"), "saturated_thread": top.get("saturated_thread"),
            "saturated_share": top.get("saturated_share"),
            "emulator_drops": sum(v.get("emulator_drops", 0) for v in measured.values()),
            **({"latency": top["latency"]} if "latency" in top else {}),
            "outside_processes": [{"server": server, **p} for server, v in measured.items()
                                  for p in v.get("outside_processes", [])],
            "concurrent_runs": sorted({r for v in measured.values() for r in v.get("concurrent_runs", [])}),
            "ok": ok, "notes": notes,
            "servers": [{"server": server, **(v if v is not None else {"ok": False, "notes": ["it went away"]})}
                        for server, v in verdicts.items()],
            "clock": {"limit_s": None if limit is None else round(limit, 7),
                      "time_uncertainty_s": dict(time_uncertainty)}}
