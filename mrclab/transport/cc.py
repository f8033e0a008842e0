"""RTT estimation and congestion control: a sender window in the spirit of UET 1.0 NSCC.

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

from ..metrics.rtt import rtt_bucket


class RttEstimator:
    """Smoothed RTT and variance (RFC 6298) plus the minimum, which stands for the base RTT, and a histogram
    of every sample (``hist``: :func:`~mrclab.metrics.rtt.rtt_bucket` -> count), for the RTT under load a run
    reports."""

    __slots__ = ("srtt", "rttvar", "min_rtt", "latest", "filtered", "hist", "_half", "_bucket", "_bucket_min",
                 "_prev_min")

    def __init__(self, filter_samples: int = 1) -> None:
        self._half = max(1, filter_samples // 2)
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rtt = float("inf")
        self.latest = 0.0
        self.filtered = 0.0  # lowest of the last filter_samples / 2 to filter_samples samples
        self.hist: dict[int, int] = {}
        self._bucket = 0
        self._bucket_min = float("inf")
        self._prev_min = float("inf")

    def update(self, sample: float) -> None:
        if sample <= 0.0:
            return  # clock skew between send and echo paths; nothing to learn
        self.latest = sample
        bucket = rtt_bucket(sample)
        self.hist[bucket] = self.hist.get(bucket, 0) + 1
        if sample < self.min_rtt:
            self.min_rtt = sample
        if sample < self._bucket_min:
            self._bucket_min = sample
        self._bucket += 1
        if self._bucket >= self._half:
            self._prev_min = self._bucket_min
            self._bucket_min = float("inf")
            self._bucket = 0
        self.filtered = self._bucket_min if self._bucket_min < self._prev_min else self._prev_min
        if self.srtt is None:
            self.srtt = sample
            self.rttvar = sample / 2
        else:
            self.rttvar += 0.25 * (abs(self.srtt - sample) - self.rttvar)
            self.srtt += 0.125 * (sample - self.srtt)

    def rto(self, rto_min: float, rto_initial: float) -> float:
        if self.srtt is None:
            return rto_initial
        return max(rto_min, self.srtt + 4 * self.rttvar)


class WindowCC:
    """The congestion window, in bytes; never below one MSS."""

    __slots__ = ("cwnd", "_mss", "_max", "_base_rtt", "_target", "_ai", "_fi", "_md", "_trim_md", "_hold_until")

    def __init__(self, mss: int, *, init_window: int, max_window: int, base_rtt: float, target_delay: float,
                 ai: float, fi: float, md: float, trim_md: float) -> None:
        self._mss = mss
        self._base_rtt = base_rtt
        self._max = max(max_window, mss)
        self.cwnd = float(min(max(init_window, mss), self._max))
        self._target = target_delay
        self._ai = ai
        self._fi = fi
        self._md = md
        self._trim_md = trim_md
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
