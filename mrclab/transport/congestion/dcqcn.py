"""DCQCN (Zhu et al., SIGCOMM 2015): the rate control RoCE NICs run, as its reaction point does.

An ECN echo stands for a CNP. The first one in a period cuts the rate by alpha/2 and makes the rate before
the cut the target; alpha tracks how often periods bring a CNP (gain ``dcqcn_g``). Every period without one
the rate climbs halfway back to the target: for ``FAST_RECOVERY`` periods with the target fixed, then with
the target raised by ``dcqcn_ai`` of the line rate each period (additive increase). Time is caught up on every
call, so the control needs no timer of its own. A NIC's 55 us period against microsecond RTTs becomes
``dcqcn_period`` (1 ms) against the lab's millisecond RTTs. The window stays at ``cc_max_window``: RoCE bounds
what is outstanding by its send queue, not by a window.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..rtt import RttEstimator
from .base import CongestionControl

if TYPE_CHECKING:  # a type only: config imports this package to check cc_algorithm
    from ..config import TransportConfig

FAST_RECOVERY = 5
MIN_RATE = 0.01  # of the line rate: a rate never reaches 0
_CATCH_UP_MAX = 1000  # periods caught up at most: by then an idle connection is back at the line rate


class Dcqcn(CongestionControl):
    __slots__ = ("cwnd", "rate", "_target", "_alpha", "_period", "_g", "_ai", "_clock", "_cnp", "_stage")

    def __init__(self, config: TransportConfig) -> None:
        self.cwnd = float(max(config.cc_max_window, config.mss))
        self.rate = 1.0
        self._target = 1.0
        self._alpha = 1.0
        self._period = config.dcqcn_period
        self._g = config.dcqcn_g
        self._ai = config.dcqcn_ai
        self._clock: float | None = None  # start of the current period
        self._cnp = False  # the current period brought a CNP (and its cut)
        self._stage = 0  # periods since the last cut

    def on_ack(self, acked: int, rtt: RttEstimator, now: float) -> None:
        self._catch_up(now)

    def on_congestion(self, now: float, rtt: RttEstimator) -> None:
        self._catch_up(now)
        if self._cnp:
            return  # one cut per period
        self._cnp = True
        self._target = self.rate
        rate = self.rate * (1.0 - self._alpha / 2)
        self.rate = rate if rate > MIN_RATE else MIN_RATE
        self._stage = 0

    def _catch_up(self, now: float) -> None:
        if self._clock is None:
            self._clock = now
            return
        periods = int((now - self._clock) / self._period)
        if periods <= 0:
            return
        self._clock += periods * self._period
        g = self._g
        for _ in range(min(periods, _CATCH_UP_MAX)):
            if self._cnp:
                self._alpha = (1 - g) * self._alpha + g
                self._cnp = False
                continue
            self._alpha *= 1 - g
            self._stage += 1
            if self._stage > FAST_RECOVERY:
                self._target = min(1.0, self._target + self._ai)
            self.rate = (self.rate + self._target) / 2
