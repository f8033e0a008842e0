"""The lab VM booted for real (`make vm-test`, not in CI: minutes of CPU): `mrclab check` there says the
kernel datapath, `topo verify` passes there, and the smoke scenario runs through `--target vm` and its
results come back. Figures are printed (-s) for docs/remote.md."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_run import check_schema

pytestmark = pytest.mark.skipif(os.environ.get("MRCLAB_VM_TEST") != "1",
                                reason="boots the lab VM (minutes of CPU): run with `make vm-test`")

REPO = Path(__file__).resolve().parents[2]


def mrclab(*args, timeout=900):
    env = {k: v for k, v in os.environ.items() if k not in ("MRCLAB_REMOTE_COMMAND", "MRCLAB_REMOTE_DIR")}
    return subprocess.run([sys.executable, "-m", "mrclab", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


@pytest.fixture(scope="module")
def vm():
    up = mrclab("vm", "up")
    print(up.stderr)
    assert up.returncode == 0, up.stderr
    state = json.loads((REPO / ".vm" / "vm.json").read_text())
    try:
        yield state
    finally:
        down = mrclab("vm", "down")
        print(down.stderr)
        assert not Path(f"/proc/{state['pid']}").exists() or \
            Path(f"/proc/{state['pid']}/stat").read_text().split()[2] == "Z"


def test_check_there_says_kernel_datapath(vm):
    result = mrclab("vm", "ssh", "mrclab", "check", "--json")
    doc = json.loads(result.stdout)
    print(json.dumps(doc["rows"], indent=1))
    [datapath] = [r for r in doc["rows"] if r["name"] == "datapath"]
    assert datapath["ok"] and datapath["detail"] == "auto -> ovs: the OVS kernel module is loaded", datapath
    assert doc["ok"], [r for r in doc["rows"] if r["required"] and not r["ok"]]


def test_topo_verify_there(vm):
    result = mrclab("vm", "ssh", "mrclab", "topo", "verify", "clos-2p-2l-2s", "--json")
    doc = json.loads(result.stdout)
    print({k: doc[k] for k in ("datapath", "paths", "ok_paths", "timings_s")})
    # 4 hosts: 12 pairs x 2 planes x 2 spines
    assert result.returncode == 0 and doc["ok"] and doc["ok_paths"] == doc["paths"] == 48


def test_smoke_through_target_vm(vm):
    local = REPO / ".vm" / "results" / f"smoke-{vm['accel']}-{vm['booted_at']:.0f}"
    result = mrclab("run", "scenarios/smoke.yaml", "--target", "vm", "--out", str(local), "--json",
                    "--set", "expect.fidelity_ok=false", "--set", "expect.max_avoid_s=10s",
                    "--set", "expect.max_step_time_ratio=100", "--set", "duration_limit=300s")
    print(result.stderr)
    doc = json.loads(result.stdout)
    check_schema(doc)
    s = doc["summary"]
    print(json.dumps({"accel": vm["accel"], "boot_s": vm.get("boot_s"), "datapath": doc.get("datapath"),
                      "duration_s": doc["duration_s"], "step_time_s": s["step_time_s"],
                      "goodput_fraction": s["goodput_fraction"], "fidelity": doc["fidelity"],
                      "events": doc["events"]}, indent=1, default=str))
    assert s["bytes"]["sent"] == s["bytes"]["delivered"] == s["bytes"]["verified"] == 24 * 4 * 256 * 1024
    assert (local / "results.json").is_file() and (local / "runner.log").is_file()
