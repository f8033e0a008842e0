"""Entropy values (EVs): which paths a connection sprays over, and what it believes of each.

States follow the OCP MRC API (``mrc_ctl.h``):

* ``UNKNOWN`` - in use, nothing heard back yet;
* ``GOOD`` - a packet sent on it was acknowledged;
* ``SKIP`` - transient: a trim NACK or ECN echo said the path is congested, so it sits
  out its next turn and is GOOD again. Congestion is never a reason to retire a path.
* ``ASSUMED_BAD`` - its path lost a packet without a trim: loss means failure, so the
  EV gets no more data until probes of its path succeed ``probe_successes`` times in a row;
* ``DENIED`` - excluded by the operator (:meth:`EvSet.deny`) until :meth:`EvSet.allow`.

**Paths.** With SRv6 source routing the sender writes the whole path, so it knows which
EVs share one: ``ev_path(ev)`` (for a connection, whose ends are fixed, ``(plane, spine)``
is the whole path). A loss on one EV then condemns its *path*: every EV on it turns
ASSUMED_BAD at once (in slots and in reserve alike), and the path, not each EV, is
probed - one probe per bad path per interval, sent on one of its EVs; after
``probe_successes`` consecutive replies the whole path comes back. The interval starts
at ``probe_interval`` and doubles with every probe that goes unanswered, up to
``probe_interval_max``: a dead path costs little, while one that answers is probed back
at the fast interval. Without the back-off, a lab with many connections each probing
many paths every few ms spends its CPU on probes when it is already overloaded, which
delays replies and condemns more paths: a feedback loop seen on the real fabric. With 64 EVs over 4
paths this is the difference between one lost packet and sixteen before a dead path is
avoided, and between one probe per interval and sixteen. Without ``ev_path`` (ECMP,
where the fabric hashes the EV to a path the sender cannot see) every EV is its own
path: the per-EV behaviour of the MRC API.

The connection holds ``ev_count`` active *slots*, spread round-robin over planes so
that consecutive packets walk the planes; the remaining EVs it was given wait in a
per-plane reserve. A retired EV hands its slot to a reserve EV of the same plane on a
path not known bad, so planes stay balanced; with none left it keeps its slot, skipped,
until its path heals. Retirement never takes the number of usable slots below
``ev_min_active``: EVs of a bad path that would break that floor stay in service
(``Counters.loss_at_min_active`` counts the losses that could not retire their EV).

A path the owner *holds* (``Path.held``: a packet on it is overdue, not yet declared lost)
is passed over like a skipped EV, turn after turn, until the hold ends; it keeps its
state and its slots. When every usable slot is held, the next one is used anyway.

SKIP transitions are not reported as events: under congestion they would flood the
log, and they carry no news about paths (``Counters.skips`` counts them).
"""
from __future__ import annotations

from collections import deque
from enum import IntEnum
from typing import Callable, Hashable, NamedTuple


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


class Path:
    """One path (every EV steering the same way) and its probing episode while it is bad."""

    __slots__ = ("key", "evs", "bad", "probe_seq", "probe_last", "probe_ok", "next_probe", "probe_gap",
                 "probe_cursor", "cause", "cause_delivered", "heard", "rtt", "held")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.evs: list[Ev] = []
        self.bad = False
        self.probe_seq = 0  # next probe sequence number
        self.probe_last = -1  # highest probe seq answered, or the seq before this episode's first probe
        self.probe_ok = 0  # consecutive probe replies in this episode
        self.next_probe = 0.0
        self.probe_gap = 0.0  # the current interval between probes (backs off while unanswered)
        self.probe_cursor = 0  # probes rotate over the path's EVs (they all steer the same way)
        self.cause: object = None  # the owner's record of the loss that condemned it
        self.cause_delivered = False  # the owner learned that loss was none (the packet was late)
        self.heard = -1  # the owner's latest transmission on this path that was delivered (its sequence)
        self.rtt = 0.0  # the owner's latest RTT samples on this path
        self.held: object = None  # the owner's overdue transmission that keeps new data off this path

    def probe_ev(self) -> Ev | None:
        """The EV the next probe of this path goes on: the next one not denied, None if all are."""
        evs = self.evs
        for i in range(len(evs)):
            e = evs[(self.probe_cursor + i) % len(evs)]
            if e.state != DENIED:
                self.probe_cursor = (self.probe_cursor + i + 1) % len(evs)
                return e
        return None


class Ev:
    """One entropy value and what the sender knows about its path."""

    __slots__ = ("ev", "plane", "path", "state", "slot", "last_send", "sent")

    def __init__(self, ev: int, plane: int, path: Path) -> None:
        self.ev = ev
        self.plane = plane
        self.path = path
        self.state = UNKNOWN
        self.slot: int | None = None  # index in the active slots, None when in reserve or retired
        self.last_send: float | None = None  # last DATA packet put on this path
        self.sent = 0  # DATA packets put on this path


class EvSet:
    """The spraying order and the state machine of every EV (and path) of one connection."""

    def __init__(self, evs: list[int], ev_plane: Callable[[int], int], count: int, min_active: int,
                 probe_interval: float, probe_interval_max: float, probe_successes: int, single_path: bool,
                 events: list, counters, ev_path: Callable[[int], Hashable] | None = None) -> None:
        if not evs:
            raise ValueError("a connection needs at least one EV")
        if len(set(evs)) != len(evs):
            raise ValueError("EVs of a connection must be distinct")
        self.path_aware = ev_path is not None
        self._paths: dict[Hashable, Path] = {}
        self._by_ev: dict[int, Ev] = {}
        for ev in evs:
            key = ev_path(ev) if ev_path is not None else ev
            path = self._paths.get(key)
            if path is None:
                path = self._paths[key] = Path(key)
            e = self._by_ev[ev] = Ev(ev, ev_plane(ev), path)
            path.evs.append(e)
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
        self._probing: list[Path] = []  # bad paths, probed
        self._cursor = 0
        self._min_active = min_active
        self._probe_interval = probe_interval
        self._probe_interval_max = probe_interval_max
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

        ``avoid`` (the EV a lost packet went on) is passed over, and so is every EV of its path,
        when another slot is usable; so are held paths (a packet on them is overdue). None when
        no slot is usable (every EV denied or bad at ``ev_min_active``).
        """
        slots = self.slots
        n = len(slots)
        cursor = self._cursor
        fallback = None
        avoid_path = avoid.path if avoid is not None else None
        for _ in range(2 * n):  # a second lap finds EVs whose SKIP the first lap consumed
            e = slots[cursor]
            cursor = cursor + 1 if cursor + 1 < n else 0
            state = e.state
            if state == SKIP:
                e.state = GOOD
            elif state <= GOOD:
                if (e.path is avoid_path or e.path.held is not None) and n > 1:
                    if fallback is None or e is avoid:
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

    def on_loss(self, e: Ev, now: float) -> bool:
        """A packet sent on ``e`` was lost without a trim: condemn its path (its EVs, as far as
        ``ev_min_active`` allows). True when the path was not known bad before."""
        if self._single_path or e.state == DENIED:
            return False
        path = e.path
        newly = not path.bad
        path.bad = True  # first, so that no spare is taken from this very path
        retired = False
        if e.state != ASSUMED_BAD:
            if self._retire(e, now):
                retired = True
            else:
                self._counters.loss_at_min_active += 1
        for other in path.evs:
            if other is not e and other.state <= SKIP and self._retire(other, now):
                retired = True
        if not newly:
            return False
        if not retired:  # ev_min_active kept every EV of it in service: nothing to probe back
            path.bad = False
            return False
        path.probe_last = path.probe_seq - 1
        path.probe_ok = 0
        path.probe_gap = self._probe_interval
        path.next_probe = now + path.probe_gap
        self._probing.append(path)
        self._counters.paths_retired += 1
        return True

    def deny(self, ev: int, now: float) -> None:
        """Administrative exclusion: no data, no probes, until :meth:`allow`."""
        e = self._by_ev[ev]
        if e.state == DENIED:
            return
        if e.slot is not None:
            spare = self._take_spare(e.plane)
            if spare is not None:
                self._move_slot(e, spare)
        else:
            self._drop_from_reserve(e)
        self._set(e, DENIED, now)
        path = e.path
        if path.bad and all(x.state == DENIED for x in path.evs):
            self._end_episode(path)  # nothing left to probe it with

    def allow(self, ev: int, now: float) -> None:
        e = self._by_ev[ev]
        if e.state != DENIED:
            return
        path = e.path
        if path.bad:
            self._set(e, ASSUMED_BAD, now)
        else:
            self._set(e, UNKNOWN, now)
            self._return(e)

    def usable(self) -> int:
        return sum(1 for e in self.slots if e.state <= SKIP)

    def bad_paths(self) -> list[Hashable]:
        return [p.key for p in self._probing]

    def one_ev_per_path(self) -> list[Ev]:
        """An EV on each path (not denied), for a probe down every path."""
        return [e for e in (path.probe_ev() for path in self._paths.values()) if e is not None]

    def next_probe_at(self) -> float | None:
        return min((p.next_probe for p in self._probing), default=None)

    def probes_due(self, now: float) -> list[tuple[Ev, int]]:
        """(EV, probe seq) for every bad path whose probe is due; each path is rescheduled one interval on."""
        due = []
        for path in self._probing:
            if path.next_probe <= now:
                path.next_probe = now + path.probe_gap
                path.probe_gap = min(path.probe_gap * 2, self._probe_interval_max)
                e = path.probe_ev()
                if e is not None:
                    due.append((e, path.probe_seq))
                    path.probe_seq += 1
        return due

    def on_probe_reply(self, e: Ev, seq: int, now: float) -> None:
        path = e.path
        if not path.bad or seq <= path.probe_last or seq >= path.probe_seq:
            return  # stale, from an episode that is over, or never sent
        path.probe_ok = path.probe_ok + 1 if seq == path.probe_last + 1 else 1  # a gap is a lost probe
        path.probe_last = seq
        if path.probe_gap > self._probe_interval:  # it answers: probe it back at the fast pace
            path.probe_gap = self._probe_interval
            path.next_probe = min(path.next_probe, now + self._probe_interval)
        if path.probe_ok >= self._probe_successes:
            self._counters.paths_restored += 1
            self._restore(path, now)

    def undo(self, path: Path, now: float) -> None:
        """The loss that condemned ``path`` was no loss and the path delivered since: restore it without probing."""
        if path.bad:
            self._counters.retirements_undone += 1
            self._restore(path, now)

    def _restore(self, path: Path, now: float) -> None:
        self._end_episode(path)
        for x in path.evs:
            if x.state == ASSUMED_BAD:
                self._set(x, GOOD, now)
                self._counters.ev_restored += 1
                self._return(x)

    def _retire(self, e: Ev, now: float) -> bool:
        """Take one EV out of service (its path is bad); False when ``ev_min_active`` forbids it."""
        if e.slot is not None:
            spare = self._take_spare(e.plane)
            if spare is not None:
                self._move_slot(e, spare)
            elif self.usable() <= self._min_active:
                return False
        else:
            self._drop_from_reserve(e)
        self._set(e, ASSUMED_BAD, now)
        self._counters.ev_retired += 1
        return True

    def _end_episode(self, path: Path) -> None:
        path.bad = False
        path.cause = None
        path.cause_delivered = False
        if path in self._probing:
            self._probing.remove(path)

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
        """A reserve EV of ``plane`` on a path not known bad (reserve EVs of bad paths stay put)."""
        reserve = self._reserve.get(plane)
        if not reserve:
            return None
        for e in reserve:
            if e.state <= SKIP and not e.path.bad:
                reserve.remove(e)
                return e
        return None

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
