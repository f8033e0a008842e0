"""When a host's NICs put its DATA packets on the wire: the owner's model of each NIC's queue.

A sender that hands its NICs a burst (``TransportConfig.pace_ahead``) cannot date a packet by the
handing: the packet waits behind the burst's earlier ones on its NIC, and an RTT sample, a RACK
deadline or a retransmission timeout counted from the handing would read that wait as the network's.
Each NIC is a FIFO that sends ``rate`` bytes of UDP payload per second (its line rate, in the
pacer's units), as the emulated host link's shaper (HTB) does: a packet leaves when its NIC has sent
everything handed to it before, and a NIC idle for a while lets ``NIC_BURST`` bytes ahead of its rate
go at once (HTB's burst, which `mrclab.fabric.egress` gives every shaped port). One model serves every
connection of a host, since they share its NICs; DATA packets are what it counts (SACKs, NACKs and
probes are tens of bytes, and only make a packet leave a little later than dated).

Where the model errs it should err late, as an RTT sample read from it then errs long (the way an
undated wait would); it errs early (a sample too short) only while a NIC sends faster than its rate:
never on the lab's shaped host links, and only up to a burst on a cable that was cut meanwhile.

A transmission's timestamp is its departure in nanoseconds, made unique among the host's: rounded
down to a multiple of the number of planes and offset by the plane, so packets leaving two NICs at
the same moment still differ, and packets of one NIC are a serialization time apart.
"""
from __future__ import annotations

NIC_BURST = 1600
"""Bytes a shaped port lets go at once after idling (HTB's burst and cburst; tc's default, made explicit)."""


class Departures:
    def __init__(self, planes: int, rate: float) -> None:
        if planes < 1 or rate <= 0:
            raise ValueError(f"departures need at least one NIC and a positive rate, got {planes} and {rate}")
        self.planes = planes
        self._rate = rate
        self._burst = NIC_BURST / rate  # seconds of sending a NIC may bank while idle
        self._free = [float("-inf")] * planes  # when each NIC may send its next packet (its bucket not in debt)

    def depart(self, plane: int, size: int, now: float) -> float:
        """When a packet of ``size`` bytes handed to NIC ``plane`` at ``now`` goes on the wire."""
        free = self._free[plane]
        at = now if now > free else free
        banked = at - self._burst  # the bucket holds at most a burst
        self._free[plane] = (free if free > banked else banked) + size / self._rate
        return at

    def stamp(self, plane: int, at: float) -> int:
        """The timestamp (ns) of a packet leaving NIC ``plane`` at ``at``, unique among the host's."""
        planes = self.planes
        return int(at * 1e9) // planes * planes + plane
