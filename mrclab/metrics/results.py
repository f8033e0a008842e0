"""The parts of results.json (schema mrclab.results/v1, docs/spec.md) computed from a run's raw record, and the
files a run writes: results.json, steps.csv, events.csv, messages.csv, timeseries.csv (streams). `document`
assembles the parts."""
from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ..agent.endpoint import MARK_BIN_S
from .outcome import Fired, Outcome, Step
from .records import Records
from .rtt import rtt_quantile

SCHEMA = "mrclab.results/v1"
PACKET_KEYS = ("data_sent", "sacks", "retransmitted", "trimmed", "timeouts", "nacks", "probes")
PATH_KEYS = ("paths_retired", "paths_restored", "retirements_undone", "paths_held")


def rtt_histogram(agent_stats: dict) -> dict[int, int]:
    """Every RTT sample of the run (MRC agents; TCP ones report none), by bucket."""
    hist: dict[int, int] = {}
    for stats in agent_stats.values():
        for bucket, n in stats.get("rtt_hist", {}).items():
            hist[int(bucket)] = hist.get(int(bucket), 0) + n
    return hist


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), so p100 is the max."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def base_rtt(agent_stats: dict[str, dict]) -> float | None:
    """The median of the agents' base RTTs, None without any (TCP agents measure none)."""
    rtts = sorted(s["base_rtt_s"] for s in agent_stats.values() if s.get("base_rtt_s"))
    return round(rtts[len(rtts) // 2], 6) if rtts else None


def step_times(steps: Records[Step], fired: Sequence[Fired]) -> dict:
    """Step time over the steps after the warm-up: step 0 opens every connection and grows every window from
    its first value, so it measures start-up, not the fabric. It is left out (`from_step` 1; its time is
    `warmup_s`) unless it is the only step or a fault fired during it (then `from_step` 0: every step counts)."""
    ordered = sorted(zip(steps.column("index"), steps.column("start_s"), steps.column("duration_s"), strict=True))
    durations = [d for _, _, d in ordered]
    from_step = 0
    if len(ordered) >= 2 and ordered[0][0] == 0 and not any(f.t_s < ordered[1][1] for f in fired):
        durations, from_step = durations[1:], 1
    return {"p50": round(percentile(durations, 50), 6), "p99": round(percentile(durations, 99), 6),
            "p100": round(max(durations, default=0.0), 6),
            "mean": round(sum(durations) / len(durations), 6) if durations else 0.0,
            "from_step": from_step, "warmup_s": round(ordered[0][2], 6) if ordered else None}


def summary(outcome: Outcome, agent_stats: dict[str, dict]) -> dict:
    wall = max(outcome.wall_s, 1e-9)
    total = outcome.total()
    delivered, verified, completed = total.delivered, total.verified, total.completed
    ideal = outcome.ideal_time_s
    counters = [s.get("counters", {}) for s in agent_stats.values()]
    hist = rtt_histogram(agent_stats)  # to read avoid_s in loaded RTTs
    loaded = {q: rtt_quantile(hist, q / 100) for q in (50, 99)}
    return {
        "step_time_s": step_times(outcome.steps, outcome.fired),
        "goodput_bps": round(delivered * 8 / wall, 1),
        "goodput_fraction": round(ideal / wall, 4) if outcome.steps else 0.0,
        "ideal_time_s": round(ideal, 6),
        "workload_time_s": round(wall, 6),
        "base_rtt_s": base_rtt(agent_stats),
        "rtt_p50_s": None if loaded[50] is None else round(loaded[50], 6),
        "rtt_p99_s": None if loaded[99] is None else round(loaded[99], 6),
        "messages": {"sent": total.sent, "completed": completed,
                     "failed": total.sent - completed},  # an unfinished message failed too
        "bytes": {"sent": total.bytes_sent, "delivered": delivered, "verified": verified},
        "packets": {k: sum(c.get(k, 0) for c in counters) for k in PACKET_KEYS},
        "paths": {k: sum(c.get(k, 0) for c in counters) for k in PATH_KEYS},
    }


DROP_KEYS = ("queue_drops", "loss_drops", "blackhole_drops", "down_drops")


def with_sends_into_faults(links: list[dict], sent: dict[tuple[str, str], int]) -> list[dict]:
    """`down_drops` of each link direction: the larger of what OVS counted as sent into the downed cable and
    what the senders put on paths that met the fault there (both undercount: OVS rarely counts a failed
    send; the senders' count covers only MRC over static source routing, where an EV fixes the path)."""
    out = []
    for link in links:
        n = sent.get((link["from"], link["to"]), 0)
        if n > link.get("down_drops", 0):
            link = {**link, "drops": link["drops"] - link.get("down_drops", 0) + n, "down_drops": n}
        out.append(link)
    return out


def ecn(links: list[dict], agent_stats: dict[str, dict]) -> dict:
    """ECN over the run: packets the switch ports marked CE, CE-marked packets the receivers got, and the EV
    turns senders sat out because of the echoes."""
    counters = [s.get("counters", {}) for s in agent_stats.values()]
    return {"marked": sum(link.get("ecn_marked", 0) for link in links),
            "ce_received": sum(c.get("ce_received", 0) for c in counters),
            "ev_skips": sum(c.get("ecn_skips", 0) for c in counters)}


def connections(agent_stats: dict[str, dict], host_names: Sequence[str]) -> list[dict]:
    """One row per connection end: the host, its peer, the connection id and its own counters."""
    rows = [{"host": host, "peer": host_names[row["peer"]], **{k: v for k, v in row.items() if k != "peer"}}
            for host, stats in agent_stats.items() for row in stats.get("connections", [])]
    order = {name: i for i, name in enumerate(host_names)}
    return sorted(rows, key=lambda r: (order[r["host"]], order[r["peer"]], r["conn"]))


def link_drops(links: list[dict]) -> dict:
    """Packets the emulated links dropped, by cause, summed over every link direction."""
    return {key: sum(link.get(key, 0) for link in links) for key in DROP_KEYS}


def series(sample_times: Sequence[float], sample: Callable[[int], tuple | None]) -> list[dict]:
    """Counters and EV states summed over agents (`Agents.sample_row`), one row per sampling round any agent
    answered; ``sample_times`` holds each round's time."""
    rows = []
    for round_no, t in enumerate(sample_times):
        summed = sample(round_no)
        if summed is None or not summed[0]:
            continue
        _, counters, states = summed
        rows.append({"t_s": t, **{k: counters.get(k, 0) for k in PACKET_KEYS}, "ev_states": dict(states)})
    return rows


def recovery(marks: dict[str, dict[int, int]], t0: float, slot_s: float = MARK_BIN_S) -> dict:
    """{counter: [[t_s, count], ...]}: when trims, retransmissions and timeouts happened, to the agents'
    millisecond (the start of each slot, in seconds since the workload started)."""
    return {key: [[round(slot * slot_s - t0, 6), n] for slot, n in sorted(bins.items())]
            for key, bins in marks.items()}


def write(out_dir: Path, doc: dict) -> None:
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    with open(out_dir / "steps.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["index", "start_s", "duration_s", "ideal_s"])
        writer.writerows([s["index"], s["start_s"], s["duration_s"], s["ideal_s"]] for s in doc["steps"])
    with open(out_dir / "events.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_s", "action", "target", "rate", "avoid_s", "revive_s"])
        writer.writerows([e["t_s"], e["action"], e["target"], e.get("rate", ""), e.get("avoid_s", ""),
                          e.get("revive_s", "")] for e in doc["events"])
    series = doc.get("timeseries")
    if series is not None:  # one row per bin: its start, then bit/s of each pair and the total
        names = [k for k in series if k != "bin_s"]
        with open(out_dir / "timeseries.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["t_s", *names])
            writer.writerows([round(i * series["bin_s"], 6), *(series[n][i] for n in names)]
                             for i in range(len(series[names[0]])))


MESSAGE_COLUMNS = ["step", "src", "dst", "bytes", "posted_s", "delivered_s", "status"]


class MessageLog:
    """messages.csv, written as the run goes: one row per message as it completes or fails (the rest at the end,
    unfinished), so a long run holds none of them and a killed one keeps what it wrote."""

    FLUSH_EVERY = 256

    def __init__(self, path: Path) -> None:
        self._file = open(path, "w", newline="")  # noqa: SIM115  open for the run's life; close() ends it
        self._writer = csv.writer(self._file)
        self._writer.writerow(MESSAGE_COLUMNS)
        self._pending = 0

    def write(self, row: list) -> None:
        self._writer.writerow(row)
        self._pending += 1
        if self._pending >= self.FLUSH_EVERY:
            self._file.flush()
            self._pending = 0

    def close(self) -> None:
        self._file.close()


def what_ran(scenario) -> dict:
    """results.json's `scenario`, `engine` and `topology`."""
    topo = scenario.topology
    return {"scenario": {"name": scenario.name, "file": scenario.source}, "engine": scenario.engine,
            "topology": {"name": topo.name, "planes": topo.planes, "leaves": topo.leaves, "spines": topo.spines,
                         "hosts": topo.hosts}}


def write_unfinished(out_dir: Path, *, status: str, error: str, run_id: str, started_at: str, scenario,
                     overrides: dict) -> None:
    """results.json of a run that failed or was interrupted before it had results: what ran, and why it
    stopped, so `mrclab report` can say so."""
    doc = {"schema": SCHEMA, "run_id": run_id, "status": status, "error": error, **what_ran(scenario),
           "transport": scenario.transport, "routing": scenario.routing, "seed": scenario.seed,
           "started_at": started_at, "overrides": overrides}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
