"""`mrclab compare DIR...`: several runs side by side, as a table (worst run of each row flagged) and one plot.

Runs are labelled scenario · transport · routing; when two runs share a label (same
scenario run twice, e.g. another seed) the directory name is appended so every column
stays identifiable.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter
from rich.markup import escape
from rich.table import Table

from ..errors import UsageError
from . import plots, summary
from .run import Run, load

RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


def load_all(dirs: list[str]) -> list[Run]:
    runs = [load(d) for d in dirs]
    labels = [r.label for r in runs]
    for run in runs:
        if labels.count(run.label) > 1:
            run.label_suffix = f" [{run.dir.name}]"
    return runs


def warnings(runs: list[Run]) -> list[str]:
    """What makes the comparison less than like for like: other scenarios, other fabrics, runs not to be trusted."""
    out = []
    for what, key in (("scenarios", lambda r: r.name), ("topologies", lambda r: r.results["topology"]["name"])):
        values = sorted({key(r) for r in runs})
        if len(values) > 1:
            out.append(f"the runs are of different {what} ({', '.join(values)}): not like for like")
    engines = sorted({r.results.get("engine", "lab") for r in runs})
    if len(engines) > 1:
        out.append(f"the runs are on different engines ({', '.join(engines)}): a simulated run's times are "
                   "simulated, its hosts infinitely fast; compare shares of ideal and ratios, not seconds")
    for r in runs:
        if not r.results["fidelity"]["ok"]:
            out.append(f"{r.label}: fidelity NOT OK, " + (
                "the run hit a limit of the simulator's model (see fidelity.limits)"
                if r.results.get("engine") == "sim" else "the host machine limited that run (see its report)"))
        if r.results.get("status", "completed") != "completed":
            out.append(f"{r.label}: the run did not complete ({r.results['status']})")
    return out


def default_plot_path(runs: list[Run]) -> Path:
    """compare.png next to the runs, in the folder that holds them all. Runs in several folders have no such
    folder (what they share may be the checkout, the current folder or /), so they need --out."""
    folders = {r.dir.resolve().parent for r in runs}
    if len(folders) > 1:
        raise UsageError(f"the runs are in {len(folders)} folders: say where the plot goes with --out FILE")
    return folders.pop() / "compare.png"


def headlines(runs: list[Run]) -> list[dict]:
    return [summary.headline(r) for r in runs]


def table(runs: list[Run]) -> Table:
    hs = headlines(runs)
    t = Table(title="mrclab compare", show_lines=False)
    t.add_column("metric")
    for h in hs:
        t.add_column(escape(h["label"].replace(" · ", "\n")), justify="right")
    for row in summary.ROWS:
        worst = summary.worst_index(row, hs)
        cells = [escape(row.text(h)) for h in hs]
        t.add_row(row.label, *(f"[bold red]{c}[/]" if i == worst else c for i, c in enumerate(cells)))
    t.caption = "red: the worst run on that row"
    return t


def _spread(values: list[float]) -> bool:
    """Whether values differ by 10x or more: then a log axis keeps the smaller ones readable."""
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) / min(positive) >= 10


def figure(runs: list[Run]) -> Figure:
    """Step time of every run on one time axis (faults dashed in the run's colour), and bars of p100 and goodput.

    Runs are named by their labels (scenario · transport · routing), legends sit outside the data, and an
    axis whose runs differ by 10x or more is logarithmic.
    """
    fig = Figure(figsize=(11, 8.5), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 2.2))
    ax = fig.add_subplot(grid[0, :])
    span = max(plots.time_span(r) for r in runs)
    durations = []
    for i, run in enumerate(runs):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        steps = run.results["steps"]
        durations += [s["duration_s"] * 1e3 for s in steps]
        ax.plot([s["start_s"] for s in steps], [s["duration_s"] * 1e3 for s in steps], marker="o", ms=3, lw=1.2,
                drawstyle="steps-post", color=colour, label=run.label)
        plots.mark_events(ax, run.results["events"], span, colour=colour, labels=False)
    ax.set_xlim(0, span)
    if _spread(durations):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("step start (s since workload start)")
    ax.set_ylabel("step duration (ms)" + (", log scale" if ax.get_yscale() == "log" else ""))
    ax.set_title("Step time over time (dashed: faults, shaded: outages, in each run's colour)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=min(len(runs), 3), fontsize=8)
    hs = headlines(runs)
    colours = [RUN_COLOURS[i % len(RUN_COLOURS)] for i in range(len(runs))]
    names = [h["label"].replace(" · ", "\n") for h in hs]
    p100 = [h["step_time_s"]["p100"] * 1e3 for h in hs]
    goodput = [h["goodput_bps"] / 1e6 for h in hs]
    for col, (values, texts, ylabel, title) in enumerate((
            (p100, [f"{v:.1f}" for v in p100], "p100 step time (ms)", "Worst step (p100)"),
            (goodput,
             [f"{v:.1f} ({h['goodput_fraction'] * 100:.0f}% of ideal)" for v, h in zip(goodput, hs, strict=True)],
             "goodput (Mbit/s)", "Goodput"))):
        bar_ax = fig.add_subplot(grid[1, col])
        bars = bar_ax.bar(range(len(runs)), values, color=colours)
        bar_ax.set_xticks(range(len(runs)), names, fontsize=7)
        bar_ax.bar_label(bars, labels=texts, fontsize=8)
        if _spread(values):
            bar_ax.set_yscale("log")
            bar_ax.yaxis.set_major_formatter(ScalarFormatter())
            ylabel += ", log scale"
        bar_ax.set_ylabel(ylabel)
        bar_ax.set_title(title)
        bar_ax.margins(y=0.15)
        bar_ax.grid(axis="y", alpha=0.3)
    return fig


REPEATED = (("goodput fraction", lambda h: h["goodput_fraction"], "{:.1%}"),
            ("step time p50", lambda h: h["step_time_s"]["p50"], "{:.4g} s"))
"""The figures `repetitions` gives a median and a 95% interval of, with how each is shown."""


def groups(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs that are repetitions of one another: the same scenario, transport, routing and --set values but the
    seed; keyed by their shared label (with the --set values)."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        sets = {k: v for k, v in r.results.get("overrides", {}).items() if k != "seed"}
        key = f"{r.name} · {r.results['transport']} · {r.results['routing']}" + (
            " (" + ", ".join(f"{k}={v}" for k, v in sorted(sets.items())) + ")" if sets else "")
        out.setdefault(key, []).append(r)
    return out


def repetitions(runs: list[Run]) -> list[dict]:
    """Per group of repeated runs (two or more), the median and 95% interval of each `REPEATED` figure; and,
    between every two groups, whether their intervals overlap (then the runs show no difference)."""
    from ..sweeps import interval
    rows = []
    for key, members in groups(runs).items():
        if len(members) < 2:
            continue
        hs = headlines(members)
        row: dict = {"runs": key, "n": len(members)}
        for name, read, _ in REPEATED:
            row[name] = interval([float(read(h)) for h in hs])
        rows.append(row)
    for a, b in ((a, b) for i, a in enumerate(rows) for b in rows[i + 1:]):
        for name, _, _ in REPEATED:
            if a[name][1] <= b[name][2] and b[name][1] <= a[name][2]:
                a.setdefault("overlaps", []).append(f"{name} with {b['runs']}")
    return rows


def repetition_lines(rows: list[dict]) -> list[str]:
    """`repetitions` in words, one line per group."""
    lines = []
    for row in rows:
        figures = "; ".join(f"{name} {fmt.format(row[name][0])} [{fmt.format(row[name][1])}, "
                            f"{fmt.format(row[name][2])}]" for name, _, fmt in REPEATED)
        same = f"; intervals overlap (no difference shown): {', '.join(row['overlaps'])}" if "overlaps" in row else ""
        lines.append(f"{row['runs']}: {row['n']} runs, median [95% interval] {figures}{same}")
    return lines


def document(runs: list[Run], plot_path: Path) -> dict:
    return {"runs": headlines(runs), "plot": str(plot_path), "warnings": warnings(runs),
            "repetitions": [{**r, **{name: list(r[name]) for name, _, _ in REPEATED}} for r in repetitions(runs)]}
