"""Entropy values (EVs): which paths a connection sprays over, and what it believes of each.

States follow the OCP MRC API (``mrc_ctl.h``):

* ``UNKNOWN`` - in use, nothing heard back yet;
* ``GOOD`` - a packet sent on it was acknowledged;
* ``SKIP`` - transient: a trim NACK or ECN echo said the path is congested, so it sits
  out its next turn and is GOOD again. Congestion is never a reason to retire a path.
* ``ASSUMED_BAD`` - a packet sent on it was lost without a trim: loss means failure, so
  the EV gets no more data, is probed every ``probe_interval`` and comes back after
  ``probe_successes`` consecutive probe replies;
* ``DENIED`` - excluded by the operator (:meth:`EvSet.deny`) until :meth:`EvSet.allow`.

The connection holds ``ev_count`` active *slots*, spread round-robin over planes so
that consecutive packets walk the planes; the remaining EVs it was given wait in a
per-plane reserve. A retired EV hands its slot to a reserve EV of the same plane, so
planes stay balanced; with no reserve left it keeps its slot, skipped, until it heals.
Retirement never takes the number of usable slots below ``ev_min_active``.

SKIP transitions are not reported as events: under congestion they would flood the
log, and they carry no news about paths (``Counters.skips`` counts them).
"""
from __future__ import annotations

from collections import deque
from enum import IntEnum
from typing import Callable, NamedTuple


class EvState(IntEnum):
    UNKNOWN = 0
    GOOD = 1
    SKIP = 2
    ASSUMED_BAD = 3
    DENIED = 4


UNKNOWN, GOOD, SKIP, ASSUMED_BAD, DENIED = EvState


class EvStateChanged(NamedTuple):
    ev: int
    old: EvState
    new: EvState
    now: float


class Ev:
    """One entropy value and what the sender knows about its path."""

    __slots__ = ("ev", "plane", "state", "slot", "last_send", "probe_seq", "probe_last", "probe_ok", "next_probe")

    def __init__(self, ev: int, plane: int) -> None:
        self.ev = ev
        self.plane = plane
        self.state = UNKNOWN
        self.slot: int | None = None  # index in the active slots, None when in reserve or retired
        self.last_send: float | None = None  # last DATA packet put on this path
        self.probe_seq = 0  # next probe sequence number
        self.probe_last = -1  # highest probe seq answered, or the seq before this episode's first probe
        self.probe_ok = 0  # consecutive probe replies in this episode
        self.next_probe = 0.0


class EvSet:
    """The spraying order and the state machine of every EV of one connection."""

    def __init__(self, evs: list[int], ev_plane: Callable[[int], int], count: int, min_active: int,
                 probe_interval: float, probe_successes: int, single_path: bool, events: list, counters) -> None:
        if not evs:
            raise ValueError("a connection needs at least one EV")
        if len(set(evs)) != len(evs):
            raise ValueError("EVs of a connection must be distinct")
        self._by_ev = {ev: Ev(ev, ev_plane(ev)) for ev in evs}
        by_plane: dict[int, deque[Ev]] = {}
        for e in self._by_ev.values():
            by_plane.setdefault(e.plane, deque()).append(e)
        count = 1 if single_path else min(count, len(evs))
        self.slots: list[Ev] = []
        while len(self.slots) < count:  # round-robin over planes: consecutive packets change plane
            for queue in by_plane.values():
                if queue and len(self.slots) < count:
                    e = queue.popleft()
                    e.slot = len(self.slots)
                    self.slots.append(e)
        self._reserve = by_plane
        self._bad: list[Ev] = []  # ASSUMED_BAD EVs, probed
        self._cursor = 0
        self._min_active = min_active
        self._probe_interval = probe_interval
        self._probe_successes = probe_successes
        self._single_path = single_path
        self._events = events
        self._counters = counters

    def __getitem__(self, ev: int) -> Ev:
        return self._by_ev[ev]

    def get(self, ev: int) -> Ev | None:
        return self._by_ev.get(ev)

    def __iter__(self):
        return iter(self._by_ev.values())

    def next_ev(self, avoid: Ev | None = None) -> Ev | None:
        """The EV for the next data packet: the next usable slot after the cursor.

        ``avoid`` (the EV a lost packet went on) is passed over when another slot is usable.
        None when no slot is usable (every EV denied or bad at ``ev_min_active``).
        """
        slots = self.slots
        n = len(slots)
        cursor = self._cursor
        fallback = None
        for _ in range(2 * n):  # a second lap finds EVs whose SKIP the first lap consumed
            e = slots[cursor]
            cursor = cursor + 1 if cursor + 1 < n else 0
            state = e.state
            if state == SKIP:
                e.state = GOOD
            elif state <= GOOD:
                if e is avoid and n > 1:
                    fallback = e
                    continue
                self._cursor = cursor
                return e
        self._cursor = cursor
        return fallback

    def on_delivered(self, e: Ev, now: float) -> None:
        if e.state == UNKNOWN:
            self._set(e, GOOD, now)

    def on_congestion(self, e: Ev) -> None:
        """A trim NACK or ECN echo about this EV's path: skip one turn."""
        if e.state <= GOOD and not self._single_path:
            e.state = SKIP
            self._counters.skips += 1

    def on_loss(self, e: Ev, now: float) -> None:
        """A packet sent on ``e`` was lost without a trim: retire the EV unless that leaves too few."""
        if self._single_path or e.state >= ASSUMED_BAD:
            return
        if e.slot is not None:
            spare = self._take_spare(e.plane)
            if spare is not None:
                self._move_slot(e, spare)
            elif self.usable() <= self._min_active:
                self._counters.loss_at_min_active += 1
                return
        else:
            self._drop_from_reserve(e)
        self._set(e, ASSUMED_BAD, now)
        self._start_probing(e, now)
        self._counters.ev_retired += 1

    def deny(self, ev: int, now: float) -> None:
        """Administrative exclusion: no data, no probes, until :meth:`allow`."""
        e = self._by_ev[ev]
        if e.state == DENIED:
            return
        if e.state == ASSUMED_BAD:
            self._bad.remove(e)
        if e.slot is not None:
            spare = self._take_spare(e.plane)
            if spare is not None:
                self._move_slot(e, spare)
        else:
            self._drop_from_reserve(e)
        self._set(e, DENIED, now)

    def allow(self, ev: int, now: float) -> None:
        e = self._by_ev[ev]
        if e.state == DENIED:
            self._set(e, UNKNOWN, now)
            self._return(e)

    def usable(self) -> int:
        return sum(1 for e in self.slots if e.state <= SKIP)

    def next_probe_at(self) -> float | None:
        return min((e.next_probe for e in self._bad), default=None)

    def probes_due(self, now: float) -> list[Ev]:
        """ASSUMED_BAD EVs whose probe is due; each is rescheduled one interval on."""
        due = [e for e in self._bad if e.next_probe <= now]
        for e in due:
            e.next_probe = now + self._probe_interval
        return due

    def on_probe_reply(self, e: Ev, seq: int, now: float) -> None:
        if e.state != ASSUMED_BAD or seq <= e.probe_last:
            return  # stale, or from an episode that is over
        e.probe_ok = e.probe_ok + 1 if seq == e.probe_last + 1 else 1  # a gap is a lost probe
        e.probe_last = seq
        if e.probe_ok >= self._probe_successes:
            self._bad.remove(e)
            self._set(e, GOOD, now)
            self._counters.ev_restored += 1
            self._return(e)

    def _start_probing(self, e: Ev, now: float) -> None:
        e.probe_last = e.probe_seq - 1
        e.probe_ok = 0
        e.next_probe = now + self._probe_interval
        self._bad.append(e)

    def _return(self, e: Ev) -> None:
        """A healed or re-allowed EV takes back a slot of its plane held by a bad EV, else waits in reserve."""
        if e.slot is not None:
            return
        for held in self.slots:
            if held.plane == e.plane and held.state >= ASSUMED_BAD:
                self._move_slot(held, e)
                return
        self._reserve.setdefault(e.plane, deque()).append(e)

    def _take_spare(self, plane: int) -> Ev | None:
        reserve = self._reserve.get(plane)
        return reserve.popleft() if reserve else None

    def _drop_from_reserve(self, e: Ev) -> None:
        reserve = self._reserve.get(e.plane)
        if reserve and e in reserve:
            reserve.remove(e)

    def _move_slot(self, old: Ev, new: Ev) -> None:
        new.slot = old.slot
        self.slots[old.slot] = new
        old.slot = None

    def _set(self, e: Ev, state: EvState, now: float) -> None:
        old = e.state
        e.state = state
        self._events.append(EvStateChanged(e.ev, old, state, now))
