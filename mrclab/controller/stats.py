"""The controller's stats file: the one channel from the controller process to the runner.

The app rewrites it atomically (write + rename) whenever something changes, so a reader
never sees half a document. Layout::

    {"app": "static_srv6", "pid": 1234, "port": 6653,
     "switches": {"p0l0": {"dpid": ..., "connected": true, "programmed": true,
                           "connects": 1, "flow_mods": 7}},
     "flow_mods_boot": 56, "flow_mods_after_boot": 0, "packet_ins": 0, "errors": 0}

`programmed` turns true when the switch's barrier reply arrives, i.e. after it has
applied every boot flow-mod: the runner waits for that before sending traffic.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


def read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def programmed(document: dict[str, Any] | None) -> set[str]:
    if not document:
        return set()
    return {name for name, s in document["switches"].items() if s["programmed"]}
