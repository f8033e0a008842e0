"""The datapath's batched datagram I/O (mrclab/agent/batchio.py) on kernel UDP sockets over ::1, no root: every
implementation this build has (the pure build: the Python calls; the compiled build: those and sendmmsg/recvmmsg)
must give the same answers."""
from __future__ import annotations

import errno
import socket

import pytest

from mrclab import build
from mrclab.agent import batchio, ecn
from mrclab.agent.batchio import BATCH, BatchedIo, PythonIo

IMPLEMENTATIONS = ["python"] + (["batched"] if batchio.NATIVE is not None else [])


@pytest.fixture(params=IMPLEMENTATIONS)
def io(request) -> PythonIo:
    return PythonIo() if request.param == "python" else BatchedIo(batchio.NATIVE)


def udp(tclass: int = ecn.ECT0) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass)
    sock.setsockopt(socket.IPPROTO_IPV6, 25, 1)  # IPV6_RECVERR, as the agent's sockets
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind(("::1", 0))
    sock.setblocking(False)
    return sock


@pytest.fixture
def socks():
    made = []

    def make(tclass: int = ecn.ECT0) -> socket.socket:
        made.append(udp(tclass))
        return made[-1]
    yield make
    for sock in made:
        sock.close()


def test_the_build_picks_its_io():
    assert isinstance(batchio.default(), BatchedIo) == (build.BUILD == "compiled")
    assert (batchio.NATIVE is not None) == (build.BUILD == "compiled")


def test_a_batch_goes_to_a_destination_per_datagram_and_arrives_in_order(io, socks):
    sender, other, a, b = socks(), socks(), socks(), socks()
    to = {s: io.address("::1", s.getsockname()[1]) for s in (a, b)}
    batch = [(sender if i < 7 else other, to[a if i % 3 else b], bytes([i]) * (100 + i)) for i in range(10)]
    assert io.send(batch) == (10, 0)
    for sock, want in ((a, [i for i in range(10) if i % 3]), (b, [i for i in range(10) if not i % 3])):
        got = io.receive(sock)
        assert [size for size, _, _ in got] == [100 + i for i in want]
        assert [bytes(io.views[k][:size]) for k, (size, _, _) in enumerate(got)] == [bytes([i]) * (100 + i)
                                                                                    for i in want]
        assert {io.source_text(source) for _, source, _ in got} == {"::1"}
        assert io.receive(sock) == []


def test_datagrams_leave_in_the_order_given_across_sockets(io, socks):
    """A connection sprays over its planes' sockets: datagrams through different sockets interleave, and arrive
    interleaved as they were handed over (one receiving socket sees the order they left in)."""
    senders, sink = [socks() for _ in range(3)], socks()
    to = io.address("::1", sink.getsockname()[1])
    batch = [(senders[i % 3], to, bytes([i])) for i in range(12)]
    assert io.send(batch) == (12, 0)
    assert [bytes(io.views[k][:1])[0] for k in range(len(io.receive(sink)))] == list(range(12))


def test_a_receive_reads_at_most_a_batch_and_the_rest_next_time(io, socks):
    sender, sink = socks(), socks()
    to = io.address("::1", sink.getsockname()[1])
    assert io.send([(sender, to, i.to_bytes(2, "big")) for i in range(BATCH + 5)]) == (BATCH + 5, 0)
    first, second = io.receive(sink), io.receive(sink)
    assert (len(first), len(second)) == (BATCH, 5)
    assert [int.from_bytes(io.views[k][:2], "big") for k in (0, 4, 5)] == [BATCH, BATCH + 4, 5]  # slots reused


def test_each_datagram_says_whether_it_arrived_marked_ce(io, socks):
    marked, plain, sink = socks(ecn.CE), socks(), socks()
    to = io.address("::1", sink.getsockname()[1])
    assert io.send([(sender, to, b"x") for sender in (plain, marked, plain)]) == (3, 0)
    assert [ce for _, _, ce in io.receive(sink)] == [False, True, False]


def test_send_stops_at_the_datagram_the_kernel_refuses_and_says_why(io, socks):
    sender, sink = socks(), socks()
    to = io.address("::1", sink.getsockname()[1])
    batch = [(sender, to, b"a"), (sender, to, b"b"), (sender, to, bytes(70000)), (sender, to, b"d")]
    assert io.send(batch) == (2, errno.EMSGSIZE)
    assert io.send(batch, 3) == (1, 0)
    assert [bytes(io.views[k][:size]) for k, (size, _, _) in enumerate(io.receive(sink))] == [b"a", b"b", b"d"]


def test_an_error_the_socket_reports_comes_before_what_waits(io, socks):
    """An ICMP error (port unreachable, reported through IPV6_RECVERR) is raised once, then the datagrams that
    were waiting are read; the agent counts it and drains the error queue (mrc.MrcDatapath._socket_error)."""
    sock, peer = socks(), socks()
    closed = socks()
    gone = io.address("::1", closed.getsockname()[1])
    closed.close()
    assert io.send([(peer, io.address("::1", sock.getsockname()[1]), b"waits")]) == (1, 0)
    assert io.send([(sock, gone, b"x")]) == (1, 0)
    with pytest.raises(ConnectionRefusedError):
        io.receive(sock)
    assert [size for size, _, _ in io.receive(sock)] == [5]


def test_a_bad_batch_is_a_type_error_not_a_crash(io, socks):
    sender = socks()
    with pytest.raises((TypeError, ValueError)):
        io.send([(sender, "not an address", b"x")])
    if isinstance(io, BatchedIo):
        with pytest.raises(ValueError):
            io.address("not an address", 1)
        with pytest.raises(ValueError):
            io.address("::1", 70000)
