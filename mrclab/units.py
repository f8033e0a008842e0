"""Sizes, rates and durations with units, as written in topology and scenario files."""
from __future__ import annotations

import math
import re
import reprlib

_SIZE = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_RATE = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "bps": 1, "kbps": 10**3, "mbps": 10**6, "gbps": 10**9}
_TIME = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0}
_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _parse(value, table: dict, what: str, default_unit: str | None) -> float:
    shown = reprlib.repr(value)
    if isinstance(value, bool):
        raise ValueError(f"expected a {what}, got {shown}")
    if isinstance(value, (int, float)):
        if default_unit is None:
            raise ValueError(f"a {what} needs a unit ({', '.join(k for k in table if k)}), got {shown}")
        number, unit = float(value), default_unit
    else:
        match = _NUMBER.match(str(value)) if isinstance(value, str) and len(value) <= 64 else None
        if not match:
            raise ValueError(f"expected a {what} like {_example(what)}, got {shown}")
        number, unit = float(match.group(1)), match.group(2).lower()
        if unit == "" and default_unit is not None:
            unit = default_unit
    if unit not in table:
        raise ValueError(f"unknown unit {unit!r} for a {what}; allowed: {', '.join(k for k in table if k)}")
    if number < 0:
        raise ValueError(f"a {what} cannot be negative, got {shown}")
    if not math.isfinite(number * table[unit]):
        raise ValueError(f"a {what} must be finite, got {shown}")
    return number * table[unit]


def tables() -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """The units sizes, rates and durations take (lower case; "" is a bare number), each to its scale."""
    return dict(_SIZE), dict(_RATE), dict(_TIME)


def _example(what: str) -> str:
    return {"size": "64KiB", "rate": "100Mbit", "duration": "3s"}[what]


def size_bytes(value) -> int:
    """``64KiB`` -> 65536; a bare number is bytes."""
    return int(_parse(value, _SIZE, "size", ""))


def rate_bps(value) -> int:
    """``100Mbit`` -> 100_000_000 bits per second; a unit is required."""
    return int(_parse(value, _RATE, "rate", None))


def seconds(value) -> float:
    """``200ms`` -> 0.2; a bare number is seconds."""
    return _parse(value, _TIME, "duration", "s")


def format_rate(bps: float) -> str:
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("Kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"


def format_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def format_seconds(s: float) -> str:
    """0.05 -> ``50 ms``; 2.5 -> ``2.5 s``; 3e-5 -> ``30 µs``: three significant figures at most."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale or unit == "µs":
            return f"{s / scale:.3g} {unit}"
    return f"{s:g} s"


def format_bytes(n: float) -> str:
    """24117248 -> ``23.0 MiB``: one decimal in the largest binary unit that keeps the number above 1."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
