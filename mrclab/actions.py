"""The fault actions a scenario's timeline can apply: one row each.

A row says what the action names (a link or a switch), the scenario keys it takes, the
actions it undoes when it is a repair, and whether it cuts paths (then `avoid_s` counts
from it to the last send through it, and `revive_s` from its repair). Adding an action is
a row here plus its method on `fabric.faults.Faults`.
"""
from __future__ import annotations

from dataclasses import dataclass

LINK, SWITCH = "link", "switch"


@dataclass(frozen=True)
class FaultAction:
    name: str
    target: str  # LINK or SWITCH
    params: tuple[str, ...] = ()  # scenario keys besides at/at_step/action/target
    clears: tuple[str, ...] = ()  # a repair: the faults it undoes on its target
    cuts: bool = False  # takes the paths through its target away

    @property
    def repair(self) -> bool:
        return bool(self.clears)


ACTIONS = {a.name: a for a in (
    FaultAction("link_down", LINK, cuts=True),
    FaultAction("link_up", LINK, clears=("link_down",)),
    FaultAction("loss", LINK, params=("rate",)),
    FaultAction("rate", LINK, params=("rate",)),
    FaultAction("flap", LINK, params=("period", "until")),  # link_down and link_up by turns (see timeline)
    FaultAction("blackhole", LINK),
    FaultAction("restore", LINK, clears=("loss", "rate", "blackhole")),
    FaultAction("switch_down", SWITCH, cuts=True),
    FaultAction("switch_up", SWITCH, clears=("switch_down",)),
)}


def cuts(action: str) -> bool:
    """Does it take paths away? False for a name not in the table (a results file of another version)."""
    return action in ACTIONS and ACTIONS[action].cuts


def mends_cut(action: str) -> bool:
    """A repair of a path cut: `revive_s` counts from it."""
    return action in ACTIONS and any(cuts(fault) for fault in ACTIONS[action].clears)


def clears_target(action: str, loss_probability: float | None) -> bool:
    """Does it leave its target healthy? A repair does, and so does a loss of 0."""
    return ACTIONS[action].repair or (action == "loss" and not loss_probability)


def perform(faults, action: str, target: str, *, loss_probability: float | None = None,
            rate_bps: float | None = None) -> float | None:
    """Call the method of `faults` (a fabric's: the lab's or the simulator's) that the action's row names, with its
    setting; what it returns (a cable says when it changed)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown fabric action {action!r}")
    if action == "loss":
        return faults.loss(target, loss_probability or 0.0)
    if action == "rate":
        if rate_bps is None:
            raise ValueError("a rate action needs rate_bps")
        return faults.rate(target, int(rate_bps))
    if action == "blackhole":
        return faults.blackhole(target, True)
    return getattr(faults, action)(target)
