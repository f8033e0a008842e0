"""What a congestion control is to a sender: a window and a rate it steers from acknowledgements and congestion
signals (trim NACKs, ECN echoes)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..rtt import RttEstimator

if TYPE_CHECKING:  # a type only: config imports this package to check cc_algorithm
    from ..config import TransportConfig


class CongestionControl:
    """One connection's congestion state. ``cwnd``: bytes the sender may have in flight. ``rate``: the fraction of
    the connection's pacing rate (its share of the NIC) it may send at, 1.0 when the control steers the window
    only."""

    __slots__ = ()
    cwnd: float
    rate: float

    def __init__(self, config: TransportConfig) -> None:
        raise NotImplementedError

    def on_ack(self, acked: int, rtt: RttEstimator, now: float) -> None:
        """``acked`` bytes newly acknowledged; ``rtt.latest`` is the delay sample they brought."""
        raise NotImplementedError

    def on_congestion(self, now: float, rtt: RttEstimator) -> None:
        """A trim NACK or an ECN echo (RoCE's CNP)."""
        raise NotImplementedError
