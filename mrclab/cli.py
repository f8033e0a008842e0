"""The `mrclab` command line; nothing else imports this module.

Every failure becomes one line on stderr and an exit code from SPEC.md (0 ok,
1 expectation or verification failed, 2 bad input, 3 environment not ready);
`--json` prints exactly one JSON document on stdout.
"""
from __future__ import annotations

import json
import signal
import sys
import time
import traceback
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from . import check as check_mod
from . import runstate
from .errors import EnvironmentNotReady, ExpectationFailed, MrclabError, Terminated, UsageError
from .spec import topology as topology_mod

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def emit_json(document) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def require_environment() -> None:
    """Exit 3 naming the first failing `mrclab check` row, before anything is built."""
    failed = check_mod.first_failure(check_mod.rows())
    if failed is not None:
        raise EnvironmentNotReady(f"cannot run a lab: `mrclab check` row '{failed.name}' fails: {failed.detail}"
                                  + (f" (fix: {failed.fix})" if failed.fix else ""))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mrclab")
def cli() -> None:
    """Emulate MRC (Multipath Reliable Connection) on a multi-plane Clos of Open vSwitch switches."""


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def check(as_json: bool) -> None:
    """Environment doctor: one row per requirement, ok or missing, and the fix."""
    rows = check_mod.rows()
    failed = check_mod.first_failure(rows)
    if as_json:
        emit_json({"ok": failed is None, "rows": [r.to_dict() for r in rows]})
    else:
        table = Table(title="mrclab check")
        for column in ("requirement", "status", "detail", "fix"):
            table.add_column(column)
        for r in rows:
            status = "[green]ok[/]" if r.ok else ("[red]missing[/]" if r.required else "[yellow]optional[/]")
            table.add_row(r.name, status, r.detail, "" if r.ok else r.fix)
        out.print(table)
    if failed is not None:
        sys.exit(3)


@cli.group()
def topo() -> None:
    """Inspect and verify fabrics described by topology files."""


@topo.command("show")
@click.argument("file")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def topo_show(file: str, as_json: bool) -> None:
    """The fabric: counts, names, paths per host pair."""
    t = topology_mod.load(file)
    doc = {**t.to_dict(), "counts": {"hosts": t.hosts, "switches": len(t.switch_names), "links": len(t.links),
                                     "paths_per_host_pair": t.plan.paths_per_pair},
           "hosts": t.host_names, "leaves": t.leaf_names, "spines": t.spine_names,
           "links_list": [link.name for link in t.links],
           "example_path": {"src": "h0", "dst": t.host_names[-1], "plane": 0, "spine": 0,
                            "address": str(t.plan.path_address(0, t.hosts - 1, 0, 0))}}
    if as_json:
        emit_json(doc)
        return
    table = Table(title=f"{t.name}  ({t.source})")
    table.add_column("what")
    table.add_column("value")
    for key, value in (("planes", t.planes), ("leaves per plane", t.leaves), ("spines per plane", t.spines),
                       ("hosts", f"{t.hosts}  ({t.hosts_per_leaf} per leaf, one NIC per plane)"),
                       ("switches", len(t.switch_names)), ("links", len(t.links)),
                       ("paths per host pair", f"{t.plan.paths_per_pair}  (planes x spines)"),
                       ("host / fabric rate", f"{doc['links']['host_rate']} / {doc['links']['fabric_rate']}"),
                       ("queue, mtu, trim", f"{doc['links']['queue']}, {t.mtu}, {'on' if t.trim else 'off'}"),
                       ("leaves", " ".join(t.leaf_names)), ("spines", " ".join(t.spine_names)),
                       ("example path", f"h0 -> {t.host_names[-1]} via p0s0: {doc['example_path']['address']}")):
        table.add_row(key, str(value))
    out.print(table)


def ssh_options(command):
    """--identity, --known-hosts and --accept-new-host-key, for every command that reaches a target."""
    for option in reversed((
            click.option("--identity", type=click.Path(dir_okay=False), help="Private key file (the SSH agent and "
                         "~/.ssh/config are used too; never a password)."),
            click.option("--known-hosts", type=click.Path(dir_okay=False),
                         help="known_hosts file checked for the target's host key (default ~/.ssh/known_hosts)."),
            click.option("--accept-new-host-key", is_flag=True, help="Accept and remember a host key seen for the "
                         "first time (a changed key is always refused)."))):
        command = option(command)
    return command


def reach(target: str, identity: str | None, known_hosts: str | None, accept_new_host_key: bool,
          require_mrclab: bool = True):
    """A connected, located target (mrclab.remote.job.Remote); any failure is one line and exit 3."""
    from .remote import job, ssh
    from .remote import target as target_mod

    conn = ssh.Connection(target_mod.parse(target), identity=identity, known_hosts=known_hosts,
                          accept_new_host_key=accept_new_host_key, say=err.print)
    try:
        return job.locate(conn, require=require_mrclab)
    except BaseException:
        conn.close()
        raise


def empty_out(path: Path, option: str = "--out") -> Path:
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{option} {path}: directory exists and is not empty")
    return path


@cli.command()
@click.argument("scenario")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Results directory "
              "(default results/<name>-<UTC timestamp>/).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key by dotted path.")
@click.option("--json", "as_json", is_flag=True, help="Print the results document only.")
@click.option("--progress-jsonl", type=click.Path(dir_okay=False), help="Also write the live view's records, "
              "one JSON object a line, to this file (what --target follows).")
@click.option("--target", envvar="MRCLAB_TARGET", metavar="[USER@]HOST[:PORT]|vagrant|vm",
              help="Run it on that machine over SSH and fetch the results here (env MRCLAB_TARGET).")
@ssh_options
def run(scenario: str, out_dir: str | None, overrides: tuple[str, ...], as_json: bool, progress_jsonl: str | None,
        target: str | None, identity: str | None, known_hosts: str | None, accept_new_host_key: bool) -> None:
    """Run a scenario with a live progress view; write its results directory."""
    from . import runner
    from .spec import scenario as scenario_mod

    spec = scenario_mod.load(scenario, list(overrides))
    if target:
        if progress_jsonl:
            raise UsageError("--progress-jsonl is written where the run runs; with --target, leave it out")
        run_remote(spec, overrides, Path(out_dir) if out_dir else None, as_json,
                   reach(target, identity, known_hosts, accept_new_host_key))
        return
    if identity or known_hosts or accept_new_host_key:
        raise UsageError("--identity, --known-hosts and --accept-new-host-key go with --target")
    require_environment()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target_dir = empty_out(Path(out_dir) if out_dir else Path("results") / f"{spec.name}-{stamp}")
    doc = runner.run_scenario(spec, target_dir, console=None if as_json else err,
                              progress_jsonl=Path(progress_jsonl) if progress_jsonl else None)
    if as_json:
        emit_json({**doc, "dir": str(target_dir)})
    else:
        print_summary(doc, target_dir)
    if not all(c["ok"] for c in doc["expectations"]):
        sys.exit(1)


def run_remote(spec, overrides: tuple[str, ...], out_dir: Path | None, as_json: bool, remote) -> None:
    from .remote import job as job_mod

    if out_dir is not None:
        empty_out(out_dir)
    with remote.conn:
        job_mod.check(remote)
        job = job_mod.start(remote, spec, overrides)
        err.print(f"run {job.run_id} on {remote.spec} (there: {job.dir})", soft_wrap=True)
        finish_remote(job, out_dir or Path("results") / job.run_id, as_json)


def finish_remote(job, local: Path, as_json: bool) -> None:
    """Follow a remote run to its end, fetch its results, show them as a local run would; exit with its code."""
    import paramiko

    from .remote import job as job_mod
    try:
        code, follower = job_mod.follow(job, None if as_json else err)
        files = job_mod.fetch(job, local)
        remote_err = job_mod.stderr_lines(job)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise EnvironmentNotReady(f"connection to {job.remote.spec} lost ({exc or type(exc).__name__}); run "
                                  f"{job.run_id} goes on there: `mrclab remote fetch {job.remote.spec} {job.run_id}` "
                                  "gets its results") from None
    for line in remote_err:
        err.print(f"{job.remote.spec}: {line}", soft_wrap=True, markup=False, highlight=False)
    if follower.stopped:
        err.print(f"mrclab: interrupted; run {job.run_id} was stopped and torn down on {job.remote.spec}"
                  + (f" ({files} files fetched into {local}/)" if files else ""))
        sys.exit(130)
    if code in (0, 1) and (local / "results.json").is_file():
        doc = json.loads((local / "results.json").read_text())
        if as_json:
            emit_json({**doc, "dir": str(local)})
        else:
            print_summary(follower.done["results"] if follower.done else doc, local)
    elif files:
        err.print(f"{files} files fetched into {local}/")
    sys.exit(code)


def print_summary(doc: dict, target: Path) -> None:
    from .report.summary import actual_text, rtt_text
    for u in doc.get("unfired_events", []):
        err.print(f"[yellow]event {u['event_index']} ({u['action']} {u['target']} at {u['t_s']:g} s) never fired: "
                  f"the workload ended at {doc['duration_s']:g} s[/yellow]")
    s = doc["summary"]
    table = Table(title=f"{doc['scenario']['name']}: {doc['transport']} over {doc['routing']} "
                        f"on {doc['topology']['name']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    st = s["step_time_s"]
    rows = [("steps", f"{len(doc['steps'])}"),
            ("step time p50 / p99 / p100", f"{st['p50'] * 1e3:.1f} / {st['p99'] * 1e3:.1f} / {st['p100'] * 1e3:.1f} ms"),
            ("p100 / p50", f"{st['p100'] / st['p50']:.2f}" if st["p50"] else "-"),
            ("goodput", f"{s['goodput_bps'] / 1e6:.1f} Mbit/s ({s['goodput_fraction'] * 100:.0f}% of ideal)"),
            ("messages sent / completed / failed", "{sent} / {completed} / {failed}".format(**s["messages"])),
            ("bytes delivered / verified", "{delivered} / {verified}".format(**s["bytes"])),
            ("packets data / retx / trimmed / timeouts", "{data_sent} / {retransmitted} / {trimmed} / {timeouts}"
             .format(**s["packets"])),
            ("RTT", rtt_text(s)),
            ("flow-mods after boot", str(doc["controller"]["flow_mods_after_boot"]))]
    rows += [(f"{key} {e['action']} {e['target']} @{e['t_s']:.2f}s",
              "-" if e[key] is None else f"{e[key] * 1e3:.1f} ms")
             for e in doc["events"] for key in ("avoid_s", "revive_s") if key in e]
    fid = doc["fidelity"]
    rows.append(("fidelity", ("[green]ok[/] " if fid["ok"] else "[red bold]NOT OK[/] ") + "; ".join(fid["notes"])))
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    checks = Table(title="expectations")
    for column in ("check", "expected", "actual", ""):
        checks.add_column(column)
    for c in doc["expectations"]:
        checks.add_row(c["name"], str(c["expected"]), actual_text(c), "[green]ok[/]" if c["ok"] else "[red]FAILED[/]")
    if doc["expectations"]:
        out.print(checks)
    out.print(f"results in {target}/")


@cli.command()
@click.argument("run_dir", metavar="DIR")
def report(run_dir: str) -> None:
    """Write DIR/report.html (self-contained) and the PNG plots of one run into DIR."""
    from .report import write_report

    written = write_report(run_dir)
    for title, why in written.missing.items():
        err.print(f"not drawn: {title}: {why}", soft_wrap=True)
    out.print(f"report: {written.html}  ({len(written.pngs)} plots: {', '.join(p.name for p in written.pngs)})",
              soft_wrap=True)


@cli.command()
@click.argument("run_dirs", metavar="DIR...", nargs=-1, required=True)
@click.option("--out", "plot_file", default="compare.png", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the comparison plot (PNG).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def compare(run_dirs: tuple[str, ...], plot_file: str, as_json: bool) -> None:
    """Side-by-side table of runs (worst of each row in red), and a comparison plot."""
    from .report import compare as compare_mod
    from .report.plots import save

    runs = compare_mod.load_all(list(run_dirs))
    target = Path(plot_file)
    if not target.parent.is_dir():
        raise UsageError(f"--out {target}: directory {target.parent} does not exist")
    save(compare_mod.figure(runs), target)
    if as_json:
        emit_json(compare_mod.document(runs, target))
    else:
        out.print(compare_mod.table(runs))
        out.print(f"plot: {target}", soft_wrap=True)


@topo.command("verify")
@click.argument("file")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def topo_verify(file: str, as_json: bool) -> None:
    """Build the fabric, probe every (src, dst, plane, spine) path, check each arrives through its spine, tear down."""
    from .fabric.verify import verify_topology

    t = topology_mod.load(file)
    require_environment()
    doc = verify_topology(t)
    if as_json:
        emit_json(doc)
    else:
        timings = doc["timings_s"]
        table = Table(title=f"{t.name}: {doc['ok_paths']}/{doc['paths']} paths ok",
                      caption=f"{doc['datapath']} datapath; build {timings['build']:.1f}s, "
                              f"verify {timings['verify']:.1f}s, teardown {timings['teardown']:.1f}s")
        for column in ("spine", "paths", "arrived", "through spine, ok"):
            table.add_column(column, justify="right")
        for row in doc["spines"]:
            colour = "green" if row["ok"] == row["paths"] else "red"
            table.add_row(row["spine"], str(row["paths"]), str(row["arrived"]), f"[{colour}]{row['ok']}[/]")
        out.print(table)
        for f in doc["failed"][:20]:
            why = "did not arrive" if not f["arrived"] else "spine counters disagree"
            out.print(f"[red]FAIL[/] {f['src']} -> {f['dst']} plane {f['plane']} via {f['spine']} ({f['address']}): {why}")
        if len(doc["failed"]) > 20:
            out.print(f"... and {len(doc['failed']) - 20} more (--json lists them all)")
    if not doc["ok"]:
        raise ExpectationFailed(f"{doc['paths'] - doc['ok_paths']} of {doc['paths']} paths failed verification")


@cli.group()
def remote() -> None:
    """Targets of `mrclab run --target`: install mrclab there, fetch a run's results, clean up there."""


@remote.command("setup")
@click.argument("target")
@ssh_options
def remote_setup(target: str, identity: str | None, known_hosts: str | None, accept_new_host_key: bool) -> None:
    """Install this exact mrclab version on TARGET, provisioned by vagrant/provision.sh (sudo -n when not root)."""
    from . import __version__
    from .remote import install

    found = reach(target, identity, known_hosts, accept_new_host_key, require_mrclab=False)
    with found.conn:
        install.setup(found, say=err.print)
    out.print(f"mrclab {__version__} is installed on {target} and `mrclab check` passes there")


@remote.command("fetch")
@click.argument("target")
@click.argument("run_id")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where to put it (default results/RUN_ID/).")
@click.option("--json", "as_json", is_flag=True, help="Print the results document only.")
@ssh_options
def remote_fetch(target: str, run_id: str, out_dir: str | None, as_json: bool, identity: str | None,
                 known_hosts: str | None, accept_new_host_key: bool) -> None:
    """Follow run RUN_ID on TARGET if it still runs, then download its results directory; exit with its code."""
    from .remote import job as job_mod

    local = empty_out(Path(out_dir) if out_dir else Path("results") / run_id)
    found = reach(target, identity, known_hosts, accept_new_host_key, require_mrclab=False)
    with found.conn:
        finish_remote(job_mod.existing(found, run_id), local, as_json)


@remote.command("clean")
@click.argument("target")
@ssh_options
def remote_clean(target: str, identity: str | None, known_hosts: str | None, accept_new_host_key: bool) -> None:
    """Run `mrclab clean` on TARGET: remove what interrupted runs left there, and nothing else."""
    found = reach(target, identity, known_hosts, accept_new_host_key)
    with found.conn:
        result = found.conn.run(found.as_root(*found.mrclab, "clean"), timeout=300)
    for line in (result.stdout + result.stderr).splitlines():
        out.print(f"{target}: {line}", soft_wrap=True, markup=False, highlight=False)
    sys.exit(result.code)


@cli.group()
def vm() -> None:
    """The lab VM (Debian 12, kernel OVS datapath) under QEMU, for `mrclab run --target vm`; files in .vm/."""


@vm.command("build")
def vm_build() -> None:
    """Build the image: debootstrap, provision.sh --install-only in a chroot, mkfs.ext4 -d (minutes)."""
    from . import vm as vm_mod
    vm_mod.build(say=err.print)
    out.print(f"image: {vm_mod.DISK}")


@vm.command("up")
def vm_up() -> None:
    """Boot it (KVM where a guest comes up with it, else TCG); only SSH is forwarded, to 127.0.0.1."""
    from . import vm as vm_mod
    vm_mod.up(say=err.print)


@vm.command("down")
def vm_down() -> None:
    """Shut it down (poweroff inside, then its recorded qemu PID if needed)."""
    from . import vm as vm_mod
    vm_mod.down(say=err.print)


@vm.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def vm_ssh(args: tuple[str, ...]) -> None:
    """Log in to it, or run ARGS there (OpenSSH's ssh with .vm/ssh-config)."""
    import os

    from . import vm as vm_mod
    command = vm_mod.ssh_command(args)
    os.execvp(command[0], command)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def clean(as_json: bool) -> None:
    """Remove whatever interrupted mrclab runs left behind, and nothing else."""
    removed = runstate.clean_stale()
    if as_json:
        emit_json({"removed": removed})
    elif removed:
        for item in removed:
            out.print(f"removed {item}")
    else:
        out.print("nothing to clean")


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        err.print("mrclab: interrupted")
        sys.exit(130)
    except click.ClickException as exc:
        message = exc.format_message().replace("\n", " ")
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        sys.stderr.write(f"mrclab: {message}{hint}\n")
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except MrclabError as exc:
        sys.stderr.write(f"mrclab: {exc}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("mrclab: interrupted\n")
        sys.exit(130)
    except Terminated as exc:  # torn down already; the shell's code for death by that signal
        sys.stderr.write(f"mrclab: stopped by {exc}\n")
        sys.exit(128 + signal.Signals[str(exc)].value)
    except Exception as exc:  # a bug: one line for the user, the traceback in a file for us
        log = Path("/tmp/mrclab-crash.log")
        log.write_text(traceback.format_exc())
        sys.stderr.write(f"mrclab: internal error: {type(exc).__name__}: {exc} (traceback in {log})\n")
        sys.exit(1)
    sys.exit(0)
