"""SIGKILL a process in the middle of building a fabric: `mrclab clean` removes every bridge,
veth, namespace and process of that run, and nothing else (not even a process named `controller`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrclab.runstate import STATE_DIR, proc_start_time

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]
BUILDER = """
import sys, time
from mrclab.spec import topology
from mrclab.fabric.net import Fabric
fabric = Fabric(topology.load("clos-2p-2l-2s"), datapath=sys.argv[1])
print(fabric.state.run_id, flush=True)
fabric.build()
time.sleep(60)
"""


def _netns_inode(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _processes_in(namespaces: set[str]) -> list[int]:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [pid for pid in pids if _netns_inode(pid) in namespaces]


def _mid_build(state: dict, prefix: str, datapath: str) -> bool:
    """Hosts running and some of the run's switches and cables made."""
    if datapath == "ovs":
        return bool(state["bridges"] and len(state["processes"]) > 2
                    and [n for n in os.listdir("/sys/class/net") if n.startswith(prefix)])
    return any(label.startswith("router") for _, _, label in state["processes"])


@pytest.mark.parametrize("datapath", ["ovs", "linux"])
def test_clean_after_sigkill_mid_build(leftovers, datapath):
    decoy = subprocess.Popen(["bash", "-c", "exec -a controller sleep 60"])
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, datapath], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        run_id = builder.stdout.readline().strip()
        assert run_id, "the builder died before creating its run"
        state_file, prefix = STATE_DIR / f"{run_id}.json", f"m{run_id}"
        deadline = time.monotonic() + 20
        while True:
            state = json.loads(state_file.read_text())
            if _mid_build(state, prefix, datapath):
                break
            assert time.monotonic() < deadline, "the build never got going"
            time.sleep(0.005)
        host_namespaces = {_netns_inode(pid) for pid, _, label in state["processes"]
                           if label.startswith(("host", "router"))}
        host_namespaces.discard(None)
        os.kill(builder.pid, signal.SIGKILL)
        builder.wait()
        state = json.loads(state_file.read_text())

        result = subprocess.run([sys.executable, "-m", "mrclab", "clean", "--json"], cwd=REPO,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        json.loads(result.stdout)  # the record is read and removed; what the run's children did not take with
        # them when they died (their shells end with the builder's pipe, their namespaces with them) is removed
        assert leftovers(prefix, state["processes"]) == []
        time.sleep(0.2)  # a namespace outlives its last process only until the kernel reaps it
        assert _processes_in(host_namespaces) == []
        assert not state_file.exists()
        assert decoy.poll() is None and proc_start_time(decoy.pid) is not None
    finally:
        for proc in (builder, decoy):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
