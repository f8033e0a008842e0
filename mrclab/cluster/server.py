"""One server's side of a lab over several: ``mrclab cluster-server`` (or ``python -m mrclab.cluster.server``)
answers one runner over its standard input and output, one JSON line a message (`cluster.messages` lists them).

`Hello`s say where its underlay is; `Build` makes that server's `Share` of the fabric in the namespace the process
runs in, and from then on it answers clock readings on its underlay address (`clock.Responder`). It then serves
topo verify (`verify.LocalProbes` on its own hosts and spines) and a run's part on it (`run_part`): its agents,
faults on its ends, its counters and CPU. Over SSH, standard input and output are the session's channel, so a
runner that goes away ends the share by EOF; a local share also ends with its runner (lifeline). Anything it
cannot do is answered `Failed`, and it ends: its share is torn down.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MrclabError, Terminated
from ..protocol import Message
from ..runstate import RunState, proc_text
from ..spec import topology as topology_mod
from . import clock
from . import messages as msg
from .messages import (
    Apply,
    Build,
    Built,
    Clock,
    Clocked,
    Count,
    Failed,
    Flood,
    Hello,
    Judge,
    Kill,
    Launch,
    Logs,
    Probe,
    Quiesce,
    Read,
    Reap,
    Receive,
    Stop,
    Tick,
    Underlay,
    Watch,
    decode,
    encode,
)
from .run_part import KILL_WAIT_S, RunPart

SILENCE_S = 10.0  # a run's share whose runner says nothing for this long tears itself down


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


def session_pid() -> int | None:
    """The SSH session process this share's channel runs under (its nearest sshd ancestor), if any."""
    pid = os.getppid()
    while pid > 1:
        try:
            stat = proc_text(f"/proc/{pid}/stat")
        except OSError:
            return None
        if stat[stat.index("(") + 1:stat.rindex(")")] == "sshd":
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return None


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


class Silence:
    """Ends this share (SIGTERM: the fabric unwinds and tears it down, as when its runner dies here) once its runner
    has said nothing for SILENCE_S while it waited: a runner behind a partition never closes the channel, but its
    heartbeat (`servers.Heartbeat`) stops. Armed by a run (`Launch`); topo verify sends no heartbeat."""

    def __init__(self) -> None:
        self.armed = False
        self.since: float | None = time.monotonic()  # waiting for the runner since
        threading.Thread(target=self._watch, name="silence", daemon=True).start()

    def waiting(self) -> None:
        self.since = time.monotonic()

    def heard(self) -> None:
        self.since = None

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            since = self.since
            if self.armed and since is not None and time.monotonic() - since > SILENCE_S:
                os.kill(os.getpid(), signal.SIGTERM)
                return


class Served:
    """The share a `Build` made, and everything asked of it after: one answer per request."""

    def __init__(self, fabric, topology, probes, responder: clock.Responder, log_dir: Path,
                 session: int | None) -> None:
        self.fabric, self.topology, self.probes, self.responder = fabric, topology, probes, responder
        self.part = RunPart(fabric, log_dir, session)

    def answer(self, request: Message) -> Message:
        part = self.part
        handlers: dict[type, Callable[[Any], Message]] = {
            Apply: self._apply, Clock: lambda _: Clocked(time.monotonic()), Tick: self._tick,
            Launch: part.launch, Watch: part.watch, Quiesce: lambda _: part.quiesce(), Read: lambda _: part.read(),
            Judge: part.judge, Reap: lambda r: part.reap(r.host, r.timeout),
            Kill: lambda r: part.reap(r.host, KILL_WAIT_S, kill=True), Logs: lambda _: part.logs(),
            Probe: self._probe, Receive: self._receive, Count: lambda r: msg.Counted(self.probes.counts(r.spines)),
            Flood: self._flood}
        handler = handlers.get(type(request))
        if handler is None:
            raise ValueError(f"unexpected {type(request).__name__}")
        return handler(request)

    def _apply(self, request: Apply) -> msg.Applied:
        return msg.Applied(self.fabric.apply(request.action, request.target,
                                             loss_probability=request.loss_probability, rate_bps=request.rate_bps))

    def flood_port(self) -> int:
        """Where its controller hears the other servers' link states (0: a routing that never changes)."""
        return int((self.fabric.controller.stats() or {}).get("flood_port", 0))

    def _flood(self, request: Flood, timeout: float = 5.0) -> msg.Flooding:
        """Hand the controller the other controllers' ports, from this server's underlay address (the only
        kind of source it hears), until its stats say it has them."""
        share = self.fabric.share
        address, port = share.underlays[share.server].address, self.flood_port()
        data = json.dumps({"peers": request.peers}).encode()
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        deadline = time.monotonic() + timeout
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
            while "flood_peers" not in (self.fabric.controller.stats() or {}):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the controller did not take its peers within {timeout:g} s")
                sock.sendto(data, (address, port))
                time.sleep(0.05)
        return msg.Flooding()

    @staticmethod
    def _tick(request: Tick) -> msg.Ticked:
        offset = clock.read(request.address, request.port)
        return msg.Ticked(offset.offset_s, offset.uncertainty_s)

    def _probe(self, request: Probe) -> msg.Sent:
        self.probes.send([(p[0], p[1], p[2], p[3], p[4]) for p in request.probes])
        return msg.Sent()

    def _receive(self, request: Receive) -> msg.Arrived:
        arrived = self.probes.receive(request.spine, request.wanted, request.timeout)
        return msg.Arrived([list(p) for p in sorted(arrived)])

    def close(self) -> None:
        self.part.close()
        self.probes.close()
        self.responder.close()


def serve(stdin=sys.stdin, stdout=sys.stdout) -> int:
    """Answer one runner until `Stop` or EOF: `Hello`s, then one `Build`, then what is asked of the share."""
    from ..fabric.net import Fabric  # Mininet and the fabric only where a share is built
    from ..fabric.verify import LocalProbes

    def say(message: Message) -> None:
        stdout.write(encode(message))
        stdout.flush()

    state: RunState | None = None
    try:
        request = decode(stdin.readline())
        while isinstance(request, Hello | Clock):
            say(underlay_towards(request.peer) if isinstance(request, Hello) else Clocked(time.monotonic()))
            request = decode(stdin.readline())
        if not isinstance(request, Build):
            raise ValueError(f"expected Build, got {type(request).__name__}")
        topology = topology_mod.from_mapping(request.topology, "the runner's topology")
        share = request.share()
        if request.run:  # a run's record says so (other runs see it live); the fabric's own says "fabric"
            state = RunState.create(f"run {request.run} (server {request.server} of a lab over servers)")
        with Fabric(topology, state, datapath="linux", seed=request.seed, share=share, routing=request.routing,
                    convergence_delay=request.convergence_delay) as fabric:
            hosts = {n: h.pid for n, h in fabric.hosts.items()}
            probes = LocalProbes(topology, {topology.host_index(n): pid for n, pid in hosts.items()},
                                 fabric.switches.spine_counts)
            mine = share.underlays[share.server].address
            responder = clock.Responder(mine, [u.address for i, u in share.underlays.items() if i != share.server])
            session = session_pid()
            served = Served(fabric, topology, probes, responder, fabric.state.private_dir(), session)
            try:
                say(Built(hosts, fabric.switches.netns_pids(), fabric.state.run_id, responder.port,
                          [os.getpid(), *([session] if session else [])], boot_id(), served.flood_port()))
                silence = Silence()
                for line in stdin:
                    silence.heard()
                    request = decode(line)
                    if isinstance(request, Stop):
                        break
                    silence.armed = silence.armed or isinstance(request, Launch)
                    say(served.answer(request))
                    silence.waiting()
            finally:
                served.close()
    except (MrclabError, ValueError, OSError, RuntimeError) as exc:
        say(Failed(f"{type(exc).__name__}: {exc}"))
        return 1
    except Terminated:  # told to end (its runner gave up on it, or its silence ran out): torn down, nothing to say
        return 1
    finally:
        if state is not None:
            state.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
