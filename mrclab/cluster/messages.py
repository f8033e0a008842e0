"""The messages between the runner and a server's share process, each declared once; both ends encode and
decode them here (`protocol.Codec`). Every request has one answer, or ``failed {error}``, after which the share
ends::

    hello {peer}             -> underlay {address, device, mtu, vxlan}   (its route towards another server)
    clock                    -> clocked {monotonic}                      (a heartbeat, and a reading over the channel)
    build {topology, server, server_of, underlays, port, seed, run}
                             -> built {hosts, switches, run_id, clock_port, lab_pids, boot_id}
    tick {address, port}     -> ticked {offset_s, uncertainty_s}  (another server's clock, read over the underlay)
    probe {probes} -> sent;  receive {spine, wanted, timeout} -> arrived {paths};  count {spines} -> counted

    launch {scenario}        -> launched {agents: {host: [pid, control socket]}}
    apply {action, target, loss_probability, rate_bps}  -> applied {t}
    watch {lab, runs}        -> watching                  (counters and CPU sampling start: the workload starts)
    quiesce                  -> spent {used, softirq, wakeups}   (its CPU meter stops)
    read                     -> readings {links, queue, controller}
    judge {emulator_drops, goodput_fraction, latency, link_load}  -> judged {fidelity}
    reap {host, timeout}     -> reaped {code}             (kill {host} -> reaped: the same, after SIGKILL)
    logs                     -> logged {files}
    stop (or EOF)            -> the share is torn down

Times are the server's `time.monotonic()`; the runner puts them on its own clock (`cluster.clock`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol import Codec, Message, ProtocolError
from . import tunnel
from .share import Share
from .tunnel import VXLAN_PORT

# -- building and probing a share ----------------------------------------------------------------------------


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
    run: str = ""  # the scenario's name when the share is a run's (its run record says so); "" for topo verify

    def share(self) -> Share:
        return Share(self.server, self.server_of, {int(i): tunnel.Underlay(*u) for i, u in self.underlays.items()},
                     self.port)


@dataclass(frozen=True)
class Built(Message):
    TYPE = "built"
    hosts: dict[str, int]     # host name -> a PID in its namespace
    switches: dict[str, int]  # switch name -> a PID in its namespace
    run_id: str
    clock_port: int = 0        # the UDP port on its underlay address that answers clock readings
    lab_pids: list[int] | None = None  # the share process and the SSH session that carries it (the lab's own CPU)
    boot_id: str = ""          # its kernel's: servers that share one are one machine


@dataclass(frozen=True)
class Tick(Message):
    TYPE = "tick"
    address: str
    port: int


@dataclass(frozen=True)
class Ticked(Message):
    TYPE = "ticked"
    offset_s: float       # theirs = ours + offset_s
    uncertainty_s: float  # within +- this: half the shortest round trip


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


# -- a run's part on a server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch(Message):
    TYPE = "launch"
    scenario: dict[str, Any]  # `Scenario.to_dict`: the agents' command lines follow from it, as on one machine


@dataclass(frozen=True)
class Launched(Message):
    TYPE = "launched"
    agents: dict[str, list[Any]]  # host -> [pid, its control socket's path], once every socket listens


@dataclass(frozen=True)
class Apply(Message):
    TYPE = "apply"
    action: str
    target: str
    loss_probability: float | None = None
    rate_bps: float | None = None


@dataclass(frozen=True)
class Applied(Message):
    TYPE = "applied"
    t: float  # when this server's ends changed


@dataclass(frozen=True)
class Watch(Message):
    TYPE = "watch"
    lab: list[int]   # PIDs on this server's machine that are the lab's own (other shares, their sessions, the runner)
    runs: list[str]  # the run ids of this lab's records (the runner's and every share's): not other runs


@dataclass(frozen=True)
class Watching(Message):
    TYPE = "watching"


@dataclass(frozen=True)
class Quiesce(Message):
    TYPE = "quiesce"


@dataclass(frozen=True)
class Spent(Message):
    TYPE = "spent"
    used: dict[str, float]  # CPU seconds by label (`metrics.cost.CpuMeter`)
    softirq: float
    wakeups: int


@dataclass(frozen=True)
class Read(Message):
    TYPE = "read"


@dataclass(frozen=True)
class Readings(Message):
    TYPE = "readings"
    links: list[dict[str, Any]]  # results.json `links` rows of the directions this server sends
    queue: list[int]             # [data waited ns, data packets, control waited ns, control packets]
    controller: dict[str, Any]   # its controller's stats (results.json `controller`)


@dataclass(frozen=True)
class Judge(Message):
    TYPE = "judge"
    emulator_drops: int                 # this server's
    goodput_fraction: float | None      # the run's
    latency: dict[str, Any] | None      # the run's RTT split (`fidelity.latency_split`)
    link_load: list[float] | None       # the run's (most carried, fastest configured), bit/s


@dataclass(frozen=True)
class Judged(Message):
    TYPE = "judged"
    fidelity: dict[str, Any]  # `fidelity.Verdict.to_dict()` of this server's CPU


@dataclass(frozen=True)
class Reap(Message):
    TYPE = "reap"
    host: str
    timeout: float


@dataclass(frozen=True)
class Kill(Message):
    TYPE = "kill"
    host: str


@dataclass(frozen=True)
class Reaped(Message):
    TYPE = "reaped"
    code: int | None  # Popen.returncode, None while it runs


@dataclass(frozen=True)
class Logs(Message):
    TYPE = "logs"


@dataclass(frozen=True)
class Logged(Message):
    TYPE = "logged"
    files: dict[str, str]  # file name -> text: the agents' logs, for the runner's results directory


CODEC = Codec(Hello, Underlay, Build, Built, Tick, Ticked, Probe, Sent, Receive, Arrived, Count, Counted, Clock,
              Clocked, Stop, Failed, Launch, Launched, Apply, Applied, Watch, Watching, Quiesce, Spent, Read,
              Readings, Judge, Judged, Reap, Kill, Reaped, Logs, Logged)


def encode(message: Message) -> str:
    return CODEC.encode(message).decode()


def decode(line: str) -> Message:
    """A message from one line; ProtocolError (a ValueError) naming what is wrong, also when the line is empty:
    the other end closed the channel."""
    if not line:
        raise ProtocolError("the other end closed the channel")
    return CODEC.decode(line)
