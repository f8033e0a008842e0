"""The `mrclab` command line; nothing else imports this module.

Every failure becomes one line on stderr and an exit code from docs/spec.md (0 ok,
1 expectation or verification failed, 2 bad input, 3 environment not ready);
`--json` prints exactly one JSON document on stdout.
"""
from __future__ import annotations

import functools
import json
import os
import re
import signal
import sys
import tempfile
import textwrap
import time
import traceback
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import build, runstate
from . import check as check_mod
from .engines import ENGINES
from .errors import EnvironmentNotReady, ExpectationFailed, MrclabError, Terminated, UsageError
from .launch import empty_out, override_map, require_environment, require_lab, results_dir
from .metrics import expectations
from .placements import DEFAULT as PLACEMENT_DEFAULT
from .placements import PLACEMENTS
from .spec import topology as topology_mod
from .spec.cluster import MAX_SERVERS
from .spec.keys import DATAPATHS
from .spec.reader import one_line
from .trace import make as trace_make

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def emit_json(document) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def completer(names):
    """Tab completion (click's: `eval "$(_MRCLAB_COMPLETE=bash_source mrclab)"`) of `names()` that start with what
    was typed, or of file names when none does (a scenario or topology may be a path)."""
    def complete(ctx, param, incomplete: str):
        from click.shell_completion import CompletionItem

        matches = [name for name in names() if name.startswith(incomplete)]
        return [CompletionItem(name) for name in matches] or [CompletionItem(incomplete, type="file")]
    return complete


def _scenario_names() -> list[str]:
    from .spec import scenario as scenario_mod
    return scenario_mod.shipped()


def _key_paths() -> list[str]:
    from .spec import keys
    return [path.replace("[]", "") for path in keys.all_paths()]


SCENARIOS = completer(_scenario_names)
TOPOLOGIES = completer(topology_mod.shipped)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mrclab")
def cli() -> None:
    """Emulate MRC (Multipath Reliable Connection) on a multi-plane Clos fabric built on this machine, its switches
    Linux SRv6 routers or Open vSwitch bridges (datapath: auto takes what this machine runs best; `mrclab check`
    says which), or simulate it (--engine sim)."""


@cli.command()
@click.option("--servers", default=None, metavar="LIST",
              help="Also each server of a lab over several (local first, then [user@]host[:port], comma-separated): "
                   "reachable, the same mrclab, and an underlay that carries the fabric's frames inside VXLAN.")
@click.option("--topology", "topology_ref", default="clos-4p-4l-4s", show_default=True,
              help="With --servers: the fabric whose frames the underlay must carry.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def check(servers: str | None, topology_ref: str, as_json: bool) -> None:
    """Environment doctor: one row per requirement, ok or missing, and the fix."""
    rows = check_mod.rows()
    if servers is not None:
        from .cluster.servers import Cluster, check_rows

        rows += check_rows(Cluster(topology_mod.load(topology_ref), [s.strip() for s in servers.split(",")]))
    failed = check_mod.first_failure(rows)
    if as_json:
        emit_json({"ok": failed is None, "build": build.running(), "rows": [r.to_dict() for r in rows]})
    else:
        print_check(rows)
    if failed is not None:
        sys.exit(3)


def print_check(rows: list[check_mod.Row]) -> None:
    """One row a block, on a terminal and piped alike: `name: status: detail`, then `fix: ...` on a line of its
    own, wrapped at spaces within 80 columns (a command in a fix is never cut), continuation lines indented."""
    for r in rows:
        status, colour = ("ok", "green") if r.ok else ("missing", "red") if r.required else ("optional", "yellow")
        lines = [escape(line) for line in wrapped(f"{r.name}: {status}: {r.detail}")]
        lines[0] = f"[bold]{escape(r.name)}[/]: [{colour}]{status}[/]:" + lines[0][len(escape(f"{r.name}: {status}:")):]
        lines += [escape(line) for line in wrapped(f"fix: {r.fix}", indent=4, first=4)] if not r.ok and r.fix else []
        for line in lines:
            out.print(line, highlight=False, soft_wrap=True)


WIDTH = 80
"""What every table and line of text the CLI prints fits, whatever the terminal: 80 columns."""


def wrapped(text: str, *, indent: int = 4, first: int = 0) -> list[str]:
    """`text` in lines of at most WIDTH columns, broken at spaces only (a command or a path stays whole, even if
    it alone is wider), lines after the first indented."""
    return textwrap.wrap(text, min(out.width, WIDTH), initial_indent=" " * first, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False) or [""]


_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def print_fitted(renderable) -> None:
    """A table (or anything rich draws) at most WIDTH columns wide, without the spaces it pads lines with."""
    with out.capture() as captured:
        out.print(renderable, width=min(out.width, WIDTH))
    out.file.write(_TRAILING.sub(r"\1", captured.get()))
    out.file.flush()


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def list_shipped(as_json: bool) -> None:
    """The shipped scenarios and topologies, one line each."""
    from . import catalog

    doc = catalog.shipped()
    if as_json:
        emit_json(doc)
    else:
        print_lines(catalog.list_lines(doc))


@cli.command()
@click.argument("key", required=False, shell_complete=completer(_key_paths))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def explain(key: str | None, as_json: bool) -> None:
    """What a scenario or topology key means: its kind, unit, default and an example (e.g. workload.message,
    links.queue, events.action, transport_options.hold_window); without KEY, every key."""
    from . import catalog

    if key is None:
        if as_json:
            emit_json({"keys": catalog.keys.all_paths()})
        else:
            print_lines(catalog.index_lines())
        return
    entries = catalog.explain(key)
    if as_json:
        emit_json({"entries": entries})
    else:
        print_lines(catalog.explain_lines(entries))


@cli.command()
@click.argument("file", type=click.Choice(("scenario", "topology")), default="scenario")
def schema(file: str) -> None:
    """The JSON Schema of scenario (or topology) files, generated from the key table: save it where your editor
    looks, e.g. for the YAML language server a first line `# yaml-language-server: $schema=PATH`."""
    from .spec.schema import schema as make

    emit_json(make(file))


def print_lines(lines: list[str]) -> None:
    """Plain text, as it is (no markup, no wrapping beyond the lines' own)."""
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


@cli.group()
def trace() -> None:
    """Chakra execution traces: write small ones from a description, summarise any (docs/workloads.md)."""


@trace.command("make")
@click.argument("kind", type=click.Choice(trace_make.KINDS))
@click.option("--ranks", type=click.IntRange(2, 8192), required=True, help="One ET file per rank.")
@click.option("--layers", type=click.IntRange(1, 1000), default=4, show_default=True)
@click.option("--size", default="1MiB", show_default=True, help="Each rank's buffer per collective (comm_size).")
@click.option("--compute", default="1ms", show_default=True, help="Each layer's compute node.")
@click.option("--group", type=click.IntRange(2, 8192), default=4, show_default=True,
              help="Ranks per tensor-parallel or expert-parallel group (tp, moe, mixed).")
@click.option("--out", "folder", required=True, help="The folder to write <name>.<rank>.et into.")
@click.option("--name", default=None, help="The files' prefix (default: the kind).")
def trace_make_cmd(kind: str, ranks: int, layers: int, size: str, compute: str, group: int, folder: str,
                   name: str | None) -> None:
    """Write a small trace: dp (data-parallel all-reduce per layer), tp (tensor-parallel all-gather and
    reduce-scatter), moe (an MoE all-to-all pair per layer), or mixed (all three)."""
    from .units import seconds, size_bytes
    try:
        description = trace_make.Description(kind, ranks, layers, size_bytes(size), round(seconds(compute) * 1e6),
                                             group)
        description.check()
    except ValueError as exc:
        raise UsageError(f"trace make: {exc}") from None
    target = Path(folder)
    taken = [p for p in (target / f"{name or kind}.{r}.et" for r in range(ranks)) if p.exists()]
    if taken:
        raise UsageError(f"--out {folder}: {taken[0].name} exists: give an empty folder or another --name")
    paths = trace_make.write(description, target, name)
    out.print(f"wrote {len(paths)} files: {paths[0]} ... {paths[-1]}")


@trace.command("show")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def trace_show(path: str, as_json: bool) -> None:
    """A trace's ranks, ops, collectives and communicators, checked as a replay would (exit 2 on a bad one)."""
    from .spec.trace import resolve
    from .trace import TraceError, load
    from .trace.summary import lines, summarize
    try:
        doc = summarize(load(str(resolve(path, ""))))
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    if as_json:
        emit_json(doc)
        return
    for line in lines(doc):
        out.print(line, soft_wrap=True, markup=False, highlight=False)


@cli.group()
def topo() -> None:
    """Inspect and verify fabrics described by topology files."""


@topo.command("show")
@click.argument("file", shell_complete=TOPOLOGIES)
@click.option("--servers", type=click.IntRange(1, MAX_SERVERS), metavar="N",
              help="Also plan the fabric over N servers (Mininet Cluster): what each runs, which cables cross.")
@click.option("--placement", type=click.Choice(tuple(PLACEMENTS)), help=f"How --servers places the nodes "
              f"(default {PLACEMENT_DEFAULT}; docs/cluster.md).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def topo_show(file: str, servers: int | None, placement: str | None, as_json: bool) -> None:
    """The fabric: counts, names, paths per host pair; with --servers, its placement on them."""
    t = topology_mod.load(file)
    if placement and not servers:
        raise UsageError("--placement goes with --servers")
    assignment = None
    if servers:
        from .cluster.placement import assign
        assignment = assign(t, [f"server{i}" for i in range(servers)], placement or PLACEMENT_DEFAULT,
                            source=f"--servers {servers}")
    doc = {**t.to_dict(), "counts": {"hosts": t.hosts, "switches": len(t.switch_names), "links": len(t.links),
                                     "paths_per_host_pair": t.plan.paths_per_pair},
           "hosts": t.host_names, "leaves": t.leaf_names, "spines": t.spine_names,
           "links_list": [link.name for link in t.links],
           "hosts_per_leaf": {f"l{j}": [f"h{n}" for n in range(j * t.hosts_per_leaf, (j + 1) * t.hosts_per_leaf)]
                              for j in range(t.leaves)},
           "example_path": {"src": "h0", "dst": t.host_names[-1], "plane": 0, "spine": 0,
                            "address": str(t.plan.path_address(0, t.hosts - 1, 0, 0))}}
    if assignment:
        doc["placement"] = assignment.to_dict()
    if as_json:
        emit_json(doc)
        return
    table = Table(title=f"{t.name}  ({t.source})", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in (("planes", t.planes), ("leaves per plane", t.leaves), ("spines per plane", t.spines),
                       ("hosts", f"{t.hosts}  ({t.hosts_per_leaf} per leaf, one NIC per plane)"),
                       ("switches", len(t.switch_names)), ("links", len(t.links)),
                       ("paths per host pair", f"{t.plan.paths_per_pair}  (planes x spines)"),
                       ("host / fabric rate", f"{doc['links']['host_rate']} / {doc['links']['fabric_rate']}"),
                       ("queue, mtu, trim", f"{doc['links']['queue']}, {t.mtu}, {'on' if t.trim else 'off'}"),
                       ("hosts per leaf", " · ".join(f"{leaf}: {' '.join(hosts)}"
                                                     for leaf, hosts in doc["hosts_per_leaf"].items())
                        + "  (leaf l<j> of every plane, p<k>l<j>)"),
                       ("leaves", " ".join(t.leaf_names)), ("spines", " ".join(t.spine_names)),
                       *((f"{kind} links", " ".join(link.name for link in t.links if link.plane == 0 and
                                                     link.kind == key) + (f"  (and the same on p1..p{t.planes - 1})"
                                                                          if t.planes > 1 else ""))
                         for kind, key in (("host", "host"), ("leaf-spine", "fabric"))),
                       ("example path", f"h0 -> {t.host_names[-1]} via p0s0: {doc['example_path']['address']}")):
        table.add_row(key, str(value))
    print_fitted(table)
    if assignment:
        print_assignment(assignment)


def print_assignment(assignment) -> None:
    """One row per server; node names folded (`l0-1 on p0-3`: leaves 0 and 1 of planes 0 to 3)."""
    table = Table(title=f"placement {assignment.placement} on {len(assignment.shares)} servers",
                  caption="cables between servers: " + ", ".join(f"{kind} {assignment.crossing[kind]} of {total}"
                                                                 for kind, total in assignment.cables.items()),
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("server", "leaves", "spines", "hosts", "agents"):
        table.add_column(column, justify="right" if column == "agents" else "left", overflow="fold")
    for share in assignment.shares:
        table.add_row(share.server, fold(share.leaves), fold(share.spines), fold(share.hosts), str(share.agents))
    print_fitted(table)


def fold(names: tuple[str, ...]) -> str:
    """`p0l0 p0l1 p1l0 p1l1` -> `4: l0-1 on p0-1`; `h0 h1 h2` -> `3: h0-2`."""
    if not names:
        return "-"
    parts = [topology_mod.node_parts(name) for name in names]
    if parts[0][0] == "host":
        return f"{len(names)}: h{spans(index for _, _, index in parts)}"
    planes: dict[int, set[int]] = {}
    for _, plane, index in parts:
        planes.setdefault(index, set()).add(plane)
    indices_on: dict[str, list[int]] = {}
    for index, held in sorted(planes.items()):
        indices_on.setdefault(spans(held), []).append(index)
    letter = parts[0][0][0]
    return f"{len(names)}: " + ", ".join(f"{letter}{spans(indices)} on p{held}" for held, indices in indices_on.items())


def spans(numbers) -> str:
    """0 1 2 5 -> `0-2,5`."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


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


class _OutFolder(click.Path):
    """An `--out` folder: an empty name is refused (it would mean the default folder, which nobody typed)."""

    def convert(self, value, param, ctx):
        if value == "":
            self.fail("is empty: name a folder, or leave --out out for the default", param, ctx)
        return super().convert(value, param, ctx)


OUT_FOLDER = _OutFolder(file_okay=False)
ENGINE_OPTION = click.option("--engine", type=click.Choice(tuple(ENGINES)), default=None,
                             help="Where packets move (the scenario key engine; default lab): lab runs real packets, "
                                  "sim the same scenario in simulated time.")


@cli.command()
@click.argument("scenario", shell_complete=SCENARIOS)
@click.option("--out", "out_dir", type=OUT_FOLDER, help="Results directory "
              "(default results/<name>-<UTC timestamp>/).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario key by dotted path.")
@click.option("--capture", "capture", metavar="hosts|switches|all|LINK,...",
              help="Record pcapng files under DIR/capture/ (the scenario key capture.interfaces).")
@click.option("--capture-full", is_flag=True, help="Capture whole packets, not only headers (capture.packets=full).")
@click.option("--json", "as_json", is_flag=True, help="Print the results document only.")
@click.option("--dry-run", is_flag=True, help="Check everything that can be checked without a lab, print the "
              "resolved scenario and its expanded timeline, build nothing.")
@click.option("--progress-jsonl", type=click.Path(dir_okay=False), help="Also write the live view's records, "
              "one JSON object a line, to this file (what --target follows).")
@click.option("--target", envvar="MRCLAB_TARGET", metavar="[USER@]HOST[:PORT]|vagrant|vm",
              help="Run it on that machine over SSH and fetch the results here (env MRCLAB_TARGET).")
@click.option("--allow-concurrent", is_flag=True, help="Run even while another mrclab run is live here; both "
              "runs' fidelity is then not ok.")
@click.option("--servers", default=None, metavar="LIST", help="Run it over these servers: local (this machine, "
              "first) and [user@]host[:port], comma-separated (docs/cluster.md).")
@click.option("--placement", type=click.Choice(list(PLACEMENTS)), default=None,
              help=f"With --servers: what each server runs (default {PLACEMENT_DEFAULT}).")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False), default=None,
              help="Run it over the servers a cluster file names, placed as it says (docs/cluster.md).")
@ENGINE_OPTION
@ssh_options
def run(scenario: str, out_dir: str | None, overrides: tuple[str, ...], capture: str | None, capture_full: bool,
        as_json: bool, dry_run: bool, progress_jsonl: str | None, target: str | None, allow_concurrent: bool,
        servers: str | None, placement: str | None, cluster_file: str | None, engine: str | None,
        identity: str | None, known_hosts: str | None, accept_new_host_key: bool) -> None:
    """Run a scenario with a live progress view; write its results directory."""
    from . import preflight
    from .spec import scenario as scenario_mod

    overrides += ((f"capture.interfaces={capture}",) if capture is not None else ()) + (
        ("capture.packets=full",) if capture_full else ()) + ((f"engine={engine}",) if engine else ())
    spec = scenario_mod.load(scenario, list(overrides))
    preflight.check(spec)
    cluster = over_servers(spec, servers, placement, cluster_file)
    if cluster is not None and target:
        raise UsageError("--target runs the scenario on one machine over SSH; --servers and --cluster spread it over "
                         "several from here: give one or the other")
    if dry_run:
        from .launch import dry_run as dry_checks

        plan = preflight.plan(spec)
        if cluster is not None:
            plan["cluster"] = cluster.assignment.to_dict()
        plan["checks"] = dry_checks(spec, out_dir=out_dir, target=target,
                                    lab_here=cluster is None or cluster.servers[0] == "local")
        if as_json:
            emit_json(plan)
        else:
            import yaml
            sys.stdout.write(yaml.safe_dump(plan, sort_keys=False))
        return
    if target:
        if progress_jsonl:
            raise UsageError("--progress-jsonl is written where the run runs; with --target, leave it out")
        run_remote(spec, overrides, Path(out_dir) if out_dir else None, as_json,
                   reach(target, identity, known_hosts, accept_new_host_key))
        return
    if identity or known_hosts or accept_new_host_key:
        raise UsageError("--identity, --known-hosts and --accept-new-host-key go with --target")
    run_here(spec, overrides, results_dir(spec.name, out_dir), as_json=as_json, progress_jsonl=progress_jsonl,
             allow_concurrent=allow_concurrent, cluster=cluster)


def run_here(spec, overrides: tuple[str, ...], target_dir: Path, *, as_json: bool, progress_jsonl: str | None,
             allow_concurrent: bool, cluster) -> None:
    """`mrclab run` from this machine: here, or over `cluster`'s servers."""
    from .launch import start

    run_class = None
    if cluster is not None:
        from .cluster.run import ClusterRun
        run_class = functools.partial(ClusterRun, cluster=cluster)
    doc = start(spec, target_dir, console=None if as_json else err, overrides=override_map(overrides),
                progress_jsonl=Path(progress_jsonl) if progress_jsonl else None, allow_concurrent=allow_concurrent,
                run_class=run_class, lab_here=cluster is None or cluster.servers[0] == "local")
    if as_json:
        emit_json({**doc, "dir": str(target_dir)})
    else:
        _print_summary(doc, target_dir)
    if expectations.failed(doc["expectations"]):
        sys.exit(1)


def over_servers(spec, servers: str | None, placement: str | None, cluster_file: str | None):
    """The servers a run spreads over (`cluster.servers.Cluster`, not built), checked against the scenario; None for
    a run on one machine. Anything they cannot carry is exit 2 before anything runs."""
    if servers is None and cluster_file is None:
        if placement:
            raise UsageError("--placement goes with --servers")
        return None
    from .cluster.run import refuse
    from .cluster.servers import Cluster
    from .spec import cluster as cluster_spec

    if servers is not None and cluster_file is not None:
        raise UsageError("--servers and --cluster both name the servers: give one")
    if cluster_file is not None:
        if placement:
            raise UsageError("--placement goes with --servers; a cluster file says its own placement")
        named = cluster_spec.load(cluster_file)
        names, where = named.server_names, named.placement
    else:
        assert servers is not None
        names, where = [s.strip() for s in servers.split(",")], placement or PLACEMENT_DEFAULT
    cluster = Cluster(spec.topology, names, where, seed=spec.seed, run=spec.name, routing=spec.routing,
                      convergence_delay=spec.convergence_delay_s)
    refuse(spec, cluster)
    return cluster


@cli.command()
@click.argument("scenario", shell_complete=SCENARIOS)
@click.option("--grid", "grid", multiple=True, metavar="KEY=V1,V2,...",
              help="A scenario key (as --set) and the values it takes; several make a grid of every combination.")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Runs per point, with seeds seed, seed+1, ... (unless seed is on the grid).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a key at every point.")
@click.option("--out", "out_dir", type=OUT_FOLDER,
              help="Sweep folder (default results/sweep-<name>-<UTC timestamp>/); give an earlier one to resume it.")
@ENGINE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (the runs' rows) instead of a line.")
def sweep(scenario: str, grid: tuple[str, ...], repeat: int, overrides: tuple[str, ...], out_dir: str | None,
          engine: str | None, as_json: bool) -> None:
    """Run a grid of one scenario with repetitions; write runs.csv and summary.csv (median, 95% interval)."""
    from . import sweeps as sweep_mod

    overrides += (f"engine={engine}",) if engine else ()
    root, rows = sweep_mod.run(scenario, grid=grid, repeat=repeat, overrides=overrides, out_dir=out_dir,
                               console=None if as_json else err,
                               say=lambda line: err.print(escape(line), soft_wrap=True))
    failed = sum(1 for r in rows if r["status"] != "completed")
    if as_json:
        emit_json({"dir": str(root), "runs": rows, "runs_csv": str(root / "runs.csv"),
                   "summary_csv": str(root / "summary.csv")})
    else:
        out.print(f"sweep: {len(rows)} runs ({failed} not completed); {root / 'runs.csv'}, {root / 'summary.csv'}")
    if failed:
        sys.exit(1)


@cli.command()
@click.option("--only", metavar="ID,...", help="Only these claims, e.g. 9a,16.")
@click.option("--quick", is_flag=True, help="The quick subset (a few minutes).")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Runs of every claim, each with its own seed; a claim agrees when most of them do.")
@click.option("--out", "out_dir", type=OUT_FOLDER,
              help="Folder (default results/paper-<UTC timestamp>/); give an earlier one to finish it.")
def paper(only: str | None, quick: bool, repeat: int, out_dir: str | None) -> None:
    """Run the paper suite: MRC's published experiments at the lab's scale, judged claim by claim (paper.md)."""
    from . import paper as paper_mod
    from .spec import scenario as scenario_mod

    claims = paper_mod.select(only, quick)
    root = Path(out_dir) if out_dir else results_dir("paper", None)
    earlier = root.is_dir() and not root.is_symlink() and any(root.glob("*/results.json"))
    if not earlier:
        empty_out(root)
    todo = [(name, path, sets) for claim in claims for name, path, sets in paper_mod.runs(claim, repeat)
            if not (root / name / "results.json").exists()]
    if any(ENGINES[scenario_mod.load(path, list(sets)).engine].lab for _, path, sets in todo):
        require_lab()  # judging runs already there, or simulating, needs no lab
    root.mkdir(parents=True, exist_ok=True)
    from . import runner
    for name, path, sets in todo:
        folder = root / name
        err.print(f"paper: {name}: {path.name} {paper_mod.sets_text(sets)}", soft_wrap=True)
        try:
            runner.run_scenario(scenario_mod.load(path, list(sets)), folder, console=err,
                                overrides=override_map(tuple(sets)))
        except MrclabError as exc:
            err.print(f"paper: {name} failed: {escape(str(exc))}", soft_wrap=True)
    rows = [paper_mod.judge(claim, root, repeat) for claim in claims]
    command = "mrclab paper" + (f" --only {only}" if only else "") + (" --quick" if quick else "") + (
        f" --repeat {repeat}" if repeat > 1 else "")
    (root / "paper.json").write_text(json.dumps(rows, indent=2) + "\n")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    (root / "paper.md").write_text(paper_mod.markdown(rows, command, date))
    from .report import paper_page
    paper_page.write(root, rows, command, date)
    for r in rows:
        out.print(f"{r['id']:>6}  {r['verdict']:<15} {escape(r['lab'])}", soft_wrap=True)
    out.print(f"paper: {root / 'paper.md'}, {root / 'paper.html'}")
    if any(r["verdict"] in ("disagree", "not measured") for r in rows):
        sys.exit(1)


def _print_summary(doc: dict, target: Path) -> None:
    from .report.terminal import print_run
    print_run(doc, target, out=out, err=err)


def run_remote(spec, overrides: tuple[str, ...], out_dir: Path | None, as_json: bool, remote) -> None:
    from .remote import job as job_mod

    if out_dir is not None:
        empty_out(out_dir)
    with remote.conn:
        difference = job_mod.check(remote)
        if difference:  # the target runs everything itself: its build is its own affair, but worth a line
            err.print(f"note: {difference}", soft_wrap=True, markup=False, highlight=False)
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
            _print_summary(follower.done["results"] if follower.done else doc, local)
    elif files:
        err.print(f"{files} files fetched into {local}/")
    sys.exit(code)


@cli.command()
@click.argument("run_dir", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def report(run_dir: str, as_json: bool) -> None:
    """Write DIR/report.html (self-contained) and the PNG plots of one run into DIR."""
    from .report import write_report

    written = write_report(run_dir)
    if as_json:
        emit_json({"html": str(written.html), "plots": [str(p) for p in written.pngs], "not_drawn": written.missing})
        return
    for title, why in written.missing.items():
        err.print(f"not drawn: {title}: {why}", soft_wrap=True)
    out.print(f"report: {written.html}  ({len(written.pngs)} plots: {', '.join(p.name for p in written.pngs)})",
              soft_wrap=True)


@cli.command()
@click.argument("run_dirs", metavar="DIR...", nargs=-1, required=True)
@click.option("--out", "plot_file", type=click.Path(dir_okay=False),
              help="Where to write the comparison plot (PNG; default compare.png in the folder holding the runs; "
                   "needed when they are in several folders).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def compare(run_dirs: tuple[str, ...], plot_file: str, as_json: bool) -> None:
    """Side-by-side table of runs (worst of each row in red), and a comparison plot."""
    from .report import compare as compare_mod
    from .report.plots import save

    runs = compare_mod.load_all(list(run_dirs))
    target = Path(plot_file) if plot_file else compare_mod.default_plot_path(runs)
    if not target.parent.is_dir():
        raise UsageError(f"--out {target}: directory {target.parent} does not exist")
    save(compare_mod.figure(runs), target)
    if as_json:
        emit_json(compare_mod.document(runs, target))
    else:
        for warning in compare_mod.warnings(runs):
            err.print("\n".join(f"[yellow]{escape(line)}[/]" for line in wrapped(f"warning: {warning}")),
                      soft_wrap=True)
        print_fitted(compare_mod.table(runs))
        for line in compare_mod.repetition_lines(compare_mod.repetitions(runs)):
            print_lines(wrapped(line))
        print_lines(wrapped(f"plot: {target}"))


@topo.command("verify")
@click.argument("file", shell_complete=TOPOLOGIES)
@click.option("--datapath", type=click.Choice(DATAPATHS), default="auto", show_default=True,
              help="The switches: OVS bridges, Linux SRv6 routers, or what this machine runs best.")
@click.option("--servers", default=None, metavar="LIST",
              help="Build it over these servers: local (this machine, first) and [user@]host[:port], comma-separated.")
@click.option("--placement", type=click.Choice(list(PLACEMENTS)), default=PLACEMENT_DEFAULT, show_default=True,
              help="With --servers: what each server runs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def topo_verify(file: str, datapath: str, servers: str | None, placement: str, as_json: bool) -> None:
    """Build the fabric, probe every (src, dst, plane, spine) path, check each arrives through its spine, tear down."""
    t = topology_mod.load(file)
    if servers is not None:
        from .cluster.servers import Cluster
        from .cluster.servers import verify_topology as verify_over

        if datapath == "ovs":
            raise UsageError("--servers: a lab over several servers runs the linux datapath")
        cluster = Cluster(t, [s.strip() for s in servers.split(",")], placement)  # checked before anything runs
        require_environment()
        doc = verify_over(cluster)
    else:
        from .fabric.verify import verify_topology

        require_environment()
        doc = verify_topology(t, datapath=datapath)
    if as_json:
        emit_json(doc)
    else:
        timings = doc["timings_s"]
        table = Table(title=f"{t.name}: {doc['ok_paths']}/{doc['paths']} paths ok",
                      caption=f"{doc['datapath_detail']}; build {timings['build']:.1f}s, "
                              f"verify {timings['verify']:.1f}s, teardown {timings['teardown']:.1f}s")
        for column in ("spine", "paths", "arrived", "through spine, ok"):
            table.add_column(column, justify="right")
        for row in doc["spines"]:
            colour = "green" if row["ok"] == row["paths"] else "red"
            table.add_row(row["spine"], str(row["paths"]), str(row["arrived"]), f"[{colour}]{row['ok']}[/]")
        out.print(table)
        for f in doc["failed"][:20]:
            why = "did not arrive" if not f["arrived"] else "spine counters disagree"
            out.print(f"[red]FAIL[/] {f['src']} -> {f['dst']} plane {f['plane']} via {f['spine']} "
                      f"({f['address']}): {why}")
        if len(doc["failed"]) > 20:
            out.print(f"... and {len(doc['failed']) - 20} more (--json lists them all)")
    if not doc["ok"]:
        raise ExpectationFailed(f"{doc['paths'] - doc['ok_paths']} of {doc['paths']} paths failed verification")


@cli.command("cluster-server", hidden=True)
def cluster_server() -> None:
    """One server's share of a lab over several, spoken to on stdin and stdout (see mrclab.cluster.server)."""
    from .cluster.server import serve

    sys.exit(serve())


@cli.group()
def capture() -> None:
    """Work with the packet captures of a run (mrclab run --capture)."""


@capture.command("merge")
@click.argument("run_dir", metavar="DIR")
def capture_merge(run_dir: str) -> None:
    """Write DIR/capture/all.pcapng: every interface's packets in time order, interface names kept."""
    from .capture import merge

    out.print(f"merged: {merge(run_dir)}", soft_wrap=True)


@cli.command()
@click.option("--path", "path_only", is_flag=True, help="Print the dissector's path only.")
def wireshark(path_only: bool) -> None:
    """Where the shipped MRC dissector is, and how to load it into Wireshark or tshark."""
    from .wireshark import DISSECTOR, PERSONAL_PLUGINS

    if path_only:
        out.print(str(DISSECTOR), soft_wrap=True)
        return
    for line in (f"MRC dissector (Lua): {DISSECTOR}",
                 "",
                 "Load it for one session:",
                 f"  wireshark -X lua_script:{DISSECTOR} DIR/capture/all.pcapng",
                 f"  tshark -X lua_script:{DISSECTOR} -r DIR/capture/all.pcapng -Y 'mrc.flags.trimmed'",
                 "Or for good: copy it into your personal Lua plugins folder",
                 f"  mkdir -p {PERSONAL_PLUGINS} && cp {DISSECTOR} {PERSONAL_PLUGINS}/",
                 "",
                 "It decodes UDP port 4793 (preference mrc.udp_port) and the uSID path of the IPv6 destination",
                 "(preferences mrc.usid_block_bits, mrc.usid_node_bits). Filters: mrc.type == 1, mrc.conn == 3,",
                 "mrc.ev == 9, mrc.flags.trimmed, mrc.flags.retx, mrc.path.plane == 1, mrc.path.spine == 2."):
        out.print(line, soft_wrap=True, markup=False)


@cli.command("cluster-relay", hidden=True)
@click.argument("socket_path")
def cluster_relay(socket_path: str) -> None:
    """An agent's control channel over SSH: joins stdin and stdout to its socket (see mrclab.cluster.relay)."""
    from .cluster.relay import relay

    sys.exit(relay(socket_path))


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
@click.option("--out", "out_dir", type=OUT_FOLDER, help="Where to put it (default results/RUN_ID/).")
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
    """The lab VM (Debian 12) under QEMU, for `mrclab run --target vm`; files in .vm/. Its OVS kernel module makes
    datapath: auto run OVS bridges there rather than Linux SRv6 routers."""


@vm.command("build")
def vm_build() -> None:
    """Build the image: debootstrap, provision.sh --install-only in a chroot, mkfs.ext4 -d (minutes)."""
    from . import vm as vm_mod
    vm_mod.build(say=err.print)
    out.print(f"image: {vm_mod.DISK}")


@vm.command("box")
def vm_box() -> None:
    """Make a Vagrant box (libvirt provider) from the built image: `vagrant box add --name mrclab/bookworm BOX`."""
    from . import box as box_mod
    path = box_mod.build(say=err.print)
    out.print(f"box: {path}")


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
@click.option("--servers", default=None, metavar="LIST", help="Clean each of these servers instead, by its own "
              "records: local (this machine) and [user@]host[:port], comma-separated.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def clean(servers: str | None, as_json: bool) -> None:
    """Remove whatever interrupted mrclab runs left behind, and nothing else."""
    if servers is not None:
        from .cluster.servers import clean as clean_servers

        removed = clean_servers([s.strip() for s in servers.split(",")])
    else:
        removed = runstate.clean_stale()
    if as_json:
        emit_json({"removed": removed})
    elif removed:
        for item in removed:
            out.print(f"removed {item}")
    else:
        out.print("nothing to clean")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def ps(as_json: bool) -> None:
    """The live mrclab runs on this machine (runs, fabrics, checks): id, runner PID, age, what, and the folder."""
    live = runstate.live()
    if as_json:
        emit_json({"runs": live})
        return
    if not live:
        print_lines(["no live mrclab run on this machine (a run on the simulator builds nothing and holds no lab)"])
    for r in live:
        print_lines(wrapped(f"{r['run_id']}  pid {r['pid']}  {r['age_s'] // 60:.0f} min {r['age_s'] % 60:.0f} s  "
                            f"{r['what']}")
                    + wrapped(f"{r['dir']}: {r['status']}" if r["dir"] else "(no run folder)", first=4))


def crash_log(text: str) -> str:
    """Write a traceback to a new file no one else can have planted or redirected: created exclusively
    (mkstemp: O_EXCL, mode 0600) in root's own run-state directory, or the user's temp directory."""
    directory = None
    if os.geteuid() == 0:
        directory = runstate.private_root()
    try:
        fd, path = tempfile.mkstemp(prefix="crash-" if directory else "mrclab-crash-", suffix=".log",
                                    dir=directory)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return f"traceback in {path}"
    except OSError as exc:
        return f"traceback not saved: {exc.strerror}"


def main() -> None:
    try:
        cli.main(standalone_mode=False, complete_var="_MRCLAB_COMPLETE")  # also as python -m mrclab
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
        sys.stderr.write(one_line(f"mrclab: {exc}", 600) + "\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("mrclab: interrupted\n")
        sys.exit(130)
    except Terminated as exc:  # torn down already; the shell's code for death by that signal
        sys.stderr.write(f"mrclab: stopped by {exc}\n")
        sys.exit(128 + signal.Signals[str(exc)].value)
    except Exception as exc:  # a bug: one line for the user, the traceback in a file for us
        where = crash_log(traceback.format_exc())
        sys.stderr.write(one_line(f"mrclab: internal error: {type(exc).__name__}: {exc}") + f" ({where})\n")
        sys.exit(1)
    sys.exit(0)
