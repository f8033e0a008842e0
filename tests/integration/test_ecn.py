"""ECN marking in a real fabric, on each datapath: a congested port between two switches marks MRC's data
(which the agents send ECN-capable), and a leaf's port towards a host never does, however full its queue.

Two senders on leaf 0 into one receiver on leaf 1, one plane and one spine: the uplink (at 1.5x a host's
rate) carries twice a host's rate and queues; the receiver's port (a host's rate) overflows and trims."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]
SCENARIO = {
    "name": "ecn-incast",
    "topology": {"planes": 1, "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
                 "links": {"host_rate": "40Mbit", "fabric_rate": "60Mbit"}},
    "workload": {"pattern": "incast", "hosts": ["h0", "h1", "h2"], "receiver": "h2", "message": "1MiB", "steps": 6},
    "expect": {"failed_messages": 0},
}


def run(tmp_path: Path, datapath: str, *sets: str) -> dict:
    path = tmp_path / "ecn.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    proc = subprocess.run([sys.executable, "-m", "mrclab", "run", str(path), "--out", str(tmp_path / "out"), "--json",
                           "--set", f"datapath={datapath}", *(arg for s in sets for arg in ("--set", s))],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def links(doc: dict) -> dict[tuple[str, str], dict]:
    return {(link["from"], link["to"]): link for link in doc["links"]}


@pytest.mark.parametrize("datapath", ["linux", "ovs"])
def test_fabric_ports_mark_and_the_last_hop_never_does(tmp_path, datapath):
    doc = run(tmp_path, datapath)
    assert doc["summary"]["messages"]["failed"] == 0
    rows = links(doc)
    uplink, last_hop = rows[("p0l0", "p0s0")], rows[("p0l1", "h2")]
    assert uplink["ecn_marked"] > 0
    assert last_hop["trims"] > 0 and last_hop["ecn_marked"] == 0  # its queue overflowed, and it never marked
    assert all(link["ecn_marked"] == 0 for (src, dst), link in rows.items() if "h" in (src[0], dst[0]))
    marked = sum(link["ecn_marked"] for link in doc["links"])
    ecn = doc["summary"]["ecn"]
    assert ecn["marked"] == marked and 0 < ecn["ce_received"] <= marked  # a packet may be marked twice


def test_ecn_false_marks_nothing(tmp_path):
    doc = run(tmp_path, "linux", "topology.links.ecn=false")
    assert links(doc)[("p0l0", "p0s0")]["tx_packets"] > 0
    assert sum(link["ecn_marked"] for link in doc["links"]) == 0 and doc["summary"]["ecn"]["ce_received"] == 0
