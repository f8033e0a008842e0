"""The CLI's contract: exit codes, one-line errors, --json prints one document."""
import io
import json
import os
import re
import subprocess
import sys

import click
import pytest
from rich.console import Console

from mrclab import check, cli
from tests.conftest import REPO


def mrclab(*args):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO)


def assert_one_line_error(result, code, fragment):
    assert result.returncode == code, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_topo_show_json():
    result = mrclab("topo", "show", "clos-4p-4l-4s", "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["counts"] == {"hosts": 8, "switches": 32, "links": 96, "paths_per_host_pair": 16}
    assert doc["example_path"]["address"] == "fcbb:0:1000:2000:1003:4007::"
    assert doc["hosts_per_leaf"] == {"l0": ["h0", "h1"], "l1": ["h2", "h3"], "l2": ["h4", "h5"], "l3": ["h6", "h7"]}


def narrow(*args):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "COLUMNS": "80", "LINES": "24"}, check=False)


def test_topo_show_names_hosts_per_leaf_and_links_at_80_columns():
    result = narrow("topo", "show", "clos-2p-2l-2s")
    assert result.returncode == 0 and max(map(len, result.stdout.splitlines())) <= 80
    assert all(line == line.rstrip() for line in result.stdout.splitlines()), "lines padded with spaces"
    wide = subprocess.run([sys.executable, "-m", "mrclab", "topo", "show", "clos-8p-4l-4s"], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"}, check=True)
    assert max(map(len, wide.stdout.splitlines())) <= 80
    assert "l0: h0 h1 · l1: h2 h3" in result.stdout
    assert "h0-p0l0 h1-p0l0 h2-p0l1 h3-p0l1" in result.stdout
    assert "p0l0-p0s0 p0l0-p0s1 p0l1-p0s0 p0l1-p0s1" in result.stdout


def test_check_piped_prints_each_row_from_a_line_of_its_own_within_80_columns():
    result = narrow("check")
    assert result.stdout and "…" not in result.stdout
    for line in result.stdout.splitlines():
        assert re.match(r"[^: ][^:]*: (ok|missing|optional): ", line) or line.startswith("    "), line
        assert len(line) <= 80 and line == line.rstrip(), line


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("terminal", [False, True])
def test_check_rows_are_not_folded_into_fragments_at_80_columns(monkeypatch, terminal):
    """A fix is a command to copy: it is never cut (a table on a terminal read `vagrant/provision.` / `sh`), and no
    line is wider than 80 columns or ends in spaces, on a terminal of 200 columns or piped."""
    rows = [check.Row("root", True, "running as root", "run with sudo"),
            check.Row("datapath", False, "neither kernel SRv6, the OVS kernel module nor OVS's userspace "
                      "datapath works", check.PROVISION),
            check.Row("packet capture (optional)", False, "dumpcap, mergecap and tshark not found: `mrclab run "
                      "--capture` cannot run", check.PROVISION, required=False)]
    monkeypatch.setattr(check, "rows", lambda: rows)
    piped = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=piped, width=200 if terminal else 80, highlight=False,
                                            force_terminal=terminal))
    with pytest.raises(SystemExit) as exited:
        cli.cli.main(["check"], standalone_mode=False)
    assert exited.value.code == 3
    lines = ANSI.sub("", piped.getvalue()).splitlines()
    assert lines == ["root: ok: running as root",
                     "datapath: missing: neither kernel SRv6, the OVS kernel module nor OVS's",
                     "    userspace datapath works",
                     f"    fix: {check.PROVISION}",
                     "packet capture (optional): optional: dumpcap, mergecap and tshark not found:",
                     "    `mrclab run --capture` cannot run",
                     f"    fix: {check.PROVISION}"]
    assert ("\x1b[" in piped.getvalue()) == terminal


def help_texts(command: click.Command, path: str = "mrclab"):
    """(where, text) for a command's own help, its options' and its subcommands', all the way down."""
    yield path, command.help or ""
    for param in command.params:
        yield f"{path} {param.name}", getattr(param, "help", None) or ""
    for name, sub in getattr(command, "commands", {}).items():
        yield from help_texts(sub, f"{path} {name}")


def test_help_names_both_datapaths_and_none_claims_ovs_only():
    top = " ".join(mrclab("--help").stdout.split())
    assert "Open vSwitch" in top and "Linux SRv6" in top and "datapath: auto" in top, top
    for where, text in help_texts(cli.cli):
        if re.search(r"\bOVS\b|Open vSwitch", text):
            assert "SRv6" in text, f"{where}: {text}"


def test_topo_show_servers_prints_what_each_server_runs_at_80_columns():
    result = narrow("topo", "show", "clos-8p-4l-4s", "--servers", "3")
    assert result.returncode == 0 and max(map(len, result.stdout.splitlines())) <= 80
    assert "placement pods on 3 servers" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.lstrip().startswith("server")][1:]
    assert rows[0] == ["server0", "16:", "l0-1", "on", "p0-7", "10:", "s0", "on", "p0-7,", "s1", "on", "p0-1",
                       "4:", "h0-3", "4"]
    assert "host-leaf 0 of 64, leaf-spine 86 of 128" in result.stdout
    planes = narrow("topo", "show", "clos-4p-4l-4s", "--servers", "2", "--placement", "planes")
    assert "8: l0-3 on p0-1" in planes.stdout and "host-leaf 16 of 32, leaf-spine 0 of 64" in planes.stdout


def test_topo_show_servers_json():
    result = mrclab("topo", "show", "clos-4p-4l-4s", "--servers", "2", "--json")
    assert result.returncode == 0
    placement = json.loads(result.stdout)["placement"]
    assert placement["name"] == "pods" and placement["crossing_cables"] == {"host-leaf": 0, "leaf-spine": 32}
    assert placement["cables"] == {"host-leaf": 32, "leaf-spine": 64}
    assert [s["server"] for s in placement["servers"]] == ["server0", "server1"]
    assert placement["servers"][1]["hosts"] == ["h4", "h5", "h6", "h7"] and placement["servers"][1]["agents"] == 4
    assert len(placement["servers"][0]["leaves"]) == 8 and "p3l1" in placement["servers"][0]["leaves"]


@pytest.mark.parametrize("args,fragment", [
    (["--servers", "0"], "'--servers': 0 is not in the range 1<=x<=64"),
    (["--servers", "-1"], "'--servers': -1 is not in the range"),
    (["--servers", "65"], "'--servers': 65 is not in the range"),
    (["--servers", "two"], "'--servers': 'two' is not a valid integer"),
    (["--servers", "5"], "--servers 5: pods placement: 5 servers is more than the fabric's 4 leaf positions"),
    (["--servers", "5", "--placement", "planes"], "--servers 5: planes placement: 5 servers is more than the "
                                                  "fabric's 4 planes"),
    (["--servers", "2", "--placement", "rack"], "'--placement': 'rack' is not one of 'pods', 'planes'"),
    (["--placement", "planes"], "--placement goes with --servers"),
])
def test_topo_show_bad_servers_exit_2(args, fragment):
    assert_one_line_error(mrclab("topo", "show", "clos-4p-4l-4s", *args), 2, fragment)


@pytest.mark.parametrize("args,fragment", [
    (["topo", "show", "/nonexistent/t.yaml"], "/nonexistent/t.yaml: no such topology file"),
    (["topo", "show"], "Missing argument"),
    (["no-such-command"], "No such command"),
    (["topo", "show", "clos-2p-2l-2s", "--colour"], "No such option"),
])
def test_bad_usage_exits_2(args, fragment):
    assert_one_line_error(mrclab(*args), 2, fragment)


def test_zero_planes_exits_2(tmp_path):
    path = tmp_path / "zero.yaml"
    path.write_text("planes: 0\n")
    assert_one_line_error(mrclab("topo", "show", str(path)), 2, f"{path}: planes: must be between 1 and 16")


@pytest.mark.parametrize("out, fragment", [
    ("/proc/mrclab-x", "is under /proc, not a real file system"),
    ("/sys/mrclab-x/y", "is under /sys, not a real file system"),
    ("/etc/hostname/x", "/etc/hostname is a file, not a folder"),
    ("", "'--out': is empty"),  # not the default folder, which nobody typed
])
def test_a_bad_out_folder_is_refused_before_any_lab(out, fragment):
    result = mrclab("run", "smoke", "--out", out)
    assert result.returncode == 2 and fragment in result.stderr and len(result.stderr.splitlines()) == 1
    assert "internal error" not in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a read-only tmpfs (root)")
def test_an_out_folder_on_a_read_only_file_system_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        result = mrclab("run", "smoke", "--out", str(ro / "x"))
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    assert result.returncode == 2 and "is on a read-only file system" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="run records live in root's /run/mrclab")
def test_a_second_concurrent_run_is_refused_with_one_line():
    from mrclab import runstate
    owner = subprocess.Popen(["sleep", "30"])
    record = runstate.RunState("zz9", owner.pid, runstate.proc_start_time(owner.pid), "run quickstart")
    runstate.private_root()
    record.save()
    try:
        result = mrclab("run", "smoke")
    finally:
        record.path.unlink()
        owner.kill()
        owner.wait()
    assert result.returncode == 3 and len(result.stderr.splitlines()) == 1
    assert "another mrclab run is live on this machine (" in result.stderr
    assert f"run zz9 (quickstart, pid {owner.pid})" in result.stderr
    assert "--allow-concurrent" in result.stderr


@pytest.mark.parametrize("args, fragment", [
    (["topo", "verify", "clos-2p-2l-2s", "--servers", "local"], "needs at least two"),
    (["topo", "verify", "clos-2p-2l-2s", "--servers", "root@lab1,local"], "can only be the first server"),
    (["topo", "verify", "clos-2p-2l-2s", "--servers", "local,lab1,lab1"], "named twice"),
    (["topo", "verify", "clos-2p-2l-2s", "--servers", "local,a@b@c"], "--servers 'a@b@c': expected"),
    (["topo", "verify", "clos-2p-2l-2s", "--servers", "local,lab1", "--datapath", "ovs"], "linux datapath"),
    (["topo", "verify", "clos-2p-2l-2s", "--servers", "local,lab1,lab2,lab3"], "--servers:"),
    (["check", "--servers", "local,-oProxyCommand=x"], "starts with '-'"),
    (["run", "smoke", "--servers", "local"], "needs at least two"),
    (["run", "smoke", "--servers", "local,lab1", "--placement", "planes"], "host cables between two servers"),
    (["run", "smoke", "--servers", "local,lab1", "--set", "datapath=ovs"], "runs the linux datapath, not ovs"),
    (["run", "smoke", "--servers", "local,lab1", "--engine", "sim"], "runs real packets (engine lab)"),
    (["run", "smoke", "--servers", "local,lab1", "--capture", "hosts"], "leave capture off"),
    (["run", "smoke", "--servers", "local,lab1,lab2"], "pods placement: 3 servers is more than"),
    (["run", "smoke", "--servers", "local,lab1", "--cluster", "c.yaml"], "both name the servers"),
    (["run", "smoke", "--servers", "local,lab1", "--target", "lab2"], "give one or the other"),
    (["run", "smoke", "--placement", "planes"], "--placement goes with --servers"),
    (["run", "smoke", "--cluster", "/nonexistent/c.yaml"], "c.yaml"),
    (["clean", "--servers", ""], "name at least one server"),
    (["clean", "--servers", "local,a@b@c"], "--servers 'a@b@c': expected"),
])
def test_servers_that_cannot_be_a_cluster_are_refused_before_anything_starts(args, fragment):
    assert_one_line_error(mrclab(*args), 2, fragment)


def test_a_cluster_file_is_placed_and_checked_before_anything_starts(tmp_path):
    planes = tmp_path / "planes.yaml"
    planes.write_text("servers: [local, root@lab2]\nplacement: planes\n")
    assert_one_line_error(mrclab("run", "smoke", "--cluster", str(planes)), 2, "host cables between two servers")
    short = tmp_path / "short.yaml"
    short.write_text("servers: [local, root@lab2]\nplacement: {h0: 0}\n")
    assert_one_line_error(mrclab("run", "smoke", "--cluster", str(short)), 2, "every node needs a server")
    dry = mrclab("run", "smoke", "--servers", "local,root@lab2", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert [s["hosts"] for s in json.loads(dry.stdout)["cluster"]["servers"]] == [["h0", "h1"], ["h2", "h3"]]


def test_list_names_every_shipped_scenario_and_topology_in_one_line_each():
    result = narrow("list")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 and line == line.rstrip() for line in lines)
    assert any(line.startswith("  quickstart ") and "The default lab." in line for line in lines), lines
    assert any(line.startswith("  clos-4p-4l-4s ") and "4 planes, 4 leaves, 4 spines" in line for line in lines)
    doc = json.loads(mrclab("list", "--json").stdout)
    assert {s["name"] for s in doc["scenarios"]} >= {"quickstart", "smoke", "link-failure"}
    assert {t["name"] for t in doc["topologies"]} >= {"clos-2p-2l-2s", "clos-4p-4l-4s"}


def test_explain_says_meaning_kind_unit_default_and_example():
    result = narrow("explain", "workload.message")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for fragment in ("Bytes each host sends per step.", "size, in bytes (B, KiB, MiB, GiB", "default:  1MiB",
                     "example:  message: 4MiB", "--set workload.message=4MiB", "with pattern stream",
                     "default:  64KiB"):
        assert fragment in text, text
    assert all(len(line) <= 80 and line == line.rstrip() for line in text.splitlines())
    topology = json.loads(mrclab("explain", "links.queue", "--json").stdout)["entries"]
    assert topology == [{"key": "links.queue", "file": "topology", "meaning": topology[0]["meaning"],
                         "kind": "size, in bytes (B, KiB, MiB, GiB; a bare number is bytes)", "default": "64KiB",
                         "example": "64KiB", "unit": "bytes (B, KiB, MiB, GiB; a bare number is bytes)"}]
    option = narrow("explain", "transport_options.hold_window").stdout
    assert "holds its path" in option and "default:  0.0005" in option
    assert "events[].period" in narrow("explain", "events.period").stdout
    assert narrow("explain").stdout.count("\n") > 60


def test_explain_a_misspelt_key_says_what_was_meant():
    assert_one_line_error(mrclab("explain", "worklod.mesage"), 2, "no key 'worklod.mesage' in a scenario or "
                          "topology file (did you mean workload.message?)")


def test_a_misspelt_scenario_on_the_command_line_names_the_shipped_ones():
    assert_one_line_error(mrclab("run", "quickstar", "--dry-run"), 2, "(did you mean quickstart?); shipped: ")


def test_schema_prints_the_generated_schema():
    doc = json.loads(mrclab("schema").stdout)
    assert doc["$schema"].endswith("2020-12/schema") and "workload" in doc["properties"]
    assert "links" in json.loads(mrclab("schema", "topology").stdout)["properties"]


def test_a_run_summary_sets_the_warm_up_apart_and_ends_with_the_next_command(tmp_path):
    result = narrow("run", "smoke", "--engine", "sim", "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith(f"next: mrclab report {tmp_path / 'run'}"), lines[-1]
    assert re.search(r"^warm-up +step 0: [0-9.]+ ms \(not in p50, p100\)", result.stdout, re.M), result.stdout
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    steps = [s["duration_s"] for s in doc["steps"]]
    st = doc["summary"]["step_time_s"]
    assert st["from_step"] == 1 and st["warmup_s"] == steps[0] and st["p100"] == max(steps[1:])


@pytest.mark.parametrize("args,code,fragment", [
    (["--out", "/proc/nope"], 2, "--out /proc/nope: is under /proc"),
    (["--target", "bad host;rm"], 2, "--target 'bad host;rm': expected [user@]host[:port]"),
    (["--target", "alice@lab1", "--out", "/proc/x"], 2, "--out /proc/x: is under /proc"),
])
def test_dry_run_checks_out_and_target_as_the_run_would(args, code, fragment):
    """A dry run exited 0 with `--out /proc/nope` and with `--target 'bad host;rm'`: the run itself refused them."""
    assert_one_line_error(mrclab("run", "smoke", "--dry-run", *args), code, fragment)


def test_dry_run_says_what_it_checked_and_the_datapath_auto_picks(tmp_path):
    sim = json.loads(mrclab("run", "smoke", "--dry-run", "--json", "--engine", "sim", "--out",
                            str(tmp_path / "r")).stdout)["checks"]
    assert sim == {"out": str(tmp_path / "r"), "machine": "engine sim builds nothing: no lab to check"}
    remote = json.loads(mrclab("run", "smoke", "--dry-run", "--json", "--target", "alice@lab1:2222").stdout)
    assert remote["checks"]["target"].startswith("alice@lab1:2222: well-formed, not contacted")
    if os.geteuid() != 0:
        assert_one_line_error(mrclab("run", "smoke", "--dry-run"), 3, "`mrclab check` row 'root' fails")
        return
    lab = mrclab("run", "smoke", "--dry-run", "--json")
    if lab.returncode == 3:  # this machine cannot run a lab: said as the run would say it
        assert_one_line_error(lab, 3, "cannot run a lab: `mrclab check` row")
        return
    checks = json.loads(lab.stdout)["checks"]
    assert checks["machine"] == "can run a lab (mrclab check)" and checks["out"].startswith("results/smoke-")
    assert re.fullmatch(r"auto -> (linux|ovs): .+", checks["datapath"]), checks
    assert not (REPO / checks["out"]).exists()


@pytest.mark.parametrize("words,expected", [
    ("mrclab ru", "plain,run"), ("mrclab run quick", "plain,quickstart"), ("mrclab sweep perm", "plain,permutation"),
    ("mrclab topo show clos-2", "plain,clos-2p-2l-2s"), ("mrclab explain workload.mes", "plain,workload.message"),
    ("mrclab run ./my", "file,./my"),
])
def test_tab_completion_of_commands_scenarios_topologies_and_keys(words, expected):
    """click's completion: `eval "$(_MRCLAB_COMPLETE=bash_source mrclab)"` in bash."""
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
           "_MRCLAB_COMPLETE": "bash_complete"}
    result = subprocess.run([sys.executable, "-m", "mrclab"], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.stdout.split() == [expected], result


def test_every_command_the_readme_gives_json_has_it():
    readme = (REPO / "README.md").read_text()
    promised = readme[readme.index("`--json` prints one JSON document"):].split("\n\n")[0]
    names = re.findall(r"`([a-z][a-z ]+?)`(?=[,: ]| \()", promised.split("(`mrclab schema")[0])
    assert {"check", "report", "sweep", "compare", "ps", "list", "explain"} <= set(names), names
    for name in names:
        command = cli.cli
        for part in name.split():
            command = command.commands[part]
        assert "as_json" in {p.name for p in command.params}, f"mrclab {name} has no --json"


def test_report_json_is_one_document(tmp_path):
    from tests.report_fixture import make_run

    make_run(tmp_path / "run", kind="mrc")
    result = mrclab("report", str(tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["html"] == str(tmp_path / "run" / "report.html") and doc["plots"] and isinstance(doc["not_drawn"], dict)
