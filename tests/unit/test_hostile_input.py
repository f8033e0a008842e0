"""Hostile or careless spec files: every one is refused when it is read, with one short line (exit 2),
within a small time and memory bound; nothing reaches a lab."""
import resource
import subprocess
import sys
import time

import pytest
import yaml

from mrclab.errors import UsageError
from mrclab.spec import scenario as scenario_mod
from mrclab.spec import topology as topology_mod
from tests.conftest import REPO
from tests.unit.test_spec import BASE, merged


def refused(path, overrides=(), fragment=""):
    start = time.monotonic()
    with pytest.raises(UsageError) as info:
        scenario_mod.load(path, list(overrides))
    message = str(info.value)
    assert time.monotonic() - start < 10, "hung instead of refusing"
    assert "\n" not in message and len(message) < 700, message[:1000]
    assert fragment in message, message
    return message


def scenario_file(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def with_base(tmp_path, **changes):
    return scenario_file(tmp_path, yaml.safe_dump(merged(**changes)))


ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
    f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n" for i in range(8))


@pytest.mark.parametrize("text,fragment", [
    (ALIAS_BOMB, "aliases"),
    ("name: t\nname: u\n", "duplicate key 'name'"),
    (b"name: \xff\xfe\n", "not UTF-8"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested"),
    ("a: " + "[" * 40 + "]" * 40 + "\n", "nested more than"),
    ("a: [\n", "not valid YAML at line"),
])
def test_malformed_files_are_refused_with_one_line(tmp_path, text, fragment):
    refused(scenario_file(tmp_path, text), fragment=fragment)


def test_the_alias_bomb_costs_neither_time_nor_memory(tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    refused(scenario_file(tmp_path, ALIAS_BOMB), fragment="aliases")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


def test_only_regular_files_of_bounded_size_are_read(tmp_path):
    refused(with_base(tmp_path, topology="/dev/zero"), fragment="topology: /dev/zero: not a regular file")
    big = scenario_file(tmp_path, "# " + "x" * (2 << 20) + "\n", "big.yaml")
    refused(big, fragment="more than a spec file may hold")
    message = refused(with_base(tmp_path, topology="/" + "x" * 5000 + ".yaml"), fragment="no topology")
    assert len(message) < 400
    with pytest.raises(UsageError, match="not a regular file"):
        topology_mod.load("/dev/zero")


@pytest.mark.parametrize("changes,fragment", [
    ({"workload__message": "9" * 400 + "MiB"}, "workload.message"),
    ({"workload__message": 10 ** 400}, "workload.message"),
    ({"workload__steps": 10 ** 400}, "workload.steps"),
    ({"duration_limit": float("nan")}, "duration_limit"),
    ({"duration_limit": float("inf")}, "duration_limit"),
    ({"workload__hosts": ["h00", "h1"]}, "unknown host 'h00'"),
    ({"workload__hosts": ["h\u0660", "h1"]}, "unknown host"),
    ({"seed": 1 << 63}, "seed"),
    ({"events": [{"at_step": 1, "action": "rate", "target": "p0l0-p0s0", "rate": "0bit"}]}, "events[0].rate"),
    ({"events": [{"at_step": 1, "action": "loss", "target": "p0l0-p0s0", "rate": float("nan")}]}, "events[0].rate"),
    ({"duration_limit": "1000000s", "events": [{"at": "1s", "action": "flap", "target": "p0l0-p0s0",
                                                "period": "10ms", "until": "999999s"}]}, "10000 actions"),
    ({"transport_options": {"foo": 1}}, "unknown transport option 'foo'"),
    ({"transport_options": {"hold_window": "abc"}}, "hold_window"),
    ({"transport_options": {"hold_window": float("inf")}}, "hold_window"),
    ({"transport_options": {"mss": 9000}}, "does not fit MTU"),
    ({"transport_options": {"cc_md": 1.5}}, "cc_md"),
    ({"transport": "tcp", "transport_options": {"cc": False}}, "transport tcp takes no options"),
    ({"name": "../../../tmp/x"}, "name:"),
    ({"name": "/etc/x"}, "name:"),
    ({"name": ".."}, "name:"),
    ({"description": ["x"] * 10_000}, "description"),
])
def test_values_that_would_fail_after_the_lab_is_built_are_refused_when_read(tmp_path, changes, fragment):
    refused(with_base(tmp_path, **changes), fragment=fragment)


@pytest.mark.parametrize("override,fragment", [
    ("transport_options.foo=1", "unknown transport option 'foo'"),
    ("transport_options.hold_window=abc", "hold_window"),
    ("workload.steps.x=1", "steps is not a mapping"),
])
def test_overrides_are_validated_like_the_file(tmp_path, override, fragment):
    refused(with_base(tmp_path), [override], fragment=fragment)


def test_transport_options_take_units_and_resolve_to_seconds_and_bytes(tmp_path):
    s = scenario_mod.load(with_base(tmp_path, transport_options={"hold_window": "5ms", "cc_init_window": "64KiB",
                                                                 "ev_count": 16}))
    assert s.transport_options == {"hold_window": 0.005, "cc_init_window": 65536, "ev_count": 16}
    again = scenario_mod.from_mapping(yaml.safe_load(s.to_yaml()), "resolved")
    assert again.transport_options == s.transport_options


def test_every_transport_option_has_a_unit():
    import dataclasses

    from mrclab.transport.config import UNITS, TransportConfig
    assert set(UNITS) == {f.name for f in dataclasses.fields(TransportConfig)}


def test_topology_errors_name_the_scenarios_topology_key(tmp_path):
    topo = tmp_path / "bad.yaml"
    topo.write_text("planes: 0\n")
    message = refused(with_base(tmp_path, topology=str(topo)))
    assert message.startswith(f"{tmp_path / 's.yaml'}: topology: {topo}: planes:"), message


def test_canonical_host_names_still_load(tmp_path):
    s = scenario_mod.load(with_base(tmp_path, workload__hosts=["h0", "h3"]))
    assert s.workload.hosts == ("h0", "h3")
    assert topology_mod.parse_node("p10s0") == ("spine", 10, 0) and topology_mod.parse_node("p01s0") is None


def mrclab(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)


def test_cli_yaml_errors_and_bombs_are_one_line_exit_2(tmp_path):
    for text in ("a: [\n  b: {\n", ALIAS_BOMB):
        result = mrclab("run", str(scenario_file(tmp_path, text)), "--dry-run")
        assert result.returncode == 2, result
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_dry_run_prints_the_resolved_scenario_and_timeline_and_builds_nothing(tmp_path):
    path = with_base(tmp_path, events=[{"at": "0.1s", "action": "flap", "target": "p0l0-p0s0",
                                        "period": "40ms", "until": "0.2s"},
                                       {"at_step": 2, "action": "link_down", "target": "p1l1-p1s0"}],
                     transport_options={"hold_window": "3ms"})
    result = mrclab("run", str(path), "--dry-run", "--set", "workload.steps=8")
    assert result.returncode == 0, result.stderr
    plan = yaml.safe_load(result.stdout)
    assert plan["scenario"]["workload"]["steps"] == 8
    assert plan["scenario"]["transport_options"] == {"hold_window": 0.003}
    flap = [a for a in plan["timeline"] if a["event"] == 0]
    assert [a["action"] for a in flap] == ["link_down", "link_up", "link_down", "link_up", "link_down", "link_up"]
    assert {"at_step": 2, "action": "link_down", "target": "p1l1-p1s0", "event": 1} in plan["timeline"]
    assert plan["workload_length_s"]["ideal"] > 0
    assert not list(tmp_path.glob("results*")) and not (REPO / "results" / "t").exists()


def test_timed_events_after_the_workload_ends_are_refused(tmp_path):
    path = with_base(tmp_path, events=[{"at": "50s", "action": "link_down", "target": "p0l0-p0s0"}])
    result = mrclab("run", str(path), "--dry-run")
    assert result.returncode == 2 and "events[0].at: 50s is after the workload ends" in result.stderr, result.stderr


def test_every_shipped_scenario_passes_dry_run():
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        result = mrclab("run", str(path), "--dry-run", "--json")
        assert result.returncode == 0, (path, result.stderr)


def test_a_file_name_that_is_no_directory_name_gives_a_safe_default_name(tmp_path):
    path = tmp_path / "my run (v2).yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in BASE.items() if k != "name"}))
    assert scenario_mod.load(path).name == "my-run--v2-"
