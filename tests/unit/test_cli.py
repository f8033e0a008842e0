"""The CLI's contract: exit codes, one-line errors, --json prints one document."""
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def mrclab(*args):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO)


def assert_one_line_error(result, code, fragment):
    assert result.returncode == code, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_topo_show_json():
    result = mrclab("topo", "show", "clos-4p-4l-4s", "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["counts"] == {"hosts": 8, "switches": 32, "links": 96, "paths_per_host_pair": 16}
    assert doc["example_path"]["address"] == "fcbb:0:1000:2000:1003:4007::"


@pytest.mark.parametrize("args,fragment", [
    (["topo", "show", "/nonexistent/t.yaml"], "/nonexistent/t.yaml: no such topology file"),
    (["topo", "show"], "Missing argument"),
    (["no-such-command"], "No such command"),
    (["topo", "show", "clos-2p-2l-2s", "--colour"], "No such option"),
])
def test_bad_usage_exits_2(args, fragment):
    assert_one_line_error(mrclab(*args), 2, fragment)


def test_zero_planes_exits_2(tmp_path):
    path = tmp_path / "zero.yaml"
    path.write_text("planes: 0\n")
    assert_one_line_error(mrclab("topo", "show", str(path)), 2, f"{path}: planes: must be between 1 and 16")
