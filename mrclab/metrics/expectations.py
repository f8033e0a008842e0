"""`expect:` checks against a run's results; each yields {name, expected, actual, ok}.

`min_*` are lower bounds, `fidelity_ok` must match, every other check is an upper
bound (`failed_messages: 0` means at most none). A check whose figure the run could not
measure fails, with `actual` null.
"""
from __future__ import annotations

from typing import Any


def _actual(name: str, results: dict) -> Any:
    s = results["summary"]
    if name == "failed_messages":
        return s["messages"]["failed"]
    if name == "max_step_time_ratio":
        p = s["step_time_s"]
        return round(p["p100"] / p["p50"], 3) if p["p50"] else None
    if name == "min_goodput_fraction":
        return s["goodput_fraction"]
    if name == "max_step_time_s":
        return s["step_time_s"]["p100"]
    if name == "max_avoid_s":
        faults = [e for e in results["events"] if e["action"] in ("link_down", "switch_down")]
        if faults and not any("avoid_s" in e for e in faults):
            return None  # not measurable (ECMP: the fabric, not the sender, picked the paths): not met
        values = [e["avoid_s"] for e in faults if e.get("avoid_s") is not None]
        return round(max(values), 4) if values else 0.0
    if name == "flow_mods_after_boot":
        return results["controller"]["flow_mods_after_boot"]
    if name == "fidelity_ok":
        return results["fidelity"]["ok"]
    raise KeyError(name)


def evaluate(expect: dict, results: dict) -> list[dict]:
    checks = []
    for name, expected in expect.items():
        actual = _actual(name, results)
        if actual is None:
            ok = False
        elif name.startswith("min_"):
            ok = actual >= expected
        elif name == "fidelity_ok":
            ok = actual == expected
        else:
            ok = actual <= expected
        checks.append({"name": name, "expected": expected, "actual": actual, "ok": ok})
    return checks
