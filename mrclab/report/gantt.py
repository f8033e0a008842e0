"""The timeline of a replayed trace: one row per rank, a bar per op it took part in (compute grey, each kind of
collective its own colour), iterations separated by thin lines and the faults marked as on every other plot.
Ranks past `MAX_RANKS` are left out (the title says how many are drawn)."""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .plots import NoData, mark_events, time_span
from .run import Run

MAX_RANKS = 64
COMPUTE_COLOUR = "#b0b0b0"
COMM_COLOURS = {"ALL_REDUCE": "#1f77b4", "ALL_GATHER": "#2ca02c", "REDUCE_SCATTER": "#9467bd",
                "ALL_TO_ALL": "#ff7f0e", "BROADCAST": "#8c564b", "BARRIER": "#7f7f7f", "SEND_RECV": "#e377c2"}


def applies(run: Run) -> bool:
    return any("trace" in w for w in run.results.get("workloads", []))


def gantt(run: Run) -> Figure:
    w = next(w for w in run.results["workloads"] if "trace" in w)
    t, spans = w["trace"], w["trace"]["spans"]
    if not spans["op"]:
        raise NoData("no op of the trace finished before the run ended")
    shown = min(t["ranks"], MAX_RANKS)
    bars: dict[str, list[list[tuple[float, float]]]] = {}
    for op_index, start, end in zip(spans["op"], spans["start_s"], spans["end_s"], strict=True):
        op = t["ops"][op_index]
        if op["kind"] == "noop" or end <= start and op["kind"] == "compute":
            continue
        key = "compute" if op["kind"] == "compute" else op["comm"]
        rows = bars.setdefault(key, [[] for _ in range(shown)])
        for rank in op["ranks"]:
            if rank < shown:
                rows[rank].append((start, max(end - start, 1e-6)))
    fig = Figure(figsize=(11, max(3.2, 1.6 + 0.22 * shown)), layout="constrained")
    ax = fig.add_subplot()
    for key, rows in bars.items():
        colour = COMPUTE_COLOUR if key == "compute" else COMM_COLOURS.get(key, "#17becf")
        for rank, segments in enumerate(rows):
            if segments:
                ax.broken_barh(segments, (rank - 0.4, 0.8), facecolors=colour,
                               alpha=0.85 if key == "compute" else 0.7, lw=0)
    for it in w["iterations"]:
        ax.axvline(it["start_s"], color="#333333", lw=0.6, alpha=0.5)
    end = time_span(run)
    band = mark_events(ax, run.results["events"], end, labels=True)
    ax.set_xlim(0, end)
    ax.set_ylim(shown - 0.5 + shown * band / max(1 - band, 0.3), -0.5)
    ax.set_yticks(range(shown))
    ax.set_yticklabels([f"r{r} {t['hosts'][r]}" for r in range(shown)], fontsize=7 if shown <= 32 else 5)
    ax.set_xlabel("time (s since workload start); thin lines: iteration starts")
    ax.set_ylabel("rank and host")
    more = f" (first {shown} of {t['ranks']} ranks)" if shown < t["ranks"] else ""
    ax.set_title(f"Trace timeline{more}: {w['name']}, {len(w['iterations'])} iterations, "
                 f"p50 {w['iteration_time_s']['p50'] * 1e3:.1f} ms\n{run.label}", fontsize=10)
    handles = [Patch(color=COMPUTE_COLOUR if k == "compute" else COMM_COLOURS.get(k, "#17becf"),
                     label=k.lower().replace("_", "-")) for k in bars]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig
