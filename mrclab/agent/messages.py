"""The messages between the runner and an agent, each declared once; both ends encode and decode them here.

A message is one line of JSON, ``{"type": T, ...its fields}``, so any byte stream carries the channel (a
Unix socket on one machine, an SSH connection to another). A request carries an ``id`` its answer echoes;
an event carries none::

    ping {id}                         -> pong {id, host, pid, build}
    post {id, conn, peer, msg, size}  -> done {id}            (the message's end is an event)
    warm {id, conn, peer}             -> warmed {id, probes}  (one probe down every path)
    stats {id}                        -> report {id, stats}   (the datapath's counters, as it keeps them)
    quit {id}                         -> done {id}
    a request the agent cannot carry out -> refused {id, error}  (id null when the line named none)

    delivered {conn, peer, msg, bytes, verified, t}    completed {conn, peer, msg, t}
    failed {conn, peer, msg, reason, t}                ev_state {conn, peer, ev, old, new, t}
    nic {plane, state, t, of}  (of: the peer whose NIC its SACKs reported; null: the agent's own)

`decode` takes nothing it does not know: an unknown type, a missing or unknown field, or a field of the wrong
type (a request's integers must fit 32 bits) raises `ProtocolError` naming it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar, cast

from ..protocol import U32, Codec, Message, RequestId
from ..protocol import ProtocolError as ProtocolError
from ..protocol import to_dict as to_dict

A = TypeVar("A", bound="Answer")


# -- answers (agent -> runner) -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer(Message):
    id: RequestId


@dataclass(frozen=True)
class Pong(Answer):
    TYPE = "pong"
    host: int
    pid: int
    build: dict  # mrclab.build.running(): which transport build the agent runs, and why


@dataclass(frozen=True)
class Done(Answer):
    TYPE = "done"


@dataclass(frozen=True)
class Warmed(Answer):
    TYPE = "warmed"
    probes: int


@dataclass(frozen=True)
class Report(Answer):
    TYPE = "report"
    stats: dict  # the datapath's stats() and the agent's cpu_s


@dataclass(frozen=True)
class Refused(Answer):
    TYPE = "refused"
    error: str


# -- requests (runner -> agent) ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Request(Message, Generic[A]):
    ANSWER: ClassVar[type[Answer]]  # what answers it, unless the agent refuses it
    id: RequestId


@dataclass(frozen=True)
class Ping(Request[Pong]):
    TYPE = "ping"
    ANSWER = Pong


@dataclass(frozen=True)
class Post(Request[Done]):
    TYPE = "post"
    ANSWER = Done
    conn: U32
    peer: U32
    msg: U32
    size: U32


@dataclass(frozen=True)
class Warm(Request[Warmed]):
    TYPE = "warm"
    ANSWER = Warmed
    conn: U32
    peer: U32


@dataclass(frozen=True)
class Stats(Request[Report]):
    TYPE = "stats"
    ANSWER = Report


@dataclass(frozen=True)
class Quit(Request[Done]):
    TYPE = "quit"
    ANSWER = Done


# -- events (agent -> runner) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event(Message):
    pass


@dataclass(frozen=True)
class Delivered(Event):
    TYPE = "delivered"
    conn: int
    peer: int
    msg: int
    bytes: int
    verified: bool
    t: float


@dataclass(frozen=True)
class Completed(Event):
    TYPE = "completed"
    conn: int
    peer: int
    msg: int
    t: float


@dataclass(frozen=True)
class Failed(Event):
    TYPE = "failed"
    conn: int
    peer: int
    msg: int
    reason: str
    t: float


@dataclass(frozen=True)
class EvChanged(Event):
    TYPE = "ev_state"
    conn: int
    peer: int
    ev: int
    old: str  # EvState names
    new: str
    t: float


@dataclass(frozen=True)
class NicChanged(Event):
    TYPE = "nic"
    plane: int
    state: str  # "up" or "down"
    t: float
    of: int | None = None


Emit = Callable[[Event], None]  # where a datapath's events go: the agent's channel, or the simulated run's queue

CODEC = Codec(Ping, Post, Warm, Stats, Quit, Pong, Done, Warmed, Report, Refused, Delivered, Completed, Failed,
              EvChanged, NicChanged)
TYPES = CODEC.types
encode = CODEC.encode
decode = CODEC.decode


def answer_to(request: type[Request[A]], answer: Answer) -> A:
    """``answer``, if it is what answers a request of this type; a refusal is the caller's to report."""
    if not isinstance(answer, request.ANSWER):
        raise ProtocolError(f"{request.TYPE!r} answered by {answer.TYPE!r}", answer.id)
    return cast(A, answer)

