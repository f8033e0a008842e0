"""The RTT histogram: every RTT sample a sender takes, counted in logarithmic buckets.

The transport counts its samples here (a histogram per connection costs one dictionary
increment a sample and adds up across connections and agents); the run's RTT under load
(``summary.rtt_p50_s``, ``rtt_p99_s``) and the fidelity's latency split are read off the sum.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

RTT_BUCKETS_PER_OCTAVE = 16  # buckets 4.4% wide: a quantile read off them is within 2.2% of a sample's


def rtt_bucket(sample: float) -> int:
    """The histogram bucket of an RTT sample (seconds): logarithmic, from 1 us."""
    return int(math.log2(sample * 1e6) * RTT_BUCKETS_PER_OCTAVE) if sample > 1e-6 else 0


def _middle(bucket: int) -> float:
    return 2 ** ((bucket + 0.5) / RTT_BUCKETS_PER_OCTAVE) * 1e-6


def rtt_quantile(hist: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0 to 1) of the samples ``hist`` counted, as its bucket's geometric middle; None
    for no samples. Histograms add up, so one quantile serves a whole run of agents and connections."""
    total = sum(hist.values())
    if not total:
        return None
    rank, seen = q * (total - 1), 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen > rank:
            return _middle(bucket)
    raise AssertionError("unreachable: the last bucket holds the largest rank")


def rtt_mean(hist: Mapping[int, int]) -> float | None:
    """The mean of the samples ``hist`` counted (bucket middles), None for no samples."""
    total = sum(hist.values())
    if not total:
        return None
    return sum(n * _middle(b) for b, n in hist.items()) / total
