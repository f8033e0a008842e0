"""One server's side of a lab over several: ``mrclab cluster-server`` (or ``python -m mrclab.cluster.server``)
answers one runner over its standard input and output, one JSON line a message (`protocol.Codec`):

    hello {peer}                -> underlay {address, device, mtu, vxlan}   (its route towards another server)
    clock                       -> clocked {monotonic}                      (for the runner's offset readings)
    build {topology, server, server_of, underlays, port, seed} -> built {hosts, switches, run_id}
    probe {probes} -> sent;  receive {spine, wanted, timeout} -> arrived {paths};  count {spines} -> counted
    stop                        (or EOF)                                    -> the share is torn down
    anything it cannot do       -> failed {error}, and it ends

`build` makes that server's `Share` of the fabric in the namespace the process runs in; the probing requests
are `verify.LocalProbes` on its own hosts and spines. Over SSH, standard input and output are the session's
channel, so a runner that goes away ends the share by EOF; a local share also ends with its runner (lifeline).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..errors import MrclabError
from ..protocol import Codec, Message, ProtocolError
from ..spec import topology as topology_mod
from . import tunnel
from .share import Share
from .tunnel import VXLAN_PORT


@dataclass(frozen=True)
class Hello(Message):
    TYPE = "hello"
    peer: str  # an address of another server: the underlay is where the route to it leaves


@dataclass(frozen=True)
class Underlay(Message):
    TYPE = "underlay"
    address: str
    device: str
    mtu: int  # the device's: what a tunnelled frame may take on the first hop
    vxlan: bool  # this kernel makes VXLAN devices


@dataclass(frozen=True)
class Build(Message):
    TYPE = "build"
    topology: dict[str, Any]      # the runner's topology (`Topology.to_dict`): no file needs to be there
    server: int
    server_of: dict[str, int]
    underlays: dict[str, list[str]]  # server index (as text: JSON keys) -> [address, interface]
    port: int = VXLAN_PORT
    seed: int = 1

    def share(self) -> Share:
        return Share(self.server, self.server_of, {int(i): tunnel.Underlay(*u) for i, u in self.underlays.items()},
                     self.port)


@dataclass(frozen=True)
class Built(Message):
    TYPE = "built"
    hosts: dict[str, int]     # host name -> a PID in its namespace
    switches: dict[str, int]  # switch name -> a PID in its namespace
    run_id: str


@dataclass(frozen=True)
class Probe(Message):
    TYPE = "probe"
    probes: list[list[Any]]  # [src, dst, plane, spine, address] from this server's hosts (`verify.LocalProbes`)


@dataclass(frozen=True)
class Sent(Message):
    TYPE = "sent"


@dataclass(frozen=True)
class Receive(Message):
    TYPE = "receive"
    spine: int
    wanted: int
    timeout: float


@dataclass(frozen=True)
class Arrived(Message):
    TYPE = "arrived"
    paths: list[list[int]]  # [src, dst, plane] of every probe of that batch that reached this server's hosts


@dataclass(frozen=True)
class Count(Message):
    TYPE = "count"
    spines: list[str]


@dataclass(frozen=True)
class Counted(Message):
    TYPE = "counted"
    counts: dict[str, int]


@dataclass(frozen=True)
class Clock(Message):
    TYPE = "clock"


@dataclass(frozen=True)
class Clocked(Message):
    TYPE = "clocked"
    monotonic: float  # the server's time.monotonic() when it read the request


@dataclass(frozen=True)
class Stop(Message):
    TYPE = "stop"


@dataclass(frozen=True)
class Failed(Message):
    TYPE = "failed"
    error: str


CODEC = Codec(Hello, Underlay, Build, Built, Probe, Sent, Receive, Arrived, Count, Counted, Clock, Clocked,
              Stop, Failed)


def encode(message: Message) -> str:
    return CODEC.encode(message).decode()


def decode(line: str) -> Message:
    """A message from one line; ProtocolError (a ValueError) naming what is wrong, also when the line is empty:
    the other end closed the channel."""
    if not line:
        raise ProtocolError("the other end closed the channel")
    return CODEC.decode(line)


def vxlan_works() -> bool:
    """Whether a VXLAN device can be made, tried in a namespace of its own that leaves nothing behind."""
    probe = ["unshare", "--net", "ip", "link", "add", "vxprobe", "type", "vxlan", "id", "1", "dstport", "4789"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def underlay_towards(peer: str) -> Underlay:
    """This machine's address and interface on the route to `peer` (the kernel's own choice)."""
    out = subprocess.run(["ip", "-j", "route", "get", peer], capture_output=True, text=True, check=False)
    try:
        route = json.loads(out.stdout)[0]
        device = route["dev"]
        link = subprocess.run(["ip", "-j", "link", "show", "dev", device], capture_output=True, text=True, check=False)
        return Underlay(route["prefsrc"], device, int(json.loads(link.stdout)[0]["mtu"]), vxlan_works())
    except (ValueError, LookupError, TypeError):
        raise ValueError(f"no route to {peer} here: {out.stderr.strip() or out.stdout.strip()}") from None


def serve(stdin=sys.stdin, stdout=sys.stdout) -> int:
    """Answer one runner until `Stop` or EOF: `Hello`s, then one `Build`, then probes and counts."""
    from ..fabric.net import Fabric  # Mininet and the fabric only where a share is built
    from ..fabric.verify import LocalProbes

    def say(message: Message) -> None:
        stdout.write(encode(message))
        stdout.flush()

    try:
        request = decode(stdin.readline())
        while isinstance(request, Hello | Clock):
            say(underlay_towards(request.peer) if isinstance(request, Hello) else Clocked(time.monotonic()))
            request = decode(stdin.readline())
        if not isinstance(request, Build):
            raise ValueError(f"expected Build, got {type(request).__name__}")
        topology = topology_mod.from_mapping(request.topology, "the runner's topology")
        with Fabric(topology, datapath="linux", seed=request.seed, share=request.share()) as fabric:
            hosts = {n: h.pid for n, h in fabric.hosts.items()}
            probes = LocalProbes(topology, {topology.host_index(n): pid for n, pid in hosts.items()},
                                 fabric.switches.spine_counts)
            try:
                say(Built(hosts, fabric.switches.netns_pids(), fabric.state.run_id))
                for line in stdin:
                    request = decode(line)
                    if isinstance(request, Stop):
                        break
                    if isinstance(request, Probe):
                        probes.send([(p[0], p[1], p[2], p[3], p[4]) for p in request.probes])
                        say(Sent())
                    elif isinstance(request, Receive):
                        arrived = probes.receive(request.spine, request.wanted, request.timeout)
                        say(Arrived([list(p) for p in sorted(arrived)]))
                    elif isinstance(request, Count):
                        say(Counted(probes.counts(request.spines)))
                    elif isinstance(request, Clock):
                        say(Clocked(time.monotonic()))
                    else:
                        raise ValueError(f"unexpected {type(request).__name__}")
            finally:
                probes.close()
    except (MrclabError, ValueError, OSError, RuntimeError) as exc:
        say(Failed(f"{type(exc).__name__}: {exc}"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(serve())
