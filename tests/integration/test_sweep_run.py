"""A tiny sweep through the real command line: two points, one run each, the tables written; run again, it
resumes (nothing runs twice)."""
from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]


def test_a_two_point_sweep_writes_its_tables_and_resumes(tmp_path):
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "mrclab", "sweep", "smoke", "--grid", "workload.message=64KiB,128KiB",
            "--set", "datapath=linux", "--set", "events=[]", "--set", "workload.steps=4", "--out", str(out)]
    first = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    runs = list(csv.DictReader((out / "runs.csv").read_text().splitlines()))
    assert [(r["workload.message"], r["status"]) for r in runs] == [("64KiB", "completed"), ("128KiB", "completed")]
    assert all(float(r["goodput_fraction"]) > 0 and r["failed_messages"] == "0" for r in runs)
    summary = list(csv.DictReader((out / "summary.csv").read_text().splitlines()))
    assert [s["runs"] for s in summary] == ["1", "1"] and (out / "sweep.json").is_file()
    again = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert again.returncode == 0 and "2 of 2 runs already in" in again.stderr
