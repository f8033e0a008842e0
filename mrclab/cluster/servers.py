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
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from .. import lifeline
from ..check import Row
from ..errors import EnvironmentNotReady, UsageError
from ..spec import address as address_mod
from ..spec.topology import Topology
from . import server as msg
from .placement import assign
from .tunnel import VXLAN_PORT, underlay_mtu

LOCAL = "local"  # this machine, as a server (first in the list, if at all)
ANSWER_TIMEOUT_S = 300.0  # a share of hundreds of nodes takes a while to build


CLOCK_ROUNDS = 16  # ping-pongs per offset reading: the one with the shortest round trip is kept


@dataclass(frozen=True)
class Offset:
    """A server's monotonic clock against the runner's: theirs = ours + offset_s, within +- uncertainty_s (half
    the shortest round trip of the readings)."""

    offset_s: float
    uncertainty_s: float


@dataclass
class Channel:
    """One server's share process: what it reads and what it writes."""

    spec: str
    send: IO[str]
    receive: IO[str]
    closer: Any  # a Popen or an SSH connection

    def ask(self, message: msg.Message, answer: type) -> Any:
        self.tell(message)
        return self.answer(answer)

    def tell(self, message: msg.Message) -> None:
        try:
            self.send.write(msg.encode(message))
            self.send.flush()
        except OSError as exc:
            raise EnvironmentNotReady(f"server {self.spec}: the share went away ({exc})") from None

    def answer(self, answer: type) -> Any:
        try:
            reply = msg.decode(self.receive.readline())
        except (ValueError, OSError) as exc:  # a timeout is an OSError
            raise EnvironmentNotReady(f"server {self.spec}: {exc}") from None
        if isinstance(reply, msg.Failed):
            raise EnvironmentNotReady(f"server {self.spec}: {reply.error}")
        if not isinstance(reply, answer):
            raise EnvironmentNotReady(f"server {self.spec}: answered {type(reply).__name__}, not {answer.__name__}")
        return reply

    def clock_offset(self) -> Offset:
        """Ping-pong over the channel: the reading with the shortest round trip bounds the offset best."""
        best: tuple[float, float] | None = None
        for _ in range(CLOCK_ROUNDS):
            sent = time.monotonic()
            theirs = self.ask(msg.Clock(), msg.Clocked).monotonic
            back = time.monotonic()
            if best is None or back - sent < best[1]:
                best = (theirs - (sent + back) / 2, back - sent)
        assert best is not None
        return Offset(round(best[0], 7), round(best[1] / 2, 7))

    def close(self) -> None:
        try:
            self.tell(msg.Stop())
            self.send.close()
        except (EnvironmentNotReady, OSError):
            pass
        if isinstance(self.closer, subprocess.Popen):
            try:
                self.closer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.closer.kill()
                self.closer.wait()
        else:
            self.receive.read()  # the share has torn down once its output ends
            self.closer.close()


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
        job.check(remote)
        chan = conn.client.get_transport().open_session()
        chan.settimeout(ANSWER_TIMEOUT_S)
        chan.exec_command(shlex.join([*remote.sudo, *remote.mrclab, "cluster-server"]))
    except BaseException:
        conn.close()
        raise
    return Channel(spec, chan.makefile_stdin("w"), chan.makefile("r"), conn)


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
    placement: str = "pods"
    port: int = VXLAN_PORT
    seed: int = 1
    channels: list[Channel] = field(default_factory=list)
    built: list[msg.Built] = field(default_factory=list)
    offsets: dict[str, list[Offset]] = field(default_factory=dict)  # "start", "end": one per server

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
        self.server_of = assign(self.topology, self.servers, self.placement, source="--servers").server_of()

    def __enter__(self) -> Cluster:
        try:
            for spec in self.servers:
                self.channels.append(open_local() if spec == LOCAL else open_remote(spec))
            underlays = self.underlays()
            table = {str(i): [u.address, u.device] for i, u in enumerate(underlays)}
            for i, ch in enumerate(self.channels):  # every server builds at once
                ch.tell(msg.Build(self.topology.to_dict(), i, self.server_of, table, self.port, self.seed))
            self.built = [ch.answer(msg.Built) for ch in self.channels]
            self.offsets["start"] = [ch.clock_offset() for ch in self.channels]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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

    def close(self) -> None:
        if self.built and "end" not in self.offsets:
            with contextlib.suppress(EnvironmentNotReady):  # a server that went away: no offset at the end
                self.offsets["end"] = [ch.clock_offset() for ch in self.channels]
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
            "servers": [{"server": spec, "run_id": b.run_id, "hosts": sorted(b.hosts), "switches": sorted(b.switches),
                         "clock": {when: asdict(offsets[i]) for when, offsets in cluster.offsets.items()}}
                        for i, (spec, b) in enumerate(zip(servers, cluster.built, strict=True))],
            "timings_s": {"build": round(built - started, 3), "verify": round(verified - built, 3),
                          "teardown": round(done - verified, 3), "total": round(done - started, 3)}}
