"""One MRC connection (a QP) as a sans-IO state machine, in the manner of h11 and aioquic.

The owner feeds it datagrams (:meth:`Connection.receive`) and timer expiries
(:meth:`Connection.on_timer`) with the current time, and after each of those, and
after :meth:`Connection.send_message`, takes :meth:`Connection.datagrams_to_send`:
``(ev, datagram)`` pairs, the EV naming the path (``Plan.ev_address``) to send on.
:meth:`Connection.next_timer` says when to call back. The object never reads a clock,
opens a socket or starts a thread, so the whole protocol runs deterministically in
tests and in :mod:`mrclab.transport.sim`.

A connection is full duplex and symmetric: both ends build one with the same
``conn_id`` and either may send messages; no role is needed. Each direction has its
own PSN space (the sending half is :mod:`.sender`, the receiving half :mod:`.receiver`).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from .config import TransportConfig
from .counters import Counters
from .departures import Departures
from .ev import EvSet, EvState
from .receiver import Receiver
from .sender import Sender
from .wire import Data, Nack, Probe, Sack, WireError, decode


class Connection:
    def __init__(self, conn_id: int, evs: list[int], ev_plane: Callable[[int], int], *,
                 config: TransportConfig | None = None, ev_path: Callable[[int], Hashable] | None = None,
                 first_slot: int = 0, departures: Departures | None = None) -> None:
        """``evs``: every EV this connection may use; the first ``ev_count`` (balanced over planes) are
        active, the rest are spares for retired ones. ``ev_plane``: the plane an EV steers to.
        ``ev_path``: the path an EV steers to (any hashable; EVs that share a path fail together), when the
        sender writes the path (SRv6); None when the fabric hides it (ECMP): then each EV is its own path.
        ``first_slot``: the active EV spraying starts at (modulo their number); an owner of many connections gives
        each its own, so that connections started together do not all put their first packets on one path.
        ``departures``: the owner's model of its NICs (shared by its connections), which dates each DATA packet of a
        burst by when its NIC sends it: what ``config.pace_ahead`` needs."""
        config = config or TransportConfig()
        if not 0 <= conn_id <= 0xFFFFFFFF:
            raise ValueError(f"conn_id {conn_id} does not fit in 32 bits")
        self.conn_id = conn_id
        self.config = config
        self.counters = Counters()
        self._events: list = []
        self._evs = EvSet(list(evs), ev_plane, count=config.ev_count, min_active=config.ev_min_active,
                          probe_interval=config.probe_interval, probe_interval_max=config.probe_interval_max,
                          probe_successes=config.probe_successes, single_path=config.single_path,
                          events=self._events, counters=self.counters, ev_path=ev_path,
                          first_slot=first_slot)
        self._tx = Sender(conn_id, config, self._evs, events=self._events, counters=self.counters,
                          departures=departures)
        self._rx = Receiver(conn_id, config, self._events, self.counters)

    # -- driving it ------------------------------------------------------------------------------

    def send_message(self, msg_id: int, data: bytes | bytearray | memoryview) -> None:
        """Queue a message (RDMA-write semantics). ``data`` is not copied: leave it alone until completed."""
        self._tx.send_message(msg_id, data)

    def receive(self, datagram: bytes | bytearray | memoryview, ev_hint: int | None, now: float,
                ce: bool = False) -> None:
        """Feed one datagram. ``ev_hint``: the EV to answer on, when the agent wants the return path pinned;
        None answers on the EV the datagram names (the same path back). ``ce``: its IPv6 header arrived marked
        Congestion Experienced. Malformed datagrams are counted in ``counters.malformed`` and dropped."""
        try:
            pkt: Any = decode(datagram)  # dispatched by exact class below: cheaper per datagram than isinstance
        except WireError:
            self.counters.malformed += 1
            return
        if pkt.conn_id != self.conn_id:
            self.counters.malformed += 1
            return
        kind = pkt.__class__
        if kind is Data:
            self._rx.on_data(pkt, pkt.ev if ev_hint is None else ev_hint, now, ce)
        elif kind is Sack:
            self._tx.on_sack(pkt, now)
        elif kind is Nack:
            self._tx.on_nack(pkt, now)
        elif kind is Probe:
            self._rx.on_probe(pkt, pkt.ev if ev_hint is None else ev_hint)
        else:
            self._tx.on_probe_reply(pkt, now)

    def on_timer(self, now: float) -> None:
        self._rx.on_timer(now)
        self._tx.on_timer(now)

    def datagrams_to_send(self, now: float) -> list[tuple[int, bytes | bytearray]]:
        """Answers first (SACK, NACK, probe replies), then due probes, retransmissions and new data. An answer
        due on a plane whose NIC is down (at either end) goes on a plane that is up."""
        out = self._rx.take(now)
        if out and self._evs.planes_down:
            reply_ev = self._evs.reply_ev
            out = [(reply_ev(ev), d) for ev, d in out]
        self._tx.emit(now, out)
        return out

    def next_timer(self) -> float | None:
        rx = self._rx.next_timer()
        tx = self._tx.next_timer()
        if rx is None:
            return tx
        return rx if tx is None or rx < tx else tx

    def pop_events(self) -> list:
        """MessageDelivered, MessageCompleted, MessageFailed and EvStateChanged, oldest first."""
        events = self._events[:]
        self._events.clear()
        return events

    # -- paths ---------------------------------------------------------------------------------------

    def warm(self) -> int:
        """Send one probe down every path with the next datagrams (returns how many);
        ``counters.warm_replies`` counts the answers.

        The first packet of every flow through a userspace ovs-vswitchd takes its slow path (an upcall
        to install a datapath flow; about 1500 in the default lab), which made a run's first step take
        twice as long as the others. A real fabric forwards its first packet like its last, so the
        runner warms every path its workload will use before the clock starts."""
        return self._tx.warm()

    def set_pace_share(self, share: float) -> None:
        """Pace at this fraction of ``pace_rate`` (the owner splits its NICs among connections)."""
        self._tx.set_pace_share(share)

    def deny_ev(self, ev: int, now: float) -> None:
        """Stop using an EV (administrative), replacing it from the same plane's spares if any."""
        self._evs.deny(ev, now)

    def set_nic_down(self, planes: int, now: float) -> None:
        """This host's planes whose NIC link is down (bitmap, bit k for plane k; 0: all up). From this call on
        nothing is sent on them (what was in flight there is resent on the others) and every SACK tells the far
        end, which then avoids them too; undone when the bit clears. A ``NicStateChanged`` event records it."""
        self._rx.nic_down = planes
        self._tx.set_planes_down(planes, now)

    @property
    def planes_down(self) -> tuple[int, int]:
        """(this host's, the far end's) planes whose NIC is down, as bitmaps."""
        return self._tx.planes_down

    def allow_ev(self, ev: int, now: float) -> None:
        self._evs.allow(ev, now)

    def ev_state(self, ev: int) -> EvState:
        return self._evs[ev].state

    def ev_last_send(self, ev: int) -> float | None:
        """When this connection last put a DATA packet on ``ev`` (the runner's ``avoid_s`` is built on it)."""
        return self._evs[ev].last_send

    def ev_sent(self, ev: int) -> int:
        """DATA packets this connection put on ``ev`` (counts what went into a cut: see metrics.avoid)."""
        return self._evs[ev].sent

    def active_evs(self) -> list[int]:
        """The EVs holding spraying slots now, in spraying order (whatever their state)."""
        return [e.ev for e in self._evs.slots]

    # -- state -----------------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Messages sent and not yet acknowledged."""
        return self._tx.busy

    @property
    def failed(self) -> bool:
        """Retries exhausted; the connection sends nothing more."""
        return self._tx.failed

    @property
    def cwnd(self) -> float:
        return self._tx.cc.cwnd

    @property
    def srtt(self) -> float | None:
        return self._tx.rtt.srtt

    @property
    def min_rtt(self) -> float | None:
        """The lowest RTT sample so far (the base RTT of the emptiest path), None before the first."""
        m = self._tx.rtt.min_rtt
        return m if m != float("inf") else None

    @property
    def rtt_histogram(self) -> dict[int, int]:
        """Every RTT sample so far, counted by :func:`~mrclab.metrics.rtt.rtt_bucket` (read-only)."""
        return self._tx.rtt.hist

    def bad_paths(self) -> list[Hashable]:
        """Paths (``ev_path`` keys; EVs without ``ev_path``) known bad and being probed."""
        return self._evs.bad_paths()
