"""Figures of each workload alone, and the throughput of streams over time (results.json `workloads`,
`timeseries`; timeseries.csv).

A stream's bytes count in the bin of the time its receiver's agent delivered (and verified) each transfer;
bin i covers [i * bin_s, (i + 1) * bin_s) from the start of the workloads, the clock of the events' `at`.
A stream's ideal rate is its flows' bytes over the time a perfect fabric needs to carry them all
(`ideal_step_seconds`): the share of line rate its NICs and uplinks allow.
"""
from __future__ import annotations

import math

from ..addressing import conn_hosts
from ..spec import Scenario, Workload
from ..workload import Transfer, ideal_step_seconds
from .outcome import Outcome
from .results import percentile

TOTAL = "total"


def pair_key(src: str, dst: str) -> str:
    return f"{src}>{dst}"


def ideal_stream_bps(w: Workload, scenario: Scenario) -> float:
    """The stream's total rate on a perfect fabric (every flow sending at once)."""
    size = 1 << 20
    seconds = ideal_step_seconds([Transfer(src, dst, size) for src, dst in w.flows], scenario.topology)
    return len(w.flows) * size * 8 / seconds


def timeseries(scenario: Scenario, outcome: Outcome) -> dict | None:
    """{bin_s, "<src>>dst>": [bit/s per bin], ..., total: [...]} over every stream; None without streams. The bins
    cover the longest stream's duration at the first stream's bin width."""
    streams = [i for i, w in enumerate(scenario.workloads) if w.stream]
    if not streams:
        return None
    first = scenario.workloads[streams[0]]
    bin_s = first.bin_s
    count = math.ceil(max(scenario.workloads[i].duration_s for i in streams) / bin_s - 1e-9)
    names = scenario.topology.host_names
    series: dict[str, list[float]] = {pair_key(*f): [0.0] * count for i in streams for f in scenario.workloads[i].flows}
    total = [0.0] * count
    for key, delivery in outcome.delivered.items():
        if outcome.workload_of.get(key) not in streams or not delivery.verified:
            continue
        slot = int((delivery.t - outcome.t0) / bin_s)
        if 0 <= slot < count:
            src, dst = conn_hosts(key.conn)
            series[pair_key(names[src], names[dst])][slot] += delivery.bytes
            total[slot] += delivery.bytes
    scale = 8 / bin_s
    out: dict = {"bin_s": bin_s}
    for name, values in {**series, TOTAL: total}.items():
        out[name] = [round(v * scale, 1) for v in values]
    return out


def rows(scenario: Scenario, outcome: Outcome, series: dict | None) -> list[dict]:
    """One row per workload: its messages and bytes, and its steps (a collective) or bins (a stream)."""
    out = []
    for index, w in enumerate(scenario.workloads):
        keys = [k for k, i in outcome.workload_of.items() if i == index]
        completed = sum(1 for k in keys if outcome.status(k) == "completed")
        delivered = sum(outcome.delivered[k].bytes for k in keys if k in outcome.delivered)
        row: dict = {"name": w.name, "pattern": w.pattern, "connections": w.connections,
                     "messages": {"sent": len(keys), "completed": completed, "failed": len(keys) - completed},
                     "bytes_delivered": delivered}
        if w.stream:
            row.update(_stream_figures(w, scenario, outcome, series, keys))
        else:
            steps = outcome.workload_steps.get(w.name, [])
            durations = [s.duration_s for s, _ in steps]
            wall = max(outcome.wall_s, 1e-9)
            row.update(steps=len(steps), goodput_bps=round(delivered * 8 / wall, 1),
                       goodput_fraction=round(sum(i for _, i in steps) / wall, 4) if steps else 0.0,
                       step_time_s={"p50": round(percentile(durations, 50), 6),
                                    "p100": round(max(durations, default=0.0), 6)})
        out.append(row)
    return out


def _stream_figures(w: Workload, scenario: Scenario, outcome: Outcome, series: dict | None, keys: list) -> dict:
    """Goodput over the stream's duration, as bit/s and as a share of its ideal rate, and the lowest bin's share
    (bins after the first, which holds the start-up, and within the duration)."""
    ideal = ideal_stream_bps(w, scenario)
    inside = sum(outcome.delivered[k].bytes for k in keys if k in outcome.delivered and outcome.delivered[k].verified
                 and outcome.delivered[k].t - outcome.t0 < w.duration_s)
    goodput = inside * 8 / w.duration_s
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
