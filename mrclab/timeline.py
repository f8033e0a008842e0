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
    loss_probability: float | None = field(default=None, compare=False)
    rate_bps: float | None = field(default=None, compare=False)

    @property
    def rate_field(self) -> float | None:
        """What the scenario file and results.json call `rate`: the loss probability or the link rate."""
        return self.loss_probability if self.loss_probability is not None else self.rate_bps


def _expand(event: Event, start: float) -> list[tuple[float, str]]:
    if event.action != "flap":
        return [(start, event.action)]
    period, until = event.flap_timing
    out: list[tuple[float, str]] = []
    t, down = start, True
    while t < until - 1e-9:
        out.append((t, "link_down" if down else "link_up"))
        t += period / 2
        down = not down
    if not down:  # it was left down: bring it back at `until`
        out.append((until, "link_up"))
    return out


def _action(t: float, order: int, action: str, event: Event, index: int) -> Action:
    """The fabric action ``action`` of ``event`` (flaps expand into link_down / link_up, which carry no setting)."""
    return Action(t, order, action, event.target, index, loss_probability=event.loss_probability,
                  rate_bps=event.rate_bps)


def timed_actions(events: tuple[Event, ...]) -> list[Action]:
    actions: list[Action] = []
    for index, event in enumerate(events):
        if event.at_s is not None:
            actions.extend(_action(t, len(actions), a, event, index) for t, a in _expand(event, event.at_s))
    return sorted(actions)


def step_actions(events: tuple[Event, ...], step: int, now_s: float) -> list[Action]:
    """Actions of the `at_step: step` events, placed at `now_s` (flaps run on from there)."""
    actions: list[Action] = []
    for index, event in enumerate(events):
        if event.at_step == step:
            if event.action == "flap":
                period, until = event.flap_timing
                span = until - (event.at_s or 0.0)
                shifted = Event("flap", event.target, at_s=now_s, period_s=period, until_s=now_s + span)
                actions.extend(_action(t, index * 1000 + i, a, shifted, index)
                               for i, (t, a) in enumerate(_expand(shifted, now_s)))
            else:
                actions.append(_action(now_s, index * 1000, event.action, event, index))
    return sorted(actions)
