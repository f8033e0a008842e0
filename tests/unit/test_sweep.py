"""Sweeps: the grid, the run plan, resuming, and the tables, with a stand-in for the lab that writes results."""
import csv
import json

import pytest

from mrclab.errors import UsageError
from mrclab.runner import RunFailed
from mrclab.sweeps import Grid, Plan, execute, interval, run_dir


def plan(grid=("transport=mrc,single-path",), repeat=2):
    return Plan("smoke", Grid.parse(list(grid)), repeat, ("workload.steps=20",), base_seed=1)


def test_the_grid_is_every_combination_and_each_point_repeats_over_seeds():
    p = plan(("transport=mrc,single-path", "workload.message=64KiB,1MiB"), repeat=2)
    assert len(p.grid.points()) == 4 and p.grid.points()[1] == {"transport": "mrc", "workload.message": "1MiB"}
    runs = p.runs()
    assert len(runs) == 8 and runs[0][:2] == (0, 0) and runs[1][:2] == (0, 1)
    assert runs[1][2] == ["workload.steps=20", 'transport="mrc"', 'workload.message="64KiB"', "seed=2"]


@pytest.mark.parametrize("items, fragment", [
    (["transport"], "expected KEY=V1,V2"),
    (["transport=mrc,mrc"], "a value is listed twice"),
    (["seed=1,2", "seed=3"], "--grid seed: given twice"),
])
def test_a_bad_grid_is_one_line(items, fragment):
    with pytest.raises(UsageError, match=fragment):
        Grid.parse(items)


def test_a_point_that_does_not_load_is_named_before_anything_runs():
    with pytest.raises(UsageError, match=r"sweep point 1 \(transport=\"rdma\", seed=1\): .*transport: 'rdma'"):
        plan(("transport=mrc,rdma",)).check()


def fake_results(folder, transport, seed, fraction, ok=True):
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "status": "completed", "events": [], "fidelity": {"ok": ok},
        "summary": {"goodput_fraction": fraction, "goodput_bps": fraction * 1e8,
                    "step_time_s": {"p50": 0.1, "p100": 0.2}, "messages": {"failed": 0},
                    "packets": {"trimmed": 0, "timeouts": 0}}}))


def test_runs_one_after_another_records_failures_resumes_and_writes_tables(tmp_path):
    p = plan(repeat=3)
    calls = []

    def run_one(folder, sets):
        calls.append(folder.name)
        seed = int(sets[-1].split("=")[1])
        if folder.name == "p001-r01":
            folder.mkdir()
            (folder / "results.json").write_text(json.dumps({"status": "failed", "error": "boom"}))
            raise RunFailed("run failed: boom")
        fake_results(folder, sets[1], seed, 0.9 if "mrc" in sets[1] and "single" not in sets[1] else 0.2 + seed / 100)

    said = []
    fake_results(run_dir(tmp_path, 0, 0), "mrc", 1, 0.9)  # already there: a resumed sweep
    rows = execute(p, tmp_path, run_one, said.append)
    assert calls == ["p000-r01", "p000-r02", "p001-r00", "p001-r01", "p001-r02"]
    assert said[0].startswith("sweep: 1 of 6 runs already in") and any("failed: run failed: boom" in s for s in said)
    assert [r["status"] for r in rows] == ["completed"] * 4 + ["failed", "completed"]
    table = list(csv.DictReader((tmp_path / "runs.csv").read_text().splitlines()))
    assert table[4]["status"] == "failed" and table[4]["goodput_fraction"] == "" and table[0]["transport"] == "mrc"
    summary = list(csv.DictReader((tmp_path / "summary.csv").read_text().splitlines()))
    assert [s["runs"] for s in summary] == ["3", "2"]
    assert float(summary[0]["goodput_fraction"]) == 0.9
    assert float(summary[1]["goodput_fraction"]) == pytest.approx(0.22)
    assert float(summary[1]["goodput_fraction_low"]) <= 0.22 <= float(summary[1]["goodput_fraction_high"])
    assert execute(p, tmp_path, run_one, said.append) and len(calls) == 5  # all there now: nothing runs again


def test_the_interval_holds_the_median_and_narrows_with_agreeing_runs():
    median, low, high = interval([0.80, 0.82, 0.84, 0.86, 0.88])
    assert median == 0.84 and low < median < high and high - low <= 0.08
    assert interval([0.5]) == (0.5, 0.5, 0.5)
    assert interval([0.84] * 5) == (0.84, 0.84, 0.84)


def test_a_grid_value_may_be_a_yaml_list_or_mapping():
    grid = Grid.parse(["events=[],[{at_step: 1, action: switch_down, target: p0s1}]", "transport=mrc,single-path"])
    assert grid.axes[0] == ("events", ([], [{"at_step": 1, "action": "switch_down", "target": "p0s1"}]))
    assert len(grid.points()) == 4
