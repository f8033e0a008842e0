"""MRC against the traditional fabric on the same cut, through the real runner on clos-2p-2l-2s.

A plane-0 leaf-spine link is cut in the middle of an all-to-all. Under ECMP with
reconvergence (RoCE-like single-path flows, a 1 s convergence delay) the flows that the
*other* leaf hashes onto that spine towards the cut leaf are lost until the control plane
rewrites the leaves' ECMP routes: the cut leaf itself sees its own link go dark (on Linux
routers it skips that next hop at once, as a switch does), the remote one cannot. So the
worst step lasts at least the delay and routes change after boot. MRC over static SRv6
routes around it from the endpoints: no route change after boot, no failed message.
"""
from __future__ import annotations

import json

import pytest

from mrclab.runner import run_scenario
from mrclab.spec.scenario import from_mapping

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

DELAY_S = 1.0
# The switches hash each flow's 5-tuple with a seed of their own (OVS's and each Linux namespace's): the cut
# link is one that hashed flows of this workload cross on that datapath (the test says so if they stop to).
CUTS = {"ovs": 0, "linux": 1}  # datapath -> the plane of the cut, on spine 0 towards leaf 1


def _run(tmp_path, leftovers, routing: str, transport: str, datapath: str) -> tuple[dict, dict]:
    scenario = from_mapping({
        "name": f"baseline-{routing}-{transport}", "topology": "clos-2p-2l-2s", "seed": 1,
        "transport": transport, "routing": routing, "datapath": datapath, "duration_limit": "30s",
        "routing_options": {"convergence_delay": f"{DELAY_S}s"},
        "workload": {"pattern": "all-to-all", "hosts": "all", "message": "256KiB", "steps": 8, "connections": 2},
        "events": [{"at_step": 3, "action": "link_down", "target": _cut(datapath)[0]}],
    }, "test_baselines")
    out = tmp_path / f"{routing}-{transport}"
    doc = run_scenario(scenario, out, console=None)
    assert leftovers(json.loads((out / "layout.json").read_text())["prefix"]) == []
    assert f"run {doc['run_id']}: scenario" in (out / "runner.log").read_text()
    return doc, json.loads((out / "controller-stats.json").read_text())


def _cut(datapath: str) -> tuple[str, str]:
    """(the cut link, its spine) on this datapath."""
    plane = CUTS[datapath]
    return f"p{plane}l1-p{plane}s0", f"p{plane}s0"


def _spine_packets(doc: dict) -> int:
    """Packets the spine sent down the cut link (before the cut: afterwards it is dark)."""
    link, spine = _cut(doc["datapath"])
    return sum(r["tx_packets"] for r in doc["links"] if r["link"] == link and r["from"] == spine)


@pytest.mark.parametrize("datapath", ["ovs", "linux"])
def test_ecmp_stalls_for_the_convergence_delay_and_mrc_does_not(tmp_path, leftovers, datapath):
    ecmp, stats = _run(tmp_path, leftovers, "ecmp-reconverge", "single-path", datapath)
    assert ecmp["routing"] == "ecmp-reconverge" and ecmp["datapath"] == datapath
    assert _spine_packets(ecmp) > 0, "no hashed flow crossed the spine that dies: the cut proves nothing"
    assert ecmp["summary"]["step_time_s"]["p100"] >= DELAY_S
    assert ecmp["controller"]["flow_mods_after_boot"] > 0
    first = stats["reconvergences"][0]
    plane = CUTS[datapath]
    assert first["switches"] == [f"p{plane}l0", f"p{plane}l1"] and first["flow_mods"] > 0
    assert DELAY_S <= first["t"] - first["trigger_t"] < DELAY_S + 0.5
    assert ecmp["controller"]["reconvergences"] == stats["reconvergences"]  # results.json carries them
    assert ecmp["summary"]["messages"]["failed"] == 0  # late, not lost: single-path retransmits once rerouted

    mrc, stats = _run(tmp_path, leftovers, "static-srv6", "mrc", datapath)
    assert _spine_packets(mrc) > 0
    assert mrc["controller"]["flow_mods_after_boot"] == 0 and "reconvergences" not in stats
    assert mrc["summary"]["paths"]["paths_retired"] > 0  # the cut link's paths were retired by the endpoints
    assert mrc["summary"]["messages"]["failed"] == 0
    assert mrc["summary"]["step_time_s"]["p100"] < ecmp["summary"]["step_time_s"]["p100"]
