"""What a run created, written down before it is created, so `mrclab clean` can remove exactly that.

Every run gets a short id; every bridge and root-namespace interface it makes is named
with the prefix ``m<id>``, and every process it starts is recorded by PID together with
the process's start time (so a recycled PID is never killed). The record lives in
``/run/mrclab/<id>.json`` and is rewritten atomically on every change. A run whose
owner process is gone is stale; `clean` removes its recorded bridges, interfaces, namespaces,
mounts and processes and nothing else: no name patterns, never Mininet's global cleanup. Records are
root's alone (directory 0700, files 0600): whoever can write one can make `clean` delete what it names.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import string
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


def trusted_dir(variable: str, default: str) -> Path:
    """A directory of mrclab's own; root takes none from the environment, which whoever started it chose."""
    return Path(default if os.geteuid() == 0 else os.environ.get(variable, default))


STATE_DIR = trusted_dir("MRCLAB_STATE_DIR", "/run/mrclab")
_ALPHABET = string.ascii_lowercase + string.digits
ID_LEN = 3


def proc_text(path: str) -> str:
    """A /proc file's text. Not through pathlib, whose parsing interns every part of every path: samplers read
    thousands of ever-new /proc/PID paths over a long run."""
    with open(path) as f:
        return f.read()


def proc_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    try:
        raw = proc_text(f"/proc/{pid}/stat")
    except OSError:
        return None
    return int(raw.rsplit(")", 1)[1].split()[19])


@dataclass
class RunState:
    run_id: str
    owner_pid: int
    owner_start: int | None
    purpose: str = ""
    created_at: float = field(default_factory=time.time)
    bridges: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[list] = field(default_factory=list)  # [pid, start_time, label]
    mounts: list[str] = field(default_factory=list)  # bpffs instances holding this run's pinned eBPF objects
    out_dir: str = ""  # the run folder: `clean` tells it when its runner died without finishing

    @property
    def prefix(self) -> str:
        return f"m{self.run_id}"

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    def private_dir(self) -> Path:
        """A root-only directory for the run's sockets; short enough for AF_UNIX paths."""
        path = STATE_DIR / self.run_id
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    @classmethod
    def create(cls, purpose: str = "") -> RunState:
        private_root()
        while True:
            run_id = "".join(secrets.choice(_ALPHABET) for _ in range(ID_LEN))
            if not (STATE_DIR / f"{run_id}.json").exists() and not _names_with_prefix(f"m{run_id}"):
                break
        state = cls(run_id, os.getpid(), proc_start_time(os.getpid()), purpose)
        state.save()
        return state

    @classmethod
    def load(cls, path: Path) -> RunState:
        return cls(**json.loads(path.read_text()))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(asdict(self)))
            os.replace(tmp, self.path)
        except BaseException:  # a signal mid-save (a share's runner died) leaves no half-written record
            tmp.unlink(missing_ok=True)
            raise

    def add_bridge(self, name: str) -> None:
        self._add(self.bridges, name)

    def add_interface(self, name: str) -> None:
        self._add(self.interfaces, name)

    def add_namespace(self, name: str) -> None:
        self._add(self.namespaces, name)

    def add_process(self, pid: int, label: str) -> None:
        self.processes.append([pid, proc_start_time(pid), label])
        self.save()

    def add_mount(self, path: str) -> None:
        if self.run_id not in Path(path).name:
            raise ValueError(f"mount point {path!r} does not carry this run's id {self.run_id!r}")
        if path not in self.mounts:
            self.mounts.append(path)
            self.save()

    def release_mount(self, path: str) -> None:
        """Unmount (which drops everything pinned in it), remove the mount point, forget it."""
        if os.path.ismount(path):
            subprocess.run(["umount", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with contextlib.suppress(OSError):
            os.rmdir(path)
        if path in self.mounts:
            self.mounts.remove(path)
            if self.path.exists():
                self.save()

    def _add(self, bucket: list[str], name: str) -> None:
        if not name.startswith(self.prefix):
            raise ValueError(f"{name!r} does not carry this run's prefix {self.prefix!r}")
        if name not in bucket:
            bucket.append(name)
            self.save()

    def is_stale(self) -> bool:
        """True when the process that owned the run is gone (or its PID now names another process)."""
        start = proc_start_time(self.owner_pid)
        return start is None or start != self.owner_start

    def teardown(self) -> list[str]:
        """Remove what this run recorded, and only that; returns what existed and was removed."""
        removed = []
        for pid, start, label in reversed(self.processes):
            if start is not None and proc_start_time(pid) == start and not _is_zombie(pid):
                removed.append(f"process {pid} ({label})")
                _kill(pid, start)
        existing = set(_bridges()) if self.bridges else set()
        for bridge in self.bridges:
            if bridge in existing:
                subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", bridge],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                removed.append(f"bridge {bridge}")
        for intf in self.interfaces:
            if Path(f"/sys/class/net/{intf}").exists():
                subprocess.run(["ip", "link", "del", intf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                removed.append(f"interface {intf}")
        for ns in self.namespaces:
            if Path(f"/run/netns/{ns}").exists():
                subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                removed.append(f"namespace {ns}")
        shutil.rmtree(STATE_DIR / self.run_id, ignore_errors=True)
        for mount in list(self.mounts):
            if os.path.lexists(mount):
                removed.append(f"mount {mount}")
            self.release_mount(mount)
        self.path.unlink(missing_ok=True)
        return removed


def _kill(pid: int, start: int) -> None:
    """SIGTERM, then SIGKILL after a grace period, re-checking identity before each signal."""
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 1.0)):
        if proc_start_time(pid) != start:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc_start_time(pid) != start or _is_zombie(pid):
                return
            time.sleep(0.02)


def _is_zombie(pid: int) -> bool:
    try:
        return proc_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def private_root() -> Path:
    """STATE_DIR, made if missing; refused unless it is ours and no one else may write in it."""
    STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = STATE_DIR.lstat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o022 or not STATE_DIR.is_dir() or STATE_DIR.is_symlink():
        raise PermissionError(f"{STATE_DIR} must be a directory of uid {os.geteuid()} that no one else can write")
    return STATE_DIR


def _bridges() -> list[str]:
    try:
        return subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True).stdout.split()
    except FileNotFoundError:
        return []


def _bridges_with_prefix(prefix: str) -> list[str]:
    return [b for b in _bridges() if b.startswith(prefix)]


def _links_with_prefix(prefix: str) -> list[str]:
    try:
        return [n for n in os.listdir("/sys/class/net") if n.startswith(prefix)]
    except OSError:
        return []


def _names_with_prefix(prefix: str) -> bool:
    return bool(_links_with_prefix(prefix) or _bridges_with_prefix(prefix))


def all_runs() -> list[RunState]:
    if not STATE_DIR.exists():
        return []
    runs = []
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            runs.append(RunState.load(path))
        except (OSError, ValueError, TypeError):
            continue
    return runs


def live_runs(*exclude: str) -> list[str]:
    """Every other mrclab run whose runner is alive, in words: what a run's fidelity and `mrclab run` check."""
    return [f"run {r.run_id} ({r.purpose.removeprefix('run ')}, pid {r.owner_pid})" for r in all_runs()
            if r.run_id not in exclude and r.purpose.startswith("run ") and not r.is_stale()]


def live() -> list[dict]:
    """Every run whose runner is alive, for `mrclab ps`: its id, what it is, its runner's PID, how long it has run,
    its folder and the folder's status line."""
    out = []
    for r in all_runs():
        if r.is_stale():
            continue
        status = ""
        if r.out_dir:
            try:
                status = (Path(r.out_dir) / "status").read_text().strip()
            except OSError:
                status = "no status file"
        out.append({"run_id": r.run_id, "what": r.purpose, "pid": r.owner_pid,
                    "age_s": round(time.time() - r.created_at, 1), "dir": r.out_dir, "status": status,
                    "processes": len(r.processes)})
    return out


CRASH_LOG_AGE_S = 86400.0


def write_status(out_dir: str | Path, text: str) -> bool:
    """Replace the run folder's `status` file atomically, never through a link (the folder may be anyone's);
    False when the folder is gone or is not a plain directory."""
    try:
        dir_fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    tmp = f".status-{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "w") as f:
            f.write(text.rstrip("\n") + "\n")
        os.replace(tmp, "status", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        return False
    finally:
        os.close(dir_fd)


def _left_by_a_dead_runner(run: RunState) -> list[str]:
    """A run folder whose runner died mid-run: its `status` says so, and the empty stderr files of agents that
    said nothing go."""
    if not run.out_dir:
        return []
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    done = []
    if write_status(run.out_dir, f"killed: its runner (pid {run.owner_pid}) ended without finishing; "
                                 f"mrclab clean removed what it left at {when}"):
        done.append(f"status of {run.out_dir}: killed")
    with contextlib.suppress(OSError):
        for name in os.listdir(run.out_dir):
            path = Path(run.out_dir) / name
            if name.startswith("agent-") and name.endswith(".stderr") and not path.is_symlink() \
                    and path.stat().st_size == 0:
                path.unlink()
    return done


def old_crash_logs(now: float | None = None) -> list[Path]:
    """Crash logs in the state directory older than a day."""
    if not STATE_DIR.is_dir():
        return []
    limit = (time.time() if now is None else now) - CRASH_LOG_AGE_S
    return [p for p in sorted(STATE_DIR.glob("crash-*.log")) if not p.is_symlink() and p.stat().st_mtime < limit]


def clean_stale() -> list[str]:
    """Tear down every run whose owner is gone (and tell its run folder); live runs are left alone. Crash logs
    older than a day go too."""
    removed: list[str] = []
    for run in all_runs():
        if run.is_stale():
            removed.extend(f"{run.run_id}: {item}" for item in [*run.teardown(), f"record {run.path}",
                                                                 *_left_by_a_dead_runner(run)])
    for log in old_crash_logs():
        log.unlink(missing_ok=True)
        removed.append(f"crash log {log} (older than a day)")
    return removed
