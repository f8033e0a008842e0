"""A replayed Chakra trace on both engines, with and without its fault, on MRC and on the traditional fabric:

    .venv/bin/python benchmarks/trace_engines.py [--scenario trace-mixed-16] [--engines lab,sim] [--set K=V]...
        [--out DIR]
    (root: the lab runs; wrap it in /work/bin/quiet on a shared machine)

The scenario runs as it is (MRC over static-srv6) and as the traditional fabric (``transport=single-path``,
``routing=ecmp-reconverge``), each with its events and with none (``events=[]``), on each engine: eight runs.
Lab runs go first, one at a time, the simulator's after them. Printed: every run's iteration times and fidelity;
per engine and fabric, each iteration's increase over the same iteration without the fault (the fault's cost);
then the two ratios the trace workload is judged by, each against a reference measured in the same invocation:
MRC's increase over single-path-over-ECMP's (docs/workloads.md aims at 1/3 at most) and the simulator's iteration
time over the lab's without a fault (aim: within 20%). A folder given with --out keeps the runs: giving it again
reads them instead of running them again.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engines import run_into  # noqa: E402

FABRICS = {"mrc": ("transport=mrc", "routing=static-srv6"),
           "ecmp": ("transport=single-path", "routing=ecmp-reconverge")}


def run(scenario: str, engine: str, fabric: str, fault: bool, out: Path, sets: tuple[str, ...] = ()) -> dict:
    folder = out / f"{Path(scenario).stem}-{engine}-{fabric}-{'fault' if fault else 'clean'}"
    return run_into(folder, scenario, engine, (*sets, *FABRICS[fabric], *(() if fault else ("events=[]",))))


def iterations(doc: dict) -> list[float]:
    rows = doc.get("workloads", [{}])[0].get("iterations", [])
    return [row["time_s"] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="trace-mixed-16")
    parser.add_argument("--engines", default="lab,sim")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to every run (e.g. topology.links.host_rate=5Mbit)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="trace-engines-"))
    out.mkdir(parents=True, exist_ok=True)
    engines = args.engines.split(",")
    docs = {(e, f, fault): run(args.scenario, e, f, fault, out, tuple(args.sets)) for e in engines for f in FABRICS
            for fault in (False, True)}
    print(f"{args.scenario} {' '.join(args.sets)}: iteration times (s); runs in {out}")
    print(f"{'engine':6} {'fabric':5} {'fault':6} {'status':10} {'fidelity':8} iterations")
    for (e, f, fault), doc in docs.items():
        fid = doc.get("fidelity", {}).get("ok")
        print(f"{e:6} {f:5} {'yes' if fault else 'no':6} {doc.get('status', '?'):10} {str(fid):8} "
              + " ".join(f"{t:.3f}" for t in iterations(doc)))
    increase: dict[tuple[str, str], float] = {}
    print("\nthe fault's cost: the worst iteration's increase over the same iteration without it")
    for e in engines:
        for f in FABRICS:
            clean, hit = iterations(docs[(e, f, False)]), iterations(docs[(e, f, True)])
            if len(clean) == len(hit) and clean:
                worst = max(range(len(hit)), key=lambda i: hit[i] - clean[i])
                increase[(e, f)] = hit[worst] - clean[worst]
                print(f"{e:6} {f:5} iteration {worst}: {clean[worst]:.3f} -> {hit[worst]:.3f} s "
                      f"(+{increase[(e, f)]:.3f} s, x{hit[worst] / clean[worst]:.2f})")
            else:
                print(f"{e:6} {f:5} not comparable: {len(clean)} and {len(hit)} iterations")
    print()
    for e in engines:
        if (e, "mrc") in increase and (e, "ecmp") in increase and increase[(e, "ecmp")] > 0:
            print(f"{e}: MRC's increase / single-path over ECMP's = {increase[(e, 'mrc')] / increase[(e, 'ecmp')]:.3f}"
                  " (aim <= 0.333)")
    if {"lab", "sim"} <= set(engines):
        for f in FABRICS:
            lab, sim = iterations(docs[("lab", f, False)]), iterations(docs[("sim", f, False)])
            if lab and len(lab) == len(sim):
                ratios = " ".join(f"{s / lab_t:.3f}" for s, lab_t in zip(sim, lab, strict=True))
                print(f"{f}: sim / lab iteration time without the fault: {ratios} (aim within 0.8-1.2)")


if __name__ == "__main__":
    main()
