"""NSCC: a sender window in the spirit of UET 1.0 NSCC, MRC's congestion control.

NSCC steers one window per connection (bytes in flight, over every path at once) by
queueing delay: RTT minus the base RTT (configured, or else the lowest RTT seen; a
flow that starts into a standing queue never sees the true base, so configure it
where fairness between late and early flows matters). Below the target delay the window
grows, fast when the queue is empty (proportional to the headroom) and by
``cc_ai`` MSS per RTT always (the additive part is what lets competing flows
converge to a fair share). Above the target it shrinks in proportion to the excess,
at most by ``cc_md`` and at most once per RTT. A trim or ECN echo means a queue
overflowed or nearly did: the window is cut by ``cc_trim_md``, also once per RTT, so
an incast burst that trims many packets in one round costs one decrease, not many.
Losses are not congestion here (trimming turns overflow into NACKs): they retire a
path and leave the window alone.

The delay the window reacts to can be the lowest of the last ``cc_delay_filter`` RTT
samples rather than the latest (two buckets of half that): a queue delays every packet
behind it, while software-switch jitter delays only some, so the windowed minimum sees
the queue and not the jitter. In :mod:`.sim` with 3 ms of in-order jitter per link a
ring of flows moves ~4x more with a 16-sample filter; but the filter is as slow to see
a queue building, and a 5-to-1 incast then trims most of its packets (514 of 772 against
30 without), so it is off (1: the latest sample) by default.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..rtt import RttEstimator
from .base import CongestionControl

if TYPE_CHECKING:  # a type only: config imports this package to check cc_algorithm
    from ..config import TransportConfig


class Nscc(CongestionControl):
    """The congestion window, in bytes; never below one MSS."""

    __slots__ = ("cwnd", "rate", "_mss", "_max", "_base_rtt", "_target", "_ai", "_fi", "_md", "_trim_md", "_hold_until")

    def __init__(self, config: TransportConfig) -> None:
        mss = self._mss = config.mss
        self._base_rtt = config.cc_base_rtt
        self._max = max(config.cc_max_window, mss)
        self.cwnd = float(min(max(config.cc_init_window, mss), self._max))
        self.rate = 1.0
        self._target = config.cc_target_delay
        self._ai = config.cc_ai
        self._fi = config.cc_fi
        self._md = config.cc_md
        self._trim_md = config.cc_trim_md
        self._hold_until = 0.0

    def on_ack(self, acked: int, rtt: RttEstimator, now: float) -> None:
        """``acked`` bytes newly acknowledged; ``rtt.latest`` is the delay sample they brought."""
        base = rtt.min_rtt if rtt.min_rtt < self._base_rtt else self._base_rtt
        queueing = rtt.filtered - base
        target = self._target
        cwnd = self.cwnd
        if queueing > target and now >= self._hold_until:
            self._decrease(min(self._md, (queueing - target) / queueing), now, rtt)
            return
        growth = self._ai * self._mss / cwnd
        if queueing < target:
            growth += self._fi * (target - queueing) / target
        cwnd += acked * growth
        self.cwnd = cwnd if cwnd < self._max else self._max

    def on_congestion(self, now: float, rtt: RttEstimator) -> None:
        """A trim NACK or an ECN echo."""
        if now >= self._hold_until:
            self._decrease(self._trim_md, now, rtt)

    def _decrease(self, fraction: float, now: float, rtt: RttEstimator) -> None:
        cwnd = self.cwnd * (1.0 - fraction)
        self.cwnd = cwnd if cwnd > self._mss else float(self._mss)
        self._hold_until = now + (rtt.srtt or 0.0)
