"""Shared fixtures for tests that build real fabrics: skip (with the reason) unless root and OVS answer,
and a way to list what a run left behind."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mrclab.runstate import proc_start_time


def _lab_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (namespaces, OVS bridges)"
    if shutil.which("ovs-vsctl") is None or subprocess.run(["ovs-vsctl", "--timeout=3", "show"],
                                                           capture_output=True).returncode != 0:
        return "Open vSwitch is not answering (ovs-vsctl show failed)"
    if shutil.which("mnexec") is None:
        return "Mininet's mnexec is not installed"
    return None


@pytest.fixture(scope="session")
def lab() -> None:
    """Skip unless this machine can build a fabric."""
    missing = _lab_missing()
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="session")
def leftovers():
    """find_leftovers, for tests (conftest modules are not importable)."""
    return find_leftovers


def find_leftovers(prefix: str, processes: list[list] = ()) -> list[str]:
    """Bridges, root-namespace interfaces and named namespaces carrying `prefix`, and recorded processes alive."""
    found = [f"bridge {b}" for b in subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True)
             .stdout.split() if b.startswith(prefix)]
    found += [f"interface {n}" for n in os.listdir("/sys/class/net") if n.startswith(prefix)]
    netns = Path("/run/netns")
    found += [f"namespace {n}" for n in (os.listdir(netns) if netns.exists() else []) if n.startswith(prefix)]
    found += [f"process {pid} ({label})" for pid, start, label in processes
              if start is not None and proc_start_time(pid) == start and not _zombie(pid)]
    return found


def _zombie(pid: int) -> bool:
    """Dead but not yet reaped (an orphan waits for PID 1 to reap it): nothing of it runs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def pytest_configure(config):
    # Mininet 2.3 compares OVS versions with distutils' StrictVersion on every switch start.
    config.addinivalue_line("filterwarnings", "ignore:distutils Version classes:DeprecationWarning")
