"""results.json of a run (schema mrclab.results/v1, docs/spec.md): its `Outcome` and what the lab reported,
assembled in one place; `results` computes the parts and writes the files."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..actions import mends_cut
from ..agents import effective_options
from ..spec import Scenario, Topology
from ..transports import TRANSPORTS
from . import avoid, expectations, results, workloads
from .fidelity import latency_split
from .outcome import Outcome, rows
from .rtt import rtt_mean

NOT_MEASURED = {"cpu_busy_pct": None, "ok": False, "notes": ["not measured"]}
NO_CONTROLLER = {"flow_mods_boot": None, "flow_mods_after_boot": None}


@dataclass(frozen=True)
class Lab:
    """What the lab reported once the workload stopped; after a failure, whatever could still be read."""

    datapath: tuple[str, str]  # name, and which flavour and why
    build: dict  # the agents' transport build: {transport: compiled | pure | mixed, why}
    stats: dict[str, dict]  # host -> its agent's stats reply
    samples: Callable[[int], tuple | None]  # sampling round -> (agents, counters, EV states) summed (Agents.sample_row)
    marks: dict[str, dict[int, int]]  # counter -> millisecond slot -> count
    links: list[dict]
    controller: dict
    fidelity: dict
    cost: dict | None  # cpu_s_per_mib
    capture: dict | None  # packet counts of a recording ("counts") and its note
    t0_epoch_s: float  # the wall clock at the outcome's t0


def fidelity_inputs(outcome: Outcome, links: list[dict], stats: dict[str, dict],
                    queue_waits: tuple[float, float], topology: Topology) -> dict:
    """The keyword arguments of `CpuSampler.stop`: the emulator's drops, the share of line rate the workload
    reached, the RTT under load split into its parts, and the most any link direction carried against the
    fastest configured rate."""
    wall = outcome.wall_s
    held = max((link["tx_bytes"] * 8 / wall for link in links), default=0.0) if wall > 0 else 0.0
    return {"emulator_drops": sum(link["emulator_drops"] for link in links),
            "goodput_fraction": outcome.ideal_time_s / wall if outcome.steps and wall > 0 else None,
            "latency": latency_split(rtt_mean(results.rtt_histogram(stats)), results.base_rtt(stats), *queue_waits),
            "link_load": (held, float(max(topology.host_rate_bps, topology.fabric_rate_bps))) if links else None}


def build(*, scenario: Scenario, run_id: str, started_at: str, outcome: Outcome, lab: Lab,
          failure: tuple[str, str] | None, overrides: dict) -> dict:
    """The results document; `failure` is (status, why) of a run that stopped on an error or a signal."""
    summary = results.summary(outcome, lab.stats)
    summary["link_drops"] = results.link_drops(lab.links)
    summary["ecn"] = results.ecn(lab.links, lab.stats)
    if lab.cost is not None:
        summary["cpu_s_per_mib"] = lab.cost
    fidelity = lab.fidelity
    if lab.capture is not None:
        fidelity = {**fidelity, "notes": [*fidelity["notes"], lab.capture["note"]]}
    doc = _document(scenario, run_id, started_at, outcome, summary, lab, fidelity)
    if lab.capture is not None:  # packet time (epoch) - t0_epoch_s = the t_s of events.csv and steps.csv
        doc["capture"] = {**lab.capture["counts"], "packets_kept": scenario.capture.packets,
                          "t0_epoch_s": round(lab.t0_epoch_s, 6)}
    if failure is not None:
        doc["status"], doc["error"] = failure
        doc["expectations"].insert(0, {"name": "run", "expected": "completed", "actual": doc["error"], "ok": False})
    doc["overrides"] = dict(overrides)
    return doc


def epoch_of(t_mono: float) -> float:
    """The wall clock at a monotonic time of this process."""
    return time.time() - time.monotonic() + t_mono


def _events(scenario: Scenario, outcome: Outcome) -> list[dict]:
    """The fired actions, with revive_s of each repair of a path cut (MRC transports keep EVs to revive)."""
    events = [f.to_dict() for f in outcome.fired]
    if TRANSPORTS[scenario.transport].mrc:
        for event in events:
            if mends_cut(event["action"]):
                value = avoid.revive_seconds(scenario.topology, event["target"], event["t_s"], outcome.ev_changes)
                event["revive_s"] = None if value is None else round(value, 6)
    return events


def _document(scenario: Scenario, run_id: str, started_at: str, outcome: Outcome, summary: dict, lab: Lab,
              fidelity: dict) -> dict:
    doc = {
        "schema": results.SCHEMA,
        "run_id": run_id,
        **results.what_ran(scenario),
        "transport": scenario.transport, "routing": scenario.routing,
        "datapath": lab.datapath[0], "datapath_detail": lab.datapath[1], "build": lab.build, "seed": scenario.seed,
        "transport_options": effective_options(scenario),
        "status": "duration_limit" if outcome.aborted else "completed",
        "started_at": started_at, "duration_s": round(outcome.wall_s, 6),
        "steps": rows(outcome.steps),
        "summary": summary,
        "events": _events(scenario, outcome),
        "unfired_events": rows(outcome.unfired),
        "ev_changes": rows(outcome.ev_changes),
        "nic_changes": rows(outcome.nic_changes),
        "series": results.series(outcome.sample_times, lab.samples),
        "recovery": results.recovery(lab.marks, outcome.t0),
        "links": lab.links,
        "connections": results.connections(lab.stats, scenario.topology.host_names),
        "controller": lab.controller,
        "fidelity": fidelity,
    }
    series = workloads.timeseries(scenario, outcome)
    doc["workloads"] = workloads.rows(scenario, outcome, series)
    if series is not None:
        doc["timeseries"] = series
    if scenario.workload.stream:  # the headline share of ideal is the first workload's
        summary["goodput_fraction"] = doc["workloads"][0]["goodput_fraction"]
    if scenario.workload.trace is not None:  # a trace's headline is its iteration time
        summary["iteration_time_s"] = doc["workloads"][0]["iteration_time_s"]
    checks = expectations.evaluate(scenario.expect, doc)
    for w, row in zip(scenario.workloads, doc["workloads"], strict=True):
        checks.extend(expectations.evaluate_workload(w.expect, row))
    for u in outcome.unfired:
        checks.insert(0, {"name": "events_fired", "expected": f"event {u.event_index} fires",
                          "actual": f"{u.action} {u.target} at {u.t_s:g} s never fired: the workload "
                                    f"ended at {outcome.wall_s:.3g} s", "ok": False})
    if outcome.aborted:
        checks.insert(0, {"name": "duration_limit", "expected": scenario.duration_limit_s,
                          "actual": outcome.aborted, "unit": "s", "ok": False})
    doc["expectations"] = checks
    return doc


