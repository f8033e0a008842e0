"""Figures of each workload alone, and the throughput of streams over time (results.json `workloads`,
`timeseries`; timeseries.csv).

A stream's bytes count in the bin of the time its receiver's agent delivered (and verified) each transfer;
bin i covers [i * bin_s, (i + 1) * bin_s) from the start of the workloads, the clock of the events' `at`.
A stream's ideal rate is its flows' bytes over the time a perfect fabric needs to carry them all
(`ideal_step_seconds`): the share of line rate its NICs and uplinks allow.
"""
from __future__ import annotations

import math

from ..spec import Scenario, Workload
from ..workload import Transfer, ideal_step_seconds
from . import trace
from .outcome import Outcome, Step, Totals
from .records import Records
from .results import step_times

TOTAL = "total"


def pair_key(src: str, dst: str) -> str:
    return f"{src}>{dst}"


def ideal_stream_bps(w: Workload, scenario: Scenario) -> float:
    """The stream's total rate on a perfect fabric (every flow sending at once)."""
    size = 1 << 20
    seconds = ideal_step_seconds([Transfer(src, dst, size) for src, dst in w.flows], scenario.topology)
    return len(w.flows) * size * 8 / seconds


def timeseries(scenario: Scenario, outcome: Outcome) -> dict | None:
    """{bin_s, "<src>><dst>": [bit/s per bin], ..., total: [...]} over every stream; None without streams. The bins
    cover the longest stream's duration at the first stream's bin width (every stream's, when they agree)."""
    streams = [i for i, w in enumerate(scenario.workloads) if w.stream]
    if not streams:
        return None
    bin_s = scenario.workloads[streams[0]].bin_s
    count = max(outcome.binning[i].count for i in streams if i in outcome.binning) if outcome.binning else 0
    names = scenario.topology.host_names
    series: dict[str, list[float]] = {pair_key(*f): [0.0] * count for i in streams for f in scenario.workloads[i].flows}
    total = [0.0] * count
    for (workload, src, dst), values in outcome.bins.items():
        width = outcome.binning[workload].bin_s
        pair = series[pair_key(names[src], names[dst])]
        for slot, n in enumerate(values):
            at = int(slot * width / bin_s + 1e-9)  # a stream binned finer or coarser lands in the shared bins
            if at < count:
                pair[at] += n
                total[at] += n
    scale = 8 / bin_s
    out: dict = {"bin_s": bin_s}
    for name, values in {**series, TOTAL: total}.items():
        out[name] = [round(v * scale, 1) for v in values]
    return out


def rows(scenario: Scenario, outcome: Outcome, series: dict | None) -> list[dict]:
    """One row per workload: its messages and bytes, and its steps (a collective) or bins (a stream)."""
    out = []
    for index, w in enumerate(scenario.workloads):
        t = outcome.totals.get(index, Totals())
        row: dict = {"name": w.name, "pattern": w.pattern, "connections": w.connections,
                     "messages": {"sent": t.sent, "completed": t.completed, "failed": t.sent - t.completed},
                     "bytes_delivered": t.delivered}
        if w.stream:
            row.update(_stream_figures(w, scenario, t, series))
        else:
            steps = outcome.workload_steps.get(w.name, Records(Step))
            wall = max(outcome.wall_s, 1e-9)
            times = step_times(steps, outcome.fired)
            row.update(steps=len(steps), goodput_bps=round(t.delivered * 8 / wall, 1),
                       goodput_fraction=round(sum(steps.column("ideal_s")) / wall, 4) if steps else 0.0,
                       step_time_s={k: times[k] for k in ("p50", "p100", "from_step")})
            if w.trace is not None:
                row.update(trace.figures(w, index, scenario, outcome))
        out.append(row)
    return out


def _stream_figures(w: Workload, scenario: Scenario, t: Totals, series: dict | None) -> dict:
    """Goodput over the stream's duration, as bit/s and as a share of its ideal rate, and the lowest bin's share
    (bins after the first, which holds the start-up, and within the duration)."""
    ideal = ideal_stream_bps(w, scenario)
    goodput = t.in_window * 8 / w.duration_s
    bins: list[float] = []
    if series is not None:
        width = series["bin_s"]
        count = math.ceil(w.duration_s / width - 1e-9)
        flows = [pair_key(*f) for f in w.flows]
        bins = [sum(series[f][i] for f in flows) for i in range(count)]
    steady = bins[1:] or bins
    return {"duration_s": w.duration_s, "ideal_bps": round(ideal, 1), "goodput_bps": round(goodput, 1),
            "goodput_fraction": round(goodput / ideal, 4),
            "min_bin_fraction": round(min(steady) / ideal, 4) if steady else None}
