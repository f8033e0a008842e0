"""What the agent reads off the kernel: netlink link and address messages (the NICs' state), and the traffic
class of a received datagram (ECN). Built byte for byte as the kernel sends them, then read from this
machine's own kernel."""
from __future__ import annotations

import ipaddress
import socket
import struct

import pytest

from mrclab.addressing import Plan
from mrclab.agent import ecn, nics

IFF_UP, IFF_RUNNING, IFF_LOWER_UP = 0x1, 0x40, 0x10000


def message(kind: int, payload: bytes) -> bytes:
    """One netlink message, padded to 4 bytes as the kernel aligns them."""
    body = nics.NLMSGHDR.pack(nics.NLMSGHDR.size + len(payload), kind, 0, 0, 0) + payload
    return body + bytes(-len(body) % 4)


def attribute(kind: int, value: bytes) -> bytes:
    body = struct.pack("=HH", 4 + len(value), kind) + value
    return body + bytes(-len(body) % 4)


def link(index: int, flags: int, kind: int = nics.RTM_NEWLINK, name: bytes = b"mab1h3-p0\0") -> bytes:
    return message(kind, nics.IFINFOMSG.pack(0, 1, index, flags, 0xFFFFFFFF) + attribute(nics.IFLA_IFNAME, name))


def address(index: int, text: str) -> bytes:
    packed = ipaddress.ip_address(text).packed
    return message(nics.RTM_NEWADDR, nics.IFADDRMSG.pack(socket.AF_INET6, 128, 0, 0, index)
                   + attribute(nics.IFA_ADDRESS, packed))


def test_a_nic_is_up_only_while_administratively_up_with_carrier():
    buf = b"".join([link(2, IFF_UP | IFF_RUNNING | IFF_LOWER_UP), link(3, IFF_UP),  # up, but no carrier
                    link(4, IFF_LOWER_UP), link(5, IFF_UP | IFF_LOWER_UP, nics.RTM_DELLINK),  # down; deleted
                    message(nics.NLMSG_DONE, bytes(4))])
    assert nics.link_states(buf) == [(2, True), (3, False), (4, False), (5, False)]


def test_truncated_and_foreign_messages_are_skipped():
    whole = link(7, IFF_UP | IFF_LOWER_UP)
    assert nics.link_states(whole + whole[:20]) == [(7, True)]  # a partial message ends the walk
    assert nics.link_states(message(nics.RTM_NEWLINK, bytes(8))) == []  # too short for an ifinfomsg
    assert nics.link_states(address(7, "fcbb:0:4003::")) == []
    bad_attr = message(nics.RTM_NEWADDR, nics.IFADDRMSG.pack(socket.AF_INET6, 128, 0, 0, 7)
                       + struct.pack("=HH", 200, nics.IFA_ADDRESS))
    assert nics.address_indexes(bad_attr) == {}


def test_each_planes_nic_is_the_one_holding_the_hosts_address_on_that_plane():
    plan = Plan(2, 2, 2, 2)
    ipv4 = message(nics.RTM_NEWADDR, nics.IFADDRMSG.pack(socket.AF_INET, 32, 0, 0, 4)
                   + attribute(nics.IFA_LOCAL, bytes([10, 0, 0, 1])))
    buf = address(9, str(plan.host_address(1, 3))) + address(8, str(plan.host_address(0, 3))) + ipv4
    assert nics.address_indexes(buf) == {str(plan.host_address(1, 3)): 9, str(plan.host_address(0, 3)): 8}


def test_the_watch_reports_every_change_in_order_with_the_planes_down(monkeypatch):
    plan = Plan(2, 2, 2, 2)
    replies = {nics.RTM_GETADDR: address(8, str(plan.host_address(0, 3))) + address(9, str(plan.host_address(1, 3))),
               nics.RTM_GETLINK: link(8, IFF_UP | IFF_LOWER_UP) + link(9, IFF_UP)}  # plane 1's NIC has no carrier
    monkeypatch.setattr(nics, "dump", lambda kind, family=0: replies[kind])
    watch = nics.NicWatch(plan, 3)
    seen = []

    class Reactor:
        def add_reader(self, sock, callback):
            pass

    try:
        assert watch.planes == {8: 0, 9: 1} and watch.down == 0b10
        watch.attach(Reactor(), lambda down, changes, now: seen.append((down, changes, now)), 5.0)
        assert seen == [(0b10, [(1, False)], 5.0)]  # what was down before the loop started, at once
        watch.update([(8, False), (9, True), (42, False), (8, False)], 6.0)  # 42: not a NIC of ours
        assert seen[1:] == [(0b01, [(0, False), (1, True)], 6.0)]
        watch.update([(8, True), (8, False)], 7.0)  # a flap within one read: both changes, and the end state
        assert seen[2:] == [(0b01, [(0, True), (0, False)], 7.0)]
        watch.update([(9, True)], 8.0)
        assert len(seen) == 3  # no change, no report
    finally:
        watch.close()


def test_this_kernel_answers_the_dumps_the_watch_reads():
    """The loopback interface is up, and ::1 is on it, as this machine's own kernel says (no root needed)."""
    states = dict(nics.link_states(nics.dump(nics.RTM_GETLINK)))
    assert states.get(socket.if_nametoindex("lo")) is True
    owners = nics.address_indexes(nics.dump(nics.RTM_GETADDR, socket.AF_INET6))
    if "::1" in owners:  # IPv6 may be off on this machine's loopback
        assert owners["::1"] == socket.if_nametoindex("lo")


@pytest.mark.parametrize("tclass, ce", [(0b00, False), (0b10, False), (0b01, False), (0b11, True),
                                        (0xB8 | 0b11, True), (0xB8 | 0b10, False)])
def test_ce_is_the_low_two_bits_of_the_traffic_class(tclass, ce):
    ancdata = [(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass.to_bytes(4, "little" if ecn._LOW_BYTE == 0
                                                                         else "big"))]
    assert ecn.congestion_experienced(ancdata) is ce


def test_no_traffic_class_is_no_mark():
    assert ecn.congestion_experienced([]) is False
    other = [(socket.IPPROTO_IPV6, socket.IPV6_HOPLIMIT, (3).to_bytes(4, "little"))]
    assert ecn.congestion_experienced(other) is False


def test_a_datagram_sent_ect0_arrives_with_its_traffic_class():
    """Over this machine's loopback: what the agent's sockets send is ECT(0), and the receiver reads it."""
    receiver = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sender = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        receiver.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 on the loopback")
    try:
        for sock in (receiver, sender):
            ecn.enable(sock)
        sender.sendto(b"x", receiver.getsockname())
        receiver.settimeout(2)
        data, ancdata, _, _ = receiver.recvmsg(16, ecn.ANCILLARY_SIZE)
        assert data == b"x" and not ecn.congestion_experienced(ancdata)
        [(level, kind, value)] = ancdata
        assert (level, kind) == (socket.IPPROTO_IPV6, socket.IPV6_TCLASS)
        assert int.from_bytes(value, "little" if ecn._LOW_BYTE == 0 else "big") & ecn.ECN_MASK == ecn.ECT0
    finally:
        receiver.close()
        sender.close()
