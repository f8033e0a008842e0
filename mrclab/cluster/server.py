"""One server's side of a lab over several: ``python -m mrclab.cluster.server`` reads a `Build` line on stdin
(JSON), builds that server's `Share` of the fabric in the namespace it runs in, answers `Built` (the host
namespaces' PIDs) and holds the fabric until stdin says `Stop` or closes, then tears it down. Over SSH, stdin and
stdout are the session's channel, so a server that dies or a runner that goes away ends the share by EOF.

Every line is one message, declared once here and checked on both ends (`decode`).
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import MrclabError
from ..spec import topology as topology_mod
from .share import Share
from .tunnel import VXLAN_PORT, Underlay


@dataclass(frozen=True)
class Build:
    topology: str                 # a shipped topology's name or a file path, as `--set topology=` takes
    server: int
    server_of: dict[str, int]
    underlays: dict[str, list[str]]  # server index (as text: JSON keys) -> [address, interface]
    port: int = VXLAN_PORT
    seed: int = 1

    def share(self) -> Share:
        return Share(self.server, self.server_of, {int(i): Underlay(*u) for i, u in self.underlays.items()},
                     self.port)


@dataclass(frozen=True)
class Built:
    hosts: dict[str, int]     # host name -> a PID in its namespace
    switches: dict[str, int]  # switch name -> a PID in its namespace
    run_id: str


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Failed:
    error: str


MESSAGES = {cls.__name__: cls for cls in (Build, Built, Stop, Failed)}


def encode(message: Build | Built | Stop | Failed) -> str:
    return json.dumps({"type": type(message).__name__, **asdict(message)}) + "\n"


def decode(line: str) -> Any:
    """A message from one line; ValueError naming what is wrong."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("type") not in MESSAGES:
        raise ValueError(f"unknown message: {line.strip()[:80]!r}")
    cls = MESSAGES[doc.pop("type")]
    names = {f.name for f in fields(cls)}
    if not set(doc) <= names:
        raise ValueError(f"{cls.__name__}: unknown fields {sorted(set(doc) - names)}")
    try:
        return cls(**doc)
    except TypeError as exc:
        raise ValueError(f"{cls.__name__}: {exc}") from None


def serve(stdin=sys.stdin, stdout=sys.stdout) -> int:
    from ..fabric.net import Fabric  # Mininet and the fabric only where a share is built

    try:
        build = decode(stdin.readline())
        if not isinstance(build, Build):
            raise ValueError(f"expected Build, got {type(build).__name__}")
        topology = topology_mod.load(build.topology)
        with Fabric(topology, datapath="linux", seed=build.seed, share=build.share()) as fabric:
            stdout.write(encode(Built({n: h.pid for n, h in fabric.hosts.items()}, fabric.switches.netns_pids(),
                                      fabric.state.run_id)))
            stdout.flush()
            for line in stdin:
                if isinstance(decode(line), Stop):
                    break
    except (MrclabError, ValueError, OSError, RuntimeError) as exc:
        stdout.write(encode(Failed(f"{type(exc).__name__}: {exc}")))
        stdout.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(serve())
