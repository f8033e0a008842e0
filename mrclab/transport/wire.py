"""MRC wire format, version 1: the UDP payload agents exchange on port ``MRC_UDP_PORT``.

All fields are big-endian. Every packet opens with the same 4 bytes::

    0  version u8 (= 1)     1  type u8     2  flags u16

A switch trims a DATA packet by cutting the UDP payload after ``DATA_HEADER_LEN`` (48)
bytes and setting ``TRIMMED``; that is all the eBPF trimmer knows of this format (its
``MRC_*`` constants mirror this module's), so those offsets and values never move. The
header keeps ``length`` (what the original carried), so the receiver NACKs the exact
range that was lost.

DATA (48 bytes, then ``length`` payload bytes; none if TRIMMED)::

    off size field       meaning
     0   1  version      1
     1   1  type         DATA = 1
     2   2  flags        TRIMMED 0x1, LAST 0x2 (last packet of its message),
                         RETX 0x4 (a retransmission), ECN_CE 0x8 (congestion experienced)
     4   4  conn_id
     8   4  psn          packet sequence number, per connection and direction, mod 2**32
    12   4  msg_id
    16   4  msg_len      bytes of the whole message
    20   4  offset       where this payload goes in the message (RDMA-write placement)
    24   2  length       payload bytes of the original packet
    26   2  ev           entropy value (path) the packet was sent on
    28   8  ts           sender timestamp, ns (echoed back for RTT / delay)
    36   8  digest       XXH3-64 of the whole message, checked end to end
    44   4  reserved     0

SACK (48 bytes)::

     0   4  common       type SACK = 2; flags ECN_ECHO 0x8, DUP_ECHO 0x10 (answers a duplicate)
     4   4  conn_id
     8   4  cum_psn      every PSN below this arrived
    12   4  sack_base    first PSN the bitmap describes
    16   8  bitmap       bit i set: PSN sack_base + i arrived
    24   4  ack_psn      the PSN that triggered this SACK
    28   2  ev           its EV, echoed
    30   2  ecn_count    CE-marked packets since the previous SACK (CC echo room)
    32   8  ts_echo      its ``ts``, echoed
    40   4  ack_delay    ns the receiver held the triggering packet before answering
    44   2  nic_down     bit k: the receiver's NIC on plane k is down (link state, so the sender avoids plane k)
    46   2  reserved     0

NACK (28 bytes)::

     0   4  common       type NACK = 3
     4   4  conn_id
     8   4  psn          the PSN that needs resending
    12   4  cum_psn
    16   2  ev           echoed
    18   1  reason       TRIMMED = 1, SEQUENCE = 2 (go-back-N: resend from psn)
    19   1  reserved     0
    20   8  ts_echo

PROBE / PROBE_REPLY (24 bytes)::

     0   4  common       type PROBE = 4 / PROBE_REPLY = 5
     4   4  conn_id
     8   2  ev           the path being probed (echoed in the reply)
    10   2  reserved     0
    12   4  seq          probe sequence number of this EV; WARM_SEQ: a warm-up probe
    16   8  ts           sender timestamp (echoed in the reply)

Decoding is strict: a datagram that is short, long, of another version or type, with
unknown flags, non-zero reserved bytes or an inconsistent DATA range raises
:class:`WireError` (a ``ValueError``), so a malformed datagram costs the agent one
counter, never a crash. Every layout is a precompiled :class:`struct.Struct` and
every decoded packet is a tuple, to keep the per-packet path cheap.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from xxhash import xxh3_64_intdigest

MRC_UDP_PORT = 4793
VERSION = 1

IP_UDP_OVERHEAD = 40 + 8
"""Bytes an IPv6 and a UDP header add to every MRC datagram on a link: an MTU carries MTU - 48 bytes of it."""
ETHERNET_HEADER = 14

DATA, SACK, NACK, PROBE, PROBE_REPLY = 1, 2, 3, 4, 5
WARM_SEQ = 0xFFFFFFFF
"""Probe seq of a warm-up probe: sent down every path once before a workload, answered like any
probe, and never about a bad path (see ``Connection.warm``)."""

TRIMMED = 0x0001
LAST = 0x0002
RETX = 0x0004
ECN_CE = 0x0008
ECN_ECHO = 0x0008
DUP_ECHO = 0x0010
"""SACK flag: the packet whose timestamp it echoes was a duplicate (that PSN had arrived before). SACKs
take different paths and can overtake each other, so an echo alone says that a packet arrived, not
that it arrived second."""

NACK_TRIMMED = 1
NACK_SEQUENCE = 2  # go-back-N: psn is the next PSN the receiver takes; it discards what came after

DATA_HEADER_LEN = 48
SACK_LEN = 48
NACK_LEN = 28
PROBE_LEN = 24
SACK_BITS = 64
MAX_PAYLOAD = 0xFFFF

_DATA = struct.Struct(">BBHIIIIIHHQQI")
_SACK = struct.Struct(">BBHIIIQIHHQIHH")
_NACK = struct.Struct(">BBHIIIHBBQ")
_PROBE = struct.Struct(">BBHIHHIQ")
_COMMON = struct.Struct(">BBH")
_FLAGS = struct.Struct(">H")
assert (_DATA.size, _SACK.size, _NACK.size, _PROBE.size) == (DATA_HEADER_LEN, SACK_LEN, NACK_LEN, PROBE_LEN)

_DATA_FLAGS = TRIMMED | LAST | RETX | ECN_CE
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


class WireError(ValueError):
    """A datagram that is not a well-formed MRC v1 packet."""


class Data(NamedTuple):
    flags: int
    conn_id: int
    psn: int
    msg_id: int
    msg_len: int
    offset: int
    length: int
    ev: int
    ts: int
    digest: int
    payload: "memoryview"  # noqa: UP037  (empty when TRIMMED; quoted: compiled, the class is built at import)


class Sack(NamedTuple):
    flags: int
    conn_id: int
    cum_psn: int
    sack_base: int
    bitmap: int
    ack_psn: int
    ev: int
    ecn_count: int
    ts_echo: int
    ack_delay: int
    nic_down: int


class Nack(NamedTuple):
    flags: int
    conn_id: int
    psn: int
    cum_psn: int
    ev: int
    reason: int
    ts_echo: int


class Probe(NamedTuple):
    conn_id: int
    ev: int
    seq: int
    ts: int


class ProbeReply(NamedTuple):
    conn_id: int
    ev: int
    seq: int
    ts: int


Packet = Data | Sack | Nack | Probe | ProbeReply


def unwrap(wire_psn: int, near: int) -> int:
    """The full PSN whose low 32 bits are ``wire_psn``, closest to ``near``: PSNs wrap at 2**32 on the wire."""
    delta = (wire_psn - near) & _U32
    return near + delta - (1 << 32) if delta >= 1 << 31 else near + delta


def message_digest(data: bytes | bytearray | memoryview) -> int:
    """The 64-bit end-to-end digest of a whole message: XXH3-64, a checksum against corruption and misplacement
    rather than a cryptographic hash, at ~25 GB/s (blake2b's 0.7 GB/s would cost each end ~1.4 ms per MiB,
    a sixth of an agent's CPU per delivered byte)."""
    return xxh3_64_intdigest(data)


def encode_data_into(buf: bytearray, flags: int, conn_id: int, psn: int, msg_id: int, msg_len: int,
                     offset: int, ev: int, ts: int, digest: int, payload: bytes | memoryview, /) -> None:
    """Write a DATA packet into ``buf``, which must be ``DATA_HEADER_LEN + len(payload)`` long.

    One allocation and one payload copy per packet: the caller owns the buffer. The sender's per-packet
    form, so positional (matching eleven keywords costs ~80 ns a packet); :func:`encode_data` takes keywords.
    """
    _DATA.pack_into(buf, 0, VERSION, DATA, flags, conn_id, psn & _U32, msg_id, msg_len, offset,
                    len(payload), ev, ts & _U64, digest, 0)
    buf[DATA_HEADER_LEN:] = payload


def encode_data(*, flags: int, conn_id: int, psn: int, msg_id: int, msg_len: int, offset: int, ev: int,
                ts: int, digest: int, payload: bytes | memoryview = b"") -> bytearray:
    buf = bytearray(DATA_HEADER_LEN + len(payload))
    encode_data_into(buf, flags, conn_id, psn, msg_id, msg_len, offset, ev, ts, digest, payload)
    return buf


def encode_sack(*, flags: int, conn_id: int, cum_psn: int, sack_base: int, bitmap: int, ack_psn: int, ev: int,
                ecn_count: int, ts_echo: int, ack_delay: int, nic_down: int = 0) -> bytes:
    return _SACK.pack(VERSION, SACK, flags, conn_id, cum_psn & _U32, sack_base & _U32, bitmap, ack_psn & _U32,
                      ev, min(ecn_count, 0xFFFF), ts_echo & _U64, min(ack_delay, _U32), nic_down & 0xFFFF, 0)


def encode_nack(*, conn_id: int, psn: int, cum_psn: int, ev: int, ts_echo: int, reason: int = NACK_TRIMMED) -> bytes:
    return _NACK.pack(VERSION, NACK, 0, conn_id, psn & _U32, cum_psn & _U32, ev, reason, 0, ts_echo & _U64)


def encode_probe(conn_id: int, ev: int, seq: int, ts: int, *, reply: bool = False) -> bytes:
    return _PROBE.pack(VERSION, PROBE_REPLY if reply else PROBE, 0, conn_id, ev, 0, seq & _U32, ts & _U64)


def peek_conn_id(datagram: bytes | bytearray | memoryview) -> int:
    """The connection a datagram belongs to, for the agent's demultiplexer (every type has it at byte 4)."""
    if len(datagram) < 8:
        raise WireError(f"datagram of {len(datagram)} bytes is too short")
    return int.from_bytes(datagram[4:8], "big")


def trim(datagram: bytes | bytearray | memoryview) -> bytes | None:
    """What a trimming switch does: the DATA header alone, flagged TRIMMED; None for anything else.

    The reference the eBPF trimmer follows, and what the simulator uses.
    """
    if len(datagram) <= DATA_HEADER_LEN or datagram[0] != VERSION or datagram[1] != DATA:
        return None
    header = bytearray(datagram[:DATA_HEADER_LEN])
    _FLAGS.pack_into(header, 2, _FLAGS.unpack_from(header, 2)[0] | TRIMMED)
    return bytes(header)


def decode(datagram: bytes | bytearray | memoryview) -> Packet:
    """Parse and validate one datagram; raise :class:`WireError` if it is malformed.

    DATA, nearly every datagram, is read with one unpack; the rest go by ``_DECODERS``.
    """
    size = len(datagram)
    if size < DATA_HEADER_LEN or datagram[1] != DATA:
        return _decode_other(datagram, size)
    (version, _, flags, conn_id, psn, msg_id, msg_len, offset, length, ev, ts, digest,
     reserved) = _DATA.unpack_from(datagram)
    if version != VERSION:
        raise WireError(f"unsupported version {version}")
    if flags & ~_DATA_FLAGS or reserved:
        raise WireError(f"DATA with unknown flags {flags:#06x} or reserved bits set")
    if offset + length > msg_len:
        raise WireError(f"DATA range {offset}+{length} exceeds message length {msg_len}")
    carried = size - DATA_HEADER_LEN
    if carried != (0 if flags & TRIMMED else length):
        raise WireError(f"DATA carries {carried} payload bytes, header says {length}"
                        f"{' (trimmed)' if flags & TRIMMED else ''}")
    return Data(flags, conn_id, psn, msg_id, msg_len, offset, length, ev, ts, digest,
                memoryview(datagram)[DATA_HEADER_LEN:])


def _decode_other(datagram: bytes | bytearray | memoryview, size: int) -> Packet:
    if size < 4:
        raise WireError(f"datagram of {size} bytes is shorter than the common header")
    version, kind, flags = _COMMON.unpack_from(datagram)
    if version != VERSION:
        raise WireError(f"unsupported version {version}")
    if kind == DATA:
        raise WireError(f"DATA of {size} bytes is shorter than its {DATA_HEADER_LEN}-byte header")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise WireError(f"unknown packet type {kind}")
    return decoder(datagram, size, kind, flags)


def _decode_sack(datagram: bytes | bytearray | memoryview, size: int, kind: int, flags: int) -> Sack:
    if size != SACK_LEN:
        raise WireError(f"SACK of {size} bytes, expected {SACK_LEN}")
    fields = _SACK.unpack_from(datagram)
    if flags & ~(ECN_ECHO | DUP_ECHO) or fields[13]:
        raise WireError(f"SACK with unknown flags {flags:#06x} or reserved bits set")
    return Sack._make(fields[2:13])


def _decode_nack(datagram: bytes | bytearray | memoryview, size: int, kind: int, flags: int) -> Nack:
    if size != NACK_LEN:
        raise WireError(f"NACK of {size} bytes, expected {NACK_LEN}")
    _, _, _, conn_id, psn, cum_psn, ev, reason, reserved, ts_echo = _NACK.unpack_from(datagram)
    if flags or reserved or reason not in (NACK_TRIMMED, NACK_SEQUENCE):
        raise WireError(f"NACK with flags {flags:#06x}, reason {reason} or reserved bits set")
    return Nack(flags, conn_id, psn, cum_psn, ev, reason, ts_echo)


def _decode_probe(datagram: bytes | bytearray | memoryview, size: int, kind: int, flags: int) -> Probe | ProbeReply:
    if size != PROBE_LEN:
        raise WireError(f"PROBE of {size} bytes, expected {PROBE_LEN}")
    _, _, _, conn_id, ev, reserved, seq, ts = _PROBE.unpack_from(datagram)
    if flags or reserved:
        raise WireError(f"PROBE with flags {flags:#06x} or reserved bits set")
    return (Probe if kind == PROBE else ProbeReply)(conn_id, ev, seq, ts)


_DECODERS: dict[int, Callable[[bytes | bytearray | memoryview, int, int, int], Packet]] = {
    SACK: _decode_sack, NACK: _decode_nack, PROBE: _decode_probe, PROBE_REPLY: _decode_probe}
"""Packet type -> its decoder, for every type but DATA."""
