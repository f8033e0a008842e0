"""A finished (or aborted) run directory, read once and checked, for the report and compare commands.

Runs stopped at their duration limit may lack steps, samples or events, so every
section of the v1 results document is filled with an empty default here; the plots
and tables then only have to handle "empty", never "absent".
"""
from __future__ import annotations

import copy
import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import UsageError
from ..metrics.results import PACKET_KEYS, SCHEMA
from ..units import rate_bps

_EMPTY_RESULTS = {
    "scenario": {"name": "?", "file": ""},
    "topology": {"name": "?", "planes": 0, "leaves": 0, "spines": 0, "hosts": 0},
    "transport": "?", "routing": "?", "seed": None, "started_at": "", "duration_s": 0.0,
    "steps": [],
    "summary": {"step_time_s": {"p50": 0.0, "p99": 0.0, "p100": 0.0, "mean": 0.0},
                "goodput_bps": 0.0, "goodput_fraction": 0.0, "ideal_time_s": 0.0, "workload_time_s": 0.0,
                "base_rtt_s": None, "rtt_p50_s": None, "rtt_p99_s": None,
                "messages": {"sent": 0, "completed": 0, "failed": 0},
                "bytes": {"sent": 0, "delivered": 0, "verified": 0},
                "packets": {k: 0 for k in PACKET_KEYS}},
    "events": [], "ev_changes": [], "series": [], "links": [],
    "controller": {"flow_mods_boot": 0, "flow_mods_after_boot": 0},
    "fidelity": {"ok": True, "notes": []},
    "expectations": [],
}


def _with_defaults(doc: dict, defaults: dict) -> dict:
    out = dict(doc)
    for key, default in defaults.items():
        if key not in out:
            out[key] = copy.deepcopy(default)
        elif isinstance(default, dict) and isinstance(out[key], dict):
            out[key] = _with_defaults(out[key], default)
    return out


@dataclass
class Message:
    step: int
    src: str
    dst: str
    bytes: int
    posted_s: float
    delivered_s: float | None
    status: str

    @property
    def completion_s(self) -> float | None:
        return None if self.delivered_s is None else self.delivered_s - self.posted_s


@dataclass
class Run:
    dir: Path
    results: dict
    scenario: dict = field(default_factory=dict)   # scenario.yaml; empty if the file is missing
    messages: list[Message] = field(default_factory=list)
    label_suffix: str = ""                          # set by compare when two runs would share a label

    @property
    def name(self) -> str:
        return self.results["scenario"]["name"]

    @property
    def label(self) -> str:
        return f"{self.name} · {self.results['transport']} · {self.results['routing']}{self.label_suffix}"

    def link_rate_bps(self, kind: str) -> float | None:
        """`kind` is "fabric_rate" or "host_rate", from the resolved scenario; None if it is not known."""
        value = self.scenario.get("topology", {}).get("links", {}).get(kind)
        try:
            return float(rate_bps(value)) if value is not None else None
        except ValueError:
            return None


def load(path: str | Path) -> Run:
    """Read DIR; a missing directory, results.json or a wrong schema is a UsageError naming DIR."""
    d = Path(path)
    if not d.is_dir():
        raise UsageError(f"{d}: no such run directory")
    results_file = d / "results.json"
    if not results_file.is_file():
        if (d / "runner.log").is_file():
            last = (d / "runner.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise UsageError(f"{d}: the run stopped before it wrote results.json (killed?); runner.log ends: "
                             f"{' '.join(last) or '(empty)'}")
        raise UsageError(f"{d}: no results.json (not a mrclab run directory)")
    try:
        doc = json.loads(results_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{d}: results.json is not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise UsageError(f"{d}: results.json has schema {found!r}, expected {SCHEMA!r}")
    return Run(d, _with_defaults(doc, _EMPTY_RESULTS), _scenario(d), _messages(d))


def _scenario(d: Path) -> dict:
    try:
        data = yaml.safe_load((d / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _messages(d: Path) -> list[Message]:
    try:
        with open(d / "messages.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    out = []
    for r in rows:
        try:
            out.append(Message(int(r["step"]), r["src"], r["dst"], int(r["bytes"]), float(r["posted_s"]),
                               float(r["delivered_s"]) if r.get("delivered_s") else None, r["status"]))
        except (KeyError, TypeError, ValueError):
            continue  # a truncated last line of an interrupted run
    return out
