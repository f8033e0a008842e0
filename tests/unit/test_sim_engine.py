"""The simulator engine: shipped scenarios in simulated time, through the agents' own transport code; no root."""
import json
import os
import subprocess
import sys

import pytest

from mrclab import runner
from mrclab.spec import scenario as scenario_mod
from tests.conftest import REPO

WALL_KEYS = ("run_id", "started_at")
WALL_FIDELITY = ("wall_s", "cpu_s", "notes", "build")


def sim(name: str, tmp_path, *sets: str, out: str = "run") -> dict:
    spec = scenario_mod.load(str(REPO / "scenarios" / f"{name}.yaml"), ["engine=sim", *sets])
    return runner.run_scenario(spec, tmp_path / out)


def verified(doc: dict) -> None:
    """Every message delivered, every byte checked against the seeded payload."""
    b = doc["summary"]["bytes"]
    assert doc["summary"]["messages"]["failed"] == 0
    assert b["delivered"] > 0 and b["verified"] == b["delivered"]


def test_quickstart_routes_around_the_cut_and_says_what_it_modelled(tmp_path):
    doc = sim("quickstart", tmp_path)
    verified(doc)
    assert doc["engine"] == "sim" and doc["datapath"] == "sim" and doc["status"] == "completed"
    assert 0.5 < doc["summary"]["goodput_fraction"] <= 1 and doc["summary"]["workload_time_s"] > 1
    assert all(check["ok"] for check in doc["expectations"]), doc["expectations"]
    cut = next(e for e in doc["events"] if e["action"] == "link_down")
    assert 0 < cut["avoid_s"] < 20 * doc["summary"]["base_rtt_s"]  # a few round trips, not a reconvergence
    assert doc["summary"]["link_drops"]["down_drops"] > 0  # the cut took packets: it happened under load
    fidelity = doc["fidelity"]
    assert fidelity["engine"] == "sim" and fidelity["ok"] and fidelity["events"] > 0
    assert any("ECN" in m for m in fidelity["modelled"]) and any("CPU" in m for m in fidelity["not_modelled"])
    assert (tmp_path / "run" / "steps.csv").is_file() and (tmp_path / "run" / "messages.csv").is_file()


def test_the_same_seed_gives_the_same_results(tmp_path):
    """Byte for byte apart from the run's id and wall-clock figures, in processes with other string hashes (a
    set iterated in hash order would show)."""
    docs = []
    for out, hash_seed in (("a", "1"), ("b", "2")):
        result = subprocess.run([sys.executable, "-m", "mrclab", "run", "switch-failure", "--engine", "sim",
                                 "--set", "workload.steps=22", "--out", str(tmp_path / out), "--json"],
                                capture_output=True, text=True, cwd=REPO,
                                env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert result.returncode == 0, result.stderr
        doc = json.loads((tmp_path / out / "results.json").read_text())
        for key in WALL_KEYS:
            doc.pop(key)
        for key in WALL_FIDELITY:
            doc["fidelity"].pop(key)
        docs.append(json.dumps(doc, sort_keys=True))
    assert docs[0] == docs[1]
    assert (tmp_path / "a" / "messages.csv").read_text() == (tmp_path / "b" / "messages.csv").read_text()
    c = sim("switch-failure", tmp_path, "workload.steps=22", "seed=2", out="c")
    assert json.dumps(c["steps"]) not in docs[0]


def test_ecmp_loses_the_cut_flows_until_the_controller_reconverges(tmp_path):
    quiet = sim("link-failure-ecmp", tmp_path, "events=[]", "workload.steps=3", out="quiet")
    busiest = max((row for row in quiet["links"] if row["to"][-2] == "s"), key=lambda row: row["tx_packets"])
    assert busiest["tx_packets"] > 0  # the leaf uplink the hashed ring uses most: cut that one
    doc = sim("link-failure-ecmp", tmp_path, "routing_options.convergence_delay=200ms", "workload.steps=12",
              f"events=[{{at: 1s, action: link_down, target: {busiest['link']}}}, "
              f"{{at: 2s, action: link_up, target: {busiest['link']}}}]")
    verified(doc)
    assert doc["controller"]["flow_mods_after_boot"] > 0  # the member tables were rewritten, twice
    steps = [s["duration_s"] for s in doc["steps"]]
    assert max(steps) > 1.5 * sorted(steps)[len(steps) // 2]  # a step waited for the reconvergence


def test_a_spine_down_is_routed_around_with_no_flow_mod(tmp_path):
    doc = sim("switch-failure", tmp_path, "workload.steps=22")
    verified(doc)
    assert doc["controller"]["flow_mods_after_boot"] == 0
    assert all(check["ok"] for check in doc["expectations"]), doc["expectations"]
    assert sum(row["down_drops"] for row in doc["links"] if "p1s1" in row["link"]) > 0


def test_a_pulled_nic_is_heard_at_both_ends_and_the_stream_keeps_three_quarters(tmp_path):
    doc = sim("nic-cut-stream", tmp_path)
    verified(doc)
    changes = {(c["seen_by"], c["host"], c["state"]) for c in doc["nic_changes"]}
    assert {("h0", "h0", "down"), ("h0", "h0", "up"), ("h4", "h0", "down")} <= changes
    total, ideal = doc["timeseries"]["total"], doc["workloads"][0]["ideal_bps"]
    during = [b / ideal for b in total[16:25]]  # the cut lasts from 1.5 s to 2.5 s: the bins wholly within it
    assert 0.65 < sum(during) / len(during) < 0.85  # three planes of four


def test_roce_goes_back_n_and_is_never_trimmed(tmp_path):
    doc = sim("incast", tmp_path, "transport=roce", "workload.steps=3")
    verified(doc)
    assert doc["summary"]["packets"]["trimmed"] == 0
    assert sum(row["queue_drops"] for row in doc["links"]) > 0  # an incast RoCE cannot trim: its drops


@pytest.mark.parametrize("sets, fragment", [
    (("--set", "transport=tcp"), "tcp is not modelled by engine sim"),
    (("--capture", "hosts"), "engine sim moves no real packets to capture"),
])
def test_what_the_model_cannot_do_is_refused_in_one_line(sets, fragment, tmp_path):
    result = subprocess.run([sys.executable, "-m", "mrclab", "run", "scenarios/smoke.yaml", "--engine", "sim",
                             "--out", str(tmp_path / "x"), *sets], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "x").exists()


def test_the_simulator_takes_fabrics_the_lab_refuses(tmp_path):
    big = ["topology.planes=8", "topology.leaves=32", "topology.spines=16", "topology.hosts_per_leaf=32"]
    inline = {"name": "big", "planes": 8, "leaves": 32, "spines": 16, "hosts_per_leaf": 32}
    with pytest.raises(Exception, match="more than engine lab runs.*--engine sim"):
        scenario_mod.from_mapping({"topology": inline, "workload": {"pattern": "permutation"}}, "t")
    spec = scenario_mod.from_mapping({"topology": inline, "engine": "sim", "workload": {"pattern": "permutation"}}, "t")
    assert spec.topology.hosts == 1024 and spec.engine == "sim" and big


def test_compare_takes_a_simulated_run_beside_a_lab_run_and_says_so(tmp_path):
    from mrclab.report import compare
    from tests.report_fixture import make_run
    sim("smoke", tmp_path, out="simulated")
    make_run(tmp_path / "lab", name="smoke")
    runs = compare.load_all([str(tmp_path / "simulated"), str(tmp_path / "lab")])
    assert any("different engines (lab, sim)" in w for w in compare.warnings(runs))
    result = subprocess.run([sys.executable, "-m", "mrclab", "compare", str(tmp_path / "simulated"),
                             str(tmp_path / "lab"), "--json"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["runs"]) == 2


def test_timers_keep_their_round_trips_at_any_rate_and_the_lab_keeps_its_own():
    """The transport's timers were tuned on the default lab (25 Mbit, 64 KiB queues): the simulator keeps them
    there, shrinks them with the fabric's loaded round trip at 400 Gb/s, and a scenario's own options win."""
    from mrclab.agents import effective_options
    from mrclab.transport import TransportConfig
    default = TransportConfig()
    quickstart = {engine: effective_options(scenario_mod.load(str(REPO / "scenarios" / "quickstart.yaml"),
                                                              [f"engine={engine}"])) for engine in ("lab", "sim")}
    assert quickstart["sim"]["rto_min"] == quickstart["lab"].get("rto_min", default.rto_min) == default.rto_min
    assert quickstart["sim"]["cc_target_delay"] == quickstart["lab"]["cc_target_delay"]
    fast = ["engine=sim", "topology=clos-8p-8l-8s-400g"]
    options = effective_options(scenario_mod.load(str(REPO / "scenarios" / "quickstart.yaml"), fast))
    ratio = options["rto_min"] / default.rto_min
    assert 1e-3 < ratio < 1e-2 and options["reorder_window"] == pytest.approx(default.reorder_window * ratio)
    own = effective_options(scenario_mod.load(str(REPO / "scenarios" / "quickstart.yaml"),
                                              [*fast, "transport_options.rto_min=1ms"]))
    assert own["rto_min"] == 0.001
    lab = effective_options(scenario_mod.load(str(REPO / "scenarios" / "quickstart.yaml"), fast[1:]))
    assert "rto_min" not in lab  # the lab's agents run the transport's own defaults


def test_a_sweep_runs_on_the_simulator_without_a_lab(tmp_path):
    """Two transports, two seeds: runs.csv and summary.csv from simulated runs, no root or fabric needed."""
    result = subprocess.run([sys.executable, "-m", "mrclab", "sweep", "smoke", "--engine", "sim", "--grid",
                             "transport=mrc,single-path", "--repeat", "2", "--set", "workload.steps=8", "--set",
                             "events=[]", "--out", str(tmp_path / "sweep")], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr
    runs = (tmp_path / "sweep" / "runs.csv").read_text().splitlines()
    assert len(runs) == 5 and all(",completed," in row for row in runs[1:])
    assert len((tmp_path / "sweep" / "summary.csv").read_text().splitlines()) == 3
    for folder in (tmp_path / "sweep").glob("p*-r*"):
        assert json.loads((folder / "results.json").read_text())["engine"] == "sim"


def test_single_path_over_a_dead_spine_fails_its_messages_and_the_run_goes_on(tmp_path):
    """The baseline that cannot route around a spine: its connections through it exhaust their retries, every
    message posted to them afterwards fails at once (as a verb posted to an RC QP in error does), and the run
    ends with those failures counted, not with an error."""
    doc = sim("switch-failure", tmp_path, "transport=single-path")
    assert doc["status"] == "completed", doc.get("error")
    m = doc["summary"]["messages"]
    assert m["failed"] > 0 and m["completed"] + m["failed"] == m["sent"]
    assert next(e for e in doc["expectations"] if e["name"] == "failed_messages")["ok"] is False
