"""The JSON Schema (generated from spec/keys.py) and the loaders agree: every key the loaders accept is in the
schema and every key of the schema is accepted; every shipped scenario and topology validates against it."""
import copy
import json
import re

import jsonschema
import pytest
import yaml

from mrclab.spec import scenario as scenario_mod
from mrclab.spec import topology as topology_mod
from mrclab.spec.reader import Reader
from mrclab.spec.schema import schema
from mrclab.transport.config import UNITS

SCENARIO_SCHEMA, TOPOLOGY_SCHEMA = schema("scenario"), schema("topology")
SCENARIOS, TOPOLOGIES = (jsonschema.Draft202012Validator(s) for s in (SCENARIO_SCHEMA, TOPOLOGY_SCHEMA))
SCHEMA_LINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


def schema_paths(node: dict, path: str = "", root: dict | None = None) -> set[str]:
    """Every key path the schema names: properties, conditional ones, and a list's items as `name[]`."""
    root = root or node
    if "$ref" in node:
        node = {**node, **root["$defs"][node["$ref"].removeprefix("#/$defs/")]}
    out: set[str] = set()
    for name, sub in node.get("properties", {}).items():
        out |= {f"{path}{name}"} | schema_paths(sub, f"{path}{name}.", root)
    for name in node.get("propertyNames", {}).get("enum", []):
        out.add(f"{path}{name}")
    for rule in node.get("allOf", []):
        out |= schema_paths(rule.get("then", {}), path, root)
    for alternative in node.get("anyOf", []):
        out |= schema_paths(alternative, path, root)
    if "items" in node:
        out |= schema_paths(node["items"], path[:-1] + "[].", root)
    return out


def record(monkeypatch) -> tuple[set[str], set[str]]:
    """(keys the loaders read, keys their mappings allow), as dotted paths, while the patch lasts."""
    read: set[str] = set()
    allowed: set[str] = set()

    def tagged(tag: str):
        class Recording(Reader):
            def path(self, name: str) -> str:
                return re.sub(r"\[\d+\]", "[]", f"{tag}{self.prefix}{name}")

            def raw(self, name, default=None):
                read.add(self.path(name))
                return super().raw(name, default)

            def get(self, name, convert, default=..., what=""):
                read.add(self.path(name))
                return super().get(name, convert, default, what)

            def sub(self, name):
                read.add(self.path(name))
                self.seen.add(name)
                return Recording(self.data.get(name), self.source, f"{self.key(name)}.")

            def only(self, names):
                allowed.update(self.path(n) for n in names)
                super().only(names)

            def done(self, names=None):
                allowed.update(self.path(n) for n in names or ())
                super().done(names)
        return Recording

    monkeypatch.setattr(scenario_mod, "Reader", tagged(""))
    monkeypatch.setattr(topology_mod, "Reader", tagged("topology."))
    return read, allowed


TOPOLOGY = {"name": "every-key", "planes": 2, "leaves": 2, "spines": 2, "hosts_per_leaf": 2,
            "links": {"host_rate": "100Mbit", "fabric_rate": "100Mbit", "queue": "64KiB", "mtu": 9000, "trim": True,
                      "ecn": True, "ecn_min": "16KiB", "ecn_max": "48KiB"}}
OPTIONS = {"mss": 8000, "ev_count": 16, "ev_spares": 0, "ev_min_active": 2, "probe_interval": "5ms",
           "probe_interval_max": "100ms", "probe_successes": 3, "rto_min": "50ms", "rto_initial": "100ms",
           "rto_max": "500ms", "max_retransmits": 50, "reorder_window": "2ms", "reorder_rttvar": 4,
           "reorder_window_max": "20ms", "hold_window": "500us", "skip_rtts": 2, "sack_every": 4,
           "sack_delay": "200us", "cc": True, "cc_algorithm": "nscc", "dcqcn_period": "1ms", "dcqcn_g": 0.0625,
           "dcqcn_ai": 0.02, "cc_init_window": "128KiB", "cc_max_window": "4MiB", "cc_base_rtt": "1ms",
           "cc_target_delay": "4ms", "cc_delay_filter": 1, "cc_ai": 1.0, "cc_fi": 1.0, "cc_md": 0.5,
           "cc_trim_md": 0.3, "pace_rate": 0, "pace_depth": "32KiB", "pace_slack": "1ms", "pace_ahead": "4ms",
           "nic_rate": 0, "single_path": False, "go_back_n": False, "max_message": "1GiB"}
EVERY_KEY = [
    {"name": "every-key", "description": "Every key once.", "engine": "lab", "topology": TOPOLOGY,
     "routing": "static-srv6", "datapath": "auto", "duration_limit": "60s", "seed": 3, "transport": "mrc",
     "workload": {"name": "fan-in", "pattern": "incast", "connections": 2,
                  "expect": {"failed_messages": 0, "min_goodput_bps": "1Mbit", "min_bin_fraction": 0.1},
                  "transport": "single-path", "transport_options": {"hold_window": "1ms"},
                  "hosts": ["h0", "h1", "h2"], "message": "64KiB", "steps": 10, "receiver": "h0",
                  "senders": ["h1", "h2"]},
     "events": [{"at_step": 2, "action": "link_down", "target": "p0l0-p0s0"},
                {"at": "1s", "action": "link_up", "target": "p0l0-p0s0"},
                {"at": "1s", "action": "loss", "target": "p1l0-p1s1", "rate": 0.01},
                {"at": "1s", "action": "rate", "target": "p1l0-p1s0", "rate": "20Mbit"},
                {"at": "1s", "action": "flap", "target": "p0l1-p0s1", "period": "200ms", "until": "2s"},
                {"at": "2s", "action": "blackhole", "target": "p1l1-p1s1"},
                {"at": "3s", "action": "restore", "target": "p1l1-p1s1"},
                {"at": "3s", "action": "switch_down", "target": "p1s0"},
                {"at": "4s", "action": "switch_up", "target": "p1s0"}],
     "transport_options": OPTIONS, "routing_options": {"convergence_delay": "1s"},
     "expect": {"failed_messages": 0, "max_step_time_ratio": 3, "min_goodput_fraction": 0.1, "max_avoid_s": "1s",
                "max_step_time_s": "2s", "flow_mods_after_boot": 0, "fidelity_ok": True},
     "capture": {"interfaces": ["h0-p0l0"], "packets": "full"}},
    {"topology": "clos-2p-2l-2s", "engine": "sim",
     "workloads": [{"pattern": "ring-allreduce", "hosts": "all", "steps": 3},
                   {"name": "a", "pattern": "stream", "pairs": [["h0", "h2"]], "message": "64KiB", "duration": "2s",
                    "bin": "100ms", "bidirectional": True},
                   {"name": "b", "pattern": "stream", "hosts": ["h1", "h3"]}]},
]


def load_all(tmp_path, documents):
    for i, data in enumerate(documents):
        path = tmp_path / f"s{i}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        scenario_mod.load(path)
        SCENARIOS.validate(data)


def test_every_key_the_loader_accepts_is_in_the_schema_and_the_reverse(tmp_path, monkeypatch):
    read, allowed = record(monkeypatch)
    load_all(tmp_path, EVERY_KEY)
    for path in scenario_mod.SCENARIO_DIR.glob("*.yaml"):
        scenario_mod.load(path)
    in_schema = schema_paths(SCENARIO_SCHEMA)
    options = {p for p in in_schema if ".transport_options." in f".{p}"}
    assert {p.rpartition(".")[2] for p in options} == set(UNITS)  # what transport.config parses
    assert allowed - in_schema == set(), "the loader accepts keys the schema lacks"
    read |= {f"transport_options.{name}" for name in OPTIONS}  # read by transport.config, not by a Reader
    read |= {p.replace("transport_options.", prefix) for p in read if p.startswith("transport_options.")
             for prefix in ("workload.transport_options.", "workloads[].transport_options.")}
    read |= {p.replace("workload.", "workloads[].", 1) for p in read if p.startswith("workload.")}
    assert in_schema - read == set(), "keys of the schema the loader never read"
    assert schema_paths(TOPOLOGY_SCHEMA) == {p.removeprefix("topology.") for p in in_schema
                                             if p.startswith("topology.")}


def test_every_shipped_scenario_and_topology_validates_and_names_the_schema():
    for made in (SCENARIO_SCHEMA, TOPOLOGY_SCHEMA):
        jsonschema.Draft202012Validator.check_schema(made)
    for path in sorted(scenario_mod.SCENARIO_DIR.rglob("*.yaml")):  # the paper suite's too
        text = path.read_text()
        SCENARIOS.validate(yaml.safe_load(text))
        match = SCHEMA_LINE.match(text.splitlines()[0])
        assert match, f"{path.name}: its first line names no schema for editors"
        assert json.loads((path.parent / match.group(1)).read_text()) == SCENARIO_SCHEMA, \
            f"{match.group(1)} is not `mrclab schema`'s output: run `make schema`"
    for path in sorted(topology_mod.TOPOLOGY_DIR.glob("*.yaml")):
        text = path.read_text()
        TOPOLOGIES.validate(yaml.safe_load(text))
        match = SCHEMA_LINE.match(text.splitlines()[0])
        assert match and json.loads((path.parent / match.group(1)).read_text()) == TOPOLOGY_SCHEMA, path.name


def bad(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    node = data
    *parents, last = path.split(".")
    for part in parents:
        node = node[part] if not isinstance(node, list) else node[int(part)]
    node[last] = value
    return data


@pytest.mark.parametrize("path,value", [
    ("worklaod", {"pattern": "ring-allreduce"}), ("workload.stpes", 3), ("topology.links.colour", "red"),
    ("events.0.rat", 0.1), ("expect.max_avoid", "1s"), ("workload.pattern", "broadcast"),
    ("topology.links.host_rate", "100"), ("workload.message", "1 parsec"), ("events.0.period", "1s"),
])
def test_schema_and_loader_both_refuse_a_wrong_key_or_kind(tmp_path, path, value):
    data = bad(EVERY_KEY[0], path, value)
    with pytest.raises(jsonschema.ValidationError):
        SCENARIOS.validate(data)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(scenario_mod.UsageError):
        scenario_mod.load(tmp_path / "s.yaml")


def test_schema_and_loader_both_require_a_topology_and_a_workload(tmp_path):
    for missing in ("topology", "workload"):
        data = {k: v for k, v in EVERY_KEY[0].items() if k != missing}
        with pytest.raises(jsonschema.ValidationError):
            SCENARIOS.validate(data)
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
        with pytest.raises(scenario_mod.UsageError):
            scenario_mod.load(tmp_path / "s.yaml")
