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

import dataclasses
import json
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, TypeVar, Union, cast, get_args, get_origin, get_type_hints

U32 = Annotated[int, "0..0xFFFFFFFF"]  # a request's connection, peer, message and size
RequestId = int | str | None
MAX_U32 = 0xFFFFFFFF
A = TypeVar("A", bound="Answer")


class ProtocolError(ValueError):
    """A line that is not a message; ``request_id`` is its ``id`` when it named one (its refusal echoes it)."""

    def __init__(self, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True)
class Message:
    TYPE: ClassVar[str]


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

TYPES: dict[str, type[Message]] = {cls.TYPE: cls for cls in (Ping, Post, Warm, Stats, Quit, Pong, Done, Warmed,
                                                              Report, Refused, Delivered, Completed, Failed,
                                                              EvChanged, NicChanged)}
_FIELDS = {name: {f.name: get_type_hints(cls, include_extras=True)[f.name] for f in dataclasses.fields(cls)}
           for name, cls in TYPES.items()}
_DEFAULTS = {name: {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
             for name, cls in TYPES.items()}


def answer_to(request: type[Request[A]], answer: Answer) -> A:
    """``answer``, if it is what answers a request of this type; a refusal is the caller's to report."""
    if not isinstance(answer, request.ANSWER):
        raise ProtocolError(f"{request.TYPE!r} answered by {answer.TYPE!r}", answer.id)
    return cast(A, answer)


def to_dict(message: Message) -> dict[str, Any]:
    """The message as its line's JSON object."""
    return {"type": message.TYPE, **{f.name: getattr(message, f.name) for f in dataclasses.fields(message)}}


def encode(message: Message) -> bytes:
    return json.dumps(to_dict(message), separators=(",", ":")).encode() + b"\n"


def decode(line: bytes | bytearray | str) -> Message:
    """One line -> its message; anything else raises ProtocolError naming what is wrong."""
    try:
        obj = json.loads(line)
    except ValueError as err:
        raise ProtocolError(f"message is not JSON: {err}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"message must be a JSON object, got {type(obj).__name__}")
    request_id = obj.get("id") if _accepts(RequestId, obj.get("id")) else None
    kind = obj.get("type")
    if kind not in TYPES:
        raise ProtocolError(f"unknown message type {kind!r}; allowed: {', '.join(TYPES)}", request_id)
    hints = _FIELDS[kind]
    unknown = sorted(set(obj) - {"type", *hints})
    if unknown:
        raise ProtocolError(f"{kind!r} takes no {', '.join(map(repr, unknown))}", request_id)
    values = {}
    for name, hint in hints.items():
        if name not in obj:
            if name in _DEFAULTS[kind]:
                continue
            raise ProtocolError(f"{kind!r} has no {name!r}", request_id)
        value = obj[name]
        if not _accepts(hint, value):
            raise ProtocolError(f"{kind!r} needs {name!r} as {_describe(hint)}, got {value!r}", request_id)
        values[name] = float(value) if hint is float else value
    return TYPES[kind](**values)


def _accepts(hint: Any, value: Any) -> bool:
    if get_origin(hint) is Annotated:
        return type(value) is int and 0 <= value <= MAX_U32
    if get_origin(hint) in (Union, types.UnionType):
        return any(_accepts(h, value) for h in get_args(hint))
    if hint is float:
        return type(value) in (int, float)
    return type(value) is hint  # what json.loads makes is exactly int, str, bool, dict, list or None


def _describe(hint: Any) -> str:
    if get_origin(hint) is Annotated:
        return f"an integer in 0..{MAX_U32}"
    if get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_describe(h) for h in get_args(hint))
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
            type(None): "null"}[hint]
