"""The two builds of the transport (mrclab/build.py): which one a process runs, and why."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from mrclab import build, check

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
@pytest.mark.parametrize("source", ["transport/sender.py", "agent/_batchio.c"])
def test_a_source_newer_than_its_compiled_module_runs_as_source(tmp_path, source):
    """An edit is never shadowed by a stale build, in a copy of the package (the checkout is not touched): the
    transport's Python, or the batched I/O's C."""
    copy = tmp_path / "src"
    shutil.copytree(build.PACKAGE, copy / "mrclab", ignore=shutil.ignore_patterns("__pycache__", "shipped"))
    shared = next(build.PACKAGE.parent.glob(f"{build.SHARED}.*"))
    shutil.copy2(shared, copy)
    assert running(path=str(copy))["build"] == "compiled"
    edited = copy / "mrclab" / source
    later = time.time() + 10
    os.utime(edited, (later, later))
    assert running(path=str(copy)) == {"build": "pure",
                                       "why": f"the compiled build is older than {source} (run `make build`)"}


@pytest.mark.skipif(build.BUILD != "compiled", reason="no compiled build here (see `mrclab check`)")
def test_without_the_batched_io_the_whole_build_is_pure(tmp_path):
    """The compiled build is one: the transport and the batched I/O together, or the Python sources of both."""
    copy = tmp_path / "src"
    shutil.copytree(build.PACKAGE, copy / "mrclab",
                    ignore=shutil.ignore_patterns("__pycache__", "shipped", "_batchio.*.so"))
    shutil.copy2(next(build.PACKAGE.parent.glob(f"{build.SHARED}.*")), copy)
    assert running(path=str(copy)) == {"build": "pure", "why": "the compiled build is incomplete (run `make build`)"}
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("MRCLAB_PURE", None)
    out = subprocess.run([sys.executable, "-c", "from mrclab.agent import batchio; print(batchio.default().name)"],
                         capture_output=True, text=True, check=True, env=env, cwd=copy)
    assert out.stdout.strip() == "sendto/recvmsg"


def test_a_new_process_gets_the_build_this_one_runs():
    """`mrclab check`'s row: a new interpreter with an empty environment, from a folder where `mrclab` names the
    checkout, imports the transport (as an agent or a run over SSH does)."""
    row = check.new_process_build()
    assert row.ok and row.required, row.detail
    assert f"gets the {build.running()['build'] if os.environ.get('MRCLAB_PURE') != '1' else ''}" in row.detail


def test_a_new_process_that_cannot_import_the_transport_fails_the_row(monkeypatch):
    """An interpreter without mrclab on its path (the system's) stands for an install a new process cannot load."""
    monkeypatch.setattr(sys, "executable", shutil.which("python3", path="/usr/bin") or "/usr/bin/python3")
    row = check.new_process_build()
    assert not row.ok and row.required and "cannot import the transport: ImportError" in row.detail, row.detail
