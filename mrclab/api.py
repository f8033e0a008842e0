"""mrclab from Python: `run`, `load` and `sweep`, the same runs as `mrclab run` and `mrclab sweep`, and a `Run` that
reads what a run wrote into pandas DataFrames (docs/python.md).

Names are the command line's: ``set={"workload.steps": 5}`` is ``--set workload.steps=5``, ``engine="sim"`` is
``--engine sim``, ``grid={"transport": ["mrc", "roce"]}`` is ``--grid transport=mrc,roce``. Bad input raises
`mrclab.UsageError` with the line the command line would print; a run that fails raises after writing its
folder, which `load` reads. pandas is needed for the DataFrames only (``pip install 'mrclab[analysis]'``).
"""
from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from .errors import UsageError
from .launch import override_map, results_dir, start
from .spec import Scenario
from .spec import scenario as scenario_mod

FILES = ("results.json", "scenario.yaml", "steps.csv", "events.csv", "messages.csv", "timeseries.csv", "status",
         "runner.log", "report.html")
"""The files of a run folder `Run.paths` names, where they exist (docs/spec.md says what each holds)."""


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("mrclab's DataFrames need pandas: pip install 'mrclab[analysis]'") from None
    return pandas


def _sets(values: Mapping[str, Any] | Sequence[str] | None, engine: str | None) -> list[str]:
    """`set=` as `--set KEY=VALUE` items: a mapping's values written as YAML reads them back."""
    if values is None:
        items: list[str] = []
    elif isinstance(values, Mapping):
        items = [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in values.items()]
    elif isinstance(values, str):
        raise UsageError(f"set={values!r}: give a mapping {{KEY: VALUE}} or a list of 'KEY=VALUE'")
    else:
        items = [str(item) for item in values]
    return items + ([f"engine={engine}"] if engine else [])


def scenario(ref: str | Path | Mapping[str, Any], *, set: Mapping[str, Any] | Sequence[str] | None = None,
             engine: str | None = None) -> Scenario:
    """A scenario checked as `mrclab run` checks it: a shipped one's name, a file, or a mapping of its keys."""
    from . import preflight

    sets = _sets(set, engine)
    if isinstance(ref, Mapping):
        spec = scenario_mod.from_data(dict(ref), sets, "<mapping>", default_name=str(ref.get("name", "scenario")))
    else:
        spec = scenario_mod.load(ref, sets)
    preflight.check(spec)
    return spec


def run(ref: str | Path | Mapping[str, Any], *, set: Mapping[str, Any] | Sequence[str] | None = None,
        engine: str | None = None, out: str | Path | None = None, progress: bool = False) -> Run:
    """Run a scenario (a shipped one's name, a file, or a mapping of its keys) as `mrclab run` does, into `out`
    (default results/<name>-<UTC timestamp>/ under the current folder); the run. `progress` shows the live view
    on stderr. Its expectations are checked and recorded (`Run.expectations`), not raised."""
    sets = _sets(set, engine)
    spec = scenario(ref, set=sets)
    target = results_dir(spec.name, str(out) if out is not None else None)
    start(spec, target, console=_console() if progress else None, overrides=override_map(tuple(sets)))
    return load(target)


def _console():
    from rich.console import Console
    return Console(stderr=True, highlight=False)


def load(path: str | Path) -> Run:
    """A run folder, as a run wrote it (a finished, failed or interrupted one alike)."""
    folder = Path(path)
    if not (folder / "results.json").is_file():
        raise UsageError(f"{path}: no results.json: not a run folder")
    return Run(folder)


@dataclass(frozen=True)
class Run:
    """One run folder: its results document in parts, and its tables as DataFrames (read when first asked for)."""

    dir: Path

    @cached_property
    def results(self) -> dict[str, Any]:
        """results.json, whole (docs/spec.md describes every key)."""
        return json.loads((self.dir / "results.json").read_text())

    @property
    def name(self) -> str:
        return self.results["scenario"]["name"]

    @property
    def status(self) -> str:
        return self.results["status"]

    @property
    def summary(self) -> dict[str, Any]:
        return self.results.get("summary", {})

    @property
    def fidelity(self) -> dict[str, Any]:
        return self.results.get("fidelity", {})

    @property
    def expectations(self) -> list[dict[str, Any]]:
        return self.results.get("expectations", [])

    @property
    def ok(self) -> bool:
        """Completed, and no expectation failed."""
        return self.status == "completed" and not any(c["ok"] is False for c in self.expectations)

    @property
    def paths(self) -> dict[str, Path]:
        """The folder's files by name (results.json, steps.csv, ...), those that exist."""
        return {name: self.dir / name for name in FILES if (self.dir / name).is_file()}

    def _csv(self, name: str):
        pandas = _pandas()
        path = self.dir / name
        if not path.is_file():
            return pandas.DataFrame()
        return pandas.read_csv(path)

    @cached_property
    def steps(self):
        """steps.csv: one row per step of the first workload (index, start_s, duration_s, ideal_s)."""
        return self._csv("steps.csv")

    @cached_property
    def messages(self):
        """messages.csv: one row per message (step, src, dst, bytes, posted_s, delivered_s, status)."""
        return self._csv("messages.csv")

    @cached_property
    def events(self):
        """results.json `events`: one row per fault that fired, with avoid_s, sent_into_fault, revive_s."""
        return _pandas().DataFrame(self.results.get("events", []))

    @cached_property
    def timeseries(self):
        """timeseries.csv (streams): t_s, then bit/s of each pair and the total, one row per bin."""
        return self._csv("timeseries.csv")

    @cached_property
    def links(self):
        """results.json `links`: one row per link direction, its bytes, packets and drops by cause."""
        return _pandas().DataFrame(self.results.get("links", []))

    @cached_property
    def ev_changes(self):
        """results.json `ev_changes`: every change of an EV's state (t_s, host, peer, ev, plane, spine, old, new)."""
        return _pandas().DataFrame(self.results.get("ev_changes", []),
                                   columns=["t_s", "host", "peer", "ev", "plane", "spine", "old", "new"])

    def report(self) -> Path:
        """Write report.html and the PNG plots into the folder, as `mrclab report` does; report.html's path."""
        from .report import write_report
        return write_report(self.dir).html

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r}: {self.name}, {self.status})"


@dataclass(frozen=True)
class Sweep:
    """A sweep folder: every run's row (runs.csv) and every point's medians and 95% intervals (summary.csv)."""

    dir: Path

    @cached_property
    def runs(self):
        return _pandas().read_csv(self.dir / "runs.csv")

    @cached_property
    def summary(self):
        return _pandas().read_csv(self.dir / "summary.csv")

    def run(self, folder: str) -> Run:
        """One of its runs, by the folder runs.csv names (`dir`: p000-r00, ...)."""
        return load(self.dir / folder)

    def all_runs(self) -> list[Run]:
        """Every run that wrote results, in runs.csv's order."""
        with open(self.dir / "runs.csv", newline="") as f:
            folders = [row["dir"] for row in csv.DictReader(f)]
        return [load(self.dir / d) for d in folders if (self.dir / d / "results.json").is_file()]


def sweep(ref: str | Path, *, grid: Mapping[str, Sequence[Any]] | None = None, repeat: int = 1,
          set: Mapping[str, Any] | Sequence[str] | None = None, engine: str | None = None,
          out: str | Path | None = None, progress: bool = False) -> Sweep:
    """Run every combination of `grid`'s values, each `repeat` times (seeds seed, seed+1, ...), as `mrclab sweep`
    does, into `out` (default results/sweep-<name>-<UTC timestamp>/; an earlier sweep's folder resumes it)."""
    from . import sweeps as sweep_mod

    if not 1 <= repeat <= 100:
        raise UsageError(f"repeat={repeat}: must be between 1 and 100")
    items = [f"{key}={','.join(v if isinstance(v, str) else json.dumps(v) for v in values)}"
             for key, values in (grid or {}).items()]
    console = _console() if progress else None
    say = (lambda line: console.print(line, markup=False, soft_wrap=True)) if console else (lambda line: None)
    root, _ = sweep_mod.run(str(ref), grid=items, repeat=repeat, overrides=tuple(_sets(set, engine)),
                            out_dir=str(out) if out is not None else None,
                            console=console, say=say)
    return Sweep(root)
