"""Scenario files -> a frozen `Scenario`, every default filled in and every name checked against the fabric.

Every key, its default included, is a row of `keys.SCENARIO`; the resolved scenario written into a run's
directory is `Scenario.to_dict()`, so a reader always sees the values that ran.
"""
from __future__ import annotations

import copy
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import engines, transports
from ..actions import ACTIONS, LINK, SWITCH
from ..errors import UsageError
from ..shipped import folder
from ..transport.config import validate_options
from ..units import format_rate, format_size
from . import topology as topology_mod
from . import trace as trace_mod
from .keys import CAPTURE_SETS, MAX_CONNECTIONS, NAME, SCENARIO, STREAM, TRACE
from .reader import Reader, clip, is_file, load_yaml, parse_yaml, short, suggest
from .topology import Topology
from .trace import TraceSpec

SCENARIO_DIR = folder("scenarios")

MIN_RATE_BPS = 1000
MAX_TIMELINE_ACTIONS = 10000  # a flap of 10 ms for 50 s; more is no experiment a 2-core lab can keep time for
WORKLOAD = SCENARIO.section("workload")
EVENT = SCENARIO.section("events")
EXPECT = SCENARIO.section("expect")
WORKLOAD_EXPECT = WORKLOAD.section("expect")
CAPTURE = SCENARIO.section("capture")
ROUTING_OPTIONS = SCENARIO.section("routing_options")


@dataclass(frozen=True)
class Workload:
    """One workload of a run. A collective runs ``steps`` steps separated by a barrier; a ``stream`` keeps
    transfers of ``message_bytes`` going between its ``pairs`` for ``duration_s`` and measures throughput in
    bins of ``bin_s``. Workloads of one run go at the same time, each on QPs of its own."""

    pattern: str
    hosts: tuple[str, ...]
    message_bytes: int
    steps: int
    receiver: str | None = None
    senders: tuple[str, ...] = ()
    connections: int = 1  # QPs per ordered pair; a collective's transfer is split evenly over them
    name: str = ""
    pairs: tuple[tuple[str, str], ...] = ()  # stream: (src, dst), both directions when bidirectional
    bidirectional: bool = False
    duration_s: float = 0.0
    bin_s: float = 0.1
    expect: dict = field(default_factory=dict, hash=False)
    transport: str = ""  # "": the scenario's
    transport_options: dict = field(default_factory=dict, hash=False)  # over the scenario's
    trace: TraceSpec | None = None  # a trace's replay (spec.trace): its hosts are its ranks', its steps iterations

    @property
    def stream(self) -> bool:
        return self.pattern == STREAM

    @property
    def flows(self) -> tuple[tuple[str, str], ...]:
        """A stream's (src, dst) flows: its pairs, and their reverses when bidirectional."""
        return self.pairs + (tuple((b, a) for a, b in self.pairs) if self.bidirectional else ())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "pattern": self.pattern}
        if self.stream:  # its hosts are its pairs'
            out.update(pairs=[list(p) for p in self.pairs], bidirectional=self.bidirectional,
                       message=format_size(self.message_bytes), duration=f"{self.duration_s:g}s",
                       bin=f"{self.bin_s * 1000:g}ms")
        elif self.trace is not None:
            out.update(self.trace.to_dict())
        else:
            out.update(hosts=list(self.hosts), message=format_size(self.message_bytes), steps=self.steps)
        if self.pattern == "incast":
            out.update(receiver=self.receiver, senders=list(self.senders))
        out["connections"] = self.connections
        if self.transport:
            out["transport"] = self.transport
        if self.transport_options:
            out["transport_options"] = dict(self.transport_options)
        if self.expect:
            out["expect"] = {k: format_rate(v) if k == "min_goodput_bps" else v for k, v in self.expect.items()}
        return out


@dataclass(frozen=True)
class Event:
    """One fault on the timeline; exactly one of `at_s` and `at_step` is set."""

    action: str
    target: str
    at_s: float | None = None
    at_step: int | None = None
    loss_probability: float | None = None  # loss (the file's `rate`)
    rate_bps: float | None = None          # rate (the file's `rate`)
    period_s: float | None = None          # flap
    until_s: float | None = None           # flap

    @property
    def flap_timing(self) -> tuple[float, float]:
        """(period_s, until_s) of a flap, which has both."""
        if self.period_s is None or self.until_s is None:
            raise ValueError(f"a {self.action} event has no flap period and end")
        return self.period_s, self.until_s

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"at": f"{self.at_s:g}s"} if self.at_s is not None else {"at_step": self.at_step}
        out.update(action=self.action, target=self.target)
        if self.action == "loss":
            out["rate"] = self.loss_probability
        elif self.action == "rate" and self.rate_bps is not None:
            out["rate"] = format_rate(self.rate_bps)
        elif self.action == "flap":
            period, until = self.flap_timing
            out.update(period=f"{period * 1000:g}ms", until=f"{until:g}s")
        return out


@dataclass(frozen=True)
class Capture:
    """Which interfaces a run records into pcapng files: a set (`off`, `hosts`, `switches`, `all`)
    or links by SPEC name, each recorded at the end named first; `headers` keeps the MRC header only."""

    interfaces: str | tuple[str, ...] = "off"
    packets: str = "headers"

    @property
    def on(self) -> bool:
        return self.interfaces != "off"

    def to_dict(self) -> dict[str, Any]:
        what = self.interfaces if isinstance(self.interfaces, str) else list(self.interfaces)
        return {"interfaces": what, "packets": self.packets}


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    topology: Topology
    transport: str
    routing: str
    seed: int
    duration_limit_s: float
    workloads: tuple[Workload, ...]
    events: tuple[Event, ...]
    transport_options: dict = field(default_factory=dict, hash=False)
    convergence_delay_s: float = 2.0
    expect: dict = field(default_factory=dict, hash=False)
    datapath: str = "auto"
    capture: Capture = Capture()
    engine: str = engines.DEFAULT
    source: str = field(default="", compare=False)

    @property
    def workload(self) -> Workload:
        """The first workload: the one whose steps ``at_step`` counts (or the only one)."""
        return self.workloads[0]

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host a workload uses, in the fabric's order."""
        used = {h for w in self.workloads for h in w.hosts}
        return tuple(h for h in self.topology.host_names if h in used)

    def to_dict(self) -> dict[str, Any]:
        workloads = [w.to_dict() for w in self.workloads]
        return {"name": self.name, "description": self.description, "topology": self.topology.to_dict(),
                "engine": self.engine, "transport": self.transport, "routing": self.routing,
                "datapath": self.datapath, "seed": self.seed,
                "duration_limit": f"{self.duration_limit_s:g}s",
                **({"workload": workloads[0]} if len(workloads) == 1 else {"workloads": workloads}),
                "events": [e.to_dict() for e in self.events],
                "transport_options": dict(self.transport_options),
                "routing_options": {"convergence_delay": f"{self.convergence_delay_s:g}s"},
                "expect": dict(self.expect), "capture": self.capture.to_dict()}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def resolve_path(ref: str) -> Path:
    path = Path(ref)
    if is_file(path) or path.suffix in (".yaml", ".yml") or "/" in ref:
        return path
    return SCENARIO_DIR / f"{ref}.yaml"


def apply_overrides(data: dict, overrides: list[str], source: str) -> dict:
    """`--set a.b=VALUE`: VALUE is read as YAML, so numbers, lists and mappings work."""
    data = copy.deepcopy(data) if data is not None else {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. workload.steps=10")
        parts = key.strip().split(".")
        if not isinstance(data, dict):
            raise UsageError(f"--set {short(key)}: {source} is not a mapping of scenario keys")
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise UsageError(f"--set {short(key)}: {part} is not a mapping in {source}")
            node = child
        try:
            node[parts[-1]] = parse_yaml(value, f"--set {short(key)}") if value.strip() else ""
        except UsageError:
            node[parts[-1]] = value
    return data


def load(ref: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    path = resolve_path(str(ref))
    if not is_file(path):
        close = suggest(ref, shipped()) if path.parent == SCENARIO_DIR else None
        raise UsageError(f"{clip(path)}: no such scenario file" + (f" (did you mean {close}?)" if close else "")
                         + f"; shipped: {', '.join(shipped())} (`mrclab list`)")
    return from_data(load_yaml(path, "scenario file"), overrides, str(path), default_name=path.stem)


def from_data(data: Any, overrides: Sequence[str], source: str, default_name: str = "scenario") -> Scenario:
    """A scenario's parsed file (or a mapping made in Python), with `--set` overrides applied."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: (top level): must be a mapping of scenario keys")
    data = copy.deepcopy(data)
    if "capture" in data and not isinstance(data["capture"], dict):  # the shorthand, so that --set capture.X works
        data["capture"] = {"interfaces": data["capture"]}
    if isinstance(data.get("topology"), str) and any(o.partition("=")[0].strip().startswith("topology.")
                                                     for o in overrides):
        data["topology"] = _topology_data(data["topology"], source)  # so that --set topology.X reaches it
    return from_mapping(apply_overrides(data, list(overrides), source), source, default_name=default_name)


def shipped() -> list[str]:
    """The shipped scenarios' names."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def _topology(r: Reader, source: str, engine: str) -> Topology:
    ref = r.raw("topology")
    if ref is None:
        r.fail("topology", "is required: a file stem in topologies/, a path, or a mapping")
    if isinstance(ref, dict):
        return topology_mod.from_mapping(ref, f"{source}: topology", default_name="inline", engine=engine)
    if not isinstance(ref, str):
        r.fail("topology", f"expected a file stem, a path or a mapping, got {ref!r}")
    path = _topology_file(ref, source)
    try:
        return topology_mod.load(path, engine=engine)
    except UsageError as exc:
        r.fail("topology", str(exc))


def _topology_file(ref: str, source: str) -> Path:
    """The file a scenario's `topology: NAME` names: a shipped one, a path, or a file beside the scenario."""
    path = topology_mod.resolve_path(ref)
    if not path.is_absolute() and not is_file(path) and source:
        beside = Path(source).parent / ref
        path = beside if is_file(beside) else path
    if not is_file(path):
        raise UsageError(f"{source}: topology: no topology {short(ref)}{topology_mod.did_you_mean(ref)} "
                         f"(shipped: {', '.join(topology_mod.shipped())})")
    return path


def _topology_data(ref: str, source: str) -> dict:
    """A named topology's file as a mapping, its name kept, for `--set topology.KEY=VALUE` to change."""
    path = _topology_file(ref, source)
    data = load_yaml(path, "topology file")
    if not isinstance(data, dict):
        raise UsageError(f"{path}: (top level): must be a mapping of topology keys")
    return {"name": path.stem, **data}


def _hosts(r: Reader, name: str, topo: Topology, default: Any) -> tuple[str, ...]:
    value = r.raw(name, default)
    if value == "all":
        return tuple(topo.host_names)
    if not isinstance(value, list) or not value:
        r.fail(r.key(name), "expected `all` or a non-empty list of host names")
    for host in value:
        if not isinstance(host, str) or not topo.has_host(host):
            r.fail(r.key(name), f"unknown host {short(host)}; this fabric has h0..h{topo.hosts - 1}")
    if len(set(value)) != len(value):
        r.fail(r.key(name), "lists a host twice")
    return tuple(value)


def _workloads(r: Reader, topo: Topology, seed: int, transport: str) -> tuple[Workload, ...]:
    """`workload:` (one) or `workloads:` (a list that runs at the same time); names are unique."""
    if r.has("workload") and r.has("workloads"):
        r.fail("workloads", "give one of `workload` (a mapping) and `workloads` (a list of them), not both")
    if not r.has("workloads"):
        return (_workload(r.sub("workload"), topo, seed, "workload", transport),)
    items = r.raw("workloads")
    r.seen.add("workloads")
    if not isinstance(items, list) or not items:
        r.fail("workloads", "expected a non-empty list of workloads")
    out: list[Workload] = []
    for i, item in enumerate(items):
        w = _workload(Reader(item, r.source, f"workloads[{i}]."), topo, seed, f"workloads[{i}]", transport)
        if any(o.name == w.name for o in out):
            r.fail(f"workloads[{i}].name", f"{short(w.name)} names an earlier workload too: give each a name")
        out.append(w)
    if sum(w.connections for w in out) > MAX_CONNECTIONS:
        r.fail("workloads", f"more than {MAX_CONNECTIONS} connections per pair over all workloads")
    return tuple(out)


def _workload(w: Reader, topo: Topology, seed: int, where: str, default_transport: str) -> Workload:
    w.only(WORKLOAD.names())
    pattern = w.read(WORKLOAD["pattern"])
    w.only(WORKLOAD.names(pattern))
    name = w.read(WORKLOAD["name"], pattern if where == "workload" else f"{pattern}-{where[len('workloads['):-1]}")
    if not NAME.fullmatch(name):
        w.fail(w.key("name"), f"{short(name)} must be 1 to 64 of A-Z a-z 0-9 . _ -")
    connections = w.read(WORKLOAD["connections"])
    expect = _workload_expect(w.sub("expect"))
    transport = w.read(WORKLOAD["transport"], "")
    own = transports.TRANSPORTS[transport or default_transport]
    if transport and not own.shares_datapath(transports.TRANSPORTS[default_transport]):
        w.fail(w.key("transport"), f"{transport} cannot run beside the scenario's {default_transport}: a run's "
               "workloads share one agent datapath (mrc and single-path mix; roce and tcp run alone)")
    options = _transport_options(w, transport or default_transport, topo) if w.has("transport_options") else {}
    common = {"name": name, "connections": connections, "expect": expect, "transport": transport,
              "transport_options": options}
    if pattern == STREAM:
        return _stream(w, topo, seed, **common)
    if pattern == TRACE:
        spec = trace_mod.read(w, topo)
        w.done(WORKLOAD.names(TRACE))
        hosts = tuple(h for h in topo.host_names if h in spec.hosts)
        return Workload(TRACE, hosts, 0, spec.iterations, trace=spec, **common)
    hosts = _hosts(w, "hosts", topo, WORKLOAD["hosts"].default)
    message = w.read(WORKLOAD.row("message", pattern))
    if not connections <= message <= 1 << 30:
        w.fail(w.key("message"), f"must be between {connections} byte(s) (one per connection) and 1GiB, got {message}")
    steps = w.read(WORKLOAD["steps"])
    receiver: str | None = None
    senders: tuple[str, ...] = ()
    if pattern == "incast":
        receiver = w.read(WORKLOAD["receiver"], hosts[0])
        if receiver not in hosts:
            w.fail(w.key("receiver"), f"{short(receiver)} is not one of the workload's hosts")
        senders = _hosts(w, "senders", topo, [h for h in hosts if h != receiver])
        if receiver in senders:
            w.fail(w.key("senders"), "the receiver cannot also be a sender")
    if len(hosts) < 2:
        w.fail(w.key("hosts"), "a collective needs at least 2 hosts")
    w.done(WORKLOAD.names(pattern))
    return Workload(pattern, hosts, message, steps, receiver, tuple(senders), **common)


def derangement(hosts: tuple[str, ...], rng: random.Random) -> list[str]:
    """The hosts shuffled so that none keeps its place: who each host sends to in a permutation (and in a stream
    made from hosts, which pairs them as a permutation's first step)."""
    while True:
        order = list(hosts)
        rng.shuffle(order)
        if all(a != b for a, b in zip(hosts, order, strict=True)):
            return order


def _stream(w: Reader, topo: Topology, seed: int, **common: Any) -> Workload:
    """A stream's pairs are listed, or made from `hosts` by a seeded derangement (a permutation's first step)."""
    if w.has("pairs") and w.has("hosts"):
        w.fail(w.key("pairs"), "give `pairs` or `hosts` (paired by a seeded permutation), not both")
    if w.has("pairs"):
        pairs = _pairs(w, topo)
    else:
        hosts = _hosts(w, "hosts", topo, WORKLOAD["hosts"].default)
        if len(hosts) < 2:
            w.fail(w.key("hosts"), "a stream needs at least 2 hosts")
        pairs = tuple(zip(hosts, derangement(hosts, random.Random(f"{seed}:0")), strict=True))
    message = w.read(WORKLOAD.row("message", STREAM))
    if not 1 <= message <= 64 << 20:
        w.fail(w.key("message"), f"must be between 1 byte and 64MiB (one transfer of the stream), got {message}")
    duration = w.read(WORKLOAD["duration"])
    if not 0 < duration <= 3600:
        w.fail(w.key("duration"), f"must be more than 0s and at most 3600s, got {duration:g}s")
    bin_s = w.read(WORKLOAD["bin"])
    if not 0.001 <= bin_s <= duration:
        w.fail(w.key("bin"), f"must be at least 1ms and at most the duration, got {bin_s:g}s")
    bidirectional = w.read(WORKLOAD["bidirectional"])
    w.done(WORKLOAD.names(STREAM))
    used = {h for p in pairs for h in p}
    hosts = tuple(h for h in topo.host_names if h in used)
    return Workload(STREAM, hosts, message, 0, pairs=pairs, bidirectional=bidirectional, duration_s=duration,
                    bin_s=bin_s, **common)


def _pairs(w: Reader, topo: Topology) -> tuple[tuple[str, str], ...]:
    value = w.raw("pairs")
    if not isinstance(value, list) or not value:
        w.fail(w.key("pairs"), "expected a non-empty list of [src, dst] host pairs")
    pairs = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(h, str) for h in pair)):
            w.fail(w.key("pairs"), f"expected [src, dst] host names, got {short(pair)}")
        for host in pair:
            if not topo.has_host(host):
                w.fail(w.key("pairs"), f"unknown host {short(host)}; this fabric has h0..h{topo.hosts - 1}")
        if pair[0] == pair[1]:
            w.fail(w.key("pairs"), f"{pair[0]} cannot stream to itself")
        pairs.append((pair[0], pair[1]))
    if len(set(pairs)) != len(pairs):
        w.fail(w.key("pairs"), "lists a pair twice")
    return tuple(pairs)


def _workload_expect(e: Reader) -> dict[str, Any]:
    """Expectations read on one workload alone (`expect:` inside it)."""
    return _checks(e, WORKLOAD_EXPECT)


def _event(r: Reader, topo: Topology, steps: int, limit_s: float) -> Event:
    r.only(EVENT.names())
    action = r.read(EVENT["action"])
    r.only(EVENT.names(action))
    target = r.read(EVENT["target"])
    if ACTIONS[action].target == LINK and not topo.has_link(target):
        r.fail(r.key("target"), f"no link {short(target)} in {topo.name} (links are like p0l1-p0s2 or h3-p0l1)")
    if ACTIONS[action].target == SWITCH and not topo.has_switch(target):
        r.fail(r.key("target"), f"no switch {short(target)} in {topo.name} (switches are like p0l1 or p2s3)")
    if r.has("at") == r.has("at_step"):
        r.fail(r.key("at"), "give exactly one of `at` (a time) and `at_step` (a step number)")
    at_s = r.read(EVENT["at"])
    at_step = r.read(EVENT["at_step"])
    if at_s is not None and at_s >= limit_s:
        r.fail(r.key("at"), f"{at_s:g}s is past the run's duration_limit ({limit_s:g}s)")
    if at_step is not None and not steps:
        r.fail(r.key("at_step"), "the first workload is a stream, which has no steps: place the event with `at`")
    if at_step is not None and at_step >= steps:
        r.fail(r.key("at_step"), f"step {at_step} is past the workload's last step ({steps - 1})")
    loss_probability, link_rate, period, until = _action_parameters(r, action, at_s, limit_s)
    r.done(EVENT.names(action))
    return Event(action, target, at_s=at_s, at_step=at_step, loss_probability=loss_probability, rate_bps=link_rate,
                 period_s=period, until_s=until)


def _action_parameters(r: Reader, action: str, at_s: float | None,
                       limit_s: float) -> tuple[float | None, float | None, float | None, float | None]:
    """(loss probability, link rate, period, until): what a loss, rate or flap event needs beyond its time and
    target (each a scenario key: `rate` for the first two)."""
    if action == "loss":
        return r.read(EVENT.row("rate", action), what="a drop probability between 0 and 1"), None, None, None
    if action == "rate":
        link_rate = float(r.read(EVENT.row("rate", action), what="a link rate like 20Mbit"))
        if link_rate < MIN_RATE_BPS:
            r.fail(r.key("rate"), f"must be at least 1Kbit, got {link_rate:g} bit/s")
        return None, link_rate, None, None
    if action == "flap":
        period = r.read(EVENT["period"], what="a duration like 200ms")
        until = r.read(EVENT["until"], what="a time like 8s")
        if period < 0.01:
            r.fail(r.key("period"), f"must be at least 10ms, got {period:g}s")
        start = at_s if at_s is not None else 0.0
        if until <= start:
            r.fail(r.key("until"), f"must be after the flap starts ({start:g}s)")
        if until > limit_s:
            r.fail(r.key("until"), f"{until:g}s is past the run's duration_limit ({limit_s:g}s)")
        return None, None, period, until
    return None, None, None, None


def from_mapping(data: Any, source: str, default_name: str = "scenario") -> Scenario:
    r = Reader(data, source)
    r.only(SCENARIO.names())
    name = r.read(SCENARIO["name"], re.sub(r"[^A-Za-z0-9._-]", "-", default_name[:64]).lstrip(".") or "scenario")
    if not NAME.fullmatch(name):
        r.fail("name", f"{short(name)} must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with a dot):"
                       " it names the results directory")
    description = r.read(SCENARIO["description"])
    engine = r.read(SCENARIO["engine"])
    topo = _topology(r, source, engine)
    routing, datapath, limit = (r.read(SCENARIO[k]) for k in ("routing", "datapath", "duration_limit"))
    if limit <= 0:
        r.fail("duration_limit", "must be more than 0s")
    seed = r.read(SCENARIO["seed"])
    transport = r.read(SCENARIO["transport"])
    workloads = _workloads(r, topo, seed, transport)
    workload = workloads[0]
    raw_events = r.raw("events", [])
    if not isinstance(raw_events, list):
        r.fail("events", "expected a list of events")
    events = tuple(_event(Reader(e, source, f"events[{i}]."), topo, workload.steps, limit)
                   for i, e in enumerate(raw_events))
    _check_timeline(r, events)
    options = _transport_options(r, transport, topo)
    ro = r.sub("routing_options")
    delay = ro.read(ROUTING_OPTIONS["convergence_delay"])
    ro.done(ROUTING_OPTIONS.names())
    expect = _expect(r.sub("expect"))
    capture = _capture(r, topo)
    _check_engine(r, engine, {transport} | {w.transport for w in workloads if w.transport}, capture)
    r.done(SCENARIO.names())
    return Scenario(name, description, topo, transport, routing, seed, limit, workloads, events,
                    dict(options), delay, expect, datapath=datapath, capture=capture, engine=engine, source=source)


def _check_engine(r: Reader, engine: str, used: set[str], capture: Capture) -> None:
    """What the engine cannot run is refused here, with the engine that can."""
    row = engines.ENGINES[engine]
    for transport in sorted(used - set(row.transports)):
        r.fail("transport", f"{transport} is not modelled by engine {engine} (it runs "
                            f"{', '.join(row.transports)}); run it on engine lab")
    if capture.on and not row.lab:
        r.fail("capture", f"engine {engine} moves no real packets to capture; run it on engine lab")


def _check_timeline(r: Reader, events: tuple[Event, ...]) -> None:
    """Refuse a timeline whose expansion (a flap is one action per half period) is too long to keep time for."""
    total = 0
    for i, event in enumerate(events):
        total += flap_actions(event) if event.action == "flap" else 1
        if total > MAX_TIMELINE_ACTIONS:
            r.fail(f"events[{i}]", f"the timeline expands to more than {MAX_TIMELINE_ACTIONS} actions "
                                   "(a flap is one per half period): use a longer period or an earlier until")


def flap_actions(event: Event) -> int:
    start = event.at_s if event.at_s is not None else 0.0
    period, until = event.flap_timing
    return int((until - start) / (period / 2)) + 2


def _transport_options(r: Reader, transport: str, topo: Topology) -> dict[str, Any]:
    """The options with their units resolved (seconds, bytes), checked as the agents will use them."""
    key = r.key("transport_options")
    options = r.raw("transport_options", {}) or {}
    if not isinstance(options, dict):
        r.fail(key, "expected a mapping of transport knobs")
    row = transports.TRANSPORTS[transport]
    if not row.mrc:
        if options:
            r.fail(key, f"transport {transport} takes no options, got {short(sorted(map(str, options)))}")
        return {}
    fixed = sorted(set(map(str, options)) & set(row.options))
    if fixed:
        r.fail(key, f"transport {transport} fixes {', '.join(fixed)}: choose another transport instead")
    try:
        parsed = validate_options({**row.options, **{str(k): v for k, v in options.items()}}, mtu=topo.mtu,
                                  link_rate_bps=topo.host_rate_bps, planes=topo.planes)
    except ValueError as exc:
        r.fail(key, str(exc))
    return {k: v for k, v in parsed.items() if k not in row.options}


def _capture(r: Reader, topo: Topology) -> Capture:
    """`capture: hosts` is short for `capture: {interfaces: hosts}`; links may be a list or `a-b,c-d`."""
    value = r.raw("capture")
    c = Reader(value if isinstance(value, dict) else {"interfaces": value}, r.source, "capture.")
    interfaces = c.raw("interfaces", CAPTURE["interfaces"].default)
    if interfaces in (None, False):  # YAML reads a bare `off` as false
        interfaces = "off"
    if isinstance(interfaces, str) and interfaces not in CAPTURE_SETS:
        interfaces = [name.strip() for name in interfaces.split(",")]
    if not isinstance(interfaces, str):
        if not isinstance(interfaces, list) or not interfaces:
            c.fail("capture.interfaces", f"expected one of {', '.join(CAPTURE_SETS)} or a list of links")
        for name in interfaces:
            if not isinstance(name, str) or not topo.has_link(name):
                c.fail("capture.interfaces", f"no link {name!r} in {topo.name}: expected one of "
                       f"{', '.join(CAPTURE_SETS)} or links like p0l1-p0s2 or h3-p0l1")
        interfaces = tuple(dict.fromkeys(interfaces))
    packets = c.read(CAPTURE["packets"])
    c.done(CAPTURE.names())
    return Capture(interfaces, packets)


def _expect(r: Reader) -> dict[str, Any]:
    return _checks(r, EXPECT)


def _checks(r: Reader, rows) -> dict[str, Any]:
    """The checks an `expect:` gives (a key left out is not checked)."""
    r.only(rows.names())
    out = {key: r.read(rows[key]) for key in rows.names()}
    r.done(rows.names())
    return {k: v for k, v in out.items() if v is not None}
