"""`mrclab report DIR`: the plots of one run as PNG files in DIR and one self-contained DIR/report.html.

Which pictures a report holds, and in what order, is decided here; how each is drawn
lives in `plots`, how the page is laid out in `html`.
"""
from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from . import gantt, html, plots
from .run import Run, load


@dataclass(frozen=True)
class PlotSpec:
    file: str
    title: str
    caption: str
    build: Callable[[Run], Figure]
    applies: Callable[[Run], bool] = lambda run: True  # a plot of a kind of workload the run has not is left out


PLOTS = (
    PlotSpec("report-trace-timeline.png", "Trace timeline per rank",
             "Every op of the replayed trace on every rank it ran on: compute grey, each collective kind its own "
             "colour; thin lines start iterations, dashed lines are faults, shaded spans outages.",
             gantt.gantt, gantt.applies),
    PlotSpec("report-throughput.png", "Stream throughput over time",
             "Bits per second each stream pair delivered (verified) in each bin, and their total (timeseries.csv); "
             "dashed lines are faults, shaded spans outages.",
             plots.throughput, lambda run: "timeseries" in run.results),
    PlotSpec("report-step-time.png", "Step time over time",
             "Duration of every step at its start time; dashed lines are faults, shaded spans outages.",
             plots.step_time),
    PlotSpec("report-link-utilisation.png", "Leaf-spine link utilisation per plane",
             "Average load of every leaf-spine link over the workload, per direction; spraying should look "
             "even, ECMP collisions show as hot cells. Letters count packets trimmed (T), dropped by a full queue "
             "or a downed link (D), lost to a loss fault (L) or a blackhole (B). Host links are not shown.",
             plots.link_utilisation),
    PlotSpec("report-ev-states.png", "EV states over time",
             "Entropy values per state, summed over all connections, changing at the exact time of each "
             "transition (ev_changes); triangles mark EVs retired and revived.",
             plots.ev_states),
    PlotSpec("report-completion-cdf.png", "Message completion times",
             "CDF of delivered - posted for every delivered message (messages.csv).",
             plots.completion_cdf),
    PlotSpec("report-recovery.png", "Trims, retransmissions and timeouts over time",
             "Rates over all senders, from the millisecond each trim, retransmission and timeout happened, in bins "
             "of a quarter of a step (kernel TCP: averages over its 0.25 s counter samples).",
             plots.recovery_counters),
)


@dataclass
class Written:
    html: Path
    pngs: list[Path]
    missing: dict[str, str]   # plot title -> why it was not drawn


def write_report(run_dir: str | Path) -> Written:
    """Draw every plot the run has data for, write each PNG and report.html into the run directory."""
    run = load(run_dir)
    pictures, pngs = [], []
    for spec in (spec for spec in PLOTS if spec.applies(run)):
        picture = html.Picture(spec.file, spec.title, spec.caption)
        try:
            figure = spec.build(run)
        except plots.NoData as exc:
            picture.missing = str(exc)
        else:
            buffer = io.BytesIO()
            plots.save(figure, buffer)
            picture.png = buffer.getvalue()
            (run.dir / spec.file).write_bytes(picture.png)
            pngs.append(run.dir / spec.file)
        pictures.append(picture)
    page = run.dir / "report.html"
    page.write_text(html.render(run, pictures))
    return Written(page, pngs, {p.title: p.missing for p in pictures if p.missing})
