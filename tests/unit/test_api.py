"""mrclab.run, load, sweep and scenario: the command line's runs from Python, as docs/python.md shows them."""
import subprocess
import sys

import pytest

import mrclab
from tests.conftest import REPO


def test_import_mrclab_is_light():
    """The agents and the command line import mrclab too: the API (pandas, the runner) comes only when used."""
    code = "import sys, mrclab; print(sorted(m for m in ('pandas', 'matplotlib', 'mrclab.api', 'mrclab.runner') " \
           "if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=REPO).stdout.strip() == "[]"


def test_run_on_the_simulator_and_read_its_tables(tmp_path):
    run = mrclab.run("quickstart", engine="sim", out=tmp_path / "q",
                     set={"workload.steps": 12, "events": [{"at_step": 4, "action": "link_down",
                                                            "target": "p0l1-p0s2"}]})
    assert run.status == "completed" and run.ok and run.dir == tmp_path / "q"
    assert run.results["overrides"] == {"workload.steps": "12", "events": run.results["overrides"]["events"],
                                        "engine": "sim"}
    described = run.steps.describe()
    assert described.loc["count", "duration_s"] == 12
    assert list(run.messages.columns) == ["step", "src", "dst", "bytes", "posted_s", "delivered_s", "status"]
    assert (run.messages["status"] == "completed").all() and len(run.messages) == 12 * 8
    assert run.events["action"].tolist() == ["link_down"] and run.events["avoid_s"].iloc[0] > 0
    assert {"link", "from", "to", "tx_bytes", "drops"} <= set(run.links.columns) and len(run.links) == 192
    assert set(run.ev_changes["new"]) <= {"UNKNOWN", "GOOD", "SKIP", "ASSUMED_BAD", "DENIED"}
    assert "ASSUMED_BAD" in set(run.ev_changes["new"])
    assert run.timeseries.empty  # no stream
    assert set(run.paths) >= {"results.json", "steps.csv", "messages.csv", "scenario.yaml"}
    again = mrclab.load(tmp_path / "q")
    assert again.summary == run.summary and again.fidelity["ok"] == run.fidelity["ok"]


def test_bad_input_raises_the_command_lines_error(tmp_path):
    with pytest.raises(mrclab.UsageError, match="did you mean workload"):
        mrclab.run({"topology": "clos-2p-2l-2s", "worklaod": {"pattern": "ring-allreduce"}}, engine="sim",
                   out=tmp_path / "x")
    with pytest.raises(mrclab.UsageError, match="did you mean steps"):
        mrclab.scenario("smoke", set={"workload.stpes": 3})
    with pytest.raises(mrclab.UsageError, match="not a run folder"):
        mrclab.load(tmp_path)
    assert not (tmp_path / "x").exists()


def test_a_mapping_scenario_and_set_into_its_named_topology():
    spec = mrclab.scenario({"name": "mine", "topology": "clos-2p-2l-2s", "workload": {"pattern": "all-to-all"}},
                           set={"topology.links.fabric_rate": "10Mbit"}, engine="sim")
    assert spec.name == "mine" and spec.topology.fabric_rate_bps == 10_000_000 and spec.engine == "sim"


def test_sweep_on_the_simulator(tmp_path):
    sweep = mrclab.sweep("smoke", engine="sim", grid={"transport": ["mrc", "single-path"]}, repeat=1,
                         set={"workload.steps": 6, "events": []}, out=tmp_path / "sweep")
    assert sweep.summary["transport"].tolist() == ["mrc", "single-path"] and sweep.summary["runs"].tolist() == [1, 1]
    runs = sweep.all_runs()
    assert [r.results["transport"] for r in runs] == ["mrc", "single-path"]
    assert all(r.status == "completed" for r in runs)  # (max_avoid_s fails as not measured: no cut)
