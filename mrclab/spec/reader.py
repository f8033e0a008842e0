"""Walks a parsed YAML mapping key by key so every error names the file, the key and what is allowed.

Spec files come from users and from whoever else can write where they point, so reading one
is bounded: a regular file of at most `MAX_FILE_BYTES`, UTF-8, no aliases (a kilobyte of them
expands to gigabytes), no duplicate keys (YAML would keep the last silently), at most
`MAX_DEPTH` levels of nesting. Every way a file can be wrong is a UsageError of one short line.
"""
from __future__ import annotations

import difflib
import math
import os
import reprlib
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ..errors import UsageError

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 16
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60
_repr.maxlist = _repr.maxdict = _repr.maxtuple = 6
_repr.maxlevel = 3


def short(value: Any) -> str:
    """`repr` shortened for an error line, however large or nested the value."""
    try:
        return _repr.repr(value)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"


def clip(path: Any, limit: int = 120) -> str:
    """A path for an error line: as written, cut in the middle when long."""
    text_ = str(path)
    return text_ if len(text_) <= limit else f"{text_[:limit // 2]}...{text_[-limit // 2:]}"


class _Loader(yaml.SafeLoader):
    """safe_load without aliases and without duplicate keys."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(None, None, "aliases (*name) are not accepted in mrclab files",
                                       event.start_mark)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                           self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise yaml.MarkedYAMLError(None, None, "a mapping key must be a plain value",
                                           key_node.start_mark) from None
            if duplicate:
                raise yaml.MarkedYAMLError(None, None, f"duplicate key {short(key)}", key_node.start_mark)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> plain data, or a UsageError of one line naming `source` and where it went wrong."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UsageError(one_line(f"{source}: not valid YAML{where}: {problem}")) from None
    return data


def one_line(message: str, limit: int = 300) -> str:
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def is_file(path: Path) -> bool:
    """Path.exists() that treats a name too long or otherwise unusable as absent instead of raising."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def read_text(path: Path, what: str = "file") -> str:
    """A regular file's text, at most MAX_FILE_BYTES of UTF-8; devices, FIFOs and directories are refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{clip(path)}: no such {what}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{clip(path)}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{clip(path)}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise UsageError(f"{clip(path)}: {info.st_size} bytes is more than a spec file may hold ({MAX_FILE_BYTES})")
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(f"{clip(path)}: more than a spec file may hold ({MAX_FILE_BYTES} bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{clip(path)}: not UTF-8 text (byte {exc.start})") from None


def load_yaml(path: Path, what: str = "file") -> Any:
    return parse_yaml(read_text(path, what), str(path))


class Reader:
    """One mapping of a spec file; `done()` rejects whatever keys were not read."""

    def __init__(self, data: Any, source: str, prefix: str = ""):
        self.source, self.prefix = source, prefix
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail(prefix.rstrip(".") or "(top level)", f"must be a mapping, got {type(data).__name__}")
        self.data = data
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def fail(self, key: str, message: str) -> NoReturn:
        raise UsageError(one_line(f"{self.source}: {key}: {message}"))

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = None) -> Any:
        self.seen.add(name)
        return self.data.get(name, default)

    def get(self, name: str, convert: Callable[[Any], Any], default: Any = ..., what: str = "") -> Any:
        self.seen.add(name)
        if name not in self.data or self.data[name] is None:
            if default is ...:
                self.fail(self.key(name), f"is required{': ' + what if what else ''}")
            return default
        try:
            return convert(self.data[name])
        except (ValueError, TypeError, OverflowError) as exc:
            self.fail(self.key(name), str(exc))

    def read(self, row: Any, default: Any = None, what: str = "") -> Any:
        """A key through its row of `spec.keys`: the row's converter and default (or `default`, when the loader
        computes it), `what` saying what a required key takes."""
        return self.get(row.name, row.kind.convert, row.value if default is None else default,
                        what or row.kind.what)

    def choice(self, name: str, allowed: tuple[str, ...], default: Any = ...) -> str:
        def check(value):
            if value not in allowed:
                raise ValueError(f"{short(value)} is not one of: {', '.join(allowed)}")
            return value
        return self.get(name, check, default, what="one of " + ", ".join(allowed))

    def sub(self, name: str) -> Reader:
        self.seen.add(name)
        return Reader(self.data.get(name), self.source, f"{self.key(name)}.")

    def only(self, allowed: tuple[str, ...]) -> None:
        """Refuse a key not in `allowed` before any is read, so a misspelt key is named as such rather than as
        the key it was meant to be, missing."""
        unknown = [k for k in self.data if k not in allowed]
        if unknown:
            self.unknown(unknown[0], allowed)

    def done(self, allowed: tuple[str, ...] | None = None) -> None:
        unknown = [k for k in self.data if k not in self.seen]
        if unknown:
            self.unknown(unknown[0], allowed or tuple(self.seen))

    def unknown(self, key: Any, allowed: tuple[str, ...]) -> NoReturn:
        close = suggest(key, allowed)
        hint = f" (did you mean {close}?)" if close else ""
        self.fail(self.key(str(key)), f"unknown key{hint}; allowed: {', '.join(sorted(allowed))}")


def suggest(word: Any, choices: Iterable[str]) -> str | None:
    """The closest of `choices` to a mistyped `word`, if one is close enough to be what was meant."""
    matches = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def integer(low: int, high: int | None = None) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {short(value)}")
        if value < low or (high is not None and value > high):
            raise ValueError(f"must be between {low} and {high}, got {short(value)}" if high is not None
                             else f"must be at least {low}, got {short(value)}")
        return value
    return convert


def number(low: float, high: float | None = None) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {short(value)}")
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            raise ValueError(f"must be between {low} and {high}, got {short(value)}" if high is not None
                             else f"must be a finite number of at least {low}, got {short(value)}")
        return float(value)
    return convert


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {short(value)}")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {short(value)}")
    return value
