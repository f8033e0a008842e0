"""A run's live view, and its machine-readable twin: JSON lines that `mrclab run --target` follows.

The runner updates a `Progress`; `view()` draws one snapshot of it, given as the record
`Progress.record()` makes. A local run draws its own snapshots; a remote one writes them,
one JSON object a line, to `--progress-jsonl FILE`, and the machine that started it draws
the same table from the lines it reads there. The stream holds three kinds of record:

- `{"event": "start", ...}`: once, before the fabric is built (the run's title, its pid);
- `{"event": "progress", ...}`: every 0.25 s while steps run (what the table shows);
- `{"event": "done", "results": {...}}`: once, after results.json is written; the part of
  the results document the summary table shows.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

INTERVAL_S = 0.25
SUMMARY_KEYS = ("run_id", "status", "scenario", "topology", "transport", "routing", "datapath", "overrides",
                "duration_s", "steps", "summary", "events", "unfired_events", "controller", "fidelity",
                "expectations")


@dataclass
class Progress:
    """What the live view shows; the runner updates it."""

    steps_total: int
    step: int = 0
    step_started: float = 0.0
    last_step_s: float | None = None
    delivered_bytes: int = 0
    active_faults: dict = field(default_factory=dict)
    failed: int = 0
    clock: Callable[[], float] = time.monotonic  # the run's clock: simulated time in the simulator
    simulated: bool = False  # then records also carry the simulated and the wall time since the start
    started: float = field(default_factory=time.monotonic)

    def record(self) -> dict:
        now = self.clock()
        record = {"event": "progress", "step": self.step, "steps_total": self.steps_total,
                  "this_step_s": round(now - self.step_started, 6) if self.step_started else 0.0,
                  "last_step_s": self.last_step_s, "delivered_bytes": self.delivered_bytes, "failed": self.failed,
                  "active_faults": dict(self.active_faults)}
        if self.simulated:
            record.update(simulated_s=round(now, 6), wall_s=round(time.monotonic() - self.started, 3))
        return record


def start_record(scenario, run_id: str) -> dict:
    return {"event": "start", "pid": os.getpid(), "run_id": run_id, "scenario": scenario.name,
            "transport": scenario.transport, "routing": scenario.routing, "steps_total": scenario.workload.steps}


def done_record(doc: dict, out_dir: Path) -> dict:
    return {"event": "done", "dir": str(out_dir), "results": {k: doc[k] for k in SUMMARY_KEYS if k in doc}}


def view(start: dict, record: dict | None):
    """One line of fixed-width fields, so nothing jumps while it refreshes and nothing is left behind."""
    from rich.text import Text
    total = start["steps_total"]
    width = len(str(total))
    if record is None:
        return Text(f"step {0:>{width}}/{total}  building the lab", no_wrap=True)
    last = "-" if record["last_step_s"] is None else f"{record['last_step_s'] * 1000:.0f} ms"
    faults = ", ".join(f"{a} {t}" for t, a in record["active_faults"].items()) or "none"
    clock = (f"simulated {record['simulated_s']:.4f} s in {record['wall_s']:.0f} s  "
             if "simulated_s" in record else "")
    return Text(f"step {record['step'] + 1:>{width}}/{total}  {clock}this {record['this_step_s'] * 1000:>6.0f} ms  "
                f"last {last:>7}  delivered {record['delivered_bytes'] / 2**20:>7.1f} MiB  "
                f"failed {record['failed']:>3}  faults: {faults}", overflow="ellipsis", no_wrap=True)


class JsonlWriter:
    """Writes records to FILE, and a progress record every INTERVAL_S from a thread of its own between
    `follow()` and `stop()`. The file is opened without following a link (runs are root's)."""

    def __init__(self, path: Path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        self.file = os.fdopen(fd, "w", buffering=1)
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def write(self, record: dict) -> None:
        with self.lock:
            self.file.write(json.dumps(record, default=str) + "\n")

    def follow(self, progress: Progress) -> None:
        def loop():
            stopped = False
            while not stopped:  # the last record, written on close, shows the last step finished
                stopped = self.stopped.wait(INTERVAL_S)
                self.write(progress.record())
        self.thread = threading.Thread(target=loop, name="progress-jsonl", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the progress records; the file stays open for the `done` record."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
