"""The agent's own record: one JSON object per line, each stamped with ``time.monotonic()``.

Written through a large buffer and flushed about once a second and at exit, so logging
every control request and every event costs the packet path nothing.
"""
from __future__ import annotations

import json
import time

FLUSH_INTERVAL = 1.0


class EventLog:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115  open for the agent's life
        self._flushed_at = time.monotonic()

    def write(self, kind: str, **fields) -> None:
        record = {"t": round(time.monotonic(), 6), "kind": kind}
        record.update(fields)
        self._file.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def next_flush(self) -> float:
        return self._flushed_at + FLUSH_INTERVAL

    def flush(self, now: float) -> None:
        self._file.flush()
        self._flushed_at = now

    def close(self) -> None:
        self._file.close()
