"""What ships and what each key means, for `mrclab list` and `mrclab explain`: read from the shipped files and
from the key table (`spec.keys`), in the document `--json` prints and in lines that fit 80 columns."""
from __future__ import annotations

import re
import textwrap
from typing import Any

import yaml

from .errors import UsageError
from .spec import keys
from .spec import scenario as scenario_mod
from .spec import topology as topology_mod
from .spec.reader import load_yaml, suggest
from .units import format_rate

WIDTH = 80


SENTENCE_END = re.compile(r"(?<!Fig)(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z`])")


def _flat(text: str) -> str:
    return " ".join(str(text or "").split())


def _first_sentence(text: str) -> str:
    flat = _flat(text)
    end = SENTENCE_END.search(flat)
    return flat if end is None else flat[:end.start() + 1]


def shipped() -> dict[str, list[dict[str, str]]]:
    """Every shipped scenario (its name and the first sentence of its description) and topology (its shape)."""
    scenarios = []
    for name in scenario_mod.shipped():
        data = load_yaml(scenario_mod.SCENARIO_DIR / f"{name}.yaml", "scenario file")
        about = _flat(data.get("description", "")) if isinstance(data, dict) else ""
        scenarios.append({"name": name, "about": about})
    topologies = []
    for name in topology_mod.shipped():
        t = topology_mod.load(name, engine="sim")
        rate = (format_rate(t.host_rate_bps) if t.host_rate_bps == t.fabric_rate_bps
                else f"{format_rate(t.host_rate_bps)} hosts, {format_rate(t.fabric_rate_bps)} fabric")
        shape = ", ".join(f"{n} {what}{'s' if n > 1 else ''}" for n, what in (
            (t.planes, "plane"), (t.leaves, "leaf"), (t.spines, "spine"))).replace("leafs", "leaves")
        topologies.append({"name": name, "about": f"{shape} per plane, {t.hosts} hosts, {rate}"})
    return {"scenarios": scenarios, "topologies": topologies}


def list_lines(doc: dict[str, list[dict[str, str]]]) -> list[str]:
    """One line each, cut to 80 columns (`--json` has the whole descriptions)."""
    width = max(len(item["name"]) for items in doc.values() for item in items) + 2
    lines = []
    for heading, items in (("scenarios (mrclab run NAME)", doc["scenarios"]),
                           ("topologies (topology: NAME in a scenario)", doc["topologies"])):
        lines.append(heading)
        for item in items:
            line = f"  {item['name']:<{width}}{item['about']}".rstrip()
            lines.append(line if len(line) <= WIDTH else line[:WIDTH - 3].rstrip() + "...")
    return lines


def _find(path: str) -> list[tuple[str, keys.Key | keys.Section]]:
    found = keys.lookup(path)
    if not found:
        close = suggest(path, [p.replace("[]", "") for p in keys.all_paths()])
        raise UsageError(f"no key {path!r} in a scenario or topology file" + (f" (did you mean {close}?)" if close
                                                                                else "")
                         + "; `mrclab explain` lists them all")
    return found


def _kind(row: keys.Key | keys.Section) -> str:
    if isinstance(row, keys.Key):
        return row.kind.name + (f", in {row.kind.unit}" if row.kind.unit else "")
    what = "a list of mappings" if row.many else "a mapping"
    return what + "".join(f", or {kind.name}" for kind in row.also)


def _applies(path: str, row: keys.Key | keys.Section) -> str:
    if not row.when:
        return ""
    parent = keys.lookup(path.rpartition(".")[0])
    section = parent[0][1] if parent else None
    by = section.discriminator if isinstance(section, keys.Section) else "it"
    return f"with {by} {', '.join(row.when)}"


def explain(path: str) -> list[dict[str, Any]]:
    """One entry per row the key names (a key that means one thing for a stream and another for a collective
    has two): its meaning, kind, unit, default, example and the keys below it."""
    entries = []
    for found, row in _find(path):
        file = "topology" if any(r is row for _, r in keys.walk(keys.TOPOLOGY)) and not found.startswith(
            "topology") else "scenario"
        entry: dict[str, Any] = {"key": found, "file": file, "meaning": row.meaning, "kind": _kind(row),
                                 "default": keys.default_text(row), "example": row.example}
        if isinstance(row, keys.Key) and row.kind.unit:
            entry["unit"] = row.kind.unit
        if row.when:
            entry["applies"] = _applies(found, row)
        if isinstance(row, keys.Section):
            entry["keys"] = [{"key": k.name, "meaning": k.meaning, **({"applies": ", ".join(k.when)} if k.when
                                                                      else {})} for k in row.keys]
        entries.append(entry)
    return entries


def _example_text(entry: dict[str, Any]) -> list[str]:
    name = entry["key"].rpartition(".")[2].removesuffix("[]")
    value = yaml.safe_dump(entry["example"], default_flow_style=True, sort_keys=False, width=1000)
    value = value.strip().removesuffix("...").strip()
    lines = textwrap.wrap(f"{name}: {value}", WIDTH, initial_indent="  example:  ", subsequent_indent=" " * 12)
    if "[]" not in entry["key"] and not isinstance(entry["example"], (dict, list)):
        where = "topology." if entry["file"] == "topology" else ""
        lines.append(f"            --set {where}{entry['key']}={value}")
    return lines


def explain_lines(entries: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for entry in entries:
        if lines:
            lines.append("")
        head = f"{entry['key']}  ({entry['file']} file" + (f"; {entry['applies']}" if entry.get("applies") else "")
        lines += textwrap.wrap(head + ")", WIDTH, subsequent_indent="  ", break_on_hyphens=False)
        lines += textwrap.wrap(entry["meaning"], WIDTH, initial_indent="  ", subsequent_indent="  ")
        lines += textwrap.wrap(entry["kind"], WIDTH, initial_indent="  kind:     ", subsequent_indent=" " * 12)
        lines += textwrap.wrap(entry["default"], WIDTH, initial_indent="  default:  ", subsequent_indent=" " * 12)
        lines += _example_text(entry)
        if entry.get("keys"):
            lines.append("  keys:")
            width = max(len(k["key"]) for k in entry["keys"]) + 2
            for k in entry["keys"]:
                text = _first_sentence(k["meaning"]) + (f" ({k['applies']})" if k.get("applies") else "")
                lines += textwrap.wrap(text, WIDTH, initial_indent=f"    {k['key']:<{width}}",
                                       subsequent_indent=" " * (4 + width), break_on_hyphens=False)
    return lines


def index_lines() -> list[str]:
    """Every key of both files, with the first sentence of its meaning: `mrclab explain` without a key."""
    lines = []
    for file, section in keys.FILES.items():
        rows = [(path, row) for path, row in keys.walk(section)  # workloads[] is workload's list; a scenario's
                if not path.startswith(("workloads[]", "topology.")) and ".transport_options." not in path]
        lines.append(f"{file} file (mrclab explain KEY says more)")
        for path, row in rows:  # topology is the topology file's keys
            when = f" ({', '.join(row.when)})" if row.when else ""
            lines += textwrap.wrap(f"{path}: {_first_sentence(row.meaning)}{when}", WIDTH, initial_indent="  ",
                                   subsequent_indent=" " * 6, break_long_words=False, break_on_hyphens=False)
    return lines
