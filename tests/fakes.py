"""Test doubles shared by the agent tests."""
import socket

from mrclab.agent.ecn import ECT0


class InboxSocket:
    """The receiving half of a fake non-blocking UDP socket: datagrams wait in `inbox` as (datagram, source)
    or (datagram, source, traffic class), ECT(0) when not given."""

    inbox: list

    def recvmsg(self, _size, _ancsize, flags=0):
        if not self.inbox or flags & socket.MSG_ERRQUEUE:  # no error queue: nothing to drain
            raise BlockingIOError
        datagram, source, *tclass = self.inbox.pop(0)
        ancdata = [(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, (tclass[0] if tclass else ECT0).to_bytes(4, "little"))]
        return datagram, ancdata, 0, source

    def recvmsg_into(self, buffers, _ancsize):
        datagram, ancdata, flags, source = self.recvmsg(0, 0)
        buffers[0][:len(datagram)] = datagram
        return len(datagram), ancdata, flags, source

    def close(self):
        pass
