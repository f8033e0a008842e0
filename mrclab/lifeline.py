"""Children that end with their runner, however the runner ends (SIGKILL included).

The kernel sends a child a signal when the thread that forked it exits (``PR_SET_PDEATHSIG``);
it survives exec, so it is armed between fork and exec, where nothing but this runs. A parent
that died before the signal was armed is caught by comparing the parent PID afterwards.
Start such children from the main thread: the signal follows the forking thread, not the process.
"""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for subprocess.Popen: the child gets `sig` when this process dies."""
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child only calls it

    def arm() -> None:
        if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)
    return arm
