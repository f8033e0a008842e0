"""`[user@]host[:port]`: how a user names a machine reached over SSH (`--target`, a cluster file's servers).

One grammar for both, so a server is written the same way wherever it appears. Only the syntax is
checked here; what the name resolves to (`~/.ssh/config`, the default user) is decided on connecting.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FORM = "[user@]host[:port]"
_PLAIN = re.compile(r"^(?:(?P<user>[^@\s:/]+)@)?(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^@\s:/\[\]]+))"
                    r"(?::(?P<port>[^:]*))?$")


@dataclass(frozen=True)
class Address:
    spec: str               # as the user wrote it: what messages and tables show
    host: str               # an IPv6 address without its brackets
    user: str | None = None
    port: int | None = None


def parse(spec: str, *, forms: str = FORM) -> Address:
    """ValueError saying what is wrong (after `expected`, `forms`: what the caller accepts besides)."""
    m = _PLAIN.match(spec.strip())
    if m is None:
        raise ValueError(f"expected {forms}")
    host = m["v6"] or m["host"]
    for what, value in (("user", m["user"]), ("host", host)):
        if value and value.startswith("-"):  # ssh would read it as an option
            raise ValueError(f"{what} {value!r} starts with '-'")
    port = None
    if m["port"] is not None:
        if not (m["port"].isascii() and m["port"].isdigit()) or not 0 < int(m["port"]) < 65536:
            raise ValueError(f"port {m['port']!r} is not a number from 1 to 65535")
        port = int(m["port"])
    return Address(spec, host, m["user"], port)
