"""Each server's clock against the runner's, so that every time a server reports lands on the runner's clock.

A reading is a ping-pong: the asker notes its clock when it sends and when the answer is back, the answer
carries the other side's `time.monotonic()`; with a round trip of `rtt`, the other clock read `theirs` at some
instant within it, so `theirs - (sent + back) / 2` is the offset within +- rtt / 2. Of many readings the one
with the shortest round trip bounds it best. The runner's own machine (the ``local`` server) shares its clock;
another server is read over the underlay by UDP from the local server's share (a round trip of tens of
microseconds), or, when no server is local, over the first server's channel and from there by UDP.

The offsets are read when the shares are built and again when the run stops: times are placed with the first,
and the second says how far the clocks drifted apart meanwhile (`Offset.over`).
"""
from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

ROUNDS = 256  # readings per offset over the underlay (a few ms): the one with the shortest round trip is kept
WAIT_S = 0.2  # for one answer
SPIN_S = 0.005  # both ends poll rather than sleep while readings come: a wake-up costs more than the round trip
_PACKET = struct.Struct("!Qd")  # the reading's number; the answering clock (0.0 in a question)


@dataclass(frozen=True)
class Offset:
    """A server's monotonic clock against the runner's: theirs = ours + offset_s, within +- uncertainty_s."""

    offset_s: float
    uncertainty_s: float

    def then(self, other: Offset) -> Offset:
        """Read through another server: this one's offset against the runner plus `other`'s against it."""
        return Offset(round(self.offset_s + other.offset_s, 7), round(self.uncertainty_s + other.uncertainty_s, 7))

    def over(self, end: Offset | None) -> float:
        """How far off a time placed with this offset can be anywhere in the run that ended with `end`: this
        reading's uncertainty at its start, and at its end the drift since plus the end reading's own."""
        if end is None:
            return self.uncertainty_s
        return round(max(self.uncertainty_s, abs(end.offset_s - self.offset_s) + end.uncertainty_s), 7)


SAME = Offset(0.0, 0.0)  # this machine: the runner's own clock


def best(readings: Iterable[tuple[float, float, float]]) -> Offset:
    """(sent, theirs, back) readings -> the offset the shortest round trip gives."""
    sent, theirs, back = min(readings, key=lambda r: r[2] - r[0])
    return Offset(round(theirs - (sent + back) / 2, 7), round((back - sent) / 2, 7))


def ping_pong(ask: Callable[[], float], rounds: int) -> Offset:
    """`ask()` returns the other clock; read it `rounds` times."""
    readings = []
    for _ in range(rounds):
        sent = time.monotonic()
        theirs = ask()
        readings.append((sent, theirs, time.monotonic()))
    return best(readings)


def read(address: str, port: int, rounds: int = ROUNDS) -> Offset:
    """Another server's clock, read over UDP from this machine (its `Responder` at address, port)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((address, port))
        sock.setblocking(False)
        readings = []
        for number in range(1, rounds + 1):
            sent = time.monotonic()
            sock.send(_PACKET.pack(number, 0.0))
            while time.monotonic() - sent < WAIT_S:
                try:
                    got, theirs = _PACKET.unpack(sock.recv(64))
                except BlockingIOError:
                    continue
                except (OSError, struct.error) as exc:
                    raise OSError(f"no clock reading from [{address}]:{port}: {exc}") from None
                if got == number:  # a late answer to an earlier reading is not this one's
                    readings.append((sent, theirs, time.monotonic()))
                    break
        if not readings:
            raise OSError(f"no clock reading from [{address}]:{port} in {rounds} tries")
        return best(readings)


class Responder:
    """Answers clock readings on this server's underlay address (a port of its own), from the other servers'
    addresses only, in a thread of the share process."""

    def __init__(self, address: str, peers: Collection[str]) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((address, 0))
        self.port: int = self.sock.getsockname()[1]
        self.peers = frozenset(ipaddress.ip_address(peer) for peer in peers)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._answer, name="clock", daemon=True)
        self._thread.start()

    def _answer(self) -> None:
        """Sleep until a reading comes, then poll for SPIN_S after each (they come in bursts)."""
        with contextlib.suppress(OSError):
            while not self._closing.is_set():
                self.sock.setblocking(True)
                self._one(*self.sock.recvfrom(64))
                self.sock.setblocking(False)
                until = time.monotonic() + SPIN_S
                while time.monotonic() < until and not self._closing.is_set():
                    try:
                        data, sender = self.sock.recvfrom(64)
                    except BlockingIOError:
                        continue
                    self._one(data, sender)
                    until = time.monotonic() + SPIN_S

    def _one(self, data: bytes, sender) -> None:
        now = time.monotonic()
        if len(data) == _PACKET.size and ipaddress.ip_address(sender[0].split("%")[0]) in self.peers:
            self.sock.sendto(_PACKET.pack(_PACKET.unpack(data)[0], now), sender)

    def close(self) -> None:
        """Wake the thread (a shut down socket reads as empty at once) and end it."""
        self._closing.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=2)
        self.sock.close()
