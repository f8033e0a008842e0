"""A scenario's events as the concrete fabric actions to apply, in order.

Time-based actions are measured from the start of the workload (step 0). A flap with
period P toggles the link down at its start, up P/2 later, and so on until `until`,
always ending up. `at_step` events fire when their step starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .spec import Event


@dataclass(frozen=True, order=True)
class Action:
    t_s: float
    order: int
    action: str = field(compare=False)
    target: str = field(compare=False)
    event_index: int = field(compare=False)
    rate: float | None = field(default=None, compare=False)


def _expand(event: Event, start: float) -> list[tuple[float, str, float | None]]:
    if event.action != "flap":
        return [(start, event.action, event.rate)]
    out, t, down = [], start, True
    while t < event.until_s - 1e-9:
        out.append((t, "link_down" if down else "link_up", None))
        t += event.period_s / 2
        down = not down
    if not down:  # it was left down: bring it back at `until`
        out.append((event.until_s, "link_up", None))
    return out


def timed_actions(events: tuple[Event, ...]) -> list[Action]:
    actions = []
    for index, event in enumerate(events):
        if event.at_s is not None:
            actions.extend(Action(t, len(actions), a, event.target, index, rate)
                           for t, a, rate in _expand(event, event.at_s))
    return sorted(actions)


def step_actions(events: tuple[Event, ...], step: int, now_s: float) -> list[Action]:
    """Actions of the `at_step: step` events, placed at `now_s` (flaps run on from there)."""
    actions = []
    for index, event in enumerate(events):
        if event.at_step == step:
            if event.action == "flap":
                span = event.until_s - (event.at_s or 0.0)
                shifted = Event("flap", event.target, now_s, None, None, event.period_s, now_s + span)
                actions.extend(Action(t, index * 1000 + i, a, event.target, index, rate)
                               for i, (t, a, rate) in enumerate(_expand(shifted, now_s)))
            else:
                actions.append(Action(now_s, index * 1000, event.action, event.target, index, event.rate))
    return sorted(actions)
