"""Children end with their runner, and the controller's OpenFlow port is never free for someone else."""
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from typing import ClassVar

import pytest

from mrclab.controller import process
from mrclab.runstate import RunState
from tests.conftest import REPO

PARENT = """
import subprocess, sys, time
from mrclab import lifeline
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         preexec_fn=lifeline.die_with_parent(), start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_child_dies_within_a_second_of_its_parents_sigkill():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=REPO)
    child = int(parent.stdout.readline())
    assert alive(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 1.0
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    survived = alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    assert not survived


class _Layout:
    switches: ClassVar[dict] = {}

    def to_dict(self):
        return {}


def test_the_openflow_port_is_held_from_choice_to_controller(tmp_path, monkeypatch):
    """Whoever tries the port while the controller starts finds it taken: it is handed over bound."""
    monkeypatch.setattr("mrclab.runstate.STATE_DIR", tmp_path / "state")
    seen = {}

    class FakePopen:
        def __init__(self, argv, **kwargs):
            port = int(argv[argv.index("--port") + 1])
            intruder = socket.socket()
            try:
                intruder.bind(("127.0.0.1", port))
                seen["intruder"] = "bound"
            except OSError as exc:
                seen["intruder"] = errno.errorcode[exc.errno]
            finally:
                intruder.close()
            seen["pass_fds"] = kwargs.get("pass_fds")
            self.pid = os.getpid()

    state = RunState.create("test")
    monkeypatch.setattr(process.subprocess, "Popen", FakePopen)
    controller = process.Controller(state, _Layout(), tmp_path)
    assert seen["intruder"] == "EADDRINUSE"
    assert seen["pass_fds"]
    assert controller.port > 0
    state.path.unlink()


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="needs /proc")
def test_the_controller_refuses_a_handed_socket_bound_elsewhere():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    wrong = sock.getsockname()[1] + 1
    result = subprocess.run([sys.executable, "-m", "mrclab.controller", "--port", str(wrong), "--layout", "x",
                             "--stats", "x", "--log", os.devnull, "--listen-fd", str(sock.fileno())],
                            pass_fds=(sock.fileno(),), capture_output=True, text=True, cwd=REPO, timeout=60,
                            check=False)
    sock.close()
    assert result.returncode != 0 and "not 127.0.0.1:" in result.stderr
