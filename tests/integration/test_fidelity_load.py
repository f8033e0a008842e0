"""A run shares the machine with a CPU hog: its fidelity is not ok and names the hog."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mrclab.runner import run_scenario
from mrclab.spec.scenario import load

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]


def _hog(tmp_path) -> int:
    """A busy loop outside the lab: started in a session of its own and left to init, as another user's job."""
    pid_file = tmp_path / "hog.pid"
    subprocess.run(["setsid", "-f", sys.executable, "-c",
                    f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid()))\nwhile True: pass"], check=True)
    deadline = time.monotonic() + 5
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the hog did not start"
        time.sleep(0.05)
    return int(pid_file.read_text())


def test_a_cpu_hog_makes_fidelity_not_ok_and_is_named(tmp_path, leftovers):
    hog = _hog(tmp_path)
    try:
        doc = run_scenario(load("smoke", ["datapath=linux"]), tmp_path / "run", console=None)
    finally:
        os.kill(hog, signal.SIGKILL)
    assert leftovers(json.loads((tmp_path / "run" / "layout.json").read_text())["prefix"]) == []
    fidelity = doc["fidelity"]
    assert not fidelity["ok"]
    assert any(p["pid"] == hog for p in fidelity["outside_processes"])
    assert any(f"(pid {hog})" in note and "processes outside the lab used" in note for note in fidelity["notes"])
