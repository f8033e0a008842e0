"""Every error path of topology and scenario validation names the file and the key (exit 2 material)."""

import pytest
import yaml

from mrclab.errors import UsageError
from mrclab.spec import scenario as scenario_mod
from mrclab.spec import topology as topology_mod

BASE = {"name": "t", "topology": "clos-2p-2l-2s", "workload": {"pattern": "ring-allreduce", "steps": 4}}


def write(tmp_path, data, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def load(tmp_path, data, overrides=()):
    return scenario_mod.load(write(tmp_path, data), overrides)


def error(tmp_path, data, overrides=()):
    with pytest.raises(UsageError) as info:
        load(tmp_path, data, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def merged(**changes):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in changes.items():
        node = data
        parts = key.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return data


def test_shipped_topologies_load():
    for path in topology_mod.TOPOLOGY_DIR.glob("*.yaml"):
        topo = topology_mod.load(path)
        assert topo.name == path.stem
        assert len(topo.links) == topo.hosts * topo.planes + topo.planes * topo.leaves * topo.spines


def test_ecn_thresholds_default_to_shares_of_the_queue():
    """Marking starts at a quarter of the queue and is certain at three quarters, wherever the queue is set;
    either threshold may be given alone."""
    topo = topology_mod.from_mapping({"links": {"queue": "128KiB"}}, "t")
    assert (topo.ecn, topo.ecn_min_bytes, topo.ecn_max_bytes) == (True, 32 << 10, 96 << 10)
    topo = topology_mod.from_mapping({"links": {"ecn": False, "ecn_max": "64KiB"}}, "t")
    assert (topo.ecn, topo.ecn_min_bytes, topo.ecn_max_bytes) == (False, 16 << 10, 64 << 10)
    assert topo.to_dict()["links"] | {"ecn": False, "ecn_min": "16KiB", "ecn_max": "64KiB"} == topo.to_dict()["links"]


def test_topology_names_and_cabling():
    topo = topology_mod.load("clos-4p-4l-4s")
    assert topo.hosts == 8 and len(topo.switch_names) == 32 and len(topo.links) == 96
    assert topo.link("p0s2-p0l1") is topo.link("p0l1-p0s2")
    assert topo.link("h3-p2l1").plane == 2
    assert not topo.has_link("h3-p2l0")      # h3 hangs off leaf 1
    assert not topo.has_link("p0l1-p1s0")    # planes share nothing
    assert topo.has_switch("p3s3") and not topo.has_switch("p4s0") and not topo.has_switch("h1")


@pytest.mark.parametrize("links,fragment", [
    ({"planes": 0}, "planes: must be between 1"),
    ({"leaves": -2}, "leaves: must be between 1"),
    ({"spines": "four"}, "spines: expected a whole number"),
    ({"links": {"queue": "-64KiB"}}, "links.queue: a size cannot be negative"),
    ({"links": {"host_rate": "100"}}, "links.host_rate"),
    ({"links": {"mtu": 100}}, "links.mtu"),
    ({"links": {"queue": "1KiB"}}, "links.queue: must hold at least one MTU"),
    ({"links": {"colour": "red"}}, "links.colour: unknown key"),
    ({"flavour": 1}, "flavour: unknown key"),
    ({"planes": 16, "leaves": 64}, "more than engine lab runs faithfully"),
    ({"links": {"ecn": "sometimes"}}, "links.ecn: expected true or false"),
    ({"links": {"ecn_max": "65KiB"}}, "links.ecn_max: must be at most the queue (65536 bytes)"),
    ({"links": {"ecn_min": "10KiB", "ecn_max": "10KiB"}}, "links.ecn_min: ecn_min (10240 bytes) must be below"),
    ({"links": {"ecn_max": "8KiB"}}, "links.ecn_max: ecn_min (16384 bytes, 0.25 of the queue by default) must"),
    ({"links": {"ecn_min": "-1"}}, "links.ecn_min: a size cannot be negative"),
])
def test_topology_errors(tmp_path, links, fragment):
    path = write(tmp_path, {"name": "x", **links}, "topo.yaml")
    with pytest.raises(UsageError) as info:
        topology_mod.load(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


def test_missing_files_name_themselves(tmp_path):
    with pytest.raises(UsageError, match="no such scenario file"):
        scenario_mod.load(tmp_path / "absent.yaml")
    with pytest.raises(UsageError, match="no such topology file"):
        topology_mod.load("no-such-topology")


def test_not_yaml(tmp_path):
    assert "not valid YAML" in error(tmp_path, "name: [unclosed\n")


def test_defaults_are_filled_and_written(tmp_path):
    s = load(tmp_path, BASE)
    assert (s.transport, s.routing, s.seed, s.duration_limit_s) == ("mrc", "static-srv6", 1, 60.0)
    assert s.workload.hosts == ("h0", "h1", "h2", "h3") and s.workload.message_bytes == 1 << 20
    resolved = yaml.safe_load(s.to_yaml())
    assert resolved["topology"]["planes"] == 2 and resolved["workload"]["message"] == "1MiB"
    again = scenario_mod.from_mapping(resolved, "resolved")
    assert again.to_dict() == s.to_dict()


def test_overrides(tmp_path):
    s = load(tmp_path, BASE, ["transport=single-path", "workload.steps=7", "expect.failed_messages=0"])
    assert s.transport == "single-path" and s.workload.steps == 7 and s.expect == {"failed_messages": 0}
    assert "workload.stepz: unknown key" in error(tmp_path, BASE, ["workload.stepz=3"])
    with pytest.raises(UsageError, match="KEY=VALUE"):
        load(tmp_path, BASE, ["transport"])


def test_inline_topology(tmp_path):
    s = load(tmp_path, merged(topology={"planes": 1, "leaves": 2, "spines": 1, "hosts_per_leaf": 1}))
    assert s.topology.hosts == 2 and s.topology.name == "inline"


@pytest.mark.parametrize("changes,fragment", [
    ({"topology": None}, "topology: is required"),
    ({"topology": "clos-9p"}, "topology: no topology 'clos-9p'"),
    ({"topology": {"planes": 0}}, "planes: must be between"),
    ({"transport": "rdma"}, "transport: 'rdma' is not one of: mrc, single-path, roce, tcp"),
    ({"routing": "bgp"}, "routing: 'bgp' is not one of"),
    ({"seed": -1}, "seed: must be between 0 and"),
    ({"duration_limit": "0s"}, "duration_limit: must be more than 0s"),
    ({"workload__pattern": "broadcast"}, "workload.pattern: 'broadcast' is not one of"),
    ({"workload__pattern": None}, "workload.pattern: is required"),
    ({"workload__message": "-1MiB"}, "workload.message: a size cannot be negative"),
    ({"workload__message": 0}, "workload.message: must be between 1 byte"),
    ({"workload__steps": 0}, "workload.steps: must be between 1"),
    ({"workload__hosts": ["h0", "h9"]}, "workload.hosts: unknown host 'h9'"),
    ({"workload__hosts": ["h0"]}, "workload.hosts: a collective needs at least 2 hosts"),
    ({"workload__hosts": ["h0", "h0"]}, "workload.hosts: lists a host twice"),
    ({"workload__receiver": "h0"}, "workload.receiver: unknown key"),
    ({"workload__pattern": "incast", "workload__receiver": "h7"}, "workload.receiver: 'h7' is not one of"),
    ({"workload__pattern": "incast", "workload__receiver": "h0", "workload__senders": ["h0", "h1"]},
     "workload.senders: the receiver cannot also be a sender"),
    ({"events": {"at": 1}}, "events: expected a list"),
    ({"events": [{"at": "1s", "action": "explode", "target": "p0s0"}]}, "events[0].action: 'explode' is not one of"),
    ({"events": [{"at": "1s", "action": "link_down", "target": "p0l0-p1s0"}]}, "events[0].target: no link 'p0l0-p1s0'"),
    ({"events": [{"at": "1s", "action": "switch_down", "target": "p0s9"}]}, "events[0].target: no switch 'p0s9'"),
    ({"events": [{"action": "link_down", "target": "p0l0-p0s0"}]}, "events[0].at: give exactly one"),
    ({"events": [{"at": "1s", "at_step": 1, "action": "link_down", "target": "p0l0-p0s0"}]}, "give exactly one"),
    ({"events": [{"at": "90s", "action": "link_down", "target": "p0l0-p0s0"}]},
     "events[0].at: 90s is past the run's duration_limit"),
    ({"events": [{"at_step": 4, "action": "link_down", "target": "p0l0-p0s0"}]}, "events[0].at_step: step 4 is past"),
    ({"events": [{"at": "1s", "action": "loss", "target": "p0l0-p0s0", "rate": 1.5}]},
     "events[0].rate: must be between 0.0 and 1.0"),
    ({"events": [{"at": "1s", "action": "loss", "target": "p0l0-p0s0"}]}, "events[0].rate: is required"),
    ({"events": [{"at": "1s", "action": "rate", "target": "p0l0-p0s0", "rate": "fast"}]},
     "events[0].rate: expected a rate"),
    ({"events": [{"at": "1s", "action": "flap", "target": "p0l0-p0s0", "period": "1ms", "until": "3s"}]},
     "events[0].period: must be at least 10ms"),
    ({"events": [{"at": "4s", "action": "flap", "target": "p0l0-p0s0", "period": "100ms", "until": "3s"}]},
     "events[0].until: must be after"),
    ({"events": [{"at": "1s", "action": "link_down", "target": "p0l0-p0s0", "rate": 3}]},
     "events[0].rate: unknown key"),
    ({"transport_options": [1]}, "transport_options: expected a mapping"),
    ({"routing_options": {"convergence_delay": "soon"}}, "routing_options.convergence_delay"),
    ({"expect": {"min_goodput_fraction": 2}}, "expect.min_goodput_fraction: must be between 0.0 and 1.0"),
    ({"expect": {"happiness": 1}}, "expect.happiness: unknown key"),
    ({"expect": {"fidelity_ok": "yes"}}, "expect.fidelity_ok: expected true or false"),
    ({"bogus": 1}, "bogus: unknown key; allowed:"),
])
def test_scenario_errors(tmp_path, changes, fragment):
    message = error(tmp_path, merged(**changes))
    assert str(tmp_path / "s.yaml") in message
    assert fragment in message, message


def test_events_parse(tmp_path):
    s = load(tmp_path, merged(events=[
        {"at": "3s", "action": "link_down", "target": "p0s1-p0l1"},
        {"at_step": 2, "action": "switch_down", "target": "p1s0"},
        {"at": "2s", "action": "flap", "target": "p1l1-p1s0", "period": "200ms", "until": "8s"},
        {"at": "4s", "action": "rate", "target": "h0-p0l0", "rate": "20Mbit"},
    ]))
    down, switch, flap, rate = s.events
    assert (down.at_s, down.target) == (3.0, "p0s1-p0l1")
    assert switch.at_step == 2 and switch.at_s is None
    assert (flap.period_s, flap.until_s) == (0.2, 8.0)
    assert rate.rate_bps == 20e6 and rate.loss_probability is None


def test_shipped_scenarios_validate_and_round_trip():
    paths = sorted(scenario_mod.SCENARIO_DIR.glob("*.yaml"))
    assert {p.stem for p in paths} >= {"quickstart", "smoke", "link-failure", "switch-failure", "flap-storm",
                                       "incast", "lossy-link"}
    for path in paths:
        s = scenario_mod.load(path)
        assert s.name == path.stem
        assert scenario_mod.from_mapping(s.to_dict(), "resolved").to_dict() == s.to_dict()


@pytest.mark.parametrize("data,fragment", [
    ({**{k: v for k, v in BASE.items() if k != "workload"}, "worklaod": BASE["workload"]},
     "worklaod: unknown key (did you mean workload?); allowed:"),
    (merged(workload__stepz=3), "workload.stepz: unknown key (did you mean steps?)"),
    (merged(expect={"max_avoid": "1s"}), "expect.max_avoid: unknown key (did you mean max_avoid_s?)"),
    ({**BASE, "topology": {"planes": 2, "links": {"fabirc_rate": "10Mbit"}}},
     "links.fabirc_rate: unknown key (did you mean fabric_rate?)"),
    ({**BASE, "topology": "clos-2p-2l-3s"}, "topology: no topology 'clos-2p-2l-3s' (did you mean clos-2p-2l-2s?)"),
])
def test_a_misspelt_key_or_name_is_named_with_what_was_meant(tmp_path, data, fragment):
    """A typo is named as a typo, before the key it was meant to be is missed (which read 'workload.pattern: is
    required' for `worklaod:`)."""
    assert fragment in error(tmp_path, data)


def test_a_misspelt_scenario_name_says_what_was_meant_and_what_is_shipped():
    with pytest.raises(UsageError) as info:
        scenario_mod.load("quickstar")
    assert "no such scenario file (did you mean quickstart?); shipped: " in str(info.value)
    assert "link-failure" in str(info.value)


def test_set_reaches_into_a_named_topology(tmp_path):
    """`--set topology.links.fabric_rate=10Mbit` changes the named topology (it read 'topology is not a mapping'),
    keeping its name and every other key of its file."""
    s = load(tmp_path, BASE, ["topology.links.fabric_rate=10Mbit", "topology.links.queue=128KiB"])
    shipped = topology_mod.load("clos-2p-2l-2s")
    assert s.topology.name == "clos-2p-2l-2s" and s.topology.fabric_rate_bps == 10_000_000
    assert s.topology.queue_bytes == 128 << 10 and s.topology.host_rate_bps == shipped.host_rate_bps
    assert "links.fabric_rat: unknown key (did you mean fabric_rate?)" in error(
        tmp_path, BASE, ["topology.links.fabric_rat=1Mbit"])
