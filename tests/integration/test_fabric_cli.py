"""`mrclab topo verify`: one JSON document, exit 0 when every path works, nothing left behind."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]


def test_topo_verify_json(leftovers):
    result = subprocess.run([sys.executable, "-m", "mrclab", "topo", "verify", "clos-2p-2l-2s", "--json"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["paths"] == doc["ok_paths"] == 48 and doc["failed"] == []
    assert doc["controller"] == {"flow_mods_boot": {"ovs": 56, "linux": 32}[doc["datapath"]], "flow_mods_after_boot": 0}
    assert set(doc["timings_s"]) == {"build", "verify", "teardown", "total"}
    assert leftovers(f"m{doc['run_id']}") == []
