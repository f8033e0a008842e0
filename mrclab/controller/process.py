"""The runner's side of the controller: start its process, wait until every switch is programmed, read its stats.

The controller learns the fabric from the layout JSON the builder writes (dpid ->
switch, port number -> neighbour) and reports through the stats JSON it rewrites
atomically (see `stats`); there is no other channel, and faults never use this one.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import lifeline
from ..errors import MrclabError
from ..layout import Layout
from ..routing import DEFAULT, ROUTINGS
from ..runstate import RunState
from . import stats

REPO = Path(__file__).resolve().parents[2]


def listening_socket() -> socket.socket:
    """A socket listening on a free port of 127.0.0.1, handed to the controller as it is: a port chosen,
    released and then bound could be taken by another local process in between."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


class Controller:
    """One controller process for one run; its files live in `directory`."""

    def __init__(self, state: RunState, layout: Layout, directory: Path, app: str = ROUTINGS[DEFAULT].app,
                 convergence_delay: float = 2.0, *, datapath: str = "ovs", netns: dict[str, int] | None = None,
                 flood: dict[str, Any] | None = None) -> None:
        """`datapath` "ovs": an os-ken app on an OpenFlow port of 127.0.0.1; "linux": the kernel route
        controller, reaching each router through `netns` (switch -> pid of a process in its namespace). `flood`
        (a share of a lab over servers whose routing reconverges): {server, address, peers}, its server's index
        and underlay address and the others' addresses, where its controller tells and hears link states."""
        self.state, self.layout, self.app = state, layout, app
        self.switches = set(netns) if netns is not None else set(layout.switches)  # the ones it programs
        directory.mkdir(parents=True, exist_ok=True)
        self.layout_path = directory / "layout.json"
        self.stats_path = directory / "controller-stats.json"
        self.log_path = directory / "controller.log"
        self.layout_path.write_text(json.dumps(layout.to_dict()))
        self.stats_path.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "mrclab.controller", "--app", app, "--datapath", datapath,
                "--layout", str(self.layout_path), "--stats", str(self.stats_path), "--log", str(self.log_path),
                "--convergence-delay", str(convergence_delay)]
        self.port, listener = None, None
        if datapath == "linux":
            netns_path = directory / "netns.json"
            netns_path.write_text(json.dumps(netns))
            argv += ["--netns", str(netns_path)]
            if flood is not None:
                flood_path = directory / "flood.json"
                flood_path.write_text(json.dumps(flood))
                argv += ["--flood", str(flood_path)]
        else:
            listener = listening_socket()
            self.port = listener.getsockname()[1]
            argv += ["--port", str(self.port)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        pass_fds: tuple[int, ...] = ()
        if listener is not None:
            pass_fds = (listener.fileno(),)
            argv += ["--listen-fd", str(listener.fileno())]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                            start_new_session=True, pass_fds=pass_fds,
                                            preexec_fn=lifeline.die_with_parent())  # noqa: PLW1509  armed from the main thread
        if listener is not None:
            listener.close()
        state.add_process(self.process.pid, f"controller {app}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stats(self) -> dict[str, Any] | None:
        return stats.read(self.stats_path)

    def wait_programmed(self, timeout: float = 30.0) -> None:
        """Until every switch it programs has answered the barrier after its boot flows."""
        wanted = self.switches
        self._wait(lambda doc: stats.programmed(doc) >= wanted, timeout, "program every switch")

    def _wait(self, done, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            doc = self.stats()
            if done(doc):
                return
            if self.process.poll() is not None:
                raise MrclabError(f"controller exited with code {self.process.returncode} before it could {what} "
                                  f"(log: {self.log_path}): {self._log_tail()}")
            if time.monotonic() > deadline:
                missing = sorted(self.switches - stats.programmed(doc))
                raise MrclabError(f"controller did not {what} within {timeout:.0f}s; waiting for "
                                  f"{', '.join(missing[:8]) or 'its first stats'} (log: {self.log_path})")
            time.sleep(0.02)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text().strip().splitlines()[-3:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
