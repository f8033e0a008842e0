"""Run Debian's tshark with the shipped MRC dissector, and fail on anything it could not decode."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from mrclab.wireshark import DISSECTOR

BAD = "_ws.malformed or _ws.expert.severity == error"


def tshark(*args: str) -> str:
    """tshark's stdout; fails the test if tshark is missing, says no, or the script did not load."""
    binary = shutil.which("tshark")
    assert binary, "tshark is not installed (vagrant/provision.sh installs it)"
    done = subprocess.run([binary, "-n", "-X", f"lua_script:{DISSECTOR}", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Lua" not in done.stderr, done.stderr  # a load error is reported on stderr only
    return done.stdout


def fields(capture: Path, names: list[str], display_filter: str = "mrc", *options: str) -> list[list[str]]:
    """One row per packet matching the filter, one column per field (repeated values joined by ,)."""
    out = tshark("-r", str(capture), "-Y", display_filter, "-T", "fields", "-E", "separator=\t",
                 *options, *[arg for name in names for arg in ("-e", name)])
    return [line.split("\t") for line in out.splitlines()]


def undecodable(capture: Path, *options: str) -> list[str]:
    """Frames tshark marks malformed or with an error (a Lua error is one): frame number and message."""
    rows = fields(capture, ["frame.number", "_ws.expert.message"], BAD, *options)
    return [" ".join(row) for row in rows]
