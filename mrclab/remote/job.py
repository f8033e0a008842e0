"""A run on a target: checked, uploaded, started detached, followed, stopped, fetched.

On the target every run owns a directory, `<base>/runs/<RUN_ID>/` (base: `~/.mrclab`, or
MRCLAB_REMOTE_DIR): the uploaded scenario (and topology file), and what the run writes:

    wrapper.pid  run.pid  progress.jsonl  stdout.json  stderr.log  exit_code  out/   (the results)

The run is started under `setsid nohup`, with every stream redirected, by a small shell
wrapper that records its pid and, when `mrclab run` ends, its exit code. Nothing of it
depends on the SSH session: when the connection drops, the run finishes (or hits its
duration_limit) and tears itself down, and `mrclab remote fetch TARGET RUN_ID` follows or
collects it later. The local side reads `progress.jsonl` over SFTP (mrclab.progress) and
draws the same live view; Ctrl-C sends SIGTERM to the recorded pid, after checking that the
pid is still the process running in that directory, and waits for the teardown there.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, build
from ..errors import EnvironmentNotReady, UsageError
from ..progress import view
from ..spec import topology as topology_mod
from .ssh import Connection, sh

BASE = os.environ.get("MRCLAB_REMOTE_DIR", ".mrclab")
POLL_S = 0.3
STOP_GRACE_S = 120.0


@dataclass(frozen=True)
class Remote:
    """A target that passed its checks: where mrclab is there, and how to run it as root."""

    conn: Connection
    mrclab: tuple[str, ...]   # the command's words
    sudo: tuple[str, ...]     # `sudo -n` when the login is not root
    base: str                 # absolute

    @property
    def spec(self) -> str:
        return self.conn.target.spec

    def runs(self) -> str:
        return f"{self.base}/runs"

    def as_root(self, *words) -> str:
        return sh(*self.sudo, *words)


def locate(conn: Connection, *, require: bool = True) -> Remote:
    """Where mrclab is there (MRCLAB_REMOTE_COMMAND, else `mrclab remote setup`'s install, else PATH);
    with require=False, a target without one gives an empty command (for `remote setup`)."""
    spec = conn.target.spec
    base = conn.run(f"mkdir -p -m 700 {shlex.quote(BASE)}/runs && cd {shlex.quote(BASE)} && pwd -P")
    if base.code != 0:
        raise EnvironmentNotReady(f"target {spec}: cannot make {BASE}/runs there: {base.last_line()}")
    base_dir = base.stdout.strip()
    configured = os.environ.get("MRCLAB_REMOTE_COMMAND")
    if configured:
        words = tuple(shlex.split(configured))
    else:
        found = conn.run(f"c={shlex.quote(base_dir)}/current/.venv/bin/mrclab; "
                         'if [ -x "$c" ]; then echo "$c"; else command -v mrclab; fi')
        if require and (found.code != 0 or not found.stdout.strip()):
            raise EnvironmentNotReady(f"target {spec}: no mrclab there: install this version with "
                                      f"`mrclab remote setup {spec}`")
        words = tuple(found.stdout.split())
    sudo: tuple[str, ...] = ()
    if conn.run("id -u").stdout.strip() != "0":
        if conn.run("sudo -n true").code != 0:
            raise EnvironmentNotReady(f"target {spec}: {conn.target.user} is not root there and `sudo -n` asks for "
                                      "a password: log in as root, or give that user passwordless sudo")
        sudo = ("sudo", "-n")
    return Remote(conn, words, sudo, base_dir)


def check(remote: Remote) -> str | None:
    """Same version as here, and `mrclab check` passes there; else one line naming the fix. Returns the difference
    between the transport build there and here, in one line, or None when they are the same."""
    spec = remote.spec
    version = remote.conn.run(sh(*remote.mrclab, "--version"))
    if version.code == 127 or (version.code != 0 and "not found" in version.stderr):
        raise EnvironmentNotReady(f"target {spec}: no mrclab there ({version.last_line()}): install this version "
                                  f"with `mrclab remote setup {spec}`")
    theirs = version.stdout.strip().split()[-1] if version.code == 0 and version.stdout.strip() else None
    if theirs is None:
        raise EnvironmentNotReady(f"target {spec}: `{' '.join(remote.mrclab)} --version` failed there: "
                                  f"{version.last_line()}")
    if theirs != __version__:
        raise EnvironmentNotReady(f"target {spec} has mrclab {theirs}, this is {__version__}: install this version "
                                  f"there with `mrclab remote setup {spec}`")
    checked = remote.conn.run(remote.as_root(*remote.mrclab, "check", "--json"), timeout=120)
    try:
        doc = json.loads(checked.stdout)
        rows, theirs_build = doc["rows"], doc["build"]
    except (ValueError, KeyError, TypeError):
        raise EnvironmentNotReady(f"target {spec}: `mrclab check` failed there: {checked.last_line()}") from None
    failed = next((r for r in rows if r["required"] and not r["ok"]), None)
    if failed is not None:
        raise EnvironmentNotReady(f"target {spec} cannot run a lab: `mrclab check` row '{failed['name']}' fails "
                                  f"there: {failed['detail']}" + (f" (fix: {failed['fix']})" if failed["fix"] else ""))
    ours = build.running()
    if theirs_build["build"] == ours["build"]:
        return None
    return (f"target {spec} runs the {theirs_build['build']} transport build ({theirs_build['why']}), this mrclab the "
            f"{ours['build']} one ({ours['why']})")


@dataclass
class Job:
    remote: Remote
    run_id: str

    @property
    def dir(self) -> str:
        return f"{self.remote.runs()}/{self.run_id}"

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}"


def new_run_id(remote: Remote, name: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_id, n = f"{name}-{stamp}", 1
    while remote.conn.exists(f"{remote.runs()}/{run_id}"):
        n += 1
        run_id = f"{name}-{stamp}-{n}"
    return run_id


def start(remote: Remote, scenario, overrides: tuple[str, ...]) -> Job:
    """Upload the scenario (and the topology file it names, when that is a local file) and start the run."""
    job = Job(remote, new_run_id(remote, scenario.name))
    conn = remote.conn
    made = conn.run(sh("mkdir", "-m", "700", job.dir))
    if made.code != 0:
        raise EnvironmentNotReady(f"target {remote.spec}: cannot make {job.dir}: {made.last_line()}")
    source = Path(scenario.source)
    uploaded = job.path(source.name)
    conn.sftp.put(str(source), uploaded)
    sets = list(overrides)
    topology = Path(scenario.topology.source)
    if topology.is_file():
        if topology.resolve().parent == topology_mod.TOPOLOGY_DIR.resolve():
            sets.append(f"topology={topology.stem}")   # shipped, so the same file is there
        else:
            conn.run(sh("mkdir", job.path("topology")))
            conn.sftp.put(str(topology), job.path(f"topology/{topology.name}"))
            sets.append(f"topology={job.path(f'topology/{topology.name}')}")
    command = remote.as_root("env", "-u", "MRCLAB_TARGET", *remote.mrclab, "run", uploaded, "--out", job.path("out"),
                             "--json", "--progress-jsonl", job.path("progress.jsonl"),
                             *(word for item in sets for word in ("--set", item)))
    wrapper = (f"echo $$ > wrapper.pid; {command} </dev/null >stdout.json 2>stderr.log & echo $! > run.pid; "
               "wait $!; echo $? > exit_code.tmp; mv exit_code.tmp exit_code")
    started = conn.run(f"cd {shlex.quote(job.dir)} && setsid nohup sh -c {shlex.quote(wrapper)} "
                       ">/dev/null 2>&1 </dev/null &")
    if started.code != 0:
        raise EnvironmentNotReady(f"target {remote.spec}: cannot start the run: {started.last_line()}")
    return job


class Follower:
    """The run's progress records as they arrive, and its exit code once there is one."""

    def __init__(self, job: Job):
        self.job, self.offset, self.pending = job, 0, b""
        self.header: dict | None = None
        self.latest: dict | None = None
        self.done: dict | None = None
        self.stopped = False   # we sent it SIGTERM

    def poll(self) -> int | None:
        conn = self.job.remote.conn
        code = self._exit_code()
        data = conn.read_from(self.job.path("progress.jsonl"), self.offset)
        self.offset += len(data)
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            record = json.loads(line)
            kind = record.get("event")
            if kind == "start":
                self.header = record
            elif kind == "progress":
                self.latest = record
            elif kind == "done":
                self.done = record
        return code

    def _exit_code(self) -> int | None:
        raw = self.job.remote.conn.read_from(self.job.path("exit_code"), 0).strip()
        return int(raw) if raw else None

    def alive(self) -> bool:
        """The wrapper still runs (it writes exit_code as its last act)."""
        raw = self.job.remote.conn.read_from(self.job.path("wrapper.pid"), 0).strip()
        return not raw or self.job.remote.conn.exists(f"/proc/{int(raw)}")

    def view(self):
        from rich.text import Text
        if self.header is None:
            return Text(f"starting {self.job.run_id} on {self.job.remote.spec} ...")
        return view(self.header, self.latest)


def follow(job: Job, console) -> tuple[int, Follower]:
    """Follow the run to its end, drawing the live view on `console` (None: draw nothing).
    Ctrl-C stops it there and waits for its teardown; a second Ctrl-C leaves it running.

    Ctrl-C is taken as a flag the loop reads, not as a KeyboardInterrupt: one raised inside the SSH client's
    reads could be swallowed there, and the run would go on as if nothing had been typed."""
    from rich.live import Live

    follower = Follower(job)
    stopping_since = None
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(1))
    live = Live(console=console, refresh_per_second=4, transient=True, get_renderable=follower.view) \
        if console is not None else nullcontext()
    try:
        with live:
            while True:
                if pressed:
                    pressed.clear()
                    if stopping_since is not None:
                        raise UsageError(f"interrupted again: run {job.run_id} is left to stop by itself on "
                                         f"{job.remote.spec}; `mrclab remote fetch {job.remote.spec} {job.run_id}` "
                                         "follows it")
                    if console is not None:
                        console.print(f"stopping run {job.run_id} on {job.remote.spec} (its teardown runs there; "
                                      "Ctrl-C again to leave it)")
                    stop(job)
                    follower.stopped, stopping_since = True, time.monotonic()
                code = follower.poll()
                if code is not None:
                    follower.poll()
                    return code, follower
                if not follower.alive() and follower.poll() is None:
                    raise EnvironmentNotReady(f"target {job.remote.spec}: run {job.run_id} ended without an exit "
                                              f"code (see {job.path('stderr.log')} there)")
                if stopping_since is not None and time.monotonic() - stopping_since > STOP_GRACE_S:
                    raise EnvironmentNotReady(f"target {job.remote.spec}: run {job.run_id} did not stop within "
                                              f"{STOP_GRACE_S:g} s of SIGTERM")
                time.sleep(POLL_S)
    finally:
        signal.signal(signal.SIGINT, previous)


def stop(job: Job) -> None:
    """SIGTERM to the run's mrclab (or the sudo in front of it, which passes it on), by its recorded pid,
    once /proc says that pid still works in the run's directory."""
    script = ('pid=$(cat run.pid 2>/dev/null) && [ -n "$pid" ] && '
              '[ "$(readlink /proc/$pid/cwd)" = "$(pwd -P)" ] && kill -TERM "$pid"')
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        result = job.remote.conn.run(f"cd {shlex.quote(job.dir)} && " + job.remote.as_root("sh", "-c", script))
        if result.code == 0 or job.remote.conn.exists(job.path("exit_code")):
            return
        time.sleep(0.2)


def fetch(job: Job, local: Path) -> int:
    """Download the run's results directory; returns the number of files."""
    if not job.remote.conn.exists(job.path("out")):
        return 0
    return job.remote.conn.download_tree(job.path("out"), local)


def stderr_lines(job: Job) -> list[str]:
    return job.remote.conn.read_from(job.path("stderr.log"), 0).decode(errors="replace").splitlines()


def existing(remote: Remote, run_id: str) -> Job:
    if "/" in run_id or run_id in ("", ".", ".."):
        raise UsageError(f"RUN_ID {run_id!r}: expected a run's name, as `mrclab run --target` printed it")
    job = Job(remote, run_id)
    if not remote.conn.exists(job.path("wrapper.pid")):
        runs = sorted(remote.conn.sftp.listdir(remote.runs()))
        raise UsageError(f"no run {run_id!r} on {remote.spec} (runs there: {', '.join(runs) or 'none'})")
    return job
