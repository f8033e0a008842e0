"""What `mrclab run` prints when a run ends: the key figures first, so they fit one 80x24 screen."""
from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..metrics import expectations
from ..units import format_bytes, format_seconds
from .summary import actual_text, cpu_text, rtt_text, verdict_text


def workload_text(w: dict) -> str:
    """One workload's own figures: a stream's goodput and its worst bin, a collective's goodput and steps."""
    failed = f" · [red]{w['messages']['failed']} failed[/]" if w["messages"]["failed"] else ""
    if "duration_s" in w:
        worst = "" if w["min_bin_fraction"] is None else f", worst bin {w['min_bin_fraction'] * 100:.0f}%"
        return (f"{w['pattern']} ×{w['connections']} QP: {w['goodput_bps'] / 1e6:.1f} Mbit/s, "
                f"{w['goodput_fraction'] * 100:.0f}% of ideal{worst}{failed}")
    return (f"{w['pattern']} ×{w['connections']} QP: {w['goodput_bps'] / 1e6:.1f} Mbit/s over {w['steps']} steps, "
            f"step p50 {format_seconds(w['step_time_s']['p50'])}{failed}")


def trace_split(w: dict) -> str:
    """A replayed trace's iterations in one line: the mean's compute and communication, the slowest collective."""
    its = w["iterations"]
    compute = sum(i["compute_s"] for i in its) / len(its) if its else 0.0
    comm = sum(i["communication_s"] for i in its) / len(its) if its else 0.0
    slow = max(w["by_name"], key=lambda c: c["time_s_p100"], default=None)
    return (f"mean compute {format_seconds(compute)} + communication {format_seconds(comm)}"
            + (f"; slowest {slow['name']} ({slow['comm']}) {format_seconds(slow['time_s_p100'])}" if slow else ""))


def print_run(doc: dict, target: Path, *, out: Console, err: Console) -> None:
    """The key figures first, so they fit one 80x24 screen; then the expectations, then the notes."""
    for u in doc.get("unfired_events", []):
        err.print(f"[yellow]event {u['event_index']} ({u['action']} {u['target']} at {u['t_s']:g} s) never fired: "
                  f"the workload ended at {doc['duration_s']:g} s[/yellow]", soft_wrap=True)
    s, st = doc["summary"], doc["summary"]["step_time_s"]
    overrides = " ".join(f"{k}={v}" for k, v in doc.get("overrides", {}).items())
    out.print(f"[bold]{escape(doc['scenario']['name'])}[/]: {doc['transport']} over {doc['routing']} on "
              f"{doc['topology']['name']} ({doc.get('datapath', '?')})"
              + (f"  [dim](--set {escape(overrides)})[/]" if overrides else ""),
              soft_wrap=True)
    m, b, p = s["messages"], s["bytes"], s["packets"]
    verified = "all verified" if b["verified"] == b["delivered"] else f"{format_bytes(b['verified'])} verified"
    tail = f" ({st['p100'] / st['p50']:.2f}x p50)" if st["p50"] else ""
    step = "iteration" if "iteration_time_s" in s else "step"  # a trace's steps are its iterations
    rows = [(f"{step} time", f"p50 {format_seconds(st['p50'])} · p100 {format_seconds(st['p100'])}{tail}"
                             f" · {len(doc['steps'])} {step}s")] if doc["steps"] else []
    if doc["steps"] and st.get("from_step") == 1:
        rows += [("warm-up", f"{step} 0: {format_seconds(st['warmup_s'])} (not in p50, p100)")]
    rows += [("  split", trace_split(w)) for w in doc.get("workloads", []) if "iterations" in w]
    rows += [("goodput", f"{s['goodput_bps'] / 1e6:.1f} Mbit/s, {s['goodput_fraction'] * 100:.0f}% of ideal")]
    workloads = doc.get("workloads", [])
    rows += [(f"  {w['name']}", workload_text(w)) for w in workloads if len(workloads) > 1 or "duration_s" in w]
    rows += [("messages", (f"{m['sent']} sent · [{'red' if m['failed'] else 'green'}]{m['failed']} failed[/] · "
                           f"{format_bytes(b['delivered'])} delivered, {verified}"))]
    rows += [(key, ("not measured" if e[key] is None else format_seconds(e[key]))
              + f" ({e['action']} {e['target']} @{e['t_s']:.2f} s)")
             for e in doc["events"] for key in ("avoid_s", "revive_s") if key in e]
    fid = doc["fidelity"]
    drops = {k.removesuffix("_drops"): n for k, n in s.get("link_drops", {}).items() if n}
    rows += [("fidelity", "[green]ok[/]" if fid["ok"] else "[red bold]NOT OK[/] (see the notes)"),
             ("packets", (f"data {p['data_sent']} · retx {p['retransmitted']} · trimmed {p['trimmed']} · "
                          f"timeouts {p['timeouts']}")),
             ("link drops", " · ".join(f"{k} {n}" for k, n in drops.items()) or "none"),
             ("RTT", rtt_text(s)),
             ("CPU s/MiB", "agents / lab " + cpu_text(s.get("cpu_s_per_mib"))) if fid.get("engine") != "sim" else
             ("simulator", f"{fid['simulated_s']:.4g} s simulated in {fid['wall_s']:.3g} s ({fid['cpu_s']:.3g} s CPU, "
                           f"{fid['events']} events)"),
             ("flow-mods", f"{doc['controller']['flow_mods_after_boot']} after boot")]
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    if doc["expectations"]:
        checks = Table(box=None, show_header=False, pad_edge=False, title="expectations", title_justify="left")
        for _ in range(3):
            checks.add_column(overflow="fold")
        colours = {True: "green", False: "red bold"}
        for c in doc["expectations"]:
            checks.add_row(f"[{colours.get(c['ok'], 'dim')}]{escape(verdict_text(c))}[/]", c["name"],
                           f"{actual_text(c)} (expected {expectations.bound_text(c)})")
        out.print(checks)
    if fid["notes"]:
        out.print("[bold]notes[/]")
        for note in fid["notes"]:
            out.print(f"- {escape(note)}")
    out.print(f"results in {target}/", soft_wrap=True)
    out.print(f"next: mrclab report {shlex.quote(str(target))}   (report.html and its plots)", soft_wrap=True,
              highlight=False)
