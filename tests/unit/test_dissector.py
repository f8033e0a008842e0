"""The shipped Lua dissector in Debian's tshark, on hand-built frames of every MRC packet type: each
field as `transport/wire.py` encoded it, the uSID path, the info column, expert info and preferences."""
from __future__ import annotations

from scapy.all import UDP, Ether, IPv6, wrpcap

from mrclab.transport import wire
from mrclab.transport.scapy_layer import usid_destination
from tests.tshark import fields, tshark, undecodable

SRC = "fcbb:1:4000::"
PATH = usid_destination(1, 3, 2, 7, first_leaf=0)  # h0 (leaf 0) -> h7 (leaf 3) via spine 2 of plane 1


def frame(payload: bytes, dst: str = PATH, port: int = wire.MRC_UDP_PORT):
    return (Ether(src="02:01:01:00:00:00", dst="02:00:00:00:00:01") / IPv6(src=SRC, dst=dst)
            / UDP(sport=port, dport=port) / bytes(payload))


def write(tmp_path, frames) -> str:
    path = tmp_path / "hand.pcap"
    wrpcap(str(path), frames)
    return path


PACKETS = [
    wire.encode_data(flags=wire.LAST | wire.ECN_CE, conn_id=3, psn=1208, msg_id=77, msg_len=100000, offset=8192, ev=9,
                     ts=123456789012, digest=0xDEADBEEF00C0FFEE, payload=b"z" * 200),
    wire.trim(wire.encode_data(flags=wire.RETX, conn_id=3, psn=1207, msg_id=77, msg_len=100000, offset=0, ev=9, ts=5,
                               digest=7, payload=b"y" * 300)),
    wire.encode_sack(flags=wire.DUP_ECHO | wire.ECN_ECHO, conn_id=3, cum_psn=1200, sack_base=1201,
                     bitmap=1 | 1 << 5 | 1 << 63, ack_psn=1207, ev=9, ecn_count=2, ts_echo=123, ack_delay=4000),
    wire.encode_nack(conn_id=3, psn=1207, cum_psn=1200, ev=9, ts_echo=555),
    wire.encode_probe(3, 10, 12, 99),
    wire.encode_probe(3, 11, wire.WARM_SEQ, 98, reply=True),
]


def test_every_packet_type_and_field(tmp_path):
    capture = write(tmp_path, [frame(p) for p in PACKETS])
    assert undecodable(capture) == []
    names = ["mrc.version", "mrc.type", "mrc.flags", "mrc.flags.trimmed", "mrc.flags.last", "mrc.flags.retx",
             "mrc.flags.ecn_ce", "mrc.flags.ecn_echo", "mrc.flags.dup_echo", "mrc.conn", "mrc.psn", "mrc.msg_id",
             "mrc.msg_len", "mrc.offset", "mrc.length", "mrc.ev", "mrc.ts", "mrc.digest", "mrc.cum_psn",
             "mrc.sack.base", "mrc.sack.bitmap", "mrc.sack.psn", "mrc.sack.count", "mrc.ack_psn", "mrc.ecn_count",
             "mrc.ts_echo", "mrc.ack_delay", "mrc.nack.reason", "mrc.probe.seq", "mrc.probe.warm", "mrc.payload"]
    rows = [dict(zip(names, row, strict=True)) for row in fields(capture, names)]
    data, trimmed, sack, nack, probe, reply = rows
    for row, packet in zip(rows, PACKETS, strict=True):
        assert row["mrc.version"] == "1" and row["mrc.type"] == str(packet[1])
    assert data | {"mrc.payload": ""} == data | {
        "mrc.flags": "0x000a", "mrc.flags.trimmed": "", "mrc.flags.last": "1", "mrc.flags.retx": "",
        "mrc.flags.ecn_ce": "1", "mrc.conn": "3", "mrc.psn": "1208", "mrc.msg_id": "77", "mrc.msg_len": "100000",
        "mrc.offset": "8192", "mrc.length": "200", "mrc.ev": "9", "mrc.ts": "123456789012",
        "mrc.digest": "0xdeadbeef00c0ffee", "mrc.payload": ""}
    assert data["mrc.payload"].replace(":", "") == "7a" * 200
    assert (trimmed["mrc.flags.trimmed"], trimmed["mrc.flags.retx"], trimmed["mrc.length"], trimmed["mrc.payload"]) \
        == ("1", "1", "300", "")
    assert {k: sack[k] for k in ("mrc.flags.ecn_echo", "mrc.flags.dup_echo", "mrc.cum_psn", "mrc.sack.base",
                                 "mrc.sack.bitmap", "mrc.sack.psn", "mrc.sack.count", "mrc.ack_psn", "mrc.ev",
                                 "mrc.ecn_count", "mrc.ts_echo", "mrc.ack_delay")} == {
        "mrc.flags.ecn_echo": "1", "mrc.flags.dup_echo": "1", "mrc.cum_psn": "1200", "mrc.sack.base": "1201",
        "mrc.sack.bitmap": "0x8000000000000021", "mrc.sack.psn": "1201,1206,1264", "mrc.sack.count": "3",
        "mrc.ack_psn": "1207", "mrc.ev": "9", "mrc.ecn_count": "2", "mrc.ts_echo": "123", "mrc.ack_delay": "4000"}
    assert sack["mrc.flags.trimmed"] == ""  # DATA's flags are not SACK's
    assert (nack["mrc.psn"], nack["mrc.cum_psn"], nack["mrc.ev"], nack["mrc.nack.reason"], nack["mrc.ts_echo"]) \
        == ("1207", "1200", "9", "1", "555")
    seen = (probe["mrc.ev"], probe["mrc.probe.seq"], probe["mrc.probe.warm"], probe["mrc.ts"])
    assert seen == ("10", "12", "0", "99")
    assert (reply["mrc.probe.seq"], reply["mrc.probe.warm"], reply["mrc.ts"]) == (str(wire.WARM_SEQ), "1", "98")


def test_usid_path_and_info_column(tmp_path):
    after_spine = "fcbb:1:1003:4007::"  # what a leaf-to-host link carries: the spine's uSID shifted out
    capture = write(tmp_path, [frame(PACKETS[1]), frame(PACKETS[0], dst=after_spine), frame(PACKETS[3])])
    rows = fields(capture, ["mrc.path", "mrc.path.plane", "mrc.path.leaf", "mrc.path.spine", "mrc.path.host",
                            "mrc.path.next", "mrc.path.remaining", "_ws.col.Info"])
    assert rows[0] == ["p1 l0 s2 l3 h7", "1", "0,3", "2", "7", "0x00001000", "4",
                       "DATA conn 3 psn 1207 ev 9 p1 s2 TRIMMED RETX"]
    assert rows[1] == ["p1 l3 h7", "1", "3", "", "7", "0x00001003", "2", "DATA conn 3 psn 1208 ev 9 p1 LAST ECN_CE"]
    assert rows[2][-1] == "NACK conn 3 psn 1207 ev 9 TRIMMED p1 s2"


def test_filters_and_expert_info(tmp_path):
    capture = write(tmp_path, [frame(p) for p in PACKETS])
    assert [r[0] for r in fields(capture, ["frame.number"], "mrc.flags.trimmed")] == ["2"]
    assert [r[0] for r in fields(capture, ["frame.number"], "mrc.ev == 9")] == ["1", "2", "3", "4"]
    assert [r[0] for r in fields(capture, ["frame.number"], "mrc.path.spine == 2 && mrc.type == 1")] == ["1", "2"]
    expert = fields(capture, ["frame.number", "_ws.expert.message"], "_ws.expert")
    assert expert == [["2", "Trimmed by a switch: payload cut, the receiver NACKs it,Retransmission"],
                      ["4", "NACK: a trimmed packet is asked for again"]]


def test_malformed_packets_are_flagged(tmp_path):
    sack = wire.encode_sack(flags=0, conn_id=3, cum_psn=1, sack_base=1, bitmap=0, ack_psn=1, ev=1, ecn_count=0,
                            ts_echo=0, ack_delay=0)
    data = wire.encode_data(flags=0, conn_id=3, psn=1, msg_id=1, msg_len=100, offset=0, ev=1, ts=0, digest=0,
                            payload=b"x" * 10)
    bad = [b"\x01\x09\x00\x00" + bytes(20),                     # unknown type
           bytes(sack)[:40],                                    # short SACK
           bytes(data)[:-4],                                    # payload shorter than its header says
           bytes(wire.encode_probe(3, 1, 1, 1))[:10] + b"\x01" + bytes(13)]     # reserved bits set
    capture = write(tmp_path, [frame(p) for p in bad] + [frame(PACKETS[4])])
    assert [row.split()[0] for row in undecodable(capture)] == ["1", "2", "3", "4"]


def test_port_preference(tmp_path):
    capture = write(tmp_path, [frame(PACKETS[4], port=5000)])
    assert fields(capture, ["mrc.conn"]) == []
    assert fields(capture, ["mrc.conn"], "mrc", "-o", "mrc.udp_port:5000") == [["3"]]
    # a 48-bit block (fcbb:1:1000 as the locator): the path starts one uSID later
    assert fields(capture, ["mrc.path"], "mrc", "-o", "mrc.udp_port:5000", "-o", "mrc.usid_block_bits:48") \
        == [["p1 s2 l3 h7"]]


def test_version_check_leaves_other_udp_alone(tmp_path):
    capture = write(tmp_path, [frame(b"\x02\x01\x00\x00" + bytes(44))])
    assert fields(capture, ["frame.number"]) == []
    summary = tshark("-r", str(capture))
    assert " UDP " in summary and "MRC" not in summary
