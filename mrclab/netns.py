"""Entering another network namespace from one thread, briefly: sockets made inside stay bound to it."""
from __future__ import annotations

import ctypes
import os
import subprocess
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@contextmanager
def entered(pid: int):
    """Run the body in `pid`'s network namespace (this thread only), then return to our own."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the namespace of pid {pid}")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # cannot happen; carrying on in a host netns would be worse
                os._exit(70)
    finally:
        os.close(own)
        os.close(target)


def ip_batches(batches: dict[int, list[str]], *, family: str = "") -> None:
    """`ip [-6] -batch` inside each namespace (pid -> lines), all at once; RuntimeError naming what failed."""
    argv = ["ip", *([family] if family else []), "-batch", "-"]
    started = {pid: subprocess.Popen(["nsenter", f"--net=/proc/{pid}/ns/net", *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for pid in batches}
    errors = []
    for pid, process in started.items():
        _, err = process.communicate("\n".join(batches[pid]) + "\n")
        if process.returncode != 0:
            errors.append(f"ip {'; '.join(batches[pid])[:200]}: {err.strip()}")
    if errors:
        raise RuntimeError(" | ".join(errors))
