"""The RTT a sender measures: smoothed, its variance, the minimum (the base RTT) and a histogram."""
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
