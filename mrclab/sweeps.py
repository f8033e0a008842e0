"""A grid of one scenario, each point repeated over seeds: every run in a folder of its own under one sweep
folder, then one tidy table (runs.csv) and one per point with medians and 95% intervals (summary.csv).

The sweep folder says everything needed to redo it (sweep.json: the scenario file's text, the grid, the
repeats, the --set values shared by every point). Runs go one after another; a run that fails is recorded
and the next one starts; a sweep stopped part-way is resumed by running it again into the same folder:
runs whose folder holds a results.json are read, not run again.
"""
from __future__ import annotations

import csv
import itertools
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import MrclabError, UsageError
from .spec import scenario as scenario_mod
from .spec.reader import parse_yaml, short

MAX_RUNS = 1000
FIGURES: dict[str, Callable[[dict], Any]] = {
    "goodput_fraction": lambda d: d["summary"]["goodput_fraction"],
    "goodput_bps": lambda d: d["summary"]["goodput_bps"],
    "step_time_p50_s": lambda d: d["summary"]["step_time_s"]["p50"],
    "step_time_p100_s": lambda d: d["summary"]["step_time_s"]["p100"],
    "iteration_time_p50_s": lambda d: d["summary"]["iteration_time_s"]["p50"],  # a trace's
    "iteration_time_p100_s": lambda d: d["summary"]["iteration_time_s"]["p100"],
    "failed_messages": lambda d: d["summary"]["messages"]["failed"],
    "trimmed": lambda d: d["summary"]["packets"]["trimmed"],
    "timeouts": lambda d: d["summary"]["packets"]["timeouts"],
    "max_avoid_s": lambda d: max((e["avoid_s"] for e in d["events"] if e.get("avoid_s") is not None), default=None),
    "fidelity_ok": lambda d: d["fidelity"]["ok"],
}
"""The figures of runs.csv, each read off one results.json (None where the run measured none)."""
SUMMARIZED = ("goodput_fraction", "goodput_bps", "step_time_p50_s", "step_time_p100_s", "iteration_time_p50_s",
              "iteration_time_p100_s", "failed_messages")
"""The figures summary.csv gives a median and a 95% interval of, per point."""


def split_values(text: str) -> list[str]:
    """``V1,V2,...`` split at the commas outside brackets and braces, so a value may be a YAML list or mapping
    (``events=[],[{at_step: 1, action: switch_down, target: p0s1}]``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return [*out, text[start:]]


@dataclass(frozen=True)
class Grid:
    """KEY -> the values it takes (``--grid KEY=V1,V2``); points are every combination, in the order given."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    @classmethod
    def parse(cls, items: Sequence[str]) -> Grid:
        axes: list[tuple[str, tuple[Any, ...]]] = []
        for item in items:
            key, sep, values = item.partition("=")
            key = key.strip()
            if not sep or not key or not values.strip():
                raise UsageError(f"--grid {short(item)}: expected KEY=V1,V2,... with a dotted scenario key")
            if any(k == key for k, _ in axes):
                raise UsageError(f"--grid {key}: given twice")
            parsed = tuple(parse_yaml(v.strip(), f"--grid {key}") for v in split_values(values))
            if len(set(map(repr, parsed))) != len(parsed):
                raise UsageError(f"--grid {key}: a value is listed twice")
            axes.append((key, parsed))
        return cls(tuple(axes))

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self.axes]

    def points(self) -> list[dict[str, Any]]:
        return [dict(zip(self.keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in self.axes))]


@dataclass(frozen=True)
class Plan:
    """Every run of a sweep: (point index, repeat index, its --set overrides), checked before any runs."""

    scenario: str
    grid: Grid
    repeat: int
    overrides: tuple[str, ...]
    base_seed: int

    def runs(self) -> list[tuple[int, int, list[str]]]:
        out = []
        for p, point in enumerate(self.grid.points() or [{}]):
            for r in range(self.repeat):
                sets = [*self.overrides, *(f"{k}={json.dumps(v)}" for k, v in point.items())]
                if "seed" not in point:
                    sets.append(f"seed={self.base_seed + r}")
                out.append((p, r, sets))
        return out

    def check(self) -> None:
        """Every point's scenario loads (exit 2 naming the point otherwise); not too many runs."""
        runs = self.runs()
        if len(runs) > MAX_RUNS:
            raise UsageError(f"the sweep has {len(runs)} runs, more than {MAX_RUNS}: use fewer values or repeats")
        for p, _, sets in runs[::self.repeat]:
            try:
                scenario_mod.load(self.scenario, sets)
            except UsageError as exc:
                raise UsageError(f"sweep point {p} ({', '.join(sets[len(self.overrides):])}): {exc}") from None

    def to_dict(self, text: str) -> dict:
        return {"scenario": self.scenario, "scenario_text": text, "grid": {k: list(v) for k, v in self.grid.axes},
                "repeat": self.repeat, "overrides": list(self.overrides), "base_seed": self.base_seed}


def run_dir(root: Path, point: int, repeat: int) -> Path:
    return root / f"p{point:03d}-r{repeat:02d}"


def runs_table(plan: Plan, root: Path) -> list[dict]:
    """One row per run of the sweep: its point's values, its seed, status, and every figure of `FIGURES`."""
    rows = []
    points = plan.grid.points() or [{}]
    for p, r, _ in plan.runs():
        folder = run_dir(root, p, r)
        row: dict[str, Any] = {"point": p, "repeat": r, **points[p]}
        row["seed"] = points[p].get("seed", plan.base_seed + r)
        try:
            doc = json.loads((folder / "results.json").read_text())
        except (OSError, ValueError):
            doc = None
        row["status"] = "not run" if doc is None else doc.get("status", "failed")
        for name, read in FIGURES.items():
            try:
                row[name] = None if doc is None else read(doc)
            except (KeyError, TypeError):
                row[name] = None
        row["dir"] = folder.name
        rows.append(row)
    return rows


def interval(values: list[float], seed: int = 1) -> tuple[float, float, float]:
    """(median, low, high): the median and a 95% bootstrap interval of it (percentiles of 2000 resampled
    medians, seeded: the same numbers give the same interval)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    return statistics.median(values), medians[int(0.025 * len(medians))], medians[int(0.975 * len(medians)) - 1]


def summary_table(plan: Plan, rows: list[dict]) -> list[dict]:
    """One row per point: its values, how many runs completed, and median [low, high] of each summarized figure
    over its completed runs."""
    out = []
    for p, point in enumerate(plan.grid.points() or [{}]):
        done = [r for r in rows if r["point"] == p and r["status"] == "completed"]
        row: dict[str, Any] = {"point": p, **point, "runs": len(done),
                               "fidelity_ok": sum(1 for r in done if r["fidelity_ok"])}
        for name in SUMMARIZED:
            values = [float(r[name]) for r in done if r[name] is not None and not math.isnan(float(r[name]))]
            figures = [round(v, 6) for v in interval(values)] if values else [None, None, None]
            row.update({name: figures[0], f"{name}_low": figures[1], f"{name}_high": figures[2]})
        out.append(row)
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)


def execute(plan: Plan, root: Path, run_one: Callable[[Path, list[str]], None],
            say: Callable[[str], None]) -> list[dict]:
    """Run every run not yet run (one after another), then write runs.csv and summary.csv; the rows of runs.csv.
    ``run_one(folder, sets)`` runs one scenario into ``folder``; what it raises is that run's failure."""
    runs = plan.runs()
    todo = [(p, r, sets) for p, r, sets in runs if not (run_dir(root, p, r) / "results.json").exists()]
    if len(todo) < len(runs):
        say(f"sweep: {len(runs) - len(todo)} of {len(runs)} runs already in {root}; running the other {len(todo)}")
    started = time.monotonic()
    for n, (p, r, sets) in enumerate(todo):
        left = ""
        if n:
            per_run = (time.monotonic() - started) / n
            left = f", about {per_run * (len(todo) - n) / 60:.1f} min left"
        say(f"sweep: run {n + 1}/{len(todo)}: point {p}, repeat {r} ({' '.join(sets[len(plan.overrides):])}){left}")
        folder = run_dir(root, p, r)
        try:
            run_one(folder, sets)
        except MrclabError as exc:  # recorded in the run's own results.json; the sweep goes on
            say(f"sweep: point {p}, repeat {r} failed: {exc}")
    rows = runs_table(plan, root)
    write_csv(root / "runs.csv", rows)
    write_csv(root / "summary.csv", summary_table(plan, rows))
    return rows


def run(scenario: str, *, grid: Sequence[str], repeat: int, overrides: tuple[str, ...], out_dir: str | None,
        console, say: Callable[[str], None]) -> tuple[Path, list[dict]]:
    """`mrclab sweep` (and `mrclab.sweep`): check every point, then run what is not run yet into the sweep folder
    (`out_dir`, or results/sweep-<name>-<UTC timestamp>/; an earlier sweep's folder resumes it); the folder and
    the rows of runs.csv. `console` shows each run's live view (None: none)."""
    from . import runner
    from .engines import ENGINES
    from .launch import empty_out, override_map, require_lab, results_dir

    base = scenario_mod.load(scenario, list(overrides))
    plan = Plan(str(scenario_mod.resolve_path(scenario)), Grid.parse(list(grid)), repeat, tuple(overrides),
                base.seed)
    plan.check()
    text = Path(plan.scenario).read_text()
    root = Path(out_dir) if out_dir else results_dir(f"sweep-{base.name}", None)
    record = root / "sweep.json"
    if record.is_file() and not record.is_symlink():
        if json.loads(record.read_text()) != plan.to_dict(text):
            raise UsageError(f"--out {root}: holds another sweep (sweep.json differs): give a new folder")
    else:
        empty_out(root)
    if ENGINES[base.engine].lab:
        require_lab()
    root.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(plan.to_dict(text), indent=2) + "\n")

    def run_one(folder: Path, sets: list[str]) -> None:
        runner.run_scenario(scenario_mod.load(plan.scenario, sets), folder, console=console,
                            overrides=override_map(tuple(sets)))

    return root, execute(plan, root, run_one, say)
