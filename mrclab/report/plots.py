"""The report's figures: one builder per picture, each taking a Run and returning a matplotlib Figure.

Figures use matplotlib's object API on the Agg canvas (no pyplot, no display), so they
render headless and tests can inspect exactly what was drawn. A builder with nothing to
draw raises NoData saying why; the report shows that sentence in the picture's place.
Colours are fixed per meaning (EV state, counter, fault kind) so every picture of every
run reads the same way.
"""
from __future__ import annotations

from itertools import pairwise

import numpy as np
from matplotlib.figure import Figure

from ..actions import cuts, mends_cut
from ..spec.topology import parse_node
from ..transports import TRANSPORTS, Transport
from ..units import format_rate
from .run import Run

STEP_COLOUR = "#1f77b4"
P50_COLOUR = "#555555"
P100_COLOUR = "#d62728"
IDEAL_COLOUR = "#2ca02c"
FAULT_COLOURS = {"link_down": "#d62728", "switch_down": "#d62728", "blackhole": "#8c564b",
                 "link_up": "#2ca02c", "switch_up": "#2ca02c", "restore": "#2ca02c",
                 "loss": "#ff7f0e", "rate": "#9467bd"}
DOWN_SHADE = "#d62728"
EV_ORDER = ("GOOD", "SKIP", "UNKNOWN", "ASSUMED_BAD", "DENIED")
EV_COLOURS = {"GOOD": "#2ca02c", "SKIP": "#bcbd22", "UNKNOWN": "#bbbbbb", "ASSUMED_BAD": "#d62728",
              "DENIED": "#6a3d9a"}
RETIRED_STATES = ("ASSUMED_BAD", "DENIED")
COUNTER_COLOURS = {"trimmed": "#1f77b4", "retransmitted": "#ff7f0e", "timeouts": "#d62728"}
DPI = 110
LABEL_FONT = 7
PLANES_PER_ROW = 8
TITLE_CHAR_IN = 0.08  # inches a character of a 10 pt title takes, at most
MARKS = {"trims": (("trims",), "T"), "drops": (("queue_drops", "down_drops"), "D"), "loss": (("loss_drops",), "L"),
         "blackhole": (("blackhole_drops",), "B"), "ecn": (("ecn_marked",), "E")}
"""What a heatmap cell counts besides utilisation: results.json link fields summed, and the cell's letter."""


class NoData(Exception):
    """Nothing to plot for this run; the message says why (e.g. no step finished)."""


def save(fig: Figure, path) -> None:
    fig.savefig(path, dpi=DPI)


# --- faults on a time axis ------------------------------------------------------------------

def rate_text(event: dict) -> str:
    """A loss event's drop probability as a percentage, a rate event's rate with its unit, else ""."""
    rate = event.get("rate")
    if rate is None:
        return ""
    return f"{rate * 100:g}%" if event["action"] == "loss" else format_rate(rate)


def event_text(event: dict) -> str:
    """`link_down p0l1-p0s2`, with the rate of a loss/rate event and the measured avoid_s or revive_s."""
    text = " ".join(filter(None, (event["action"], event["target"], rate_text(event))))
    for key, word in (("avoid_s", "avoid"), ("revive_s", "revive")):
        if event.get(key) is not None:
            text += f" ({word} {event[key] * 1e3:.1f} ms)"
    return text


def transport_of(results: dict) -> Transport:
    """The run's transport row; one this version does not know is drawn as MRC."""
    return TRANSPORTS.get(results["transport"], TRANSPORTS["mrc"])


def down_intervals(events: list[dict], end_s: float) -> list[tuple[float, float, str]]:
    """(start, end, target) of every link/switch outage: a down paired with the up that cleared it."""
    opened: dict[str, float] = {}
    out = []
    for e in sorted(events, key=lambda e: e["t_s"]):
        if cuts(e["action"]):
            opened.setdefault(e["target"], e["t_s"])
        elif mends_cut(e["action"]) and e["target"] in opened:
            out.append((opened.pop(e["target"]), e["t_s"], e["target"]))
    out.extend((t, end_s, target) for target, t in opened.items())
    return sorted(out)


def bursts(events: list[dict], gap_s: float) -> list[list[dict]]:
    """Events grouped per target, split where the target was quiet for more than gap_s: a flap is one burst."""
    by_target: dict[str, list[dict]] = {}
    for e in sorted(events, key=lambda e: e["t_s"]):
        by_target.setdefault(e["target"], []).append(e)
    out = []
    for timeline in by_target.values():
        out.append([timeline[0]])
        for before, e in pairwise(timeline):
            if e["t_s"] - before["t_s"] > gap_s:
                out.append([])
            out[-1].append(e)
    return sorted(out, key=lambda b: b[0]["t_s"])


def _burst_text(burst: list[dict]) -> str:
    if len(burst) == 1:
        return event_text(burst[0])
    return f"{burst[0]['target']}: {len(burst)} events {burst[0]['t_s']:.1f}-{burst[-1]['t_s']:.1f} s"


def mark_events(ax, events: list[dict], end_s: float, colour: str | None = None, labels: bool = True) -> float:
    """Shade outages, draw a dashed line per event and label each burst at the top, in rows that do not overlap.

    Returns the fraction of the axes height the labels occupy, so the caller can leave that much headroom.
    """
    for i, (start, end, _) in enumerate(down_intervals(events, end_s)):
        ax.axvspan(start, end, color=colour or DOWN_SHADE, alpha=0.08, lw=0,
                   label="link/switch down" if i == 0 and labels else None)
    for e in events:
        ax.axvline(e["t_s"], color=colour or FAULT_COLOURS.get(e["action"], "#7f7f7f"), ls="--", lw=0.9, alpha=0.8)
    if not labels or not events:
        return 0.0
    box = ax.get_position()
    width_pt = ax.figure.get_figwidth() * 72 * box.width * 0.85   # the legend beside it takes some width
    row_height = (LABEL_FONT + 4) / (ax.figure.get_figheight() * 72 * box.height)
    row_ends: list[float] = []
    for burst in bursts(events, end_s / 20):
        text, t = _burst_text(burst), burst[0]["t_s"]
        width = len(text) * 0.55 * LABEL_FONT / width_pt * end_s
        left = t if t + width <= end_s else t - width
        row = next((i for i, taken in enumerate(row_ends) if taken < left), len(row_ends))
        row_ends[row:row + 1] = [left + width]
        ax.text(t, 0.985 - row * row_height, f" {text} ", transform=ax.get_xaxis_transform(), va="top",
                ha="left" if left == t else "right", fontsize=LABEL_FONT,
                color=FAULT_COLOURS.get(burst[0]["action"], "#444444"),
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.5})
    return len(row_ends) * row_height + 0.02


def headroom(ax, data_top: float, label_band: float) -> None:
    """y from 0 to just above the data, plus the band the fault labels need."""
    top = data_top * 1.08 if data_top > 0 else 1.0
    ax.set_ylim(0, top / max(1.0 - label_band, 0.3))


def finish_timeline(ax, run: Run, data_top: float, xlabel: str, ylabel: str, title: str) -> None:
    """The common dress of every plot against run time: fault marks, room for their labels, legend outside."""
    band = mark_events(ax, run.results["events"], time_span(run))
    ax.set_xlim(0, time_span(run))
    headroom(ax, data_top, band)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)


def time_span(run: Run) -> float:
    """Seconds from workload start to the last thing that happened, for a common x range."""
    r = run.results
    ends = [r["summary"]["workload_time_s"], r["duration_s"]]
    ends += [s["start_s"] + s["duration_s"] for s in r["steps"]]
    ends += [e["t_s"] for e in r["events"]] + [row["t_s"] for row in r["series"]]
    return max(ends, default=0.0) or 1.0


# --- 1. step time -----------------------------------------------------------------------

def warmup_note(step_time_s: dict) -> str:
    """Which steps p50 and p100 count, as a suffix: ` (steps 1-)` when the warm-up step is left out."""
    return " (steps 1-)" if step_time_s.get("from_step") == 1 else ""


def step_time(run: Run) -> Figure:
    """Each step's duration at its start time, with p50/p100 and the faults: the job riding out a failure.

    Drawn as a staircase (a step's duration held until the next step starts) so a long step
    reads as a plateau over the time it took, not as a slope into the next one.
    """
    r = run.results
    steps = r["steps"]
    if not steps:
        raise NoData("no step finished before the run ended" if not r["summary"]["goodput_fraction"] or
                     not r.get("timeseries") else "the first workload is a stream, which has no steps")
    x = [s["start_s"] for s in steps]
    y = [s["duration_s"] * 1e3 for s in steps]
    st = r["summary"]["step_time_s"]
    counted = warmup_note(st)
    fig = Figure(figsize=(10, 4.8), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(x, y, marker="o", ms=3.5, lw=1.2, drawstyle="steps-post", color=STEP_COLOUR, label="step time",
            zorder=3)
    if st.get("from_step") == 1:  # the warm-up, shown apart: not in p50 and p100
        ax.plot(x[:1], y[:1], marker="o", ms=7, ls="none", mfc="none", color=P100_COLOUR, zorder=4,
                label=f"step 0: warm-up, {y[0]:.1f} ms\n(not in p50 / p100)")
    ax.axhline(st["p50"] * 1e3, color=P50_COLOUR, ls=":", lw=1.2, label=f"p50 {st['p50'] * 1e3:.1f} ms{counted}")
    ax.axhline(st["p100"] * 1e3, color=P100_COLOUR, ls="-.", lw=1.2,
               label=f"p100 {st['p100'] * 1e3:.1f} ms{counted}")
    ideal = r["summary"]["ideal_time_s"]
    if ideal:
        ax.axhline(ideal / len(steps) * 1e3, color=IDEAL_COLOUR, ls="--", lw=1,
                   label=f"ideal (line rate) {ideal / len(steps) * 1e3:.1f} ms")
    finish_timeline(ax, run, max(y + [st["p100"] * 1e3]), "step start (s since workload start)",
                    "step duration (ms)", f"Step time ({len(steps)} steps):\n{run.label}")
    ax.title.set_fontsize(10)
    return fig


# --- 2. link utilisation ----------------------------------------------------------------

def utilisation_grids(run: Run) -> dict[tuple[int, str], dict[str, np.ndarray]]:
    """{(plane, "up"|"down"): {"util", "trims", "drops", "loss", "blackhole", "ecn"}}, each a leaves x spines array
    ("drops" are queue overflows and sends into a downed cable; loss and blackhole faults count apart).

    Utilisation is tx_bytes * 8 / (fabric rate * workload time): the link's average load
    over the workload, so spraying shows as an even grid and ECMP collisions as hot cells.
    """
    r = run.results
    topo = r["topology"]
    rate, wall = run.link_rate_bps("fabric_rate"), r["summary"]["workload_time_s"]
    if not rate or not wall:
        raise NoData("the fabric link rate (scenario.yaml) or the workload time is unknown")
    shape = (topo["leaves"], topo["spines"])
    grids = {(k, d): {"util": np.full(shape, np.nan), **{key: np.zeros(shape, int) for key in MARKS}}
             for k in range(topo["planes"]) for d in ("up", "down")}
    for link in r["links"]:
        a, b = parse_node(link["from"]), parse_node(link["to"])
        if a is None or b is None or a[0] == "host" or b[0] == "host" or a[0] == b[0] or a[1] != b[1]:
            continue
        direction = "up" if a[0] == "leaf" else "down"
        leaf, spine = (a[2], b[2]) if direction == "up" else (b[2], a[2])
        grid = grids.get((a[1], direction))
        if grid is None or leaf >= shape[0] or spine >= shape[1]:
            continue
        grid["util"][leaf, spine] = link["tx_bytes"] * 8 / (rate * wall)
        for key, (fields, _) in MARKS.items():
            grid[key][leaf, spine] = sum(link.get(f, 0) for f in fields)
    if all(np.isnan(g["util"]).all() for g in grids.values()):
        raise NoData("no leaf-spine link counters in results.json")
    return grids


def link_utilisation(run: Run) -> Figure:
    """Leaf x spine utilisation grids, up and down, one column per plane; trims (T) and drops (D) annotated.

    Up to PLANES_PER_ROW planes side by side, then another pair of rows; a grid too large to
    label every cell labels only the cells with trims or drops.
    """
    grids = utilisation_grids(run)
    topo = run.results["topology"]
    planes, leaves, spines = topo["planes"], topo["leaves"], topo["spines"]
    # An absolute 0-100% scale: an evenly loaded fabric looks calm and a hot ECMP link stands out
    # (a shaper can let a link run slightly over its rate; the scale then grows to fit).
    vmax = max([100.0] + [float(np.nanmax(g["util"])) * 100 for g in grids.values() if not np.isnan(g["util"]).all()])
    columns = min(planes, PLANES_PER_ROW)
    groups = -(-planes // columns)
    cell = min(0.55, 6.0 / max(leaves, spines))
    label_all = leaves * spines <= 64
    title = (f"Leaf-spine link utilisation: {run.label}\n"
             "packets: T trimmed · D dropped (full queue, link down) · L loss fault · B blackhole · E ECN-marked")
    title_width = TITLE_CHAR_IN * max(len(line) for line in title.splitlines()) + 0.5  # never cut a long label
    fig = Figure(figsize=(max(7.0, title_width, columns * (spines * cell + 0.9) + 1.5),
                          2 * groups * (leaves * cell + 1.3) + 0.8), layout="constrained")
    axes = fig.subplots(2 * groups, columns, squeeze=False)
    for k in range(planes, groups * columns):   # empty places after the last plane
        for offset in (0, 1):
            axes[2 * (k // columns) + offset][k % columns].set_axis_off()
    image = None
    for k in range(planes):
        for offset, direction in enumerate(("up", "down")):
            ax, g = axes[2 * (k // columns) + offset][k % columns], grids[(k, direction)]
            util = g["util"] * 100
            image = ax.imshow(util, cmap="YlOrRd", vmin=0, vmax=vmax, aspect="equal")
            for leaf in range(leaves):
                for spine in range(spines):
                    value, marks = util[leaf, spine], [(MARKS[key][1], g[key][leaf, spine]) for key in MARKS]
                    if not (label_all or any(n for _, n in marks)):
                        continue
                    text = "n/a" if np.isnan(value) else f"{value:.0f}%"
                    text += "".join(f"\n{letter}{n}" for letter, n in marks if n)
                    dark = not np.isnan(value) and value > 0.6 * vmax
                    ax.text(spine, leaf, text, ha="center", va="center", fontsize=6.5,
                            color="white" if dark else "black")
            valid = util[~np.isnan(util)]
            balance = ("no counters" if not valid.size else "idle" if valid.mean() == 0
                       else f"max/mean {valid.max() / valid.mean():.2f}")
            arrow = "leaf→spine" if direction == "up" else "spine→leaf"
            ax.set_title(f"p{k} {direction} ({arrow})\n{balance}", fontsize=8)
            ax.set_xticks(range(spines), [f"s{i}" for i in range(spines)], fontsize=7)
            ax.set_yticks(range(leaves), [f"l{j}" for j in range(leaves)], fontsize=7)
            if k % columns == 0:
                ax.set_ylabel("leaf", fontsize=8)
            ax.set_xlabel("spine", fontsize=8)
    fabric_rate = run.link_rate_bps("fabric_rate")
    assert fabric_rate and image is not None  # else utilisation_grids raised NoData; a topology has a plane
    rate = format_rate(fabric_rate)
    fig.colorbar(image, ax=axes, shrink=0.8, label=f"utilisation (% of {rate} over the workload)")
    fig.suptitle(title, fontsize=10)
    return fig


# --- 3. EV states -----------------------------------------------------------------------

def ev_transitions(run: Run) -> tuple[list[float], list[float]]:
    """Times at which an EV was retired (to ASSUMED_BAD/DENIED) and revived (back to GOOD from those)."""
    retired, revived = [], []
    for c in run.results["ev_changes"]:
        old, new = str(c["old"]), str(c["new"])
        if new in RETIRED_STATES and old not in RETIRED_STATES:
            retired.append(c["t_s"])
        elif old in RETIRED_STATES and new == "GOOD":
            revived.append(c["t_s"])
    return retired, revived


def ev_state_series(run: Run) -> tuple[list[float], dict[str, list[int]]]:
    """How many EVs sit in each state, at 0 and at every transition in `ev_changes` (exact times).

    Each EV (host, peer, ev) starts in the state its first change leaves; EVs that never changed
    keep the state the first counter sample saw them in. Between two times the counts hold.
    """
    r = run.results
    changes = sorted(r["ev_changes"], key=lambda c: c["t_s"])
    state: dict[tuple, str] = {}
    for c in changes:
        state.setdefault((c["host"], str(c["peer"]), c["ev"]), str(c["old"]))
    untouched: dict[str, int] = {}
    if r["series"]:
        first = r["series"][0]
        at_first = dict(state)
        for c in changes:
            if c["t_s"] <= first["t_s"]:
                at_first[(c["host"], str(c["peer"]), c["ev"])] = str(c["new"])
        for name, n in first.get("ev_states", {}).items():
            untouched[name] = max(0, n - sum(1 for v in at_first.values() if v == name))
    counts = dict(untouched)
    for name in state.values():
        counts[name] = counts.get(name, 0) + 1
    names = [s for s in EV_ORDER if s in counts or any(c["new"] == s for c in changes)]
    names += sorted(({str(c["new"]) for c in changes} | set(counts)) - set(names))
    times, series = [0.0], {name: [counts.get(name, 0)] for name in names}
    for c in changes:
        key = (c["host"], str(c["peer"]), c["ev"])
        counts[state[key]] = counts.get(state[key], 0) - 1
        state[key] = str(c["new"])
        counts[state[key]] = counts.get(state[key], 0) + 1
        t = max(c["t_s"], 0.0)
        if times[-1] != t:
            times.append(t)
            for name in names:
                series[name].append(series[name][-1])
        for name in names:
            series[name][-1] = counts.get(name, 0)
    return times, series


def ev_states(run: Run) -> Figure:
    """How many EVs (summed over connections) sit in each state over time, with retire/revive marks.

    Drawn from the exact transition times (`ev_changes`), not from the 0.25 s counter samples.
    A single-path run has one EV per connection, so the picture says so in its title.
    """
    r = run.results
    if not r["ev_changes"]:
        if not transport_of(r).mrc:
            raise NoData("kernel TCP keeps no EVs: it sends each flow on the one path ECMP hashes it to")
        raise NoData("no EV changed state during the run")
    times, counts = ev_state_series(run)
    span = time_span(run)
    t = times + [span]
    states = list(counts)
    stacked = [counts[s] + counts[s][-1:] for s in states]
    fig = Figure(figsize=(10, 6.5), layout="constrained")
    ax, low = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1.3))
    ax.stackplot(t, stacked, labels=states, colors=[EV_COLOURS.get(s, "#7f7f7f") for s in states], alpha=0.85,
                 step="post")
    headroom(ax, max(sum(column) for column in zip(*stacked, strict=True)), mark_events(ax, r["events"], span))
    ax.set_ylabel("EVs in each state\n(stacked)")
    single = (" (single-path: one EV per connection,\nwith no other path to move to)"
              if transport_of(r).single_path else "")
    ax.set_title(f"EV states over time, summed over connections{single}:\n{run.label}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    worst = 0
    for state, column in zip(states, stacked, strict=True):
        if state != "GOOD":
            low.step(t, column, where="post", color=EV_COLOURS.get(state, "#7f7f7f"), lw=1.5, label=state)
            worst = max(worst, *column)
    retired, revived = ev_transitions(run)
    for moments, marker, colour, what in ((retired, "v", EV_COLOURS["ASSUMED_BAD"], "EVs to ASSUMED_BAD"),
                                          (revived, "^", EV_COLOURS["GOOD"], "EVs back to GOOD")):
        if moments:  # EVs, each of one connection: summary.paths counts paths, which several EVs share
            low.plot(moments, [0.93] * len(moments), ls="none", marker=marker, color=colour, ms=6, alpha=0.7,
                     transform=low.get_xaxis_transform(), label=f"{what} ({len(moments)})")
    mark_events(low, r["events"], span, labels=False)
    low.set_ylim(0, max(worst, 1) * 1.25)
    low.set_xlim(0, span)
    low.set_xlabel("time (s since workload start)")
    low.set_ylabel("EVs not GOOD")
    low.grid(alpha=0.3)
    low.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


# --- 4. message completion and loss recovery --------------------------------------------

def completion_times_ms(run: Run) -> list[float]:
    return sorted(m.completion_s * 1e3 for m in run.messages if m.completion_s is not None)


def completion_cdf(run: Run) -> Figure:
    """CDF of delivered_s - posted_s: a stalled path shows as a tail, a lost message in the legend."""
    times = completion_times_ms(run)
    if not times:
        raise NoData("no delivered message in messages.csv")
    undelivered = sum(1 for m in run.messages if m.completion_s is None)
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    fraction = np.arange(1, len(times) + 1) / len(times)
    ax.step(times, fraction, where="post", color=STEP_COLOUR, lw=1.5, label=f"delivered messages ({len(times)})")
    p50, p99 = np.percentile(times, 50), np.percentile(times, 99)
    ax.axvline(p50, color=P50_COLOUR, ls=":", label=f"p50 {p50:.1f} ms")
    ax.axvline(p99, color=P100_COLOUR, ls="-.", label=f"p99 {p99:.1f} ms")
    if times[0] > 0 and times[-1] / times[0] > 50:
        ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("message completion time (ms, delivered − posted)")
    ax.set_ylabel("fraction of messages")
    ax.set_title(f"Message completion times: {run.label}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, title=f"not delivered: {undelivered}" if undelivered else None,
              title_fontsize=8)
    return fig


def throughput(run: Run) -> Figure:
    """Stream throughput per pair and in total, bin by bin, against the faults: what a failure costs a bulk
    transfer and how soon it is back (the MRC paper's throughput-over-time plots)."""
    series = run.results.get("timeseries")
    if not series:
        raise NoData("no stream workload in this run")
    width = series["bin_s"]
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    top = 0.0
    for name, values in series.items():
        if name == "bin_s":
            continue
        edges = list(np.arange(len(values) + 1) * width)
        mbit = [v / 1e6 for v in values]
        total = name == "total"
        ax.step(edges, mbit + mbit[-1:], where="post", lw=2.0 if total else 1.0, color=STEP_COLOUR if total else None,
                label=name)
        top = max(top, max(mbit, default=0.0))
    for w in run.results.get("workloads", []):
        if w.get("ideal_bps"):
            ax.axhline(w["ideal_bps"] / 1e6, color=IDEAL_COLOUR, ls="--", lw=1,
                       label=f"{w['name']} ideal {w['ideal_bps'] / 1e6:.0f} Mbit/s")
            top = max(top, w["ideal_bps"] / 1e6)
    finish_timeline(ax, run, top, "time (s since workload start)", f"Mbit/s delivered ({width * 1e3:g} ms bins)",
                    f"Stream throughput:\n{run.label}")
    ax.title.set_fontsize(10)
    return fig


def interval_rates(series: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(interval end times, packets per second) of a cumulative counter between consecutive samples."""
    times, rates = [], []
    for before, after in pairwise(series):
        dt = after["t_s"] - before["t_s"]
        if dt > 0:
            times.append(after["t_s"])
            rates.append((after.get(key, 0) - before.get(key, 0)) / dt)
    return times, rates


def recovery_bin_s(run: Run) -> float:
    """Bins a small fraction of a step (a quarter of the median), never finer than the agents' millisecond."""
    p50 = run.results["summary"]["step_time_s"]["p50"] or time_span(run)
    return max(0.001, min(p50 / 4, time_span(run) / 100))


def recovery_rates(run: Run, key: str) -> tuple[list[float], list[float], int]:
    """(bin start times, packets per second, total) of one counter from its exact times (`recovery`)."""
    marks = run.results.get("recovery", {}).get(key, [])
    width = recovery_bin_s(run)
    bins = int(time_span(run) / width) + 1
    counts = np.zeros(bins)
    for t, n in marks:
        counts[min(max(int(t / width), 0), bins - 1)] += n
    edges = list(np.arange(bins + 1) * width)
    return edges, list(np.append(counts, counts[-1:]) / width), int(sum(n for _, n in marks))


def recovery_counters(run: Run) -> Figure:
    """Trims, retransmissions and timeouts per second over time: where the fabric hurt and the transport reacted.

    MRC agents report when each happened, to the millisecond (`recovery`), and the rates are binned at a
    quarter of a step; kernel TCP reports only totals, so its rates are averages over the 0.25 s samples,
    each drawn over the interval it covers.
    """
    r = run.results
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.add_subplot()
    top = 0.0
    if "recovery" in r and transport_of(r).mrc:
        if not any(r["recovery"].values()):
            raise NoData("no sender trimmed, retransmitted or timed out a packet")
        how = f"{recovery_bin_s(run) * 1e3:.3g} ms bins"
        for key, colour in COUNTER_COLOURS.items():
            t, rate, total = recovery_rates(run, key)
            ax.step(t, rate, where="post", color=colour, lw=1.3, label=f"{key} ({total} total)")
            top = max(top, max(rate, default=0))
    else:
        series = r["series"]
        if len(series) < 2:
            raise NoData("fewer than two counter samples in results.json, so no rates")
        how = "averages over each 0.25 s sample"
        for key, colour in COUNTER_COLOURS.items():
            t, rate = interval_rates(series, key)
            ax.step([series[0]["t_s"]] + t, rate[:1] + rate, where="pre", color=colour, lw=1.3,
                    label=f"{key} ({series[-1].get(key, 0)} total)")
            top = max(top, max(rate, default=0))
    finish_timeline(ax, run, top, "time (s since workload start)", f"packets per second, all senders ({how})",
                    f"Loss recovery: trims, retransmissions, timeouts:\n{run.label}")
    ax.title.set_fontsize(10)
    return fig
