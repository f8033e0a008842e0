"""Typed messages at a process seam, one line of JSON each: ``{"type": T, ...its fields}``.

A seam declares its messages once, as frozen dataclasses with a ``TYPE`` name, and makes one `Codec` of them;
both of its ends encode and decode through it. `decode` takes nothing it does not know: an unknown type, a
missing or unknown field, or a field of the wrong type (checked against the dataclass's annotations, into
lists and dicts) raises `ProtocolError` naming it.
"""
from __future__ import annotations

import dataclasses
import json
import types
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin, get_type_hints

U32 = Annotated[int, "0..0xFFFFFFFF"]
RequestId = int | str | None
MAX_U32 = 0xFFFFFFFF


class ProtocolError(ValueError):
    """A line that is not a message; ``request_id`` is its ``id`` when it named one (a refusal echoes it)."""

    def __init__(self, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True)
class Message:
    TYPE: ClassVar[str]


class Codec:
    """The messages of one seam, by their TYPE."""

    def __init__(self, *classes: type[Message]) -> None:
        self.types: dict[str, type[Message]] = {cls.TYPE: cls for cls in classes}
        self._fields = {name: {f.name: get_type_hints(cls, include_extras=True)[f.name]
                               for f in dataclasses.fields(cls)} for name, cls in self.types.items()}
        self._defaults = {name: {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
                          for name, cls in self.types.items()}

    def encode(self, message: Message) -> bytes:
        return json.dumps(to_dict(message), separators=(",", ":")).encode() + b"\n"

    def decode(self, line: bytes | bytearray | str) -> Message:
        """One line -> its message; anything else raises ProtocolError naming what is wrong."""
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise ProtocolError(f"message is not JSON: {err}") from None
        if not isinstance(obj, dict):
            raise ProtocolError(f"message must be a JSON object, got {type(obj).__name__}")
        request_id = obj.get("id") if _accepts(RequestId, obj.get("id")) else None
        kind = obj.get("type")
        if kind not in self.types:
            raise ProtocolError(f"unknown message type {kind!r}; allowed: {', '.join(self.types)}", request_id)
        hints = self._fields[kind]
        unknown = sorted(set(obj) - {"type", *hints})
        if unknown:
            raise ProtocolError(f"{kind!r} takes no {', '.join(map(repr, unknown))}", request_id)
        values = {}
        for name, hint in hints.items():
            if name not in obj:
                if name in self._defaults[kind]:
                    continue
                raise ProtocolError(f"{kind!r} has no {name!r}", request_id)
            value = obj[name]
            if not _accepts(hint, value):
                raise ProtocolError(f"{kind!r} needs {name!r} as {_describe(hint)}, got {value!r}", request_id)
            values[name] = float(value) if hint is float else value
        return self.types[kind](**values)


def to_dict(message: Message) -> dict[str, Any]:
    """The message as its line's JSON object."""
    return {"type": message.TYPE, **{f.name: getattr(message, f.name) for f in dataclasses.fields(message)}}


def _accepts(hint: Any, value: Any) -> bool:
    origin = get_origin(hint)
    if origin is Annotated:
        return type(value) is int and 0 <= value <= MAX_U32
    if origin in (Union, types.UnionType):
        return any(_accepts(h, value) for h in get_args(hint))
    if origin is list:
        (item,) = get_args(hint)
        return type(value) is list and all(_accepts(item, v) for v in value)
    if origin is dict:
        key, item = get_args(hint)
        return type(value) is dict and all(_accepts(key, k) and _accepts(item, v) for k, v in value.items())
    if hint is Any:
        return True
    if hint is float:
        return type(value) in (int, float)
    return type(value) is hint  # what json.loads makes is exactly int, str, bool, list, dict or None


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Annotated:
        return f"an integer in 0..{MAX_U32}"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(h) for h in get_args(hint))
    if origin is list:
        return f"a list, each {_describe(get_args(hint)[0])}"
    if origin is dict:
        return f"an object, each value {_describe(get_args(hint)[1])}"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
            list: "a list", type(None): "null"}.get(hint, "anything")
