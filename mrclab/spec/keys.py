"""Every key of a topology or scenario file, one row each: its kind (type and unit), default, meaning and example.

The loaders (`topology`, `scenario`) read each value through its row, `schema` turns the rows into a JSON
Schema and `mrclab explain` prints them, so the three cannot disagree. Adding a key is a row here plus the
line of the loader that uses its value (and, where a spec object carries it, its field).

A row's `default` is written as a file writes it (``64KiB``); `REQUIRED` marks a key without one, `UNSET` a
key whose absence means "not checked" or whose default the loader computes (then `default_text` says what).
A section (a mapping of keys) may depend on one of its keys, its `discriminator`: a row with `when` applies
only to those values of it (a stream's keys, a flap's period).
"""
from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from .. import engines, transports
from .. import routing as routing_mod
from ..actions import ACTIONS
from ..build import PACKAGE
from ..transport.config import UNITS as OPTION_UNITS
from ..transport.config import TransportConfig
from ..transport.congestion import CONGESTION_CONTROLS
from ..units import rate_bps, seconds, size_bytes
from ..units import tables as unit_tables
from .reader import boolean, integer, number, short, text

REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()

DATAPATHS = ("auto", "ovs", "linux")  # the rows of fabric.datapath, and `auto`
STREAM = "stream"
COLLECTIVES = ("ring-allreduce", "all-to-all", "incast", "permutation")
TRACE = "trace"
PATTERNS = (*COLLECTIVES, STREAM, TRACE)
CAPTURE_SETS = ("off", "hosts", "switches", "all")
CAPTURE_PACKETS = ("headers", "full")
MAX_CONNECTIONS = 64  # QPs per pair (the paper scales RoCE to 16)
MAX_SEED = (1 << 63) - 1
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # a scenario name becomes a directory name
_INDEX = "(0|[1-9][0-9]{0,3})"  # ASCII digits in canonical form: h0 and h10, never h00 or h\u0660
NODE = re.compile(rf"p{_INDEX}(l|s){_INDEX}|h{_INDEX}")
HOST = re.compile(rf"h{_INDEX}")


@dataclass(frozen=True)
class Kind:
    """How a value is written: what `explain` calls it, its unit, how the loader reads it (errors worded for a
    user) and its JSON Schema."""

    name: str
    convert: Callable[[Any], Any]
    schema: Mapping[str, Any]
    unit: str = ""
    what: str = ""  # what a required key takes, in its error when missing


def _anycase(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _unit_pattern(table: Mapping[str, float], optional: bool) -> str:
    units = "|".join(_anycase(u) for u in sorted(table, key=len, reverse=True) if u)
    return rf"^\s*[0-9]+(\.[0-9]+)?\s*({units}){'?' if optional else ''}\s*$"


def integer_kind(low: int, high: int | None = None) -> Kind:
    bounds = {"minimum": low, **({"maximum": high} if high is not None else {})}
    return Kind("whole number" + (f" {low}-{high}" if high is not None else f" >= {low}"), integer(low, high),
                {"type": "integer", **bounds})


def number_kind(low: float, high: float | None = None) -> Kind:
    bounds = {"minimum": low, **({"maximum": high} if high is not None else {})}
    return Kind("number" + (f" {low:g}-{high:g}" if high is not None else f" >= {low:g}"), number(low, high),
                {"type": "number", **bounds})


def choice_kind(allowed: tuple[str, ...]) -> Kind:
    def convert(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"{short(value)} is not one of: {', '.join(allowed)}")
        return value
    return Kind("one of " + ", ".join(allowed), convert, {"enum": list(allowed)}, what="one of " + ", ".join(allowed))


def _text_or_empty(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {short(value)}")
    return value


def _same(value: Any) -> Any:
    return value


SIZES, RATES, TIMES = unit_tables()
TEXT = Kind("text", text, {"type": "string", "pattern": r"\S"})
TEXT_OR_EMPTY = Kind("text", _text_or_empty, {"type": "string"})
BOOLEAN = Kind("true or false", boolean, {"type": "boolean"})
SIZE = Kind("size", size_bytes, {"anyOf": [{"type": "integer", "minimum": 0},
                                           {"type": "string", "pattern": _unit_pattern(SIZES, True)}]},
            unit="bytes (B, KiB, MiB, GiB; a bare number is bytes)")
RATE = Kind("rate", rate_bps, {"type": "string", "pattern": _unit_pattern(RATES, False)},
            unit="bit/s (Kbit, Mbit, Gbit; a unit is required)")
DURATION = Kind("duration", seconds, {"anyOf": [{"type": "number", "minimum": 0},
                                                {"type": "string", "pattern": _unit_pattern(TIMES, True)}]},
                unit="s (us, ms, s; a bare number is seconds)")
NAME_KIND = Kind("name", text, {"type": "string", "pattern": f"^{NAME.pattern}$"})
HOST_NAME = {"type": "string", "pattern": f"^{HOST.pattern}$"}
HOSTS = Kind("`all` or a list of hosts", _same, {"anyOf": [
    {"const": "all"}, {"type": "array", "items": HOST_NAME, "minItems": 1, "uniqueItems": True}]})
HOST_KIND = Kind("host", text, HOST_NAME)
PAIRS = Kind("list of [src, dst] host pairs", _same, {
    "type": "array", "minItems": 1, "uniqueItems": True,
    "items": {"type": "array", "items": HOST_NAME, "minItems": 2, "maxItems": 2}})
LINK_OR_SWITCH = Kind("link or switch name", text,
                        {"type": "string", "pattern": rf"^({NODE.pattern})(-({NODE.pattern}))?$"})
_LINK = rf"({NODE.pattern})-({NODE.pattern})"
CAPTURE_INTERFACES = Kind(f"{', '.join(CAPTURE_SETS)} or a list of links", _same, {"anyOf": [
    {"enum": list(CAPTURE_SETS)}, {"const": False},
    {"type": "string", "pattern": rf"^\s*{_LINK}\s*(,\s*{_LINK}\s*)*$"},
    {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": f"^{_LINK}$"}}]})


@dataclass(frozen=True)
class Key:
    """One key of a mapping in a file."""

    name: str
    kind: Kind
    meaning: str
    example: Any
    default: Any = UNSET  # as a file writes it; REQUIRED, or UNSET (none, or computed: default_text says)
    default_text: str = ""
    when: tuple[str, ...] = ()  # the values of its section's discriminator it applies to (empty: all)

    @property
    def value(self) -> Any:
        """The default as the loader holds it (converted); ... when required, None when unset."""
        if self.default is REQUIRED:
            return ...
        return None if self.default is UNSET else self.kind.convert(self.default)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Section:
    """A mapping of keys: a file's top level, or a key whose value is a mapping (`links`, `workload`), or a list
    of them (`many`: `events`, `workloads`)."""

    name: str
    meaning: str
    keys: tuple[Key | Section, ...]
    many: bool = False
    discriminator: str = ""
    also: tuple[Kind, ...] = ()  # other ways to write its value (a topology named by file)
    one_of: tuple[tuple[str, ...], ...] = ()  # groups of keys of which exactly one must be given
    when: tuple[str, ...] = ()
    example: Any = UNSET
    default_text: str = ""
    shared: bool = False  # its keys appear in more than one place (a JSON Schema writes them once)
    required: bool = False

    def __getitem__(self, name: str) -> Key:
        """The row `name` (for a key with one row per discriminator value, the first)."""
        for key in self.keys:
            if key.name == name and isinstance(key, Key):
                return key
        raise KeyError(name)

    def row(self, name: str, value: str) -> Key:
        """The row of `name` that applies when the discriminator is `value`."""
        return next(k for k in self.keys if isinstance(k, Key) and k.name == name and (not k.when or value in k.when))

    def section(self, name: str) -> Section:
        return next(k for k in self.keys if isinstance(k, Section) and k.name == name)

    def names(self, value: str | None = None) -> tuple[str, ...]:
        """The keys it accepts (when the discriminator is `value`; None: under any value)."""
        return tuple(dict.fromkeys(k.name for k in self.keys if value is None or not k.when or value in k.when))


TOPOLOGY = Section("topology", "The fabric: planes of two-tier Clos (leaves and spines) and the hosts' NICs.", (
    Key("name", TEXT, "Names the fabric in results and reports.", "clos-4p-4l-4s",
        default_text="the file's stem (inline: `inline`)"),
    Key("planes", integer_kind(1, 16), "Independent two-tier Clos fabrics; every host has one NIC in each.", 4,
        default=4),
    Key("leaves", integer_kind(1, 64), "Leaves (tier 0, top-of-rack switches) per plane.", 4, default=4),
    Key("spines", integer_kind(1, 64), "Spines (tier 1) per plane; every leaf is cabled to every spine of its "
        "plane.", 4, default=4),
    Key("hosts_per_leaf", integer_kind(1, 64), "Hosts cabled to each leaf (host h<n> hangs off leaf "
        "floor(n / hosts_per_leaf) of every plane).", 2, default=2),
    Section("links", "The cables' rates and the switch ports' queues.", (
        Key("host_rate", RATE, "Each host NIC <-> leaf cable's rate, per direction.", "25Mbit", default="100Mbit"),
        Key("fabric_rate", RATE, "Each leaf <-> spine cable's rate, per direction.", "25Mbit", default="100Mbit"),
        Key("queue", SIZE, "Egress buffer of every switch port; a data packet that does not fit is trimmed (or "
            "dropped).", "64KiB", default="64KiB"),
        Key("mtu", integer_kind(1280, 9000), "Largest frame's IP packet on every cable, bytes.", 9000, default=9000),
        Key("trim", BOOLEAN, "A full queue trims MRC data packets to their header instead of dropping them.", True,
            default=True),
        Key("ecn", BOOLEAN, "Switch-to-switch ports mark ECN-capable packets CE as their queue fills.", True,
            default=True),
        Key("ecn_min", SIZE, "Queued bytes ahead of a packet where the marking probability starts to rise from 0.",
            "16KiB", default_text="a quarter of queue"),
        Key("ecn_max", SIZE, "Queued bytes ahead of a packet where marking is certain.", "48KiB",
            default_text="three quarters of queue"),
    ), default_text="every key's own default"),
))

EXPECT = Section("expect", "Checks of the run's results; a failed one makes `mrclab run` exit 1.", (
    Key("failed_messages", integer_kind(0), "At most this many messages not delivered whole.", 0),
    Key("max_step_time_ratio", number_kind(1.0), "At most this p100 / p50 of step time, the warm-up step left "
        "out (summary.step_time_s): how much the worst step suffered.", 2.0),
    Key("min_goodput_fraction", number_kind(0.0, 1.0), "At least this share of the ideal (the workload's bytes "
        "at line rate over the time it took).", 0.5),
    Key("max_avoid_s", DURATION, "At most this long from a cut to the last data packet sent into it (MRC over "
        "static-srv6; fails as not measured if no fault cut a used path).", "100ms"),
    Key("max_step_time_s", DURATION, "At most this long for the slowest step (the warm-up step left out).", "1s"),
    Key("flow_mods_after_boot", integer_kind(0), "At most this many routing changes after boot (static-srv6 "
        "only).", 0),
    Key("fidelity_ok", BOOLEAN, "The run's fidelity verdict must be this.", True),
), default_text="no checks")

WORKLOAD_EXPECT = Section("expect", "Checks of this workload alone, named <workload>.<check> in results.", (
    Key("failed_messages", integer_kind(0), "At most this many of its messages not delivered whole.", 0),
    Key("min_goodput_bps", RATE, "At least this goodput.", "20Mbit"),
    Key("min_bin_fraction", number_kind(0.0, 1.0), "A stream's worst bin after the first, as a share of its "
        "ideal rate, at least this.", 0.5),
), default_text="no checks")

TRANSPORT_NAMES = tuple(transports.TRANSPORTS)


@cache
def option_meanings() -> dict[str, str]:
    """Each transport option's docstring in mrclab/transport/config.py (read from the source, which the compiled
    build keeps beside its library)."""
    tree = ast.parse((PACKAGE / "transport" / "config.py").read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TransportConfig").body
    meanings = {}
    for node, after in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            text_ = " ".join(after.value.value.split()).replace("``", "`")
            meanings[node.target.id] = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"`\1`", text_)  # Sphinx roles
    return meanings


_OPTION_KINDS = {
    "s": DURATION, "bytes": SIZE,
    "count": Kind("whole number", _same, {"type": "integer", "minimum": 0}),
    "x": Kind("number", _same, {"type": "number", "minimum": 0}),
    "bytes/s": Kind("number", _same, {"type": "number", "minimum": 0}, unit="bytes/s"),
    "bool": BOOLEAN, "name": choice_kind(tuple(CONGESTION_CONTROLS)),
}


def _option_example(name: str, default: Any) -> Any:
    if isinstance(default, float) and default == float("inf"):
        return "2ms"
    if OPTION_UNITS[name] == "s":
        return f"{default * 1000:g}ms" if default else "1ms"
    return default


@cache
def transport_options() -> Section:
    """`transport_options`: TransportConfig's fields, their units (transport.config.UNITS) and docstrings. The
    values are checked by transport.config, as the agents use them."""
    meanings = option_meanings()
    from_links = TransportConfig.link_defaults(100_000_000, 9000, 1)
    rows = []
    for f in dataclasses.fields(TransportConfig):
        unit = OPTION_UNITS[f.name]
        kind = _OPTION_KINDS[unit]
        rows.append(Key(f.name, kind, meanings.get(f.name, ""), _option_example(f.name, f.default),
                        default_text="set from the host links" if f.name in from_links
                        else _option_default(f.default, unit)))
    return Section("transport_options", "Knobs of the MRC transport (mrc, single-path, roce; tcp takes none); "
                   "docs/transport.md says why each exists.", tuple(rows), default_text="none (the defaults)",
                   shared=True)


def _option_default(default: Any, unit: str) -> str:
    if isinstance(default, float) and default == float("inf"):
        return "measured"
    if isinstance(default, bool):
        return str(default).lower()
    return f"{default:g}" if isinstance(default, float) else str(default)


RANKS = Kind("auto, spread or a mapping of rank to host", _same, {"anyOf": [
    {"enum": ["auto", "spread"]},
    {"type": "object", "patternProperties": {"^[0-9]+$": HOST_NAME}, "additionalProperties": False}]})
COMPUTE = Kind("as-traced, skip or scale X", text, {"type": "string",
                                                    "pattern": r"^(as-traced|skip|scale [0-9]+(\.[0-9]+)?)$"})
ALGORITHM = Kind("ring, direct or a mapping of collective to one of them", _same, {"anyOf": [
    {"enum": ["ring", "direct"]},
    {"type": "object", "additionalProperties": {"enum": ["ring", "direct"]}}]})
DIMS = Kind("list of dimension sizes", _same, {"type": "array", "items": {"type": "integer", "minimum": 1},
                                               "minItems": 1})
TRACE_KEYS = (
    Key("path", TEXT, "The Chakra trace: a folder of <name>.<rank>.et files, a glob of them, or a shipped trace "
        "(traces/).", "mixed-16", default=REQUIRED, when=(TRACE,)),
    Key("ranks", RANKS, "Where each rank runs: auto (rank i on host i: consecutive ranks share a leaf), spread "
        "(dealt round the leaves) or a mapping.", {0: "h0", 1: "h4"}, default="auto", when=(TRACE,)),
    Key("iterations", integer_kind(1, 10000), "Times the trace's iteration runs, one after another.", 3,
        default=1, when=(TRACE,)),
    Key("compute", COMPUTE, "Each compute node's duration: as traced, skipped, or times X.", "scale 100",
        default="as-traced", when=(TRACE,)),
    Key("size_scale", number_kind(1e-9, 1e6), "Every comm_size times this (at least a byte).", 0.015625,
        default=1.0, when=(TRACE,)),
    Key("algorithm", ALGORITHM, "How collectives become flows: ring or direct, for all or per collective.",
        {"all_reduce": "direct"}, default="ring", when=(TRACE,)),
    Key("dims", DIMS, "The ranks laid out over these dimensions (first fastest), for nodes that give "
        "involved_dim.", [4, 4], default_text="one dimension of every rank", when=(TRACE,)),
)


def _workload(name: str, many: bool) -> Section:
    return Section(name, "A list of workloads that run at the same time, each on QPs of its own." if many else
                   "What the hosts send: a collective of steps, or a stream.", _workload_keys(), many=many,
                   discriminator="pattern", shared=True,
                   example=[{"name": "incast", "pattern": "incast", "hosts": ["h0", "h1", "h2"], "receiver": "h0"}]
                   if many else {"pattern": "ring-allreduce", "message": "1MiB", "steps": 30})


@cache
def _workload_keys() -> tuple[Key | Section, ...]:
    """A workload's keys: the same under `workload` and in each item of `workloads`."""
    return (
        Key("name", NAME_KIND, "Names the workload in results (unique in a run).", "victim",
            default_text="the pattern (in workloads: the pattern-<index>)"),
        Key("pattern", choice_kind(PATTERNS), "What each step sends, or a stream of transfers.", "ring-allreduce",
            default=REQUIRED),
        Key("connections", integer_kind(1, MAX_CONNECTIONS), "QPs per ordered pair; a collective's transfer is "
            "split evenly over them (at most 64 over all workloads).", 4, default=1),
        WORKLOAD_EXPECT,
        Key("transport", choice_kind(TRANSPORT_NAMES), "Its own transport (mrc and single-path mix in one run; "
            "roce and tcp run alone).", "single-path", default_text="the scenario's"),
        dataclasses.replace(transport_options(), meaning="Its own transport options, over the scenario's.",
                            default_text="the scenario's"),
        Key("hosts", HOSTS, "The hosts it runs on (a stream: paired by a seeded permutation).", ["h0", "h1"],
            default="all", when=(*COLLECTIVES, STREAM)),
        Key("message", SIZE, "Bytes each host sends per step.", "4MiB", default="1MiB", when=COLLECTIVES),
        Key("steps", integer_kind(1, 100000), "Steps, separated by a barrier; they count from 0.", 30, default=10,
            when=COLLECTIVES),
        Key("receiver", HOST_KIND, "The host every sender sends to.", "h0", default_text="the first host",
            when=("incast",)),
        Key("senders", HOSTS, "The hosts that send.", ["h1", "h2"], default_text="the other hosts",
            when=("incast",)),
        Key("pairs", PAIRS, "The (src, dst) pairs that stream; give this or `hosts`.", [["h3", "h1"]],
            default_text="`hosts` paired by a seeded permutation", when=(STREAM,)),
        Key("message", SIZE, "Bytes of each transfer; two are kept going on every QP.", "256KiB", default="64KiB",
            when=(STREAM,)),
        Key("duration", DURATION, "How long it streams (at most 3600 s).", "5s", default="5s", when=(STREAM,)),
        Key("bin", DURATION, "Throughput is measured in bins this long (at least 1 ms).", "100ms",
            default="100ms", when=(STREAM,)),
        Key("bidirectional", BOOLEAN, "Each pair streams both ways.", True, default=False, when=(STREAM,)),
        *TRACE_KEYS,
    )


def _event() -> Section:
    params = {
        ("loss", "rate"): Key("rate", number_kind(0.0, 1.0), "A loss's drop probability, both directions.", 0.02),
        ("rate", "rate"): Key("rate", RATE, "A rate event's link rate (at least 1Kbit).", "20Mbit"),
        ("flap", "period"): Key("period", DURATION, "A flap's period: down and up once each (at least 10ms).",
                                "200ms"),
        ("flap", "until"): Key("until", DURATION, "When a flap stops, since the workload started.", "8s"),
    }
    rows = [dataclasses.replace(row, default=REQUIRED, when=(action,)) for (action, _), row in params.items()]
    missing = {(a.name, p) for a in ACTIONS.values() for p in a.params} ^ set(params)
    assert not missing, f"actions.ACTIONS and the event keys disagree on {missing}"
    return Section("events", "Faults on the timeline, each at a time or a step.", (
        Key("at", DURATION, "When it fires: time since the workload started (give `at` or `at_step`).", "1.5s"),
        Key("at_step", integer_kind(0), "When it fires: as this step of the first workload starts.", 8),
        Key("action", choice_kind(tuple(ACTIONS)), "What happens: " + "; ".join(
            f"{a.name} ({a.target})" for a in ACTIONS.values()) + ".", "link_down", default=REQUIRED),
        Key("target", LINK_OR_SWITCH, "The link (like p0l1-p0s2 or h3-p0l1) or the switch (like p3s1) it acts on "
            "(`mrclab topo show` lists them).", "p0l1-p0s2", default=REQUIRED),
        *rows,
    ), many=True, discriminator="action", one_of=(("at", "at_step"),),
        example=[{"at_step": 8, "action": "link_down", "target": "p0l1-p0s2"}], default_text="none")


TOPOLOGY_REF = Kind("topology file stem or path", text, {"type": "string", "pattern": r"\S"})

SCENARIO = Section("scenario", "One experiment: a fabric, a transport, a workload and its faults.", (
    Key("name", NAME_KIND, "Names the results folder (1 to 64 of A-Z a-z 0-9 . _ -).", "my-cut",
        default_text="the file's stem"),
    Key("description", TEXT_OR_EMPTY, "What this run should show, in a sentence (`mrclab list` shows it).",
        "Ring all-reduce while a link fails.", default=""),
    Key("engine", choice_kind(tuple(engines.ENGINES)), "What moves the packets: " + "; ".join(
        f"{e.name}: {e.summary}" for e in engines.ENGINES.values()) + ".", "sim", default=engines.DEFAULT),
    dataclasses.replace(TOPOLOGY, also=(TOPOLOGY_REF,), example="clos-4p-4l-4s", meaning=(
        "The fabric: a shipped topology's name (`mrclab list`), a path to a topology file, or the mapping itself."),
        required=True),
    Key("routing", choice_kind(tuple(routing_mod.ROUTINGS)), "How the switches route: " + "; ".join(
        f"{r.name}: {r.summary}" for r in routing_mod.ROUTINGS.values()) + ".", "ecmp-reconverge",
        default=routing_mod.DEFAULT),
    Key("datapath", choice_kind(DATAPATHS), "The switches: linux (Linux SRv6 routers), ovs (Open vSwitch "
        "bridges), or auto (what this machine runs best; `mrclab check` says which).", "linux", default="auto"),
    Key("duration_limit", DURATION, "The run is stopped, and fails, past this.", "120s", default="60s"),
    Key("seed", integer_kind(0, MAX_SEED), "The workload's and the transport's randomness.", 7, default=1),
    Key("transport", choice_kind(TRANSPORT_NAMES), "What the hosts speak: " + "; ".join(
        f"{t.name}: {t.summary}" for t in transports.TRANSPORTS.values()) + ".", "single-path",
        default=transports.DEFAULT),
    _workload("workload", many=False),
    _workload("workloads", many=True),
    _event(),
    transport_options(),
    Section("routing_options", "Knobs of the routing mode.", (
        Key("convergence_delay", DURATION, "How long ecmp-reconverge's control plane takes to rewrite the "
            "leaves' tables after a fault.", "500ms", default="2s"),
    ), default_text="every key's own default"),
    EXPECT,
    Section("capture", "Packet capture into pcapng files in the run folder (engine lab).", (
        Key("interfaces", CAPTURE_INTERFACES, "Which interfaces: the host NICs, the switch ports, all, or the "
            "links listed.", "hosts", default="off"),
        Key("packets", choice_kind(CAPTURE_PACKETS), "Headers only, or whole packets.", "full", default="headers"),
    ), also=(CAPTURE_INTERFACES,), example="hosts", default_text="off"),
), one_of=(("workload", "workloads"),))
"""A scenario file's keys. `topology` is TOPOLOGY, or a file's stem or path."""


def walk(section: Section, prefix: str = "") -> Iterator[tuple[str, Key | Section]]:
    """Every (dotted path, row) below `section`, a list's items as `name[]`; one path per row (a key with rows
    for several discriminator values appears once per row)."""
    for key in section.keys:
        path = f"{prefix}{key.name}"
        yield path, key
        if isinstance(key, Section):
            yield from walk(key, f"{path}[]." if key.many else f"{path}.")


FILES = {"scenario": SCENARIO, "topology": TOPOLOGY}


def lookup(path: str) -> list[tuple[str, Key | Section]]:
    """The rows a dotted path names, in a scenario (`workload.message`, `events.rate`, `topology.links.mtu`) or
    a topology file (`links.mtu`); `[]`/`[N]` may follow a list. Empty when none does."""
    wanted = re.sub(r"\[\d*\]", "", path.strip())
    found: list[tuple[str, Key | Section]] = []
    for prefix, section in (("", SCENARIO), ("", TOPOLOGY)):
        for p, row in walk(section, prefix):
            if p.replace("[]", "") == wanted and all(row is not r for _, r in found):
                found.append((p, row))
        if found:
            return found
    return found


def all_paths() -> list[str]:
    return list(dict.fromkeys([p for p, _ in walk(SCENARIO)] + [p for p, _ in walk(TOPOLOGY)]))


def default_text(row: Key | Section) -> str:
    """The default as `explain` says it."""
    if isinstance(row, Section) and row.required:
        return "none: required"
    if isinstance(row, Section) or row.default is UNSET:
        return row.default_text or "none"
    if row.default is REQUIRED:
        return "none: required"
    if isinstance(row.default, bool):
        return str(row.default).lower()
    return str(row.default)

