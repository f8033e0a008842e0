"""`expect:` checks against a run's results; each yields {name, expected, actual, unit, ok}.

`min_*` are lower bounds, `fidelity_ok` must match, every other check is an upper
bound (`failed_messages: 0` means at most none). A check whose figure the run could not
measure fails, with `actual` null: a check that measured nothing never passes.
`max_avoid_s` and `flow_mods_after_boot` are claims of MRC over static source routing: a
baseline routing is expected to break them, so there they are reported with `ok` null
and a `note`, and do not count towards the exit code.
"""
from __future__ import annotations

from typing import Any

from ..actions import cuts
from ..routing import DEFAULT, ROUTINGS
from ..units import format_seconds

UNITS = {"failed_messages": "messages", "max_step_time_ratio": "x", "min_goodput_fraction": "of ideal",
         "max_avoid_s": "s", "max_step_time_s": "s", "flow_mods_after_boot": "flow-mods", "fidelity_ok": "",
         "duration_limit": "s"}
"""The unit each check's `expected` and `actual` are in."""

MRC_CLAIMS = ("max_avoid_s", "flow_mods_after_boot")


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
        # None (not measured) when no fault cut a path the workload used, or the fabric picked the paths
        values = [e["avoid_s"] for e in results["events"]
                  if cuts(e["action"]) and e.get("avoid_s") is not None]
        return round(max(values), 4) if values else None
    if name == "flow_mods_after_boot":
        return results["controller"]["flow_mods_after_boot"]
    if name == "fidelity_ok":
        return results["fidelity"]["ok"]
    raise KeyError(name)


def evaluate(expect: dict, results: dict) -> list[dict]:
    checks = []
    routing = ROUTINGS.get(results.get("routing", DEFAULT))
    baseline = routing is None or routing.baseline  # a routing this version does not know: not MRC's
    for name, expected in expect.items():
        actual = _actual(name, results)
        check = {"name": name, "expected": expected, "actual": actual, "unit": UNITS[name]}
        if name in MRC_CLAIMS and baseline:
            check.update(ok=None, note=f"n/a for routing {results['routing']}")
        elif actual is None:
            check["ok"] = False
        elif name.startswith("min_"):
            check["ok"] = actual >= expected
        elif name == "fidelity_ok":
            check["ok"] = actual == expected
        else:
            check["ok"] = actual <= expected
        checks.append(check)
    return checks


WORKLOAD_CHECKS = {
    "failed_messages": ("messages", lambda row: row["messages"]["failed"]),
    "min_goodput_bps": ("bit/s", lambda row: row.get("goodput_bps")),
    "min_bin_fraction": ("of ideal", lambda row: row.get("min_bin_fraction")),
}
"""A workload's own checks: the unit and the figure of its row of results.json `workloads`."""


def evaluate_workload(expect: dict, row: dict) -> list[dict]:
    """A workload's own `expect:` against its row; checks are named ``<workload>.<check>``."""
    checks = []
    for name, expected in expect.items():
        unit, read = WORKLOAD_CHECKS[name]
        actual = read(row)
        ok = actual is not None and (actual >= expected if name.startswith("min_") else actual <= expected)
        checks.append({"name": f"{row['name']}.{name}", "expected": expected, "actual": actual, "unit": unit,
                       "ok": ok})
    return checks


def failed(checks: list[dict]) -> list[dict]:
    """The checks that failed; those that do not apply (ok null) are not among them."""
    return [c for c in checks if c["ok"] is False]


def bound_text(check: dict) -> str:
    """`expected` as a bound in its unit: `≤ 50 ms`, `≥ 50% of ideal`, `= true`."""
    name, value = check["name"].rpartition(".")[2], check["expected"]
    if name == "fidelity_ok":
        return f"= {str(value).lower()}"
    return ("≥ " if name.startswith("min_") else "≤ ") + value_text(name, value)


def value_text(name: str, value) -> str:
    """A check's figure in its unit, as a user writes it (50 ms, not 0.05)."""
    if value is None:
        return "not measured"
    if isinstance(value, str):
        return value
    name = name.rpartition(".")[2]
    unit = UNITS.get(name) or WORKLOAD_CHECKS.get(name, ("",))[0]
    if unit == "s":
        return format_seconds(value)
    if name in ("min_goodput_fraction", "min_bin_fraction"):
        return f"{value * 100:g}% of ideal"
    if unit == "x":
        return f"{value:g}x"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g} {unit}".strip() if isinstance(value, (int, float)) else str(value)
