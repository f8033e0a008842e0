"""Entropy values (EVs): which paths a connection sprays over, and what it believes of each.

States follow the OCP MRC API (``mrc_ctl.h``):

* ``UNKNOWN`` - in use, nothing heard back yet;
* ``GOOD`` - a packet sent on it was acknowledged;
* ``SKIP`` - transient: a trim NACK or ECN echo said the path is congested, so it sits
  out its next turn, and the rest of the time the owner gives (``skip_until``: an ECN echo
  means "avoid that EV for a while"), and is GOOD again. Congestion is never a reason to
  retire a path.
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
until its path heals. A path that comes back with no slot of its plane takes one back, from
the path that holds the most (its EV waits in reserve): a path with no slot carries no data,
so a failure on it would go unseen until another path's retirement handed it slots again.
Retirement never takes the number of usable slots below
``ev_min_active``: EVs of a bad path that would break that floor stay in service
(``Counters.loss_at_min_active`` counts the losses that could not retire their EV).

**Planes whose NIC is down.** The owner says which planes have no NIC link
(:meth:`EvSet.set_planes_down`: this host's own NICs, and the far end's as its SACKs report
them). Their EVs keep their states and slots but are passed over, so spraying spreads over the
remaining planes' slots at once, without a loss or a retirement; a loss on such a plane
condemns no path (the NIC, not the path, failed), and its bad paths are not probed until the
plane is back.

A path the owner *holds* (:meth:`EvSet.hold`: a packet on it is overdue, not yet declared
lost) is passed over like a skipped EV, turn after turn, until :meth:`EvSet.release`; it
keeps its state and its slots. When every usable slot is held, the next one is used anyway.

The owner names its transmissions by transmit sequence (``xseq``, rising). A path
remembers the one whose loss condemned it (``Path.cause``) and the latest one it
delivered (``Path.heard``); when the condemning loss turns out late (:meth:`EvSet.late`)
and the path delivered a packet sent after it, the path comes back at once
(:meth:`EvSet.undo`), without probing.

Every EV state change is a row of ``TRANSITIONS``, applied in one place (``EvSet._apply``)
by the operations that name it; ``USABLE`` is the predicate "carries data". The owner reads
EVs and paths and changes them only through :class:`EvSet`. SKIP transitions (``congested``
and ``turn``) are not reported as events: under congestion they would flood the log, and
they carry no news about paths (``Counters.skips`` counts them).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from enum import IntEnum
from typing import NamedTuple

from .counters import Counters


class EvState(IntEnum):
    UNKNOWN = 0
    GOOD = 1
    SKIP = 2
    ASSUMED_BAD = 3
    DENIED = 4


UNKNOWN, GOOD, SKIP, ASSUMED_BAD, DENIED = EvState

USABLE = frozenset({UNKNOWN, GOOD, SKIP})
"""The states of an EV that carries data (a SKIP one after sitting out its turn)."""

TRANSITIONS: dict[str, dict[EvState, EvState]] = {
    "delivered": {UNKNOWN: GOOD},  # a packet sent on it was acknowledged
    "congested": {UNKNOWN: SKIP, GOOD: SKIP},  # a trim NACK or ECN echo: sit out a turn and a while
    "turn": {SKIP: GOOD},  # the turn and the while sat out
    "retire": {UNKNOWN: ASSUMED_BAD, GOOD: ASSUMED_BAD, SKIP: ASSUMED_BAD},  # its path lost a packet
    "revive": {ASSUMED_BAD: GOOD},  # its path answered the probes, or the loss that condemned it was none
    "deny": {UNKNOWN: DENIED, GOOD: DENIED, SKIP: DENIED, ASSUMED_BAD: DENIED},  # the operator excludes it
    "allow": {DENIED: UNKNOWN},  # the operator lets it back, onto a path not known bad
    "allow_bad": {DENIED: ASSUMED_BAD},  # ... onto a path still bad: it waits for the path's probes
}
"""Operation -> {state it applies to: the state it leads to}; from any other state the operation changes nothing."""

_QUIET = frozenset({"congested", "turn"})  # not reported as events (see module doc)
BEFORE_ALL = -1
"""``Path.cause`` and ``Path.heard`` when they name no transmission: below every xseq."""


class EvStateChanged(NamedTuple):
    ev: int
    old: EvState
    new: EvState
    now: float


class Path:
    """One path (every EV steering the same way), what the owner learned of it, and its probing episode while bad.

    Its fields are read by the owner and written by :class:`EvSet` alone.
    """

    __slots__ = ("key", "plane", "evs", "bad", "probe_seq", "probe_last", "probe_ok", "next_probe", "probe_gap",
                 "probe_cursor", "cause", "cause_delivered", "heard", "rtt", "held")

    def __init__(self, key: Hashable, plane: int) -> None:
        self.key = key
        self.plane = plane
        self.evs: list[Ev] = []
        self.bad = False
        self.probe_seq = 0  # next probe sequence number
        self.probe_last = -1  # highest probe seq answered, or the seq before this episode's first probe
        self.probe_ok = 0  # consecutive probe replies in this episode
        self.next_probe = 0.0
        self.probe_gap = 0.0  # the current interval between probes (backs off while unanswered)
        self.probe_cursor = 0  # probes rotate over the path's EVs (they all steer the same way)
        self.cause = BEFORE_ALL  # the xseq whose loss condemned it
        self.cause_delivered = False  # that transmission was delivered after all (it was late, not lost)
        self.heard = BEFORE_ALL  # the latest xseq on this path that was delivered
        self.rtt = 0.0  # the latest RTT samples on this path (fast up, slow down)
        self.held: int | None = None  # the overdue xseq that keeps new data off this path

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
    """One entropy value and what the sender knows about its path (written by :class:`EvSet` alone)."""

    __slots__ = ("ev", "plane", "path", "state", "slot", "last_send", "sent", "skip_until")

    def __init__(self, ev: int, plane: int, path: Path) -> None:
        self.ev = ev
        self.plane = plane
        self.path = path
        self.state = UNKNOWN
        self.slot: int | None = None  # index in the active slots, None when in reserve or retired
        self.last_send: float | None = None  # last DATA packet put on this path
        self.sent = 0  # DATA packets put on this path
        self.skip_until = 0.0  # a SKIP EV sits out its turns until then (and one turn at least)


def latest_delay(previous: float, sample: float) -> float:
    """A path's or plane's latest delay after ``sample``: up at once, down a quarter of the way (a sample
    below the last may be a lucky packet; one above it is what the next packet can expect)."""
    return sample if sample > previous else previous + 0.25 * (sample - previous)


class EvSet:
    """The spraying order and the state machine of every EV (and path) of one connection."""

    def __init__(self, evs: list[int], ev_plane: Callable[[int], int], *, count: int, min_active: int,
                 probe_interval: float, probe_interval_max: float, probe_successes: int, single_path: bool,
                 events: list, counters: Counters, ev_path: Callable[[int], Hashable] | None = None,
                 first_slot: int = 0) -> None:
        """``first_slot``: where spraying starts (any integer, taken modulo the slots): connections that start at
        different slots do not all put their first packets on the same paths."""
        if not evs:
            raise ValueError("a connection needs at least one EV")
        if len(set(evs)) != len(evs):
            raise ValueError("EVs of a connection must be distinct")
        self.path_aware = ev_path is not None
        self._paths: dict[Hashable, Path] = {}
        self._by_ev: dict[int, Ev] = {}
        for ev in evs:
            key = ev_path(ev) if ev_path is not None else ev
            plane = ev_plane(ev)
            path = self._paths.get(key)
            if path is None:
                path = self._paths[key] = Path(key, plane)
            e = self._by_ev[ev] = Ev(ev, plane, path)
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
        self.plane_rtt: dict[int, float] = {}  # plane -> its latest delay (see latest_delay)
        self.probing: list[Path] = []  # bad paths, probed (the owner reads it, to skip asking for probes)
        self._cursor = first_slot % len(self.slots)
        self.planes_down = 0  # bitmap: planes whose NIC (ours or the far end's) is down
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

    def __iter__(self) -> Iterator[Ev]:
        return iter(self._by_ev.values())

    # -- spraying -----------------------------------------------------------------------------------

    def send_on(self, now: float, avoid: Ev | None = None) -> Ev | None:
        """The EV the next data packet goes on, counted as sent on at ``now``: the next usable slot after the
        cursor.

        ``avoid`` (the EV a lost packet went on) is passed over, and so is every EV of its path,
        when another slot is usable; so are held paths (a packet on them is overdue). EVs of planes
        whose NIC is down are never used. None when no slot is usable (every EV denied, bad at
        ``ev_min_active``, or on a plane that is down).
        """
        slots = self.slots
        n = len(slots)
        cursor = self._cursor
        fallback = None
        avoid_path = avoid.path if avoid is not None else None
        down = self.planes_down
        for lap in range(2 * n):  # the second lap takes SKIP EVs whose while is not over, rather than none
            e = slots[cursor]
            cursor = cursor + 1 if cursor + 1 < n else 0
            if down and down >> e.plane & 1:
                continue
            state = e.state
            if state == SKIP:
                if lap < n:
                    if now >= e.skip_until:
                        self._apply(e, "turn", now)  # sits out this turn, then is GOOD again
                    continue
                self._apply(e, "turn", now)
                state = GOOD
            if state in USABLE:
                if (e.path is avoid_path or e.path.held is not None) and n > 1:
                    if fallback is None or e is avoid:
                        fallback = e
                    continue
                self._cursor = cursor
                e.last_send = now
                e.sent += 1
                return e
        self._cursor = cursor
        if fallback is not None:
            fallback.last_send = now
            fallback.sent += 1
        return fallback

    def usable_slots(self) -> int:
        return sum(1 for e in self.slots if e.state in USABLE)

    # -- what the owner learns of EVs and paths ------------------------------------------------------

    def delivered(self, e: Ev, now: float) -> None:
        """A packet sent on ``e`` (or the SACK of one, which echoes it) arrived."""
        self._apply(e, "delivered", now)

    def rtt_sample(self, e: Ev, sample: float) -> None:
        """An RTT sample of a packet sent on ``e``: the latest delay of its plane and path."""
        plane = e.plane
        self.plane_rtt[plane] = latest_delay(self.plane_rtt.get(plane, 0.0), sample)
        e.path.rtt = latest_delay(e.path.rtt, sample)

    def acknowledged(self, e: Ev, xseq: int, now: float, *, arrived: bool) -> None:
        """Transmission ``xseq``, sent on ``e``, was acknowledged: the EV delivered, and the transmission holds
        its path no more. ``arrived``: this very copy is known to have arrived (not a copy of it resent): the
        path is heard from, and comes back if the loss that condemned it was late and sent before ``xseq``."""
        if e.state == UNKNOWN:
            self._apply(e, "delivered", now)
        path = e.path
        if path.held == xseq:
            path.held = None
        if arrived and xseq > path.heard:
            path.heard = xseq
            if path.cause_delivered:
                self.undo(path, now)

    def late(self, path: Path, xseq: int, now: float) -> None:
        """Transmission ``xseq`` on ``path``, declared lost, was delivered after all: the path is heard from, and
        if that loss condemned it, it comes back once it delivered a later transmission."""
        if xseq > path.heard:
            path.heard = xseq
        if path.bad and path.cause == xseq:
            path.cause_delivered = True
        if path.cause_delivered:
            self.undo(path, now)

    def congested(self, e: Ev, now: float, *, until: float = 0.0) -> bool:
        """A trim NACK or ECN echo about this EV's path: it sits out its next turn, and its turns until ``until``.
        True when the EV skips because of it (an EV already skipping keeps the later of the two ends)."""
        if self._single_path:
            return False
        if e.state == SKIP:
            if until > e.skip_until:
                e.skip_until = until
            return False
        if not self._apply(e, "congested", now):
            return False
        e.skip_until = until
        self._counters.skips += 1
        return True

    def hold(self, path: Path, xseq: int) -> None:
        """Transmission ``xseq`` on ``path`` is overdue: no new data on the path until it is released (one hold
        at a time)."""
        if path.held is None:
            path.held = xseq
            self._counters.paths_held += 1

    def release(self, path: Path, xseq: int) -> None:
        """Transmission ``xseq`` was acknowledged or declared lost: if it held ``path``, the hold ends."""
        if path.held == xseq:
            path.held = None

    def release_all(self) -> None:
        for path in self._paths.values():
            path.held = None

    def lost(self, e: Ev, xseq: int, now: float) -> None:
        """Transmission ``xseq``, sent on ``e``, was lost without a trim: condemn its path (its EVs, as far
        as ``ev_min_active`` allows); a path not known bad before remembers ``xseq`` as the cause."""
        if self._single_path or e.state == DENIED or self.planes_down >> e.plane & 1:
            return  # a plane whose NIC is down loses packets without any path being at fault
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
            if other is not e and other.state in USABLE and self._retire(other, now):
                retired = True
        if not newly:
            return
        if not retired:  # ev_min_active kept every EV of it in service: nothing to probe back
            path.bad = False
            return
        path.cause = xseq
        path.probe_last = path.probe_seq - 1
        path.probe_ok = 0
        path.probe_gap = self._probe_interval
        path.next_probe = now + path.probe_gap
        self.probing.append(path)
        self._counters.paths_retired += 1

    def undo(self, path: Path, now: float) -> None:
        """The loss that condemned ``path`` was none: restore it without probing, if it delivered a packet sent
        after that one."""
        if path.bad and path.heard > path.cause:
            self._counters.retirements_undone += 1
            self._restore(path, now)

    def set_planes_down(self, planes: int) -> None:
        """The planes whose NIC is down now (a bitmap, this host's and the far end's together)."""
        self.planes_down = planes

    def reply_ev(self, ev: int) -> int:
        """The EV to answer a packet that came on ``ev``: itself, unless its plane's NIC is down at either end;
        then the first EV of a plane that is up (``ev`` when none is)."""
        down = self.planes_down
        e = self._by_ev.get(ev)
        if not down or e is None or not down >> e.plane & 1:
            return ev
        return next((s.ev for s in self.slots if not down >> s.plane & 1), ev)

    # -- the operator --------------------------------------------------------------------------------

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
        self._apply(e, "deny", now)
        path = e.path
        if path.bad and all(x.state == DENIED for x in path.evs):
            self._end_episode(path)  # nothing left to probe it with

    def allow(self, ev: int, now: float) -> None:
        e = self._by_ev[ev]
        if e.state != DENIED:
            return
        if e.path.bad:
            self._apply(e, "allow_bad", now)
        else:
            self._apply(e, "allow", now)
            self._return(e)

    # -- probing -------------------------------------------------------------------------------------

    def bad_paths(self) -> list[Hashable]:
        return [p.key for p in self.probing]

    def one_ev_per_path(self) -> list[Ev]:
        """An EV on each path (not denied), for a probe down every path."""
        return [e for path in self._paths.values() if (e := path.probe_ev()) is not None]

    def next_probe_at(self) -> float | None:
        down = self.planes_down
        return min((p.next_probe for p in self.probing if not down >> p.plane & 1), default=None)

    def probes_due(self, now: float) -> list[tuple[Ev, int]]:
        """(EV, probe seq) for every bad path whose probe is due; each path is rescheduled one interval on. A path
        of a plane whose NIC is down waits, unprobed, until the plane is back."""
        due = []
        down = self.planes_down
        for path in self.probing:
            if path.next_probe <= now and not down >> path.plane & 1:
                path.next_probe = now + path.probe_gap
                path.probe_gap = min(path.probe_gap * 2, self._probe_interval_max)
                e = path.probe_ev()
                if e is not None:
                    due.append((e, path.probe_seq))
                    path.probe_seq += 1
        return due

    def probe_reply(self, e: Ev, seq: int, now: float) -> None:
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

    # -- internals -----------------------------------------------------------------------------------

    def _apply(self, e: Ev, operation: str, now: float) -> bool:
        """Make the ``TRANSITIONS`` row ``operation`` on ``e``; False when it does not apply to its state."""
        new = TRANSITIONS[operation].get(e.state)
        if new is None:
            return False
        old = e.state
        e.state = new
        if operation not in _QUIET:
            self._events.append(EvStateChanged(e.ev, old, new, now))
        return True

    def _restore(self, path: Path, now: float) -> None:
        self._end_episode(path)
        for x in path.evs:
            if self._apply(x, "revive", now):
                self._counters.ev_restored += 1
                self._return(x)

    def _retire(self, e: Ev, now: float) -> bool:
        """Take one EV out of service (its path is bad); False when ``ev_min_active`` forbids it."""
        if e.slot is not None:
            spare = self._take_spare(e.plane)
            if spare is not None:
                self._move_slot(e, spare)
            elif self.usable_slots() <= self._min_active:
                return False
        else:
            self._drop_from_reserve(e)
        self._apply(e, "retire", now)
        self._counters.ev_retired += 1
        return True

    def _end_episode(self, path: Path) -> None:
        path.bad = False
        path.cause = BEFORE_ALL
        path.cause_delivered = False
        if path in self.probing:
            self.probing.remove(path)

    def _return(self, e: Ev) -> None:
        """A healed or re-allowed EV takes back a slot of its plane held by an unusable EV; else, when its path has
        no slot left, one from the path of its plane with the most (that EV waits in reserve instead); else it
        waits in reserve. Left without a slot, a path that came back would carry no data until another path's
        retirement freed one, and a failure on it meanwhile would go unnoticed until then (a cut avoided after
        0.6 s instead of tens of ms); one slot is enough to see it, and leaves the rest of the split (ECN's
        skips, the retirements) as it is."""
        if e.slot is not None:
            return
        plane = e.plane
        held: dict[Path, int] = {}
        for taken in self.slots:
            if taken.plane != plane:
                continue
            if taken.state not in USABLE:
                self._move_slot(taken, e)
                return
            held[taken.path] = held.get(taken.path, 0) + 1
        reserve = self._reserve.setdefault(plane, deque())
        crowded = max(held, key=held.__getitem__, default=None)
        if crowded is not None and e.path not in held and held[crowded] > 1:
            taken = next(x for x in self.slots if x.path is crowded)
            self._move_slot(taken, e)
            reserve.append(taken)
            return
        reserve.append(e)

    def _take_spare(self, plane: int) -> Ev | None:
        """A reserve EV of ``plane`` on a path not known bad (reserve EVs of bad paths stay put)."""
        reserve = self._reserve.get(plane)
        if not reserve:
            return None
        for e in reserve:
            if e.state in USABLE and not e.path.bad:
                reserve.remove(e)
                return e
        return None

    def _drop_from_reserve(self, e: Ev) -> None:
        reserve = self._reserve.get(e.plane)
        if reserve and e in reserve:
            reserve.remove(e)

    def _move_slot(self, old: Ev, new: Ev) -> None:
        slot = old.slot
        if slot is None:
            raise ValueError(f"EV {old.ev} holds no slot to hand over")
        new.slot = slot
        self.slots[slot] = new
        old.slot = None
