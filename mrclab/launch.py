"""What starting a run takes, from the command line or from Python (`mrclab.api`): where its results go, whether
this machine can take a lab now, and its `--set` overrides as typed. Checked before anything is built, so a bad
folder or a busy machine costs no lab."""
from __future__ import annotations

import os
import time
from pathlib import Path

from . import check as check_mod
from . import runstate
from .errors import EnvironmentNotReady, UsageError


def require_environment() -> None:
    """EnvironmentNotReady (exit 3) naming the first failing `mrclab check` row, before anything is built."""
    failed = check_mod.first_failure(check_mod.rows())
    if failed is not None:
        raise EnvironmentNotReady(f"cannot run a lab: `mrclab check` row '{failed.name}' fails: {failed.detail}"
                                  + (f" (fix: {failed.fix})" if failed.fix else ""))


PSEUDO_FILE_SYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))


def empty_out(path: Path, option: str = "--out") -> Path:
    """A folder results may go into: new, or empty and ours; never through a symbolic link; on a real file
    system that takes writes. Checked before anything is built, so a bad folder costs no lab."""
    if path.is_symlink():
        raise UsageError(f"{option} {path}: is a symbolic link; give the directory itself")
    absolute = Path(os.path.abspath(path))
    if any(absolute == root or root in absolute.parents for root in PSEUDO_FILE_SYSTEMS):
        raise UsageError(f"{option} {path}: is under {absolute.parts[1] and '/' + absolute.parts[1]}, not a real "
                         "file system; give a folder on disk")
    if path.exists():
        if not path.is_dir() or any(path.iterdir()):
            raise UsageError(f"{option} {path}: exists and is not an empty directory")
        if path.stat().st_uid != os.geteuid():
            raise UsageError(f"{option} {path}: belongs to another user")
    existing = next(p for p in (absolute, *absolute.parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"{option} {path}: {existing} is a file, not a folder")
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        raise UsageError(f"{option} {path}: {existing} is on a read-only file system")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: {existing} is not writable by this user")
    return path


def require_lab(allow_concurrent: bool = False) -> None:
    """The machine can run a lab, and no other run is using it (unless the user allows it)."""
    require_environment()
    others = runstate.live_runs()
    if others and not allow_concurrent:
        raise EnvironmentNotReady(f"another mrclab run is live on this machine ({', '.join(others[:3])}): two labs "
                                  "share the CPU and neither measures the emulated network alone; wait for it, or "
                                  "pass --allow-concurrent (both runs' fidelity is then not ok)")


def results_dir(name: str, out_dir: str | None) -> Path:
    """Where the run writes: --out as given (empty, and ours if it exists), or results/<name>-<stamp> inside
    results/ (the name is checked when the scenario is read; this checks the resolved path too)."""
    if out_dir:
        return empty_out(Path(out_dir))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = Path("results") / f"{name}-{stamp}"
    if target.resolve().parent != Path("results").resolve():
        raise UsageError(f"scenario name {name!r} would place results outside results/")
    return empty_out(target)


def override_map(overrides: tuple[str, ...]) -> dict[str, str]:
    """`--set` as typed, key -> value text (already validated by the scenario reader)."""
    return dict(item.partition("=")[::2] for item in overrides)


def start(spec, out_dir: Path, *, console, overrides: dict[str, str], progress_jsonl: Path | None = None,
          allow_concurrent: bool = False, run_class=None, lab_here: bool = True) -> dict:
    """Run a checked scenario into `out_dir` as `mrclab run` does: the machine checked first when the lab runs here
    (`lab_here`), the capture tool when it captures; its results document."""
    from . import capture as capture_mod
    from . import runner
    from .engines import ENGINES

    if ENGINES[spec.engine].lab and lab_here:
        require_lab(allow_concurrent)
    if spec.capture.on:
        capture_mod.tool("dumpcap")
    return runner.run_scenario(spec, out_dir, console=console, overrides=overrides, progress_jsonl=progress_jsonl,
                               run_class=run_class)


def dry_run(spec, *, out_dir: str | None, target: str | None, lab_here: bool = True) -> dict:
    """What `mrclab run --dry-run` checks beyond the scenario, without building anything: the results folder, the
    target's form (not contacted), and, for a lab here, this machine (EnvironmentNotReady, exit 3, as the run
    would be) and the datapath `auto` picks on it."""
    from .engines import ENGINES

    checks: dict = {}
    if target:
        from .remote import target as target_mod

        parsed = target_mod.parse(target)
        checks["target"] = f"{target}: well-formed, not contacted (the run connects to {parsed})"
        if out_dir:
            checks["out"] = str(empty_out(Path(out_dir)))
    else:
        checks["out"] = str(results_dir(spec.name, out_dir))
    if not ENGINES[spec.engine].lab:
        checks["machine"] = f"engine {spec.engine} builds nothing: no lab to check"
    elif target or not lab_here:
        checks["machine"] = "not this one: the run builds its lab elsewhere"
    else:
        require_environment()
        checks["machine"] = "can run a lab (mrclab check)"
        if spec.datapath == "auto":
            name, why = check_mod.auto_datapath()
            checks["datapath"] = f"auto -> {name}: {why}"
        else:
            checks["datapath"] = f"{spec.datapath}, as the scenario asks"
        others = runstate.live_runs()
        if others:
            checks["live_runs"] = (f"{', '.join(others[:3])}: live now; the run would wait for none and refuse to "
                                   "start beside them (unless --allow-concurrent)")
    return checks
