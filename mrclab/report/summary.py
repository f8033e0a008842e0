"""The headline numbers of a run, defined once for the report's summary table and for `mrclab compare`.

`headline()` is the machine-readable form (what `compare --json` prints); `ROWS` says
how each number is labelled and shown, and which direction is worse, so compare can
flag the worst run of each row.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..metrics import expectations
from ..units import format_seconds
from .run import Run


def worst_disruption(run: Run) -> dict:
    """The worst avoid_s over the run's faults; a run without any (no fault, or not mrc) gets its
    longest step instead, as a "stall", so every run has one comparable figure."""
    r = run.results
    measured = [e for e in r["events"] if e.get("avoid_s") is not None]
    if measured:
        e = max(measured, key=lambda e: e["avoid_s"])
        return {"kind": "avoid_s", "s": e["avoid_s"], "what": f"{e['action']} {e['target']} @{e['t_s']:.2f}s"}
    if r["steps"]:
        s = max(r["steps"], key=lambda s: s["duration_s"])
        return {"kind": "stall", "s": s["duration_s"], "what": f"step {s['index']} @{s['start_s']:.2f}s"}
    return {"kind": "stall", "s": None, "what": "no step finished"}


def headline(run: Run) -> dict:
    r, s = run.results, run.results["summary"]
    st = s["step_time_s"]
    return {
        "dir": str(run.dir), "label": run.label, "scenario": run.name, "transport": r["transport"],
        "routing": r["routing"], "steps": len(r["steps"]),
        "step_time_s": {k: st[k] for k in ("p50", "p99", "p100")},
        "p100_over_p50": round(st["p100"] / st["p50"], 3) if st["p50"] else None,
        "goodput_bps": s["goodput_bps"], "goodput_fraction": s["goodput_fraction"],
        "failed_messages": s["messages"]["failed"],
        "worst_disruption": worst_disruption(run),
        "flow_mods_after_boot": r["controller"]["flow_mods_after_boot"],
        "fidelity_ok": r["fidelity"]["ok"],
        "expectations_ok": not expectations.failed(r["expectations"]),
    }


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[dict], Any]       # headline -> comparable value (None: not known)
    text: Callable[[dict], str]        # headline -> what the table shows
    worse: str | None                  # "high", "low" or None (not ranked)


def _ms(seconds) -> str:
    return "-" if seconds is None else format_seconds(seconds)


def rtt_text(summary: dict) -> str:
    """results.json summary RTTs in one line: the base RTT, then the RTT under load (p50 / p99)."""
    parts = [f"{name} {_ms(summary[key])}" for name, key in (("base", "base_rtt_s"), ("p50", "rtt_p50_s"),
                                                            ("p99", "rtt_p99_s")) if summary.get(key)]
    return ", ".join(parts) or "-"


def cpu_text(cost: dict | None) -> str:
    """results.json ``summary.cpu_s_per_mib`` in one line: the agents, the whole lab, the agents less the
    kernel's forwarding charged to them, the costliest agent, the agents' wake-ups."""
    if not cost or cost.get("agents") is None:
        return "-"
    hosts = {h: v for h, v in cost["hosts"].items() if v is not None}
    worst = max(hosts, key=lambda host: hosts[host], default=None)
    own = cost.get("agents_less_softirq")
    wakeups = cost.get("wakeups_per_mib")
    return (f"{cost['agents']:.4f} / {cost['lab']:.4f}"
            + (f", agents less softirq {own:.4f}" if own is not None else "")
            + (f" (costliest agent {worst} {hosts[worst]:.4f})" if worst else "")
            + (f"; the agents woke {wakeups:.0f} times per MiB" if wakeups is not None else ""))


def actual_text(check: dict) -> str:
    """An expectation's measured figure in its unit, or why there is none; why it does not apply, if not."""
    text = expectations.value_text(check["name"], check["actual"])
    return f"{text} ({check['note']})" if check.get("note") else text


def verdict_text(check: dict) -> str:
    """ok, FAILED, or n/a (the check does not apply to this run)."""
    return {True: "ok", False: "FAILED"}.get(check["ok"], "n/a")


def _disruption(h: dict) -> str:
    d = h["worst_disruption"]
    return "-" if d["s"] is None else f"{d['kind']} {_ms(d['s'])} ({d['what']})"


ROWS = (
    Row("steps", lambda h: h["steps"], lambda h: str(h["steps"]), None),
    Row("step time p50", lambda h: h["step_time_s"]["p50"], lambda h: _ms(h["step_time_s"]["p50"]), "high"),
    Row("step time p99", lambda h: h["step_time_s"]["p99"], lambda h: _ms(h["step_time_s"]["p99"]), "high"),
    Row("step time p100", lambda h: h["step_time_s"]["p100"], lambda h: _ms(h["step_time_s"]["p100"]), "high"),
    Row("warm-up (step 0)", lambda h: h["step_time_s"].get("warmup_s"),
        lambda h: "in p50-p100" if h["step_time_s"].get("from_step", 0) == 0 else _ms(h["step_time_s"]["warmup_s"]),
        None),
    Row("p100 / p50", lambda h: h["p100_over_p50"],
        lambda h: "-" if h["p100_over_p50"] is None else f"{h['p100_over_p50']:.2f}", "high"),
    Row("goodput", lambda h: h["goodput_bps"],
        lambda h: f"{h['goodput_bps'] / 1e6:.1f} Mbit/s ({h['goodput_fraction'] * 100:.0f}% of ideal)", "low"),
    Row("failed messages", lambda h: h["failed_messages"], lambda h: str(h["failed_messages"]), "high"),
    Row("worst avoid_s / stall", lambda h: h["worst_disruption"]["s"], _disruption, "high"),
    Row("flow-mods after boot", lambda h: h["flow_mods_after_boot"], lambda h: str(h["flow_mods_after_boot"]), "high"),
    Row("fidelity ok", lambda h: h["fidelity_ok"], lambda h: "ok" if h["fidelity_ok"] else "NOT OK", "low"),
    Row("expectations", lambda h: h["expectations_ok"], lambda h: "ok" if h["expectations_ok"] else "FAILED", "low"),
)


def worst_index(row: Row, headlines: list[dict]) -> int | None:
    """Which run is worst on this row; None when unranked, fewer than two runs, or all equal."""
    values = [row.value(h) for h in headlines]
    known = [(v, i) for i, v in enumerate(values) if v is not None]
    if row.worse is None or len(known) < 2 or len({v for v, _ in known}) == 1:
        return None
    pick = max if row.worse == "high" else min
    return pick(known, key=lambda vi: vi[0])[1]


def what_ran(run: Run) -> str:
    """One sentence from the resolved scenario and results: the workload, the transport and routing, the faults."""
    r, w = run.results, run.scenario.get("workload", {})
    hosts = w.get("hosts")
    count = len(hosts) if isinstance(hosts, list) else r["topology"]["hosts"]
    events = r["events"] or run.scenario.get("events") or []
    faults = f"{len(events)} fault events" if events else "no fault"
    return (f"{w.get('pattern', 'a workload')} on {count} hosts, {w.get('steps', len(r['steps']))} steps of "
            f"{w.get('message', '?')} each, {r['transport']} over {r['routing']} on {r['topology']['name']}; {faults}.")


def overrides_text(run: Run) -> str:
    return " ".join(f"{k}={v}" for k, v in run.results.get("overrides", {}).items())
