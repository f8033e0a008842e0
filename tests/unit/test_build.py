"""The two builds of the transport (mrclab/build.py): which one a process runs, and why."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from mrclab import build

REPORT = "import json; from mrclab import build; print(json.dumps(build.running()))"


def running(env: dict | None = None, path: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MRCLAB_PURE"} | (env or {})
    if path:
        env["PYTHONPATH"] = path
    out = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, check=True, env=env,
                         cwd=path or None)
    return json.loads(out.stdout)


def test_pure_on_request():
    assert running({"MRCLAB_PURE": "1"}) == {"build": "pure", "why": "MRCLAB_PURE=1"}


def test_this_process_says_what_it_runs():
    now = build.running()
    assert now["build"] == ("pure" if os.environ.get("MRCLAB_PURE") == "1" else build.BUILD)
    from mrclab.transport import connection
    assert connection.__file__.endswith(".py") == (now["build"] == "pure")


@pytest.mark.skipif(build.BUILD != "compiled", reason="no compiled build here (see `mrclab check`)")
def test_a_source_newer_than_its_compiled_module_runs_as_source(tmp_path):
    """An edit is never shadowed by a stale build, in a copy of the package (the checkout is not touched)."""
    copy = tmp_path / "src"
    shutil.copytree(build.PACKAGE, copy / "mrclab", ignore=shutil.ignore_patterns("__pycache__", "shipped"))
    shared = next(build.PACKAGE.parent.glob(f"{build.SHARED}.*"))
    shutil.copy2(shared, copy)
    assert running(path=str(copy))["build"] == "compiled"
    edited = copy / "mrclab" / "transport" / "sender.py"
    later = time.time() + 10
    os.utime(edited, (later, later))
    assert running(path=str(copy)) == {"build": "pure",
                                       "why": "the compiled build is older than transport/sender.py (run `make build`)"}
