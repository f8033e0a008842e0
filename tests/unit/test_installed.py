"""An installed mrclab (a wheel, no checkout) finds its shipped topologies, scenarios and traces from any folder."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_runs_without_a_checkout(tmp_path):
    source = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, check=False,
                           env={**os.environ, "MRCLAB_PURE": "1"})  # the pure wheel: compiling takes minutes
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("mrclab-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import mrclab; assert mrclab.__file__.startswith(sys.argv[1])"
            "; from mrclab.cli import main; sys.argv = ['mrclab', 'topo', 'show', 'clos-2p-2l-2s', '--json']; main()")
    shown = subprocess.run([sys.executable, "-c", code, str(site)], cwd=elsewhere, capture_output=True, text=True,
                           check=False)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["counts"]["hosts"] == 4
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from mrclab.spec import scenario"
            "; print(scenario.load('smoke').topology.source)")
    loaded = subprocess.run([sys.executable, "-c", code, str(site)], cwd=elsewhere, capture_output=True, text=True,
                            check=False)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == str(site / "mrclab" / "shipped" / "topologies" / "clos-2p-2l-2s.yaml")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from mrclab.spec import scenario"
            "; s = scenario.load('trace-moe'); print(s.workload.trace.trace.files[0])")
    traced = subprocess.run([sys.executable, "-c", code, str(site)], cwd=elsewhere, capture_output=True, text=True,
                            check=False)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout.strip() == str(site / "mrclab" / "shipped" / "traces" / "moe-4" / "moe.0.et")
