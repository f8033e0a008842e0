"""Every shipped scenario on each datapath, in one go: how much of what a run reports is the emulator's.

    sudo .venv/bin/python benchmarks/datapaths.py [--scenarios quickstart,smoke] [--datapaths ovs,linux]
        [--repeat N] [--set KEY=VALUE]... [--json]

Each (scenario, datapath) runs through `mrclab run --json` with `--set datapath=...`, one
after the other (interleaved when repeated, so both datapaths see the same machine), and
one table is printed per datapath: base RTT, RTT under load (p50/p99), the emulator's own
share of the mean RTT (`fidelity.latency`), goodput as a fraction of the workload's ideal,
avoid_s in ms and in base RTTs, machine CPU and the fidelity verdict. The ratio line at the
end divides each datapath's figures by the first one's, scenario by scenario: the reference
is measured in the same run. `--set` passes overrides to every run (e.g. a link rate through
an inline topology).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))


def run(scenario: str, datapath: str, overrides: list[str], out: Path) -> dict:
    argv = [sys.executable, "-m", "mrclab", "run", str(REPO / "scenarios" / f"{scenario}.yaml"), "--json",
            "--out", str(out), "--set", f"datapath={datapath}", *[x for o in overrides for x in ("--set", o)]]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if result.returncode not in (0, 1) or not (out / "results.json").exists():
        raise SystemExit(f"{scenario} on {datapath}: exit {result.returncode}: {result.stderr.strip()[-300:]}")
    return json.loads((out / "results.json").read_text())  # also there when a failed run prints no document


def figures(doc: dict) -> dict:
    s, f = doc["summary"], doc["fidelity"]
    latency = f.get("latency") or {}
    avoid = [e["avoid_s"] for e in doc["events"] if e.get("avoid_s") is not None]
    base = s.get("base_rtt_s")
    return {
        "base_rtt_ms": None if base is None else base * 1e3,
        "rtt_p50_ms": None if s.get("rtt_p50_s") is None else s["rtt_p50_s"] * 1e3,
        "rtt_p99_ms": None if s.get("rtt_p99_s") is None else s["rtt_p99_s"] * 1e3,
        "emulator_share": (latency["emulator_s"] / latency["rtt_mean_s"]) if latency.get("rtt_mean_s") else None,
        "goodput_fraction": s.get("goodput_fraction"),
        "avoid_ms": max(avoid) * 1e3 if avoid else None,
        "avoid_base_rtts": max(avoid) / base if avoid and base else None,
        "cpu_pct": f["cpu_busy_pct"],
        "fidelity_ok": f["ok"],
        "expectations_ok": all(c["ok"] for c in doc["expectations"]),
        "failed_messages": s["messages"]["failed"],
    }


COLUMNS = [("base_rtt_ms", "base RTT ms", "{:.2f}"), ("rtt_p50_ms", "RTT p50 ms", "{:.1f}"),
           ("rtt_p99_ms", "RTT p99 ms", "{:.1f}"), ("emulator_share", "emulator share", "{:.0%}"),
           ("goodput_fraction", "goodput", "{:.0%}"), ("avoid_ms", "avoid ms", "{:.1f}"),
           ("avoid_base_rtts", "avoid / base RTT", "{:.0f}"), ("cpu_pct", "CPU %", "{:.0f}"),
           ("fidelity_ok", "fidelity", "{}"), ("expectations_ok", "expect", "{}")]


def cell(values: list, fmt: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if isinstance(values[0], bool):
        return "ok" if all(values) else f"{sum(values)}/{len(values)}"
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}-{fmt.format(high)}"


def table(datapath: str, rows: dict[str, list[dict]]) -> str:
    head = ["scenario"] + [title for _, title, _ in COLUMNS]
    lines = [[name] + [cell([r[key] for r in runs], fmt) for key, _, fmt in COLUMNS] for name, runs in rows.items()]
    widths = [max(len(str(x)) for x in column) for column in zip(head, *lines, strict=True)]
    out = [f"datapath {datapath}", "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--datapaths", default="ovs,linux")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scenarios, datapaths = args.scenarios.split(","), args.datapaths.split(",")
    results: dict[str, dict[str, list[dict]]] = {d: {s: [] for s in scenarios} for d in datapaths}
    with tempfile.TemporaryDirectory(prefix="mrclab-bench-") as tmp:
        for scenario in scenarios:
            for i in range(args.repeat):
                for datapath in datapaths:
                    doc = run(scenario, datapath, args.overrides, Path(tmp) / f"{scenario}-{datapath}-{i}")
                    results[datapath][scenario].append(figures(doc))
                    print(f"{scenario} on {datapath} ({i + 1}/{args.repeat}): done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for datapath in datapaths:
        print(table(datapath, results[datapath]))
        print()
    ref = datapaths[0]
    for datapath in datapaths[1:]:
        for key in ("base_rtt_ms", "rtt_p50_ms", "goodput_fraction", "avoid_ms"):
            ratios = [statistics.median(v[key] for v in results[datapath][s]) /
                      statistics.median(v[key] for v in results[ref][s])
                      for s in scenarios if all(v[key] for v in results[datapath][s] + results[ref][s])]
            if ratios:
                print(f"{datapath} / {ref} {key}: median ratio {statistics.median(ratios):.2f} "
                      f"over {len(ratios)} scenarios")


if __name__ == "__main__":
    main()
