"""The MRC v1 wire format: layout invariants the eBPF trimmer relies on, round trips, strict decoding."""
import contextlib
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrclab.fabric import egress
from mrclab.transport import wire
from mrclab.transport.wire import WireError

SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=200)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)


def a_sack():
    return wire.encode_sack(flags=0, conn_id=1, cum_psn=2, sack_base=3, bitmap=4, ack_psn=5, ev=6, ecn_count=7,
                            ts_echo=8, ack_delay=9)


def data_packet(payload=b"abcdef", msg_len=100, offset=10, flags=0):
    return wire.encode_data(flags=flags, conn_id=7, psn=42, msg_id=3, msg_len=msg_len, offset=offset, ev=17,
                            ts=123456789, digest=0xDEADBEEF, payload=payload)


def test_common_header_and_data_layout_are_the_trimmers_contract():
    d = data_packet(flags=wire.LAST)
    assert wire.DATA_HEADER_LEN == 48 and len(d) == 48 + 6
    assert d[0] == 1 and d[1] == wire.DATA == 1
    assert struct.unpack(">H", d[2:4])[0] == wire.LAST
    assert (wire.SACK, wire.NACK, wire.PROBE, wire.PROBE_REPLY, wire.TRIMMED) == (2, 3, 4, 5, 0x0001)
    assert wire.MRC_UDP_PORT == 4793


@SETTINGS
@given(flags=st.sampled_from([0, wire.LAST, wire.RETX, wire.ECN_CE, wire.LAST | wire.RETX]), conn=u32, psn=u32,
       msg=u32, payload=st.binary(max_size=300), pad=st.integers(0, 1000), ev=u16, ts=u64, digest=u64)
def test_data_round_trip(flags, conn, psn, msg, payload, pad, ev, ts, digest):
    msg_len = len(payload) + pad
    offset = pad // 2
    d = wire.decode(wire.encode_data(flags=flags, conn_id=conn, psn=psn, msg_id=msg, msg_len=msg_len, offset=offset,
                                     ev=ev, ts=ts, digest=digest, payload=payload))
    assert isinstance(d, wire.Data)
    assert (d.flags, d.conn_id, d.psn, d.msg_id, d.msg_len, d.offset, d.length, d.ev, d.ts, d.digest) == \
        (flags, conn, psn, msg, msg_len, offset, len(payload), ev, ts, digest)
    assert bytes(d.payload) == payload


def test_trimmed_data_keeps_its_header_and_length():
    t = wire.trim(data_packet())
    assert len(t) == 48 and struct.unpack(">H", t[2:4])[0] & wire.TRIMMED
    d = wire.decode(t)
    assert d.flags & wire.TRIMMED and d.length == 6 and len(d.payload) == 0 and d.psn == 42
    assert wire.trim(wire.encode_probe(1, 2, 3, 4)) is None  # only DATA is trimmed


@SETTINGS
@given(flags=st.sampled_from([0, wire.ECN_ECHO]), conn=u32, cum=u32, base=u32, bitmap=u64, ack=u32, ev=u16,
       ecn=u16, ts=u64, delay=u32, nics=u16)
def test_sack_round_trip(flags, conn, cum, base, bitmap, ack, ev, ecn, ts, delay, nics):
    raw = wire.encode_sack(flags=flags, conn_id=conn, cum_psn=cum, sack_base=base, bitmap=bitmap, ack_psn=ack, ev=ev,
                           ecn_count=ecn, ts_echo=ts, ack_delay=delay, nic_down=nics)
    assert len(raw) == wire.SACK_LEN
    assert wire.decode(raw) == wire.Sack(flags, conn, cum, base, bitmap, ack, ev, ecn, ts, delay, nics)


@SETTINGS
@given(conn=u32, psn=u32, cum=u32, ev=u16, ts=u64)
def test_nack_round_trip(conn, psn, cum, ev, ts):
    raw = wire.encode_nack(conn_id=conn, psn=psn, cum_psn=cum, ev=ev, ts_echo=ts)
    assert len(raw) == wire.NACK_LEN
    assert wire.decode(raw) == wire.Nack(0, conn, psn, cum, ev, wire.NACK_TRIMMED, ts)


@SETTINGS
@given(conn=u32, ev=u16, seq=u32, ts=u64, reply=st.booleans())
def test_probe_round_trip(conn, ev, seq, ts, reply):
    raw = wire.encode_probe(conn, ev, seq, ts, reply=reply)
    assert len(raw) == wire.PROBE_LEN and wire.peek_conn_id(raw) == conn
    assert wire.decode(raw) == (wire.ProbeReply if reply else wire.Probe)(conn, ev, seq, ts)


def flip(raw, index, value):
    b = bytearray(raw)
    b[index] = value
    return bytes(b)


@pytest.mark.parametrize("raw, why", [
    (b"", "short"),
    (b"\x01\x01\x00", "short"),
    (flip(data_packet(), 0, 2), "version"),
    (flip(data_packet(), 1, 9), "type"),
    (data_packet()[:47], "short DATA"),
    (data_packet()[:-1], "payload shorter than length"),
    (data_packet() + b"x", "payload longer than length"),
    (data_packet(flags=wire.TRIMMED), "trimmed yet carrying payload"),
    (data_packet(msg_len=12, offset=10), "range past the message"),
    (flip(data_packet(), 3, 0x80), "unknown flag"),
    (flip(data_packet(), 47, 1), "reserved"),
    (a_sack()[:-1], "short SACK"),
    (flip(a_sack(), 47, 1), "SACK reserved"),
    (flip(wire.encode_nack(conn_id=1, psn=2, cum_psn=3, ev=4, ts_echo=5), 18, 9), "NACK reason"),
    (wire.encode_probe(1, 2, 3, 4) + b"\0", "long PROBE"),
])
def test_malformed_datagrams_raise_wire_error(raw, why):
    with pytest.raises(WireError):
        wire.decode(raw)


@SETTINGS
@given(st.binary(max_size=120))
def test_decode_never_fails_otherwise(raw):
    with contextlib.suppress(WireError):
        wire.decode(raw)


@SETTINGS
@given(st.binary(min_size=48, max_size=48), st.integers(0, 47), st.integers(0, 255))
def test_mutated_data_headers_decode_or_raise_wire_error(payload, index, value):
    with contextlib.suppress(WireError):
        wire.decode(flip(data_packet(payload), index, value))


@pytest.mark.parametrize("wire_psn, near, full", [
    (5, 3, 5), (0xFFFFFFFF, 1 << 32, (1 << 32) - 1), (2, (1 << 32) - 3, (1 << 32) + 2), (1, 10, 1)])
def test_unwrap_psn_across_the_32_bit_wrap(wire_psn, near, full):
    assert wire.unwrap(wire_psn, near) == full


def test_message_digest_is_64_bits_and_content_sensitive():
    a = wire.message_digest(b"hello")
    assert 0 <= a < 1 << 64 and a != wire.message_digest(b"hellp")


def test_the_egress_trimmer_knows_the_wire_format_as_this_module_defines_it():
    """Every numeric ``MRC_*`` constant of the eBPF trimmer is ``wire.MRC_*`` or ``wire.*``, with the same value,
    and it finds the MRC header past Ethernet, IPv6 and UDP headers of the sizes this module counts."""
    source = egress.SOURCE.read_text()
    defines = dict(re.findall(r"^#define (\w+) (.+?)\s*(?://.*)?$", source, re.M))
    numbers = {name: int(value, 0) for name, value in defines.items()
               if name.startswith("MRC_") and re.fullmatch(r"0x[0-9a-fA-F]+|\d+", value)}
    assert {"MRC_UDP_PORT", "MRC_VERSION", "MRC_DATA", "MRC_TRIMMED", "MRC_DATA_HEADER_LEN"} <= set(numbers)
    for name, value in numbers.items():
        assert getattr(wire, name, getattr(wire, name.removeprefix("MRC_"), None)) == value, name
    assert defines["L4_OFF"] == "(ETH_HLEN + sizeof(struct ipv6hdr))"
    assert defines["MRC_OFF"] == "(L4_OFF + sizeof(struct udphdr))"
    assert (wire.ETHERNET_HEADER, wire.IP_UDP_OVERHEAD) == (14, 40 + 8)  # ETH_HLEN; struct ipv6hdr, struct udphdr
