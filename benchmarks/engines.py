"""The two engines side by side on the shipped scenarios: does the simulator say what the lab says?

    .venv/bin/python benchmarks/engines.py [--only quickstart,smoke] [--out DIR]   (root: the lab runs)

Each shipped scenario (scenarios/*.yaml) runs as it is on the lab and on the simulator; a collective
scenario on MRC also runs as the traditional fabric (``transport=single-path``, ``routing=ecmp-reconverge``)
on both, and a scenario on that fabric also runs on MRC, for the ECMP/MRC step-time ratio (mean step
time of the ECMP run over the MRC run's). Lab runs go one at a time, the simulator's after them, so no
run shares the CPU with a lab. Printed per scenario and engine: whether the scenario's own expectations
passed, the goodput fraction, failed messages, avoid_s (and in the run's base RTTs), and the ECMP/MRC ratio;
then sim/lab of the ratio. The reference for every sim figure is the lab's, measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ECMP = ("transport=single-path", "routing=ecmp-reconverge")
MRC = ("transport=mrc", "routing=static-srv6")


def run(scenario: Path, engine: str, sets: tuple[str, ...], out: Path) -> dict:
    return run_into(out / f"{scenario.stem}-{engine}{'-' + sets[0].split('=')[1] if sets else ''}", str(scenario),
                    engine, sets)


def run_into(folder: Path, scenario: str, engine: str, sets: tuple[str, ...]) -> dict:
    """The run's results; a folder that has them already is read, not run again (``--out`` of an earlier run)."""
    if not (folder / "results.json").is_file():
        args = [sys.executable, "-m", "mrclab", "run", scenario, "--engine", engine, "--out", str(folder), "--json"]
        for s in sets:
            args += ["--set", s]
        subprocess.run(args, cwd=REPO, capture_output=True, check=False)
    try:
        return json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return {"status": "no results"}


def figures(doc: dict) -> dict:
    if "summary" not in doc:
        return {"status": doc.get("status"), "passed": False}
    s = doc["summary"]
    cut = next((e for e in doc["events"] if e.get("avoid_s") is not None), None)
    base = s.get("base_rtt_s")
    steps = [row["duration_s"] for row in doc["steps"]]
    return {"status": doc["status"], "passed": all(c["ok"] is not False for c in doc["expectations"]),
            "goodput_fraction": s.get("goodput_fraction"), "failed": s["messages"]["failed"],
            "avoid_ms": round(cut["avoid_s"] * 1e3, 1) if cut else None,
            "avoid_rtts": round(cut["avoid_s"] / base, 1) if cut and base else None,
            "step_mean_s": sum(steps) / len(steps) if steps else None, "fidelity_ok": doc["fidelity"]["ok"]}


def avoid(figures: dict) -> str:
    return "-" if figures.get("avoid_ms") is None else f"{figures['avoid_ms']} ms ({figures['avoid_rtts']})"


def plan(scenario: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The runs of one scenario: as it is, and its other fabric when it is a collective (for the ratio)."""
    text = scenario.read_text()
    if "pattern: stream" in text:
        return [("as is", ())]
    return [("as is", ()), ("other", MRC if "routing: ecmp-reconverge" in text else ECMP)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="Scenario stems, comma-separated.")
    parser.add_argument("--out", type=Path, default=None, help="Runs folder; the runs it already holds are read.")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="engines-"))
    scenarios = sorted((REPO / "scenarios").glob("*.yaml"))
    if args.only:
        scenarios = [p for p in scenarios if p.stem in args.only.split(",")]
    table: dict[str, dict[str, dict]] = {}
    for engine in ("lab", "sim"):
        for scenario in scenarios:
            for label, sets in plan(scenario):
                doc = figures(run(scenario, engine, sets, out))
                table.setdefault(scenario.stem, {})[f"{engine} {label}"] = doc
                print(json.dumps({"scenario": scenario.stem, "engine": engine, "run": label, **doc}), flush=True)
    print("\n| scenario | engine | expectations | goodput fraction | failed | avoid_s (base RTTs) | "
          "ECMP/MRC step time |\n|---|---|---|---|---|---|---|")
    for stem, runs in table.items():
        ratios = {}
        for engine in ("lab", "sim"):
            mine, other = runs[f"{engine} as is"], runs.get(f"{engine} other")
            if other and mine.get("step_mean_s") and other.get("step_mean_s"):
                mrc, ecmp = (other, mine) if (REPO / "scenarios" / f"{stem}.yaml").read_text().count(
                    "routing: ecmp-reconverge") else (mine, other)
                ratios[engine] = ecmp["step_mean_s"] / mrc["step_mean_s"]
            ratio = f"{ratios[engine]:.2f}" if engine in ratios else "-"
            if engine == "sim" and "lab" in ratios and "sim" in ratios:
                ratio += f" (sim/lab {ratios['sim'] / ratios['lab']:.2f})"
            print(f"| {stem} | {engine} | {'pass' if mine['passed'] else 'FAIL'} | {mine.get('goodput_fraction')} | "
                  f"{mine.get('failed')} | {avoid(mine)} | {ratio} |")
    print(f"\nruns in {out}")


if __name__ == "__main__":
    main()
