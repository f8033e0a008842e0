"""When a host's NICs put its DATA packets on the wire: the owner's model of each NIC's queue.

A sender that hands its NICs a burst (``TransportConfig.pace_ahead``) cannot date a packet by the
handing: the packet waits behind the burst's earlier ones on its NIC, and an RTT sample, a RACK
deadline or a retransmission timeout counted from the handing would read that wait as the network's.
Each NIC is a FIFO that sends ``rate`` bytes of UDP payload per second (its line rate, in the
pacer's units), as the emulated host link's shaper does: a packet leaves when its NIC has sent
everything handed to it before. One model serves every connection of a host, since they share its
NICs; DATA packets are what it counts (SACKs, NACKs and probes are tens of bytes).

A transmission's timestamp is its departure in nanoseconds, made unique among the host's: rounded
down to a multiple of the number of planes and offset by the plane, so packets leaving two NICs at
the same moment still differ, and packets of one NIC are a serialization time apart.
"""
from __future__ import annotations


class Departures:
    def __init__(self, planes: int, rate: float) -> None:
        if planes < 1 or rate <= 0:
            raise ValueError(f"departures need at least one NIC and a positive rate, got {planes} and {rate}")
        self.planes = planes
        self._rate = rate
        self._free = [0.0] * planes  # when each NIC has sent what it was handed

    def depart(self, plane: int, size: int, now: float) -> float:
        """When a packet of ``size`` bytes handed to NIC ``plane`` at ``now`` goes on the wire."""
        free = self._free[plane]
        at = now if now > free else free
        self._free[plane] = at + size / self._rate
        return at

    def stamp(self, plane: int, at: float) -> int:
        """The timestamp (ns) of a packet leaving NIC ``plane`` at ``at``, unique among the host's."""
        planes = self.planes
        return int(at * 1e9) // planes * planes + plane
