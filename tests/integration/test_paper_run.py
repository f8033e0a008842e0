"""One short claim of the paper suite through the real command line: its run folder, paper.json and paper.md
are written and agree with each other; run again, it judges what is there without a lab."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]


def test_one_claim_runs_and_its_table_matches_its_run(tmp_path):
    out = tmp_path / "paper"
    args = [sys.executable, "-m", "mrclab", "paper", "--only", "9a", "--out", str(out)]
    first = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert first.returncode in (0, 1), first.stderr[-2000:]  # 1: the claim disagreed (a finding, not a crash)
    [row] = json.loads((out / "paper.json").read_text())
    assert row["id"] == "9a" and row["runs"] == ["9a-mrc"] and row["verdict"] in ("agree", "disagree")
    doc = json.loads((out / "9a-mrc" / "results.json").read_text())
    assert doc["summary"]["bytes"]["verified"] > 0 and doc["scenario"]["name"] == "nic-cut-stream"
    assert f"| 9a | {row['experiment']} |" in (out / "paper.md").read_text() and row["lab"].startswith("before ")
    assert (first.returncode == 1) == (row["verdict"] == "disagree")
    again = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert again.returncode == first.returncode and json.loads((out / "paper.json").read_text()) == [row]
    assert "paper: 9a-mrc:" not in again.stderr  # nothing ran twice
