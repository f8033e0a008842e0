"""MRC v1 as scapy layers, for crafting packets and reading captures in a researcher's own scripts.

The layouts are those of `wire.py` (the source of truth; property tests hold the two
together): `MRC` is the common 4-byte header and the type picks the body layer::

    from scapy.all import IPv6, UDP, rdpcap
    from mrclab.transport.scapy_layer import MRC, MRCData, usid_destination

    pkt = (IPv6(dst=usid_destination(plane=0, leaf=1, spine=2, host=3))
           / UDP() / MRC(flags="TRIMMED") / MRCData(conn_id=3, psn=7, msg_len=8192, length=8192))

`UDP()/MRC()` gets source and destination port `MRC_UDP_PORT`; a captured UDP datagram
to or from that port is decoded as MRC.
"""
from __future__ import annotations

from typing import ClassVar

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    LongField,
    ShortField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_layers

from .. import addressing
from . import wire

FLAG_NAMES = ["TRIMMED", "LAST", "RETX", "ECN", "DUP_ECHO"]
"""Bit 0 upwards. ECN is ECN_CE on DATA and ECN_ECHO on a SACK (the same bit)."""


class MRC(Packet):
    name = "MRC"
    fields_desc: ClassVar[list] = [ByteField("version", wire.VERSION),
                   ByteEnumField("type", wire.DATA, {wire.DATA: "DATA", wire.SACK: "SACK", wire.NACK: "NACK",
                                                      wire.PROBE: "PROBE", wire.PROBE_REPLY: "PROBE_REPLY"}),
                   FlagsField("flags", 0, 16, FLAG_NAMES)]

    def mysummary(self) -> str:
        return self.sprintf("MRC %type% %flags%")


class MRCData(Packet):
    """DATA header; the payload (none once TRIMMED) follows as Raw. `length` defaults to the payload's."""

    name = "MRC DATA"
    fields_desc: ClassVar[list] = [
        IntField("conn_id", 0), IntField("psn", 0), IntField("msg_id", 0), IntField("msg_len", None),
        IntField("offset", 0), ShortField("length", None), ShortField("ev", 0), LongField("ts", 0),
        XLongField("digest", 0), XIntField("reserved", 0)]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        length = len(pay) if self.length is None else self.length
        msg_len = self.offset + length if self.msg_len is None else self.msg_len
        return pkt[:12] + msg_len.to_bytes(4, "big") + pkt[16:20] + length.to_bytes(2, "big") + pkt[22:] + pay


class MRCSack(Packet):
    name = "MRC SACK"
    fields_desc: ClassVar[list] = [
        IntField("conn_id", 0), IntField("cum_psn", 0), IntField("sack_base", 0), XLongField("bitmap", 0),
        IntField("ack_psn", 0), ShortField("ev", 0), ShortField("ecn_count", 0), LongField("ts_echo", 0),
        IntField("ack_delay", 0), XShortField("nic_down", 0), XShortField("reserved", 0)]

    def sacked(self) -> list[int]:
        """PSNs the bitmap says arrived."""
        return [(self.sack_base + i) & 0xFFFFFFFF for i in range(wire.SACK_BITS) if self.bitmap >> i & 1]


class MRCNack(Packet):
    name = "MRC NACK"
    fields_desc: ClassVar[list] = [
        IntField("conn_id", 0), IntField("psn", 0), IntField("cum_psn", 0), ShortField("ev", 0),
        ByteEnumField("reason", wire.NACK_TRIMMED, {wire.NACK_TRIMMED: "TRIMMED", wire.NACK_SEQUENCE: "SEQUENCE"}),
        ByteField("reserved", 0),
        LongField("ts_echo", 0)]


class MRCProbe(Packet):
    """PROBE and PROBE_REPLY share this body; seq 0xFFFFFFFF is a warm-up probe."""

    name = "MRC PROBE"
    fields_desc: ClassVar[list] = [IntField("conn_id", 0), ShortField("ev", 0), ShortField("reserved", 0),
                   IntField("seq", 0), LongField("ts", 0)]


bind_layers(UDP, MRC, sport=wire.MRC_UDP_PORT, dport=wire.MRC_UDP_PORT)
bind_bottom_up(UDP, MRC, dport=wire.MRC_UDP_PORT)
bind_bottom_up(UDP, MRC, sport=wire.MRC_UDP_PORT)
bind_layers(MRC, MRCData, type=wire.DATA)
bind_layers(MRC, MRCSack, type=wire.SACK)
bind_layers(MRC, MRCNack, type=wire.NACK)
bind_layers(MRC, MRCProbe, type=wire.PROBE)
bind_layers(MRC, MRCProbe, type=wire.PROBE_REPLY)


def usid_destination(plane: int, leaf: int, spine: int, host: int, *, first_leaf: int | None = None) -> str:
    """The IPv6 destination that steers a packet through `spine` of `plane` to `host` under `leaf`.

    `first_leaf` is the sender's own leaf (the first hop; default `leaf`, a pair on one leaf).
    """
    return str(addressing.encode(plane, (addressing.leaf_usid(leaf if first_leaf is None else first_leaf),
                                         addressing.spine_usid(spine), addressing.leaf_usid(leaf),
                                         addressing.host_usid(host))))
