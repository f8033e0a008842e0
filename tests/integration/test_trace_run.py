"""scenarios/trace-moe.yaml on the lab (real packets, Linux routers): a Chakra trace replayed for 3 iterations while
a spine dies, every byte verified, each iteration and collective reported by the trace's own names. The same
scenario on the simulator is tests/unit/test_trace.py's."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]


def test_trace_moe_replays_on_the_lab(tmp_path, leftovers):
    out = tmp_path / "moe"
    result = subprocess.run([sys.executable, "-m", "mrclab", "run", "trace-moe", "--out", str(out), "--json",
                             "--set", "datapath=linux"], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    s, w = doc["summary"], doc["workloads"][0]
    assert s["messages"]["failed"] == 0 and s["bytes"]["verified"] == s["bytes"]["delivered"] == s["bytes"]["sent"]
    assert [it["index"] for it in w["iterations"]] == [0, 1, 2] and len(doc["steps"]) == 3
    assert s["iteration_time_s"]["p50"] == pytest.approx(sorted(it["time_s"] for it in w["iterations"])[1])
    for it in w["iterations"]:  # per rank 2 layers of attention, experts and backward, then the optimizer, x31.25
        assert it["compute_s"] == pytest.approx((2 * (0.25e-3 + 0.25e-3 + 0.5e-3) + 0.125e-3) * 31.25, rel=0.02)
        assert it["time_s"] > it["ideal_s"] > 0
    by_name = {c["name"]: c for c in w["by_name"]}
    assert set(by_name) == {"layer0.dispatch_alltoall", "layer0.combine_alltoall", "layer1.dispatch_alltoall",
                            "layer1.combine_alltoall", "grads.allreduce"}
    assert by_name["grads.allreduce"]["count"] == 3 and by_name["layer0.dispatch_alltoall"]["count"] == 6
    assert not any(c["faults"] for c in w["collectives"] if c["iteration"] == 0)
    assert all(c["faults"] == ["switch_down p0s1"] for c in w["collectives"] if c["iteration"] == 2)
    assert doc["controller"]["flow_mods_after_boot"] == 0
    assert leftovers(f"m{doc['run_id']}") == []
