"""Streams, concurrent workloads and the roce baseline through the real runner on clos-2p-2l-2s (linux routers).

A bidirectional stream keeps going while a pulled NIC cable takes one of its two planes: every bin carries
bytes and the bins of the cut carry about half. Beside it an incast runs on QPs of its own, on roce: go-back-N
and DCQCN deliver every byte without a switch ever trimming a RoCE packet.
"""
from __future__ import annotations

import csv
import json

import pytest

from mrclab.runner import run_scenario
from mrclab.spec.scenario import from_mapping

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]


def _run(tmp_path, leftovers, name: str, data: dict) -> dict:
    scenario = from_mapping({"name": name, "topology": "clos-2p-2l-2s", "seed": 1, "datapath": "linux",
                             "duration_limit": "40s", **data}, "test_workloads_run")
    out = tmp_path / name
    doc = run_scenario(scenario, out, console=None)
    assert leftovers(json.loads((out / "layout.json").read_text())["prefix"]) == []
    return doc


def test_a_stream_rides_out_a_pulled_nic_cable(tmp_path, leftovers):
    doc = _run(tmp_path, leftovers, "stream-cut", {
        "workload": {"pattern": "stream", "pairs": [["h0", "h2"]], "bidirectional": True, "duration": "3s",
                     "connections": 2, "bin": "250ms"},
        "events": [{"at": "1s", "action": "link_down", "target": "h0-p0l0"},
                   {"at": "2s", "action": "link_up", "target": "h0-p0l0"}]})
    assert doc["summary"]["messages"]["failed"] == 0
    series = doc["timeseries"]
    assert series["bin_s"] == 0.25 and len(series["total"]) == 12
    assert all(v > 0 for v in series["h0>h2"]) and all(v > 0 for v in series["h2>h0"])
    ideal = doc["workloads"][0]["ideal_bps"]
    during = series["total"][5:8]  # 1.25-2 s: one plane of two left
    assert 0.3 * ideal < sum(during) / len(during) < 0.7 * ideal, (during, ideal)
    assert all(0.25 * ideal < v < 0.7 * ideal for v in during[1:]), (during, ideal)  # settled on one plane
    assert max(series["total"][9:]) > 0.6 * ideal  # back on both planes
    rows = list(csv.reader((tmp_path / "stream-cut" / "timeseries.csv").read_text().splitlines()))
    assert rows[0] == ["t_s", "h0>h2", "h2>h0", "total"] and len(rows) == 13
    assert [c["state"] for c in doc["nic_changes"] if c["seen_by"] == "h0"] == ["down", "up"]


def test_roce_incast_beside_a_victim_stream_delivers_every_byte_untrimmed(tmp_path, leftovers):
    doc = _run(tmp_path, leftovers, "roce-incast", {
        "transport": "roce",
        "workloads": [
            {"name": "incast", "pattern": "incast", "hosts": ["h0", "h1", "h2"], "receiver": "h0",
             "message": "256KiB", "steps": 4, "connections": 2},
            {"name": "victim", "pattern": "stream", "pairs": [["h3", "h1"]], "duration": "2s",
             "expect": {"failed_messages": 0}}]})
    incast, victim = doc["workloads"]
    assert incast["messages"]["failed"] == victim["messages"]["failed"] == 0
    assert incast["messages"]["sent"] == 4 * 2 * 2 and incast["steps"] == 4  # 2 senders x 2 QPs per step
    assert victim["goodput_bps"] > 0 and doc["summary"]["packets"]["trimmed"] == 0
    assert sum(link["trims"] for link in doc["links"]) == 0
    assert doc["transport_options"]["go_back_n"] is True and doc["transport_options"]["cc_algorithm"] == "dcqcn"
    assert [c["name"] for c in doc["expectations"]][-1] == "victim.failed_messages"
