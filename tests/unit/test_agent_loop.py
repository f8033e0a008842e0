"""The agent's event loop: it sleeps until something is due, and a writable socket wakes it only while
output waits for it."""
import socket
import time

from mrclab.agent.loop import Reactor


def test_the_loop_sleeps_until_the_deadline_and_reads_what_arrives():
    reactor = Reactor()
    a, b = socket.socketpair()
    a.setblocking(False)
    ticks, got = [], []
    start = time.monotonic()

    def tick(now):
        ticks.append(now)
        if len(ticks) == 3:
            reactor.stop("done")
        return start + 0.05 * len(ticks)

    reactor.add_reader(a, lambda: got.append(a.recv(100)))
    b.send(b"x")
    try:
        assert reactor.run(tick) == "done"
    finally:
        reactor.close()
        a.close()
        b.close()
    assert got == [b"x"]  # read on the first wake-up
    assert len(ticks) == 3 and ticks[2] - start >= 0.05  # slept to the deadline, not spun past it


def test_a_writer_is_called_only_while_registered():
    reactor = Reactor()
    a, b = socket.socketpair()
    calls, ticks = [], []

    def writable():
        calls.append(len(ticks))
        reactor.remove_writer(a)  # drained

    def tick(now):
        ticks.append(now)
        if len(ticks) == 1:
            reactor.add_writer(a, writable)
        if len(ticks) == 5:
            reactor.stop("done")
        return now + 0.01

    try:
        reactor.run(tick)
    finally:
        reactor.close()
        a.close()
        b.close()
    assert calls == [1]  # once, although the socket stayed writable
    assert ticks[-1] - ticks[1] >= 0.03  # and afterwards the loop slept between its deadlines


def test_a_socket_closed_while_watched_is_let_go():
    reactor = Reactor()
    a, b = socket.socketpair()
    reactor.add_reader(a, lambda: None)
    a.close()
    reactor.remove_reader(a)  # its descriptor is gone; nothing raises
    c, d = socket.socketpair()  # may reuse the descriptor number
    reactor.add_reader(c, lambda: None)
    reactor.remove_reader(c)
    for sock in (b, c, d):
        sock.close()
    reactor.close()
