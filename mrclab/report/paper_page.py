"""paper.html: the paper suite's table as one self-contained page (as report.html: PNGs inlined, no scripts),
with a plot per claim of each run's share of ideal, its median and 95% interval over the repetitions, so a
reader sees at a glance how far apart the compared runs are and how much each moved from seed to seed."""
from __future__ import annotations

import base64
import io
from html import escape
from pathlib import Path

from .html import STYLE, _table

VERDICT_CLASS = {"agree": "ok", "disagree": "failed"}


def figure(row: dict) -> bytes | None:
    """A claim's runs as horizontal bars (median share of ideal) with their intervals; None without runs."""
    shares = row.get("shares") or {}
    if not shares:
        return None
    from matplotlib.figure import Figure
    labels = list(shares)
    medians = [shares[label][0] for label in labels]
    low = [m - shares[label][1] for m, label in zip(medians, labels, strict=True)]
    high = [shares[label][2] - m for m, label in zip(medians, labels, strict=True)]
    fig = Figure(figsize=(7, 0.45 * len(labels) + 1.2))
    ax = fig.add_subplot()
    ax.barh(labels, medians, xerr=[low, high], color="#4c72b0", capsize=3)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.0, max(shares[label][2] for label in labels)))
    ax.set_xlabel("share of ideal (median, 95% interval over repetitions)")
    ax.set_title(f"{row['id']}: {row['experiment']}", fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()


def render(rows: list[dict], command: str, date: str) -> str:
    def verdict(word: str) -> str:
        return f'<span class="{VERDICT_CLASS.get(word, "na")}">{escape(word)}</span>'

    table = _table(["#", "experiment", "the paper", "the lab", "verdict", "what differs", "runs"],
                   [[escape(r["id"]), escape(r["experiment"]), escape(r["paper"]), escape(r["lab"]),
                     verdict(r["verdict"]), escape(r["differs"]), escape(", ".join(r["runs"]) or "-")] for r in rows])
    figures = []
    for r in rows:
        png = figure(r)
        if png is not None:
            data = base64.b64encode(png).decode("ascii")
            figures.append(f'<figure><img src="data:image/png;base64,{data}" alt="{escape(r["id"])}">'
                           f'<figcaption>{escape(r["id"])}: {verdict(r["verdict"])}</figcaption></figure>')
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>mrclab paper suite</title>"
            f"<style>{STYLE}</style></head><body><h1>The paper suite: the lab against MRC's published "
            f"experiments</h1><p class='sub'>{escape(date)}: <code>{escape(command)}</code>; every figure is read "
            f"off the run folders named in the last column.</p>{table}<h2>Each claim's runs</h2>"
            + "".join(figures) + "</body></html>\n")


def write(root: Path, rows: list[dict], command: str, date: str) -> Path:
    path = root / "paper.html"
    path.write_text(render(rows, command, date))
    return path
