"""The runner's side of a lab over several servers: one share process per server (`cluster.server`), started
here for ``local`` and over SSH for ``[user@]host[:port]`` (the same rules as ``--target``), spoken to one line
at a time.

`Cluster` places the topology (`placement`), asks each server where its underlay is (the route towards
another server), has every server build its share at once, and gives one probing side per server for
`verify.verify`. Leaving it stops every share; a share whose runner goes away ends by EOF.
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any, TypeVar

from .. import lifeline
from ..check import Row
from ..errors import EnvironmentNotReady, UsageError
from ..routing import DEFAULT as ROUTING_DEFAULT
from ..spec import address as address_mod
from ..spec.topology import Topology
from . import clock
from . import messages as msg
from .placement import assign
from .tunnel import VXLAN_PORT, underlay_mtu

A = TypeVar("A", bound=msg.Message)

LOCAL = "local"  # this machine, as a server (first in the list, if at all)
ANSWER_TIMEOUT_S = 300.0  # a share of hundreds of nodes takes a while to build
LIVENESS_S = 5.0  # once built, a server silent for this long is gone (a heartbeat goes every HEARTBEAT_S)
HEARTBEAT_S = 1.0
CLOCK_ROUNDS = 16  # ping-pongs per offset reading over a channel: the one with the shortest round trip is kept
TICK_TIMEOUT_S = 30.0
GONE_WAIT_S = 0.5
CONNECTION_CLOSED = "its SSH connection closed: the server, or the network to it, went away"


class ServerLost(EnvironmentNotReady):
    """A server went away or stopped answering: its channel closed, it failed, or it fell silent."""

    def __init__(self, spec: str, why: str) -> None:
        super().__init__(f"server {spec}: {why}")
        self.spec = spec


@dataclass(eq=False)
class Channel:
    """One server's share process: what it reads and what it writes. One request at a time (`lock`)."""

    spec: str
    send: IO[str]
    receive: IO[str]
    closer: Any  # a Popen or an SSH connection
    chan: Any = None  # over SSH: the paramiko channel (its read timeout, its transport)
    remote: Any = None  # over SSH: the `remote.job.Remote` (how mrclab runs there)
    lock: threading.Lock = field(default_factory=threading.Lock)
    timeout: float = ANSWER_TIMEOUT_S  # for an answer over SSH
    lost: str | None = None  # why it is gone

    def ask(self, message: msg.Message, answer: type[A], timeout: float | None = None) -> A:
        with self.lock:
            self.tell(message)
            return self.answer(answer, timeout)

    def tell(self, message: msg.Message) -> None:
        if self.lost is not None:
            raise ServerLost(self.spec, self.lost)
        try:
            self.send.write(msg.encode(message))
            self.send.flush()
        except EOFError:  # paramiko: its connection failed under the send (broken, closed, or its peer silent)
            raise self.lose(CONNECTION_CLOSED) from None
        except OSError as exc:
            raise self.lose(self._gone(exc)) from None

    def _gone(self, exc: Exception) -> str:
        """Why its channel failed: the whole connection, or the share alone."""
        if self.connection_closed():
            return CONNECTION_CLOSED
        return f"its share went away ({exc or type(exc).__name__})"

    def answer(self, answer: type[A], timeout: float | None = None) -> A:
        if self.lost is not None:
            raise ServerLost(self.spec, self.lost)
        if self.chan is not None:
            self.chan.settimeout(timeout or self.timeout)
        try:
            line = self.receive.readline()
        except OSError as exc:  # a timeout is an OSError
            raise self.lose(f"did not answer within {timeout or self.timeout:g} s" if isinstance(exc, TimeoutError)
                            else self._gone(exc)) from None
        if not line:
            raise self.lose(self._gone(EOFError("its channel closed")))
        try:
            reply = msg.decode(line)
        except ValueError as exc:
            raise self.lose(f"sent what is not a message: {exc}") from None
        if isinstance(reply, msg.Failed):
            raise self.lose(reply.error)
        if not isinstance(reply, answer):
            raise self.lose(f"answered {type(reply).__name__}, not {answer.__name__}")
        return reply

    def lose(self, why: str) -> ServerLost:
        """Mark it gone (no request goes to it any more: its SSH connection is closed, which ends its agents'
        channels too) and say so."""
        if self.lost is None:
            self.lost = why
            if not isinstance(self.closer, subprocess.Popen):
                self.closer.close()
        return ServerLost(self.spec, self.lost)

    def clock_offset(self) -> clock.Offset:
        """Its clock read over this channel."""
        return clock.ping_pong(lambda: self.ask(msg.Clock(), msg.Clocked).monotonic, CLOCK_ROUNDS)

    def relay(self, path: str) -> Any:
        """Another SSH channel to this server, joined to an agent's control socket there (`cluster.relay`)."""
        chan = self.chan.get_transport().open_session(timeout=LIVENESS_S)
        chan.exec_command(shlex.join([*self.remote.sudo, *self.remote.mrclab, "cluster-relay", path]))
        return chan

    def connection_closed(self) -> bool:
        """After one of its channels failed: whether its SSH connection closed (a closing connection closes its
        channels first: it is given a moment to show)."""
        deadline = time.monotonic() + GONE_WAIT_S
        while self.chan is not None and self.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.alive()

    def alive(self) -> bool:
        """Over SSH: its connection is up (a local share's end shows when it is read)."""
        return self.chan is None or self.chan.get_transport().is_active()

    def stop(self) -> None:
        """Ask the share to tear down (without waiting)."""
        if self.lost is None and not self.send.closed:
            with contextlib.suppress(EnvironmentNotReady, OSError, EOFError):
                self.tell(msg.Stop())
                self.send.close()

    def close(self) -> None:
        """Stop the share and wait until it has torn down; a lost one is let go."""
        self.stop()
        if isinstance(self.closer, subprocess.Popen):
            if self.lost is not None:  # failed (it has ended) or hung: its lifeline's signal tears it down
                self.closer.terminate()
            try:
                self.closer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.closer.kill()
                self.closer.wait()
            return
        if self.lost is None:
            with contextlib.suppress(OSError):
                self.chan.settimeout(60)
                self.receive.read()  # the share has torn down once its output ends
            self.closer.close()


class Heartbeat:
    """Asks a server's share for its clock every HEARTBEAT_S, in a thread, so that a server that falls silent (a
    partition: TCP says nothing) is found within LIVENESS_S, and so that the share knows its runner is there (it
    tears itself down when the questions stop: `server.SILENCE_S`)."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"heartbeat {channel.spec}", daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        with contextlib.suppress(EnvironmentNotReady):  # the channel is marked lost: `Cluster.check` says so
            while not self.stopping.wait(HEARTBEAT_S):
                self.channel.ask(msg.Clock(), msg.Clocked, LIVENESS_S)

    def stop(self) -> None:
        self.stopping.set()


def open_local() -> Channel:
    proc = subprocess.Popen([sys.executable, "-m", "mrclab.cluster.server"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=lifeline.die_with_parent())  # noqa: PLW1509
    assert proc.stdin is not None and proc.stdout is not None
    return Channel(LOCAL, proc.stdin, proc.stdout, proc)


def open_remote(spec: str) -> Channel:
    """Over SSH: the same checks as ``--target`` (known host, keys only, this mrclab there)."""
    from ..remote import job, ssh
    from ..remote import target as target_mod

    conn = ssh.Connection(target_mod.parse(spec), say=lambda _line: None)
    try:
        remote = job.locate(conn)
        difference = job.check(remote)
        if difference:  # a lab's hosts on several servers must cost the same per packet wherever they run
            raise EnvironmentNotReady(f"{difference}: servers run the runner's build (there: `make build`, or "
                                      "MRCLAB_PURE=1 here for the pure one)")
        chan = conn.client.get_transport().open_session()
        chan.settimeout(ANSWER_TIMEOUT_S)
        chan.exec_command(shlex.join([*remote.sudo, *remote.mrclab, "cluster-server"]))
    except BaseException:
        conn.close()
        raise
    return Channel(spec, chan.makefile_stdin("w"), chan.makefile("r"), conn, chan=chan, remote=remote)


def _address_of(spec: str) -> str:
    """An IP address of a server named in --servers, for the routes to it."""
    from ..remote import target as target_mod

    host = target_mod.parse(spec).host
    try:
        return str(socket.getaddrinfo(host, None)[0][4][0])
    except OSError as exc:
        raise EnvironmentNotReady(f"server {spec}: cannot resolve {host!r} ({exc})") from None


def underlay_problem(u: msg.Underlay, mtu: int) -> str | None:
    """What keeps a server's underlay from carrying the fabric's `mtu`-byte frames in VXLAN, with the fix."""
    if not u.vxlan:
        return "its kernel makes no VXLAN device (there: modprobe vxlan)"
    need = underlay_mtu(mtu, ipaddress.ip_address(u.address).version)
    if u.mtu < need:
        return (f"its underlay {u.device} ({u.address}) has MTU {u.mtu}; the fabric's {mtu}-byte frames inside "
                f"VXLAN need {need} (there: ip link set {u.device} mtu {need}, and the same on the switches between "
                "the servers)")
    return None


def check_rows(cluster: Cluster) -> list[Row]:
    """`mrclab check --servers`: per server, whether it answers (SSH, this mrclab, its own check passing) and
    whether its underlay carries the topology's frames to the others inside VXLAN."""
    rows = []
    servers, topology = cluster.servers, cluster.topology
    try:
        for spec in servers:
            try:
                cluster.channels.append(open_local() if spec == LOCAL else open_remote(spec))
            except EnvironmentNotReady as exc:
                rows.append(Row(f"server {spec}", False, str(exc).removeprefix(f"target {spec}: "),
                                f"mrclab remote setup {spec}" if spec != LOCAL else ""))
                continue
            rows.append(Row(f"server {spec}", True, "answers: " + ("this machine" if spec == LOCAL else
                                                                    "SSH, the same mrclab, its mrclab check passes")))
        if len(cluster.channels) == len(servers):
            for spec, u in zip(servers, cluster.underlays_unchecked(), strict=True):
                problem = underlay_problem(u, topology.mtu)
                rows.append(Row(f"server {spec} underlay", problem is None, problem or
                                f"{u.device} {u.address}, MTU {u.mtu}: carries {topology.name}'s "
                                f"{topology.mtu}-byte frames inside VXLAN"))
    finally:
        cluster.close()
    return rows


@dataclass(eq=False)
class RemoteProbes:
    """A server's share as one probing side of `verify.verify`."""

    channel: Channel
    hosts: frozenset[int]

    def send(self, probes: list[tuple[int, int, int, int, str]]) -> None:
        self.channel.ask(msg.Probe([list(p) for p in probes]), msg.Sent)

    def receive(self, spine: int, wanted: int, timeout: float) -> set[tuple[int, int, int]]:
        arrived = self.channel.ask(msg.Receive(spine, wanted, timeout), msg.Arrived)
        return {(p[0], p[1], p[2]) for p in arrived.paths}

    def counts(self, spines: list[str]) -> dict[str, int]:
        return self.channel.ask(msg.Count(spines), msg.Counted).counts if spines else {}


@dataclass
class Cluster:
    """A topology built over `servers` (``local`` first, if at all): a context manager."""

    topology: Topology
    servers: list[str]
    placement: str | Mapping[str, int] = "pods"
    port: int = VXLAN_PORT
    seed: int = 1
    run: str = ""  # the scenario's name, when the shares are a run's
    routing: str = ROUTING_DEFAULT
    convergence_delay: float = 2.0
    channels: list[Channel] = field(default_factory=list)
    built: list[msg.Built] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)  # each server's underlay address
    offsets: dict[str, list[clock.Offset | None]] = field(default_factory=dict)  # "start", "end": one per server
    heartbeats: dict[int, Heartbeat] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.servers) < 2:
            raise UsageError("--servers: a lab over servers needs at least two")
        if LOCAL in self.servers[1:]:
            raise UsageError(f"--servers: {LOCAL!r} (this machine) can only be the first server")
        if len(set(self.servers)) < len(self.servers):
            raise UsageError("--servers: a server is named twice")
        for spec in self.servers:
            if spec != LOCAL:
                try:
                    address_mod.parse(spec)
                except ValueError as exc:
                    raise UsageError(f"--servers {spec!r}: {exc} (or {LOCAL!r} for this machine)") from None
        self.assignment = assign(self.topology, self.servers, self.placement, source="--servers")
        self.server_of = self.assignment.server_of()

    def __enter__(self) -> Cluster:
        try:
            for spec in self.servers:
                self.channels.append(open_local() if spec == LOCAL else open_remote(spec))
            underlays = self.underlays()
            self.addresses = [u.address for u in underlays]
            table = {str(i): [u.address, u.device] for i, u in enumerate(underlays)}
            for i, ch in enumerate(self.channels):  # every server builds at once
                ch.tell(msg.Build(self.topology.to_dict(), i, self.server_of, table, self.port, self.seed, self.run,
                                  self.routing, self.convergence_delay))
            self.built = [ch.answer(msg.Built) for ch in self.channels]
            self.flood()
            self.offsets["start"] = self.read_clocks()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def flood(self) -> None:
        """A reconverging routing: each server's controller learns where the others' hear its link states."""
        ports = {i: b.flood_port for i, b in enumerate(self.built) if b.flood_port}
        if ports:
            self.ask_all({i: msg.Flood([[self.addresses[j], port] for j, port in ports.items() if j != i])
                          for i in ports}, msg.Flooding)

    def underlays_unchecked(self) -> list[msg.Underlay]:
        first = self.channels[0].ask(msg.Hello(_address_of(self.servers[1])), msg.Underlay)
        return [first] + [ch.ask(msg.Hello(first.address), msg.Underlay) for ch in self.channels[1:]]

    def underlays(self) -> list[msg.Underlay]:
        """Each server's address and interface towards the others (the first server's route to the second, every
        other's to the first), checked to carry the fabric's frames inside VXLAN."""
        underlays = self.underlays_unchecked()
        for spec, u in zip(self.servers, underlays, strict=True):
            problem = underlay_problem(u, self.topology.mtu)
            if problem:
                raise EnvironmentNotReady(f"server {spec}: {problem}")
        return underlays

    def read_clocks(self) -> list[clock.Offset | None]:
        """Every server's clock against the runner's (`cluster.clock`): the first is this machine's or read over
        its channel, the others by the first server over the underlay; None for a server that is gone."""
        first_channel = self.channels[0]
        first = clock.SAME if self.servers[0] == LOCAL else first_channel.clock_offset()
        out: list[clock.Offset | None] = [first]
        for ch, address, built in zip(self.channels[1:], self.addresses[1:], self.built[1:], strict=True):
            if ch.lost is not None:
                out.append(None)
                continue
            tick = first_channel.ask(msg.Tick(address, built.clock_port), msg.Ticked, TICK_TIMEOUT_S)
            out.append(first.then(clock.Offset(tick.offset_s, tick.uncertainty_s)))
        return out

    def shift(self, server: int) -> float:
        """How far ahead of the runner's clock a server's is (read when the shares were built)."""
        offset = self.offsets["start"][server]
        return 0.0 if offset is None else offset.offset_s

    def watch(self) -> None:
        """The run is on: every server answers within LIVENESS_S from now on, and is asked every HEARTBEAT_S."""
        for i, ch in enumerate(self.channels):
            ch.timeout = LIVENESS_S
            self.heartbeats[i] = Heartbeat(ch)

    def check(self) -> None:
        """ServerLost for the first server that is gone: its channel failed or went unanswered for LIVENESS_S
        (its heartbeat's or any request's), or its SSH connection closed."""
        for ch in self.channels:
            if ch.lost is None and not ch.alive():
                ch.lose(CONNECTION_CLOSED)
            if ch.lost is not None:
                raise ServerLost(ch.spec, ch.lost)

    def ask_all(self, requests: Mapping[int, msg.Message], answer: type[A], timeout: float | None = None
                ) -> dict[int, A]:
        """One request to each of some servers at once (each holds its channel meanwhile); their answers. A server
        lost on the way is raised once every other server told has answered: an answer left unread would be taken
        for the next request's."""
        channels = {i: self.channels[i] for i in sorted(requests)}
        lost: list[ServerLost] = []
        with contextlib.ExitStack() as held:
            for ch in channels.values():
                held.enter_context(ch.lock)
            told = []
            for i, ch in channels.items():
                try:
                    ch.tell(requests[i])
                    told.append(i)
                except ServerLost as exc:
                    lost.append(exc)
            answers = {}
            for i in told:
                try:
                    answers[i] = channels[i].answer(answer, timeout)
                except ServerLost as exc:
                    lost.append(exc)
        if lost:
            raise lost[0]
        return answers

    def live(self) -> list[int]:
        """The servers that have not gone away."""
        return [i for i, ch in enumerate(self.channels) if ch.lost is None]

    def describe(self) -> list[dict]:
        """Each server's share and clock (`offset_s` such that its `time.monotonic()` is the runner's plus it,
        within `uncertainty_s`; `time_uncertainty_s`: how far off its times can be over the whole run)."""
        out = []
        for i, (spec, b) in enumerate(zip(self.servers, self.built, strict=True)):
            start, end = (self.offsets.get(when, [None] * len(self.servers))[i] for when in ("start", "end"))
            out.append({"server": spec, "run_id": b.run_id, "hosts": sorted(b.hosts), "switches": sorted(b.switches),
                        "clock": {when: asdict(o) for when, o in (("start", start), ("end", end)) if o is not None},
                        "time_uncertainty_s": None if start is None else start.over(end)})
        return out

    def close(self) -> None:
        """Every share tears down at once; the clocks are read once more first (None for a server that is gone)."""
        for heartbeat in self.heartbeats.values():
            heartbeat.stop()
        if self.built and "end" not in self.offsets and self.channels:
            with contextlib.suppress(EnvironmentNotReady):
                self.offsets["end"] = self.read_clocks()
        for ch in self.channels:
            ch.stop()
        for ch in self.channels:
            ch.close()
        self.channels = []

    def sides(self) -> dict[RemoteProbes, list[str]]:
        """One probing side per server, with the spines whose counters it reads."""
        spines = set(self.topology.spine_names)
        return {RemoteProbes(ch, frozenset(self.topology.host_index(h) for h in built.hosts)):
                sorted(spines & set(built.switches)) for ch, built in zip(self.channels, self.built, strict=True)}


def verify_topology(cluster: Cluster, timeout: float = 1.0) -> dict:
    """`mrclab topo verify --servers`: build the fabric over the cluster's servers, probe every path from every
    server's hosts, tear down; the same document as on one machine, with each server's share."""
    import time

    from ..fabric.verify import summary, verify

    topology, servers, placement = cluster.topology, cluster.servers, cluster.placement
    started = time.monotonic()
    with cluster:
        built = time.monotonic()
        results = verify(topology, cluster.sides(), timeout)
        verified = time.monotonic()
        run_ids = [b.run_id for b in cluster.built]
    done = time.monotonic()
    doc = summary(results)
    crossing = sum(1 for link in topology.links if cluster.server_of[link.a] != cluster.server_of[link.b])
    return {"topology": topology.name, "ok": doc["ok_paths"] == doc["paths"], "datapath": "linux",
            "datapath_detail": f"Linux SRv6 routers over {len(servers)} servers ({placement}; {crossing} cables "
                               "between servers, a VXLAN tunnel per direction)",
            "run_id": ",".join(run_ids), **doc,
            "servers": cluster.describe(),
            "timings_s": {"build": round(built - started, 3), "verify": round(verified - built, 3),
                          "teardown": round(done - verified, 3), "total": round(done - started, 3)}}


def clean(servers: list[str]) -> list[str]:
    """`mrclab clean --servers`: each server removes what its dead runs left, by its own records (`mrclab clean`
    there, over SSH as root); what each removed, named by server."""
    from .. import runstate
    from ..remote import job, ssh
    from ..remote import target as target_mod

    if not servers or any(not spec for spec in servers):
        raise UsageError("--servers: name at least one server (local, or [user@]host[:port])")
    for spec in servers:
        if spec != LOCAL:
            try:
                address_mod.parse(spec)
            except ValueError as exc:
                raise UsageError(f"--servers {spec!r}: {exc} (or {LOCAL!r} for this machine)") from None
    removed = []
    for spec in servers:
        if spec == LOCAL:
            items = runstate.clean_stale()
        else:
            with ssh.Connection(target_mod.parse(spec), say=lambda _line: None) as conn:
                remote = job.locate(conn)
                done = conn.run(remote.as_root(*remote.mrclab, "clean", "--json"), timeout=120)
                try:
                    items = json.loads(done.stdout)["removed"]
                except (ValueError, KeyError, TypeError):
                    raise EnvironmentNotReady(f"server {spec}: `mrclab clean` failed there: {done.last_line()}") \
                        from None
        removed += [f"server {spec}: {item}" for item in items]
    return removed
