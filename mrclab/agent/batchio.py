"""Datagram I/O in batches: what the MRC datapath asks of its UDP sockets, once per wake-up.

``send`` hands the kernel a list of ``(socket, address, datagram)`` triples in the order given, each to its
own destination (every EV is its own uSID address), and stops at the first datagram the kernel refuses,
saying why (its errno), so the caller keeps exactly the per-datagram meaning of ``sendto``: what was
refused waits in its plane's backlog, with whatever follows it on that plane. ``receive`` reads what is
waiting on a socket into preallocated slots and gives each datagram's size, source address and ECN mark
(the ``IPV6_TCLASS`` control message, see :mod:`.ecn`).

Two implementations with one interface, chosen with the transport's build (:mod:`mrclab.build`) by
:func:`default`: the compiled build's `BatchedIo` is ``_batchio.c`` (``recvmmsg``, and ``sendmmsg`` for each
run of datagrams through one socket, up to ``BATCH`` per system call), the pure build's `PythonIo` the same
calls one datagram at a time through Python's socket module (it also serves any object with ``sendto`` and
``recvmsg_into``, as the tests' in-memory wire). Either way datagrams leave in the order they were handed
over: a connection sprays them over its planes' sockets in turn, and sending each socket's share at once
would put a plane's packets on the wire well after their timestamps (a connection blasting its window
back to back then saw spurious losses). An address and a source are opaque to the caller: a packed
``sockaddr_in6`` and 16 bytes, or the socket module's tuple and text; ``source_text`` reads a source.
"""
from __future__ import annotations

import errno
import mmap
import socket
from typing import Any

from .. import build
from . import ecn

BATCH = 64
"""Datagrams one receive reads at most (and one ``sendmmsg`` sends)."""
SLOT = 65536
"""Bytes per receive slot: any UDP datagram fits, so none is truncated."""
BLOCKED = (errno.EAGAIN, errno.EWOULDBLOCK)

Address = Any
"""A destination made by ``address``: what the implementation's ``send`` takes."""
Source = Any
"""A datagram's source as ``receive`` gives it, a key for the caller's table of peers."""


class PythonIo:
    """One datagram per system call, through Python's socket module. ``BATCH`` receive slots of ``SLOT`` bytes
    in one anonymous mapping are reused by every receive: a page is touched only when a datagram lands on it,
    and no datagram costs an allocation of its own."""

    name = "sendto/recvmsg"

    def __init__(self) -> None:
        self.buffer = mmap.mmap(-1, BATCH * SLOT)
        whole = memoryview(self.buffer)
        self.views = [whole[i * SLOT:(i + 1) * SLOT] for i in range(BATCH)]
        """The slots: the i-th datagram of a receive is in ``views[i]``."""
        self._into = [[view] for view in self.views]
        self._errors: dict[Any, OSError] = {}

    @staticmethod
    def address(host: str, port: int) -> Address:
        """The destination ``send`` takes for ``host`` (an IPv6 address) and ``port``."""
        return (host, port, 0, 0)

    @staticmethod
    def source_text(source: Source) -> str:
        """The IPv6 address of a datagram's source, as text."""
        return source

    @staticmethod
    def send(batch: list[tuple[Any, Address, Any]], start: int = 0) -> tuple[int, int]:
        """Send ``batch[start:]``, ``(socket, address, datagram)`` each, in order: (how many were sent, the errno of
        the one the kernel refused, 0 when all went)."""
        for i in range(start, len(batch)):
            sock, addr, datagram = batch[i]
            try:
                sock.sendto(datagram, addr)
            except BlockingIOError:
                return i - start, errno.EAGAIN
            except OSError as err:
                return i - start, err.errno or errno.EIO
        return len(batch) - start, 0

    def receive(self, sock: Any) -> list[tuple[int, Source, bool]]:
        """``(size, source, ce)`` of each datagram read, in order; empty when none was waiting. OSError when the
        socket reports an error before any datagram: an error after some is raised by the next call on that
        socket, as ``recvmmsg`` does."""
        error = self._errors.pop(sock, None)
        if error is not None:
            raise error
        got: list[tuple[int, Source, bool]] = []
        recv = sock.recvmsg_into
        congested = ecn.congestion_experienced
        ancillary = ecn.ANCILLARY_SIZE
        for into in self._into:
            try:
                size, ancdata, _flags, addr = recv(into, ancillary)
            except BlockingIOError:
                break
            except OSError as err:
                if not got:
                    raise
                self._errors[sock] = err
                break
            got.append((size, addr[0], congested(ancdata)))
        return got


class BatchedIo(PythonIo):
    """``sendmmsg`` and ``recvmmsg`` through ``_batchio.c`` (the compiled build): kernel sockets only."""

    name = "sendmmsg/recvmmsg"

    def __init__(self, native: Any) -> None:
        super().__init__()
        self._native = native
        self.address = native.address  # type: ignore[method-assign]
        self.send = native.send  # type: ignore[method-assign]

    @staticmethod
    def source_text(source: Source) -> str:
        return socket.inet_ntop(socket.AF_INET6, source)

    def receive(self, sock: Any) -> list[tuple[int, Source, bool]]:
        return self._native.recv(sock, self.buffer, SLOT, BATCH)


def _native() -> Any:
    """The C extension when the compiled build runs, else None."""
    if build.BUILD != "compiled":
        return None
    from . import _batchio  # built by setup.py beside this file
    if _batchio.BATCH != BATCH:
        raise ImportError(f"_batchio was built with BATCH {_batchio.BATCH}, this module expects {BATCH}")
    return _batchio


NATIVE = _native()


def default() -> PythonIo:
    """The I/O of the build that runs (a new one: it owns its receive slots)."""
    return BatchedIo(NATIVE) if NATIVE is not None else PythonIo()
