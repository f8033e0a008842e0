"""JSON Schemas of scenario and topology files, generated from the rows of `spec.keys` (never written by hand).

An editor given one (the `# yaml-language-server: $schema=...` line the shipped scenarios carry, or
`mrclab schema`'s output saved where the editor looks) completes keys, shows each key's meaning and flags a
key that is not there or a value of the wrong kind. The schema checks the keys and the kinds of their values;
the loader checks the rest (names against the fabric, one key against another).
"""
from __future__ import annotations

from typing import Any

from .keys import FILES, Key, Section, default_text

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID = "https://mrclab.invalid/schema/{file}.json"  # an identifier, not an address anything is fetched from


def _description(row: Key | Section) -> str:
    unit = f" Unit: {row.kind.unit}." if isinstance(row, Key) and row.kind.unit else ""
    return f"{row.meaning}{unit} Default: {default_text(row)}."


class _Defs(dict):
    """Sections that appear more than once (the transport options of a scenario and of each workload), each
    written once under `$defs` and referred to."""

    def ref(self, section: Section, body) -> dict[str, Any]:
        name = next((n for n, (keys, _) in self.items() if keys is section.keys), None)
        if name is None:
            name = section.name
            self[name] = (section.keys, None)
            self[name] = (section.keys, body(section))
        return {"$ref": f"#/$defs/{name}"}


def _row(row: Key | Section, defs: _Defs) -> dict[str, Any]:
    if isinstance(row, Key):
        return {**row.kind.schema, "description": _description(row)}
    item = defs.ref(row, lambda s: _section(s, defs)) if row.shared else _section(row, defs)
    if row.many:
        item = {"type": "array", "minItems": 1 if row.name == "workloads" else 0, "items": item}
    if row.also:
        item = {"anyOf": [item, *(dict(kind.schema) for kind in row.also)]}
    return {**item, "description": _description(row)}


def _section(section: Section, defs: _Defs) -> dict[str, Any]:
    """An object of the section's keys; a key with one row for each value of the discriminator is checked by
    that value, and a key only some values take is refused under the others."""
    properties: dict[str, Any] = {}
    for row in section.keys:
        rows = [k for k in section.keys if k.name == row.name]
        properties[row.name] = _row(row, defs) if len(rows) == 1 else {
            "description": " / ".join(dict.fromkeys(_description(k) for k in rows))}
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    required = [k.name for k in section.keys if k.required and not k.when]
    if required:
        out["required"] = required
    rules: list[dict[str, Any]] = []
    if section.discriminator:
        values = section[section.discriminator].kind.schema["enum"]
        for value in values:
            rows = [k for k in section.keys if k.when and value in k.when]
            then: dict[str, Any] = {"propertyNames": {"enum": list(section.names(value))}}
            if rows:
                then["properties"] = {k.name: _row(k, defs) for k in rows}
                needed = [k.name for k in rows if isinstance(k, Key) and k.required]
                if needed:
                    then["required"] = needed
            rules.append({"if": {"properties": {section.discriminator: {"const": value}},
                                 "required": [section.discriminator]}, "then": then})
    rules += [{"oneOf": [{"required": [name]} for name in group]} for group in section.one_of]
    if rules:
        out["allOf"] = rules
    return out


def schema(file: str) -> dict[str, Any]:
    """The JSON Schema of a `scenario` or `topology` file."""
    section, defs = FILES[file], _Defs()
    body = _section(section, defs)
    return {"$schema": DRAFT, "$id": ID.format(file=file), "title": f"mrclab {file} file",
            "description": section.meaning, **body,
            **({"$defs": {name: made for name, (_, made) in defs.items()}} if defs else {})}
