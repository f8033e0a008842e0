"""Walks a parsed YAML mapping key by key so every error names the file, the key and what is allowed."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import UsageError


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


class Reader:
    """One mapping of a spec file; `done()` rejects whatever keys were not read."""

    def __init__(self, data: Any, source: str, prefix: str = ""):
        self.source, self.prefix = source, prefix
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail(prefix.rstrip(".") or "(top level)", f"must be a mapping, got {type(data).__name__}")
        self.data, self.seen = data, set()

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def fail(self, key: str, message: str):
        raise UsageError(f"{self.source}: {key}: {message}")

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
        except (ValueError, TypeError) as exc:
            self.fail(self.key(name), str(exc))

    def choice(self, name: str, allowed: tuple[str, ...], default: Any = ...) -> str:
        def check(value):
            if value not in allowed:
                raise ValueError(f"{value!r} is not one of: {', '.join(allowed)}")
            return value
        return self.get(name, check, default, what="one of " + ", ".join(allowed))

    def sub(self, name: str) -> "Reader":
        self.seen.add(name)
        return Reader(self.data.get(name), self.source, f"{self.key(name)}.")

    def done(self, allowed: tuple[str, ...] | None = None) -> None:
        unknown = [k for k in self.data if k not in self.seen]
        if unknown:
            known = ", ".join(sorted(allowed or self.seen))
            self.fail(self.key(str(unknown[0])), f"unknown key; allowed: {known}")


def integer(low: int, high: int | None = None) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if value < low or (high is not None and value > high):
            raise ValueError(f"must be between {low} and {high}, got {value}" if high is not None
                             else f"must be at least {low}, got {value}")
        return value
    return convert


def number(low: float, high: float | None = None) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {value!r}")
        if value < low or (high is not None and value > high):
            raise ValueError(f"must be between {low} and {high}, got {value}" if high is not None
                             else f"must be at least {low}, got {value}")
        return float(value)
    return convert


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value
