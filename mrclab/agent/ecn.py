"""ECN on the agent's UDP sockets: what it sends is ECN-capable, and what arrives says whether a switch marked it.

Every datagram leaves with ECT(0) in its IPv6 traffic class (``IPV6_TCLASS``), so the fabric's
switch ports may mark it CE as their queues fill (``fabric/bpf/egress.c``). ``IPV6_RECVTCLASS``
makes the kernel hand each received datagram's traffic class over as one control message of
``recvmsg``; :func:`congestion_experienced` reads CE out of it. The receive loop asks only this
function, so a receive path that gets the traffic class some other way (a batched ``recvmmsg``)
swaps it alone.
"""
from __future__ import annotations

import socket
import sys

ECN_MASK = 0b11  # the traffic class's low two bits (RFC 3168)
ECT0 = 0b10
CE = 0b11
ANCILLARY_SIZE = socket.CMSG_SPACE(4)  # one int: the traffic class
_LOW_BYTE = 0 if sys.byteorder == "little" else 3  # the control message's int is in host byte order


def enable(sock: socket.socket) -> None:
    """Send ECT(0), and receive every datagram's traffic class with it."""
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, ECT0)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)


def congestion_experienced(ancdata: list[tuple[int, int, bytes]]) -> bool:
    """Whether ``recvmsg``'s control messages say the datagram arrived marked CE."""
    for level, kind, data in ancdata:
        if kind == socket.IPV6_TCLASS and level == socket.IPPROTO_IPV6 and len(data) == 4:
            return data[_LOW_BYTE] & ECN_MASK == CE
    return False
