"""report.html: one self-contained page per run (PNGs inlined as data URIs, CSS inline, no scripts).

The page leads with what decides whether the run can be trusted (the fidelity verdict
and failed expectations, as banners), then the numbers, the pictures, the fault
timeline and the resolved settings, so it can be mailed or archived on its own.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from html import escape

from ..metrics import expectations
from ..metrics.results import DROP_KEYS
from ..units import format_bytes
from . import summary
from .plots import event_text, rate_text
from .run import Run

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2em; } .sub { color: #555; margin-top: 0; }
.banner { padding: 0.8em 1em; border-radius: 4px; margin: 1em 0; font-weight: 600; }
.bad { background: #d62728; color: white; } .warn { background: #fde0c5; color: #7a3600; }
.good { background: #e3f4e3; color: #1e5e1e; font-weight: normal; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #1e7e1e; font-weight: 600; } .failed { color: #c00; font-weight: 700; } .na { color: #777; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 0.9em; } .missing { color: #777; font-style: italic; }
"""


@dataclass
class Picture:
    """One plot of the report: the PNG written to DIR, or why there is none."""

    file: str
    title: str
    caption: str
    png: bytes | None = None
    missing: str | None = None


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Cells are already-escaped HTML."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _verdict(check: dict) -> str:
    word = escape(summary.verdict_text(check))
    return {True: f'<span class="ok">{word}</span>', False: f'<span class="failed">{word}</span>'}.get(
        check["ok"], f'<span class="na">{word}</span>')


def _banners(run: Run) -> str:
    r = run.results
    status = r.get("status", "completed")
    if status != "completed":
        why = f": {r['error']}" if r.get("error") else ""
        return f'<div class="banner bad">This run did not complete ({escape(status)}{escape(why)}); what it ' \
               f'recorded before it stopped is below.</div>' + _verdicts(run)
    return _verdicts(run)


def _verdicts(run: Run) -> str:
    r = run.results
    fid = r["fidelity"]
    notes = "".join(f"<li>{escape(n)}</li>" for n in fid.get("notes", []))
    if fid.get("ok", True):
        out = f'<div class="banner good">Fidelity ok: the emulated network, not the host machine, set the pace.' \
              f'<ul>{notes}</ul></div>'
    else:
        out = f'<div class="banner bad">Fidelity NOT OK: the host machine, not the emulated network, limited ' \
              f'this result; do not read it as the transport\'s behaviour.<ul>{notes}</ul></div>'
    failed = expectations.failed(r["expectations"])
    if failed:
        names = ", ".join(escape(c["name"]) for c in failed)
        out += f'<div class="banner warn">{len(failed)} of {len(r["expectations"])} expectations FAILED: ' \
               f'{names}</div>'
    return out


def _summary_table(run: Run) -> str:
    h = summary.headline(run)
    s = run.results["summary"]
    p = s["packets"]
    rows = [[escape(row.label), escape(row.text(h))] for row in summary.ROWS]
    rows += [["messages sent / completed / failed", "{sent} / {completed} / {failed}".format(**s["messages"])],
             ["bytes sent / delivered / verified", " / ".join(format_bytes(s["bytes"][k])
                                                             for k in ("sent", "delivered", "verified"))],
             ["packets data / retx / trimmed / timeouts / nacks / probes",
              " / ".join(str(p.get(k, 0)) for k in ("data_sent", "retransmitted", "trimmed", "timeouts", "nacks",
                                                    "probes"))],
             ["RTT", escape(summary.rtt_text(s))],
             ["link drops: queue / loss / blackhole / link down",
              " / ".join(str(s.get("link_drops", {}).get(k, 0)) for k in DROP_KEYS)]]
    if "ecn" in s:
        rows.append(["ECN: packets marked / CE received / EV turns skipped",
                     " / ".join(str(s["ecn"][k]) for k in ("marked", "ce_received", "ev_skips"))])
    return _table(["metric", "value"], rows)


def _expectations_table(run: Run) -> str:
    checks = run.results["expectations"]
    if not checks:
        return '<p class="missing">The scenario sets no expectations.</p>'
    return _table(["check", "expected", "actual", "verdict"],
                  [[escape(c["name"]), escape(expectations.bound_text(c)), escape(summary.actual_text(c)), _verdict(c)]
                   for c in checks])


def _events_table(run: Run) -> str:
    events = run.results["events"]
    if not events:
        return '<p class="missing">No fault fired during this run.</p>'
    rows = []
    for e in sorted(events, key=lambda e: e["t_s"]):
        rows.append([f"{e['t_s']:.3f}", escape(e["action"]), escape(e["target"]), escape(rate_text(e)),
                     _ms(e, "avoid_s", "never used"), _ms(e, "revive_s", "nothing to revive"), escape(event_text(e))])
    return _table(["t (s)", "action", "target", "rate", "avoid_s", "revive_s", "as plotted"], rows)


def _nic_table(run: Run) -> str:
    """When a host's NIC lost its link and got it back, as its own agent and its peers heard it (nothing when none
    did)."""
    changes = run.results.get("nic_changes") or []
    if not changes:
        return ""
    return "<h3>Host NICs</h3>" + _table(["t (s)", "host", "plane", "link", "seen by"],
                                         [[f"{c['t_s']:.3f}", escape(c["host"]), str(c["plane"]), escape(c["state"]),
                                           escape(c.get("seen_by", c["host"]))] for c in changes])


def _ms(event: dict, key: str, none: str) -> str:
    """A measured delay of an event: blank where it does not apply, `none` where nothing was measured."""
    if key not in event:
        return ""
    return none if event[key] is None else f"{event[key] * 1e3:.1f} ms"


def settings_rows(data, prefix: str = "") -> list[tuple[str, str]]:
    """scenario.yaml flattened to (dotted key, value); a list of mappings (events) gives one row per item."""
    if isinstance(data, dict) and data:
        return [row for k, v in data.items() for row in settings_rows(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(data, list) and any(isinstance(v, dict) for v in data):
        return [(f"{prefix}[{i}]", ", ".join(f"{k}={v}" for k, v in item.items()) if isinstance(item, dict)
                 else str(item)) for i, item in enumerate(data)]
    if isinstance(data, list):
        return [(prefix, " ".join(str(v) for v in data) or "(none)")]
    return [(prefix, "(none)" if data in ({}, None) else str(data))]


def _settings_table(run: Run) -> str:
    if not run.scenario:
        return '<p class="missing">scenario.yaml is missing from the run directory.</p>'
    return _table(["setting", "value"], [[escape(k), escape(v)] for k, v in settings_rows(run.scenario)])


def _figure(p: Picture) -> str:
    if p.png is None:
        return f'<figure><h3>{escape(p.title)}</h3><p class="missing">Not drawn: {escape(p.missing or "")}</p>' \
               f'</figure>'
    data = base64.b64encode(p.png).decode("ascii")
    return f'<figure><h3>{escape(p.title)}</h3><img src="data:image/png;base64,{data}" alt="{escape(p.title)}">' \
           f'<figcaption>{escape(p.caption)} (<a href="{escape(p.file)}">{escape(p.file)}</a>)</figcaption></figure>'


def render(run: Run, pictures: list[Picture]) -> str:
    r = run.results
    t = r["topology"]
    overrides = summary.overrides_text(run)
    prose = run.scenario.get("description") or ""
    description = f"<p><b>What ran:</b> {escape(summary.what_ran(run))}"
    if overrides:
        description += f" Changed from the scenario file with <code>--set {escape(overrides)}</code>, so its " \
                       f"description does not apply as written.</p>"
    elif prose:
        description += f"</p><p><b>The scenario:</b> {escape(prose)}</p>"
    else:
        description += "</p>"
    seed = "-" if r["seed"] is None else r["seed"]
    sub = (f"{escape(r['transport'])} over {escape(r['routing'])} on {escape(t['name'])} "
           f"({t['planes']} planes × {t['leaves']} leaves × {t['spines']} spines, {t['hosts']} hosts) · "
           f"seed {seed} · started {escape(r['started_at'])} · {r['duration_s']:.2f} s · "
           f"scenario file {escape(r['scenario']['file'] or '-')}")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>mrclab report: {escape(run.name)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(run.name)}</h1>", f'<p class="sub">{sub}</p>',
        description,
        _banners(run),
        "<h2>Summary</h2>", _summary_table(run),
        "<h2>Expectations</h2>", _expectations_table(run),
        "<h2>Plots</h2>", *(_figure(p) for p in pictures),
        "<h2>Fault timeline</h2>", _events_table(run), _nic_table(run),
        "<h2>Settings (resolved scenario.yaml)</h2>", _settings_table(run),
        f'<p class="sub">Run directory: {escape(str(run.dir.resolve()))}</p>',
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"
