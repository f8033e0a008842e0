"""What can be known of a scenario without a lab: the workloads' length and the fault timeline it expands to.

A run takes at least its ideal length (every step at the bottleneck's line rate) and, on this
emulator, rarely less than `SLOWEST_FRACTION` of line rate; an event placed by time after
`ideal / SLOWEST_FRACTION` would find the workload over, so the scenario is refused. Between the
two the length is not known until the run: an event that then never fires fails the run (exit 1).
"""
from __future__ import annotations

from typing import Any

from . import timeline
from .errors import UsageError
from .spec import Scenario
from .workload import ideal_step_seconds, step_transfers, trace_plan

SLOWEST_FRACTION = 0.1


def estimated_length(scenario: Scenario) -> tuple[float, float]:
    """(ideal, latest): the run's length at line rate, and at `SLOWEST_FRACTION` of it (the longest workload's;
    a stream lasts its duration)."""
    ideal = latest = 0.0
    for w in scenario.workloads:
        if w.stream:
            length = slowest = w.duration_s
        elif w.trace is not None:  # every iteration along the trace's longest dependency path
            length = w.steps * trace_plan.plan(w.trace, scenario.topology).iteration_ideal_s
            slowest = length / SLOWEST_FRACTION
        else:
            length = sum(ideal_step_seconds(step_transfers(w, step, scenario.seed), scenario.topology)
                         for step in range(w.steps))
            slowest = length / SLOWEST_FRACTION
        ideal, latest = max(ideal, length), max(latest, slowest)
    return ideal, min(latest, scenario.duration_limit_s)


def check(scenario: Scenario) -> None:
    """UsageError naming the first event placed by time after the workload will have ended."""
    ideal, latest = estimated_length(scenario)
    for index, event in enumerate(scenario.events):
        if event.at_s is not None and event.at_s >= latest:
            raise UsageError(f"{scenario.source}: events[{index}].at: {event.at_s:g}s is after the workload ends "
                             f"(estimated {ideal:.3g}s at line rate, at most {latest:.3g}s); use at_step or an "
                             "earlier time")


def plan(scenario: Scenario) -> dict[str, Any]:
    """The resolved scenario, its estimated length and every fabric action of its timeline, in order."""
    ideal, latest = estimated_length(scenario)
    timed = [{"at": f"{a.t_s:g}s", "action": a.action, "target": a.target, "event": a.event_index,
              **({"rate": a.rate_field} if a.rate_field is not None else {})}
             for a in timeline.timed_actions(scenario.events)]
    stepped = [{"at_step": e.at_step, "action": e.action, "target": e.target, "event": i,
                **({"actions": sum(1 for _ in timeline.step_actions((e,), e.at_step, 0.0))}
                   if e.action == "flap" else {})}
               for i, e in enumerate(scenario.events) if e.at_step is not None]
    return {"scenario": scenario.to_dict(),
            "workload_length_s": {"ideal": round(ideal, 6), "latest": round(latest, 6)},
            "timeline": timed + stepped}
