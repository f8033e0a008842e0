"""The scapy layer and `transport/wire.py` agree in both directions, for every packet type and field:
what wire.py encodes, scapy decodes to the same fields; what scapy builds, wire.py decodes."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.all import UDP, IPv6, Raw, raw

from mrclab import addressing
from mrclab.transport import wire
from mrclab.transport.scapy_layer import (
    MRC,
    MRCData,
    MRCNack,
    MRCProbe,
    MRCSack,
    usid_destination,
)

SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=150)
u16, u32, u64 = st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFFFFFFFFFF)


@st.composite
def data(draw):
    """DATA fields and the original payload; a trimmed one is what a switch left of it (header only)."""
    trimmed = draw(st.booleans())
    payload = draw(st.binary(min_size=1 if trimmed else 0, max_size=300))
    offset = draw(st.integers(0, 1 << 20))
    fields = {"flags": draw(st.integers(0, 7)) << 1, "conn_id": draw(u32), "psn": draw(u32), "msg_id": draw(u32),
                  "msg_len": offset + len(payload) + draw(st.integers(0, 1000)), "offset": offset, "ev": draw(u16),
                  "ts": draw(u64), "digest": draw(u64)}
    return fields, payload, trimmed


sack_flags = st.sampled_from([0, wire.ECN_ECHO, wire.DUP_ECHO, wire.ECN_ECHO | wire.DUP_ECHO])
sack = st.fixed_dictionaries({"flags": sack_flags, "conn_id": u32, "cum_psn": u32, "sack_base": u32, "bitmap": u64,
                              "ack_psn": u32, "ev": u16, "ecn_count": u16, "ts_echo": u64, "ack_delay": u32,
                              "nic_down": u16})
nack = st.fixed_dictionaries({"conn_id": u32, "psn": u32, "cum_psn": u32, "ev": u16, "ts_echo": u64})
probe = st.fixed_dictionaries({"conn_id": u32, "ev": u16, "seq": u32, "ts": u64, "reply": st.booleans()})


def carried(datagram: bytes):
    """The datagram as a capture shows it: decoded from the UDP port alone."""
    return UDP(raw(UDP(sport=40000, dport=wire.MRC_UDP_PORT) / Raw(datagram)))[MRC]


@SETTINGS
@given(data())
def test_data_both_ways(case):
    fields, payload, trimmed = case
    encoded = bytes(wire.encode_data(**fields, payload=payload))
    if trimmed:
        encoded, payload = wire.trim(encoded), b""
    flags = fields.pop("flags") | (wire.TRIMMED if trimmed else 0)
    body = {**fields, "length": len(payload) if not trimmed else len(case[1])}
    seen = carried(encoded)
    assert (seen.version, seen.type, int(seen.flags)) == (1, wire.DATA, flags)
    assert {k: getattr(seen[MRCData], k) for k in body} == body
    assert bytes(seen[MRCData].payload) == payload
    built = raw(MRC(flags=flags) / MRCData(**body) / Raw(payload))
    assert built == encoded
    decoded = wire.decode(built)
    assert decoded._replace(payload=bytes(decoded.payload)) == wire.Data(flags, **body, payload=payload)


@SETTINGS
@given(sack)
def test_sack_both_ways(fields):
    encoded = wire.encode_sack(**fields)
    seen = carried(encoded)
    assert (seen.type, int(seen.flags)) == (wire.SACK, fields["flags"])
    body = {k: v for k, v in fields.items() if k != "flags"}
    assert {k: getattr(seen[MRCSack], k) for k in body} == body
    assert seen[MRCSack].sacked() == [(fields["sack_base"] + i) % 2**32 for i in range(64) if fields["bitmap"] >> i & 1]
    built = raw(MRC(type=wire.SACK, flags=fields["flags"]) / MRCSack(**body))
    assert built == encoded and wire.decode(built) == wire.Sack(**fields)


@SETTINGS
@given(nack)
def test_nack_both_ways(fields):
    encoded = wire.encode_nack(**fields)
    seen = carried(encoded)
    assert seen.type == wire.NACK and seen[MRCNack].reason == wire.NACK_TRIMMED
    assert {k: getattr(seen[MRCNack], k) for k in fields} == fields
    built = raw(MRC(type=wire.NACK) / MRCNack(**fields))
    assert built == encoded and wire.decode(built) == wire.Nack(0, reason=wire.NACK_TRIMMED, **fields)


@SETTINGS
@given(probe)
def test_probe_both_ways(fields):
    reply = fields.pop("reply")
    encoded = wire.encode_probe(**fields, reply=reply)
    seen = carried(encoded)
    assert seen.type == (wire.PROBE_REPLY if reply else wire.PROBE)
    assert {k: getattr(seen[MRCProbe], k) for k in fields} == fields
    built = raw(MRC(type=wire.PROBE_REPLY if reply else wire.PROBE) / MRCProbe(**fields))
    assert built == encoded
    assert wire.decode(built) == (wire.ProbeReply if reply else wire.Probe)(**fields)


def test_defaults_fill_lengths_and_ports():
    pkt = UDP() / MRC() / MRCData(conn_id=3, offset=100) / Raw(b"x" * 10)
    assert (pkt.sport, pkt.dport) == (wire.MRC_UDP_PORT, wire.MRC_UDP_PORT)
    d = wire.decode(raw(pkt[MRC]))
    assert (d.length, d.msg_len, bytes(d.payload)) == (10, 110, b"x" * 10)


@given(plane=st.integers(0, 7), leaf=st.integers(0, 15), first=st.integers(0, 15), spine=st.integers(0, 15),
       host=st.integers(0, 63))
@SETTINGS
def test_usid_destination_is_the_address_plan(plane, leaf, first, spine, host):
    dst = usid_destination(plane, leaf, spine, host, first_leaf=first)
    assert addressing.decode(dst) == (plane, (0x1000 + first, 0x2000 + spine, 0x1000 + leaf, 0x4000 + host))
    assert IPv6(dst=dst).dst == dst


def test_usid_destination_matches_the_plan_the_agents_use():
    plan = addressing.Plan(planes=4, leaves=4, spines=4, hosts_per_leaf=2)
    assert usid_destination(2, plan.leaf_of(7), 3, 7, first_leaf=plan.leaf_of(0)) == str(plan.path_address(0, 7, 2, 3))
