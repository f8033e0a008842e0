"""The sending half of a connection: spraying, selective retransmission, timers, probes.

Every DATA packet gets a PSN once and keeps it through retransmissions (flagged RETX),
so the receiver's cumulative PSN stays meaningful; each *transmission* gets a fresh
record, a transmit sequence number and a timestamp of its own (nanoseconds, bumped by
one within a burst), so loss detection is never confused by an old copy and a SACK's
echo names exactly one transmission. A packet is declared lost, and its EV retired
(loss means failure), when

* RACK: a packet transmitted after it was SACKed and it is still unacknowledged its
  expected RTT plus the reorder window after its own transmission. The expected RTT is
  the largest of the latest sample and the latest samples of the packet's plane and
  path (a plane whose NIC queue is longer is slower, not failed) - unless a packet sent
  after it *on the same plane* was delivered: that one left through the same NIC queue,
  so its RTT (or the smoothed RTT, if larger) is the expectation, and a loss is not kept
  waiting for the slowest plane's delay (the default lab: about 30 ms sooner). The
  window is the largest of ``reorder_window``, the base RTT, srtt / 2, ``reorder_rttvar`` x rttvar
  and what the packets wrongly declared lost so far would have needed, capped at
  ``reorder_window_max`` so that a failed path is still avoided within tens of ms, or
* its retransmission timeout (per packet, backed off while nothing is acknowledged)
  expires.

Before a loss is declared, its path may be *held*: once a later packet of the same plane
was delivered and the packet is still outstanding ``hold_window`` past that packet's RTT,
no new data goes on its path (``Counters.paths_held``) until the packet is acknowledged or
declared lost. Avoiding a path is cheap where declaring a loss is not (a retransmission,
a retirement, and a false alarm's undo), so the hold acts on the first evidence: on the
default lab it took a cut link out of use about 30 ms (a reorder window plus the gap
between the latest and the smoothed RTT) sooner than the loss itself.

With ``ev_path`` a loss condemns the whole path (:mod:`.ev`); what else is in flight on
it is left to RACK (declaring it lost at once doubled the retransmissions of every false
alarm on the jittery lab fabric, for a gain of one reorder window). A packet declared
lost that is SACKed after all was late, not lost (``Counters.spurious_losses``): the
window learns from it. If that packet alone condemned its path and a packet sent on the
path after it was delivered too, the path comes back at once
(``Counters.retirements_undone``) instead of after probing. Both are needed: a packet
sent just before a link died can arrive late, and proves nothing about the link now.

Which copy of a resent packet arrived is told by timestamps only: a SACK echoes the
packet that triggered it, and the receiver SACKs a duplicate at once, flagged DUP_ECHO,
so a late original shows up as its own echo or as a duplicate's (SACKs take different
paths and overtake each other: an unflagged echo of the resend proves nothing).
Guessing from RTTs ("the resend was acknowledged too soon") is no proof: the lab's RTTs
vary by tens of ms, and such guesses revived dead paths.

A trim NACK is not a loss: the packet goes to the front of the retransmit queue and
its EV skips a turn. An ECN echo says the path's queues are filling: its EV sits out its
turns for ``skip_rtts`` smoothed RTTs, so spraying moves off a hot path for as long as its
queue takes to drain (a turn alone moves little: with one EV per path, a flow that skips its
marked EV one turn in two still sends a third of its packets there). Retransmissions go out
before new data, on another EV.

``max_retransmits`` counts the losses of a packet (RACK or a timeout): what says a path is
dead. A trim says the fabric is busy, so a packet may be trimmed and resent any number of
times (RoCE's retry count and UET likewise count timeouts, not congestion).

**NIC link state.** :meth:`Sender.set_planes_down` is told the planes whose NIC is down, this
host's (from the owner) and the far end's (from the bitmap every SACK carries). What is in
flight on a plane that just went down is resent at once on the others, without counting as a
loss or condemning a path, and the EV set sends nothing more there (:mod:`.ev`).
"""
from __future__ import annotations

from collections import deque

from .config import TransportConfig
from .congestion import create as create_cc
from .counters import Counters
from .departures import Departures
from .ev import Ev, EvSet
from .events import MessageCompleted, MessageFailed, NicStateChanged
from .rtt import RttEstimator
from .wire import (
    DATA_HEADER_LEN,
    DUP_ECHO,
    ECN_ECHO,
    LAST,
    NACK_SEQUENCE,
    RETX,
    SACK_BITS,
    WARM_SEQ,
    Nack,
    ProbeReply,
    Sack,
    encode_data_into,
    encode_probe,
    message_digest,
    unwrap,
)

_INFLIGHT, _LOST, _ACKED, _DONE = range(4)
_U32 = 0xFFFFFFFF
_AMBIGUOUS_MAX = 1024  # resent packets remembered until a duplicate tells whether their first copy arrived
# The RTO's exponential backoff stops doubling here: rto_max caps the timeout long before, and a connection left
# with no usable path times out for as long as the run lasts (an unbounded multiplier overflows a float).
BACKOFF_MAX = 1 << 20


class _TxMessage:
    __slots__ = ("msg_id", "data", "length", "digest", "next_offset", "all_sent", "unacked")

    def __init__(self, msg_id: int, data: memoryview) -> None:
        self.msg_id = msg_id
        self.data = data
        self.length = len(data)
        self.digest = message_digest(data)
        self.next_offset = 0
        self.all_sent = False
        self.unacked = 0


_RELEASED = _TxMessage(0, memoryview(b""))  # what a done transmission points at instead of its message


class _TxPacket:
    """One transmission of one PSN."""

    __slots__ = ("psn", "msg", "offset", "length", "flags", "tries", "losses", "ev", "sent_at", "ts", "xseq", "state",
                 "lost_at", "prev")

    def __init__(self, psn: int, msg: _TxMessage, offset: int, length: int, flags: int, ev: Ev) -> None:
        self.psn = psn
        self.msg = msg
        self.offset = offset
        self.length = length
        self.flags = flags
        self.tries = 0  # retransmissions before this one
        self.losses = 0  # of which for a loss (RACK or timeout), not a trim: what max_retransmits counts
        self.ev = ev
        self.sent_at = 0.0
        self.ts = 0
        self.xseq = 0
        self.state = _INFLIGHT
        self.lost_at = 0.0  # when loss detection declared this transmission lost (0: it did not)
        self.prev: _TxPacket | None = None  # the transmission this one retransmits

    def resend(self, ev: Ev) -> _TxPacket:
        """The next transmission of this PSN, on ``ev``; this one is done, and lets go of its message: a done
        transmission is kept only to tell which copy arrived (``Sender._ambiguous``), and must not hold a
        message's bytes for as long as that memory lasts."""
        p = _TxPacket(self.psn, self.msg, self.offset, self.length, self.flags | RETX, ev)
        p.tries = self.tries + 1
        p.losses = self.losses
        p.prev = self
        self.state = _DONE
        self.prev = None
        self.msg = _RELEASED
        return p


class Sender:
    def __init__(self, conn_id: int, config: TransportConfig, evs: EvSet, *, events: list, counters: Counters,
                 departures: Departures | None = None) -> None:
        self._conn_id = conn_id
        self._cfg = config
        self._evs = evs
        self._events = events
        self._counters = counters
        self.rtt = RttEstimator(config.cc_delay_filter)
        self.cc = create_cc(config)
        self.failed = False
        self.inflight = 0  # wire bytes of transmissions neither acknowledged nor known lost
        self._messages: dict[int, _TxMessage] = {}
        self._queue: deque[_TxMessage] = deque()  # messages with bytes not yet packetized
        self._pkts: dict[int, _TxPacket] = {}  # PSN -> latest transmission, until acknowledged
        self._order: deque[_TxPacket] = deque()  # transmissions in send order (stale ones dropped lazily)
        self._retx: deque[_TxPacket] = deque()
        self._next_psn = 0
        self._una = 0  # lowest unacknowledged PSN
        self._acked = 0  # bit i: PSN una + i acknowledged
        self._xseq = 0
        self._rack_xseq = -1  # highest transmit sequence known delivered
        self._rack_at: float | None = None
        self._backoff = 1
        self._plane_rack: dict[int, tuple[int, float]] = {}  # plane -> (newest xseq delivered, its RTT)
        self._learned_reorder = 0.0  # reordering seen: how late a packet declared lost turned up, plus the window
        self._pace_rate = config.pace_rate  # bytes/s, this connection's share of the host's
        self._pace_depth = float(config.pace_depth)
        self._tokens = float(config.pace_depth)  # the pacer's bucket, bytes
        self._tokens_at: float | None = None  # when it was last filled
        self._pace_at: float | None = None  # when it will hold a packet again, while data waits for it
        # bursts (config.pace_ahead) are handed out only where the owner dates each packet by its NIC's departure
        self._departures = departures if config.pace_ahead > config.pace_slack and config.nic_rate > 0 else None
        self._ahead = config.pace_ahead if self._departures is not None else config.pace_slack
        self._warm: list = []  # EVs to send a warm-up probe on
        self._last_ts = -1  # timestamp of the latest transmission, in ns
        self._ambiguous: dict[int, _TxPacket] = {}  # timestamp of either copy -> a resent packet declared lost
        self._local_down = 0  # planes whose NIC is down, this host's (bitmap)
        self._remote_down = 0  # ... and the far end's, as its latest SACK said

    # -- application side ------------------------------------------------------------------

    def send_message(self, msg_id: int, data: bytes | bytearray | memoryview) -> None:
        if self.failed:  # as a verb posted to an RC QP in the error state: it completes at once, in error
            self._events.append(MessageFailed(msg_id, "retries_exhausted"))
            self._counters.messages_failed += 1
            return
        if not 0 <= msg_id <= _U32:
            raise ValueError(f"msg_id {msg_id} does not fit in 32 bits")
        if msg_id in self._messages:
            raise ValueError(f"message {msg_id} is still in flight")
        view = memoryview(data).cast("B")
        if len(view) > _U32:
            raise ValueError(f"message of {len(view)} bytes does not fit a 32-bit length")
        msg = _TxMessage(msg_id, view)
        self._messages[msg_id] = msg
        self._queue.append(msg)

    def set_pace_share(self, share: float) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"pace share {share} is not in (0, 1]")
        cfg = self._cfg
        self._pace_rate = cfg.pace_rate * share
        self._pace_depth = max(DATA_HEADER_LEN + cfg.mss, cfg.pace_depth * share)
        self._tokens = min(self._tokens, self._pace_depth)

    @property
    def busy(self) -> bool:
        """Messages not yet fully acknowledged."""
        return bool(self._messages)

    # -- network side ------------------------------------------------------------------------

    def on_sack(self, s: Sack, now: float) -> None:
        """A SACK: its RTT sample, the packets it newly acknowledges, what it says of its EV, then RACK."""
        ts_echo = s.ts_echo
        if s.flags & DUP_ECHO and self._ambiguous:
            self._duplicate_echoed(ts_echo, now)
        if s.nic_down != self._remote_down:
            self._remote_down = s.nic_down
            self._planes_changed(now)
        e = self._evs.get(s.ev)
        self._rtt_sample(e, now - (ts_echo + s.ack_delay) * 1e-9)
        new = self._newly_acked(s)
        acked_bytes = self._acknowledge(new, ts_echo, now) if new else 0
        if e is not None:
            self._evs.delivered(e, now)
            if s.flags & ECN_ECHO:
                until = now + self._cfg.skip_rtts * (self.rtt.srtt or 0.0)
                if self._evs.congested(e, now, until=until):
                    self._counters.ecn_skips += 1
                self.cc.on_congestion(now, self.rtt)
        if acked_bytes and self._cfg.cc:
            self.cc.on_ack(acked_bytes, self.rtt, now)
        if not self._cfg.go_back_n:  # RoCE finds a gap by the receiver's NAK, not by RACK
            self._detect_losses(now)

    def on_nack(self, n: Nack, now: float) -> None:
        if n.reason == NACK_SEQUENCE:
            self._go_back_from(n, now)
            return
        self._counters.trimmed += 1
        p = self._pkts.get(unwrap(n.psn, self._una))
        if p is not None and p.ts != n.ts_echo and p.prev is not None and p.prev.ts == n.ts_echo:
            p = p.prev  # about the transmission this one resent
        if p is not None and p.lost_at and p.ts == n.ts_echo:
            self._spurious(p, now)  # declared lost, but it was trimmed: congestion, not failure
        if p is None or p.state != _INFLIGHT or p.ts != n.ts_echo:
            return  # already acknowledged, already resent, or about an older transmission
        p.state = _LOST
        self._evs.release(p.ev.path, p.xseq)
        self.inflight -= p.length + DATA_HEADER_LEN
        self._retx.appendleft(p)  # trimmed: the fast lane
        e = self._evs.get(n.ev)
        if e is not None:
            self._evs.congested(e, now)
        if self._cfg.cc:
            self.cc.on_congestion(now, self.rtt)

    def _go_back_from(self, n: Nack, now: float) -> None:
        """A sequence NAK (go-back-N): everything below its PSN arrived; everything from it on, in flight when the
        packet that found the gap was sent, is resent in PSN order. A NAK older than a resend of its PSN is stale."""
        una = self._una
        cum = unwrap(n.cum_psn, una) - una
        if cum > 0:
            new = ((1 << min(cum, self._next_psn - una)) - 1) & ~self._acked
            if new:
                self._acknowledge(new, n.ts_echo, now)
        p = self._pkts.get(unwrap(n.psn, self._una))
        if p is None or p.state != _INFLIGHT or p.ts > n.ts_echo:
            return
        self._go_back(now)

    def _go_back(self, now: float) -> None:
        """Resend every packet in flight, lowest PSN first, ahead of anything else queued."""
        back = sorted((p for p in self._order if p.state == _INFLIGHT), key=lambda p: p.psn)
        for p in back:
            p.state = _LOST
            self._evs.release(p.ev.path, p.xseq)
            self.inflight -= p.length + DATA_HEADER_LEN
        self._retx = deque(sorted((p for p in (*back, *self._retx) if p.state == _LOST), key=lambda p: p.psn))
        self._counters.go_backs += 1

    def set_planes_down(self, local: int, now: float) -> None:
        """This host's planes whose NIC is down (a bitmap; 0: all up)."""
        if local != self._local_down:
            self._local_down = local
            self._planes_changed(now)

    @property
    def planes_down(self) -> tuple[int, int]:
        """(this host's, the far end's) planes whose NIC is down, as bitmaps."""
        return self._local_down, self._remote_down

    def _planes_changed(self, now: float) -> None:
        """Spray over the planes up at both ends; resend at once what is in flight on a plane that just went down."""
        evs = self._evs
        gone = (self._local_down | self._remote_down) & ~evs.planes_down
        evs.set_planes_down(self._local_down | self._remote_down)
        self._events.append(NicStateChanged(self._local_down, self._remote_down, now))
        if not gone:
            return
        stranded = [p for p in self._order if p.state == _INFLIGHT and gone >> p.ev.plane & 1]
        for p in stranded:
            p.state = _LOST
            evs.release(p.ev.path, p.xseq)
            self.inflight -= p.length + DATA_HEADER_LEN
        self._retx.extendleft(reversed(stranded))

    def warm(self) -> int:
        """Send one probe down every path with the next datagrams (see ``Connection.warm``); how many."""
        self._warm = self._evs.one_ev_per_path()
        return len(self._warm)

    def on_probe_reply(self, r: ProbeReply, now: float) -> None:
        if r.seq == WARM_SEQ:
            self._counters.warm_replies += 1
            return
        self._counters.probe_replies += 1
        e = self._evs.get(r.ev)
        if e is not None:  # no RTT sample: a small probe's delay would understate the base RTT of data
            self._evs.probe_reply(e, r.seq, now)

    def on_timer(self, now: float) -> None:
        if self._pace_at is not None and now >= self._pace_at:
            self._pace_at = None  # served: the next emit sends or sets it again (an owner that cannot send yet
            # must not be woken for it over and over)
        if self._rack_at is not None and now >= self._rack_at:
            self._detect_losses(now)
        rto = self._rto()
        order = self._order
        fired = False
        while order:
            p = order[0]
            if p.state != _INFLIGHT:
                order.popleft()
            elif p.sent_at + rto <= now:
                order.popleft()
                self._lose(p, now)
                fired = True
            else:
                break
        if fired:
            self._counters.timeouts += 1
            if self._backoff < BACKOFF_MAX:
                self._backoff *= 2
            if self._cfg.go_back_n:
                self._go_back(now)

    def next_timer(self) -> float | None:
        if self.failed:
            return None
        order = self._order
        while order and order[0].state != _INFLIGHT:
            order.popleft()
        times = [t for t in (self._rack_at, self._evs.next_probe_at(), self._pace_at) if t is not None]
        if order:
            times.append(order[0].sent_at + self._rto())
        return min(times, default=None)

    def emit(self, now: float, out: list) -> None:
        """Append the probes that are due and the data packets the window and the pacer allow to ``out``: each
        one the next transmission (:meth:`_next_transmission`), transmitted with a timestamp of its own."""
        if self.failed:
            return
        ts = int(now * 1e9)
        if self._warm or self._evs.probing:
            self._emit_probes(now, ts, out)
        cc = self._cfg.cc
        window = self.cc.cwnd if cc else self._cfg.cc_max_window
        pace = self._pace_rate * self.cc.rate if cc else self._pace_rate
        full = self._refill(now, pace) if pace else 0.0
        conn_id = self._conn_id
        counters = self._counters
        departures = self._departures
        while self.inflight < window and (self._retx or self._queue):
            if pace and self._tokens < full - 0.5:  # half a byte short is enough: the wake-up time rounds
                # wake when the next packet is pace_slack from due: it and what falls due within pace_ahead go then
                self._pace_at = now + (full + (self._ahead - self._cfg.pace_slack) * pace - self._tokens) / pace
                return
            p = self._next_transmission(now)
            if p is None:
                return
            msg = p.msg
            e = p.ev
            ev = e.ev
            size = DATA_HEADER_LEN + p.length
            sent_at = now
            if departures is not None:  # dated by when its NIC puts it on the wire (unique per host)
                sent_at = e.last_send = departures.depart(e.plane, size, now)
                ts = departures.stamp(e.plane, sent_at)
            elif ts <= self._last_ts:  # one timestamp per transmission: an echo names exactly one
                ts = self._last_ts + 1
            self._last_ts = ts
            buf = bytearray(size)
            encode_data_into(buf, p.flags, conn_id, p.psn, msg.msg_id, msg.length, p.offset, ev, ts, msg.digest,
                             msg.data[p.offset:p.offset + p.length])  # positional: see encode_data_into
            p.sent_at = sent_at
            p.ts = ts
            p.xseq = self._xseq
            self._xseq += 1
            self._pkts[p.psn] = p
            self._order.append(p)
            self.inflight += size
            self._tokens -= size
            counters.data_sent += 1
            counters.bytes_sent += p.length
            out.append((ev, buf))

    # -- internals -------------------------------------------------------------------------------

    def _emit_probes(self, now: float, ts: int, out: list) -> None:
        """The probes of bad paths that are due, and the warm-up probes asked for."""
        conn_id = self._conn_id
        counters = self._counters
        for e, seq in self._evs.probes_due(now):
            out.append((e.ev, encode_probe(conn_id, e.ev, seq, ts)))
            counters.probes += 1
        if self._warm:
            for e in self._warm:
                out.append((e.ev, encode_probe(conn_id, e.ev, WARM_SEQ, ts)))
            counters.warm_probes += len(self._warm)
            self._warm = []

    def _refill(self, now: float, pace: float) -> float:
        """Fill the pacer's bucket at ``pace`` bytes/s up to ``now``; the tokens a full packet needs (less what the
        bucket gains within ``pace_slack``, or ``pace_ahead`` for bursts: a packet due that soon goes now)."""
        if self._tokens_at is not None:
            self._tokens = min(self._pace_depth, self._tokens + (now - self._tokens_at) * pace)
        self._tokens_at = now
        self._pace_at = None
        return DATA_HEADER_LEN + self._cfg.mss - self._ahead * pace

    def _next_transmission(self, now: float) -> _TxPacket | None:
        """The next transmission, on the EV it goes on: a lost packet's resend first, else the next packet of
        new data. None when there is nothing to send, no usable EV, or the resend exhausted its retries (the
        connection fails)."""
        retx = self._retx
        while retx:
            old = retx.popleft()
            if old.state != _LOST:
                continue  # acknowledged since, or queued twice
            if old.losses > self._cfg.max_retransmits:
                self._fail(now)
                return None
            e = self._evs.send_on(now, avoid=old.ev)
            if e is None:
                retx.appendleft(old)
                return None
            self._counters.retransmitted += 1
            return old.resend(e)
        if not self._queue:
            return None
        e = self._evs.send_on(now)
        if e is None:
            return None
        msg = self._queue[0]
        offset = msg.next_offset
        length = msg.length - offset
        flags = LAST
        if length > self._cfg.mss:
            length = self._cfg.mss
            flags = 0
        msg.next_offset = offset + length
        if flags:
            msg.all_sent = True
            self._queue.popleft()
        msg.unacked += 1
        p = _TxPacket(self._next_psn, msg, offset, length, flags, e)
        self._next_psn += 1
        return p

    # -- acknowledgements --------------------------------------------------------------------------

    def _duplicate_echoed(self, ts_echo: int, now: float) -> None:
        """A SACK of a duplicate: if it echoes either copy of an ambiguous resend, its first copy had arrived."""
        dup = self._ambiguous.pop(ts_echo, None)
        if dup is not None and dup.lost_at:
            self._spurious(dup, now)  # a second copy arrived: the one declared lost had arrived too

    def _rtt_sample(self, e: Ev | None, sample: float) -> None:
        self.rtt.update(sample)
        if e is not None and sample > 0.0:
            self._evs.rtt_sample(e, sample)

    def _newly_acked(self, s: Sack) -> int:
        """The PSNs ``s`` acknowledges for the first time, as bits (bit i: PSN una + i); none beyond what was sent."""
        una = self._una
        span = self._next_psn - una  # PSNs a SACK may acknowledge; beyond that it is lying
        cum = unwrap(s.cum_psn, una) - una
        new = (1 << min(cum, span)) - 1 if cum > 0 else 0
        shift = unwrap(s.sack_base, una) - una
        if -SACK_BITS < shift < span:
            new |= s.bitmap << shift if shift >= 0 else s.bitmap >> -shift
        return new & ~self._acked & ((1 << span) - 1)

    def _acknowledge(self, new: int, ts_echo: int, now: float) -> int:
        """Take the packets of ``new`` (see :meth:`_newly_acked`) off the books, then advance una; the wire bytes
        that left the window."""
        una = self._una
        pkts = self._pkts
        evs = self._evs
        rack_xseq = self._rack_xseq
        plane_rack = self._plane_rack
        acked_bytes = 0
        bits = new
        while bits:
            low = bits & -bits
            bits ^= low
            p = pkts.pop(una + low.bit_length() - 1, None)
            if p is None:
                continue
            if p.state == _INFLIGHT:
                size = p.length + DATA_HEADER_LEN
                self.inflight -= size
                acked_bytes += size
                e = p.ev
                xseq = p.xseq
                arrived = p.tries == 0 or p.ts == ts_echo  # this very transmission, not the copy it resent
                evs.acknowledged(e, xseq, now, arrived=arrived)
                if arrived:  # RACK: the newest transmission delivered, overall and of its plane
                    if xseq > rack_xseq:
                        rack_xseq = xseq
                    if xseq > plane_rack.get(e.plane, (-1, 0.0))[0]:
                        plane_rack[e.plane] = (xseq, now - p.sent_at)
                elif p.prev is not None and p.prev.lost_at:
                    self._resend_acknowledged(p, p.prev, ts_echo, now)
            elif p.state == _LOST and p.lost_at:
                self._spurious(p, now)  # declared lost, delivered before it could be resent
            p.state = _ACKED
            msg = p.msg
            msg.unacked -= 1
            if msg.all_sent and msg.unacked == 0:
                self._complete(msg)
        self._rack_xseq = rack_xseq
        acked = self._acked | new
        run = (~acked & (acked + 1)).bit_length() - 1  # trailing ones: newly contiguous PSNs
        self._acked = acked >> run
        self._una = una + run
        self._backoff = 1
        return acked_bytes

    def _resend_acknowledged(self, p: _TxPacket, prev: _TxPacket, ts_echo: int, now: float) -> None:
        """Resend ``p`` is acknowledged by a SACK that echoes another transmission, and ``prev``, the copy it
        resent, was declared lost: if the SACK echoes ``prev``, that loss was spurious; if it echoes neither (the
        SACK of another packet, which covers both), the duplicate's SACK will tell which arrived."""
        if prev.ts == ts_echo:
            self._spurious(prev, now)  # the copy declared lost arrived, not (yet) this one
        elif p.tries == 1:
            ambiguous = self._ambiguous
            ambiguous[p.ts] = ambiguous[prev.ts] = prev
            if len(ambiguous) > _AMBIGUOUS_MAX:
                del ambiguous[next(iter(ambiguous))]

    def _complete(self, msg: _TxMessage) -> None:
        if self._messages.pop(msg.msg_id, None) is not None:
            self._counters.messages_completed += 1
            self._events.append(MessageCompleted(msg.msg_id))

    # -- loss ----------------------------------------------------------------------------------------

    def _rto(self) -> float:
        return min(self._cfg.rto_max, self.rtt.rto(self._cfg.rto_min, self._cfg.rto_initial) * self._backoff)

    def reorder_window(self) -> float:
        """How long past its expected arrival a packet may be late before it counts as lost (see module doc)."""
        cfg = self._cfg
        rtt = self.rtt
        window = max(cfg.reorder_window, self._learned_reorder, cfg.reorder_rttvar * rtt.rttvar,
                     rtt.min_rtt if rtt.srtt is not None else 0.0, 0.5 * (rtt.srtt or 0.0))
        return window if window < cfg.reorder_window_max else cfg.reorder_window_max

    def _detect_losses(self, now: float) -> None:
        """RACK: lose what was sent before a delivered packet and is overdue, and set the RACK timer to the next
        deadline (:meth:`_overdue`)."""
        self._rack_at = None
        order = self._order
        while order and order[0].state != _INFLIGHT:
            order.popleft()
        if not order:
            return
        lost, next_due = self._overdue(now)
        for p in lost:
            if p.state == _INFLIGHT:  # not already lost with its path
                self._lose(p, now)
        self._rack_at = next_due

    def _overdue(self, now: float) -> tuple[list[_TxPacket], float | None]:
        """The packets in flight that count lost at ``now`` (:meth:`_deadlines`), and the next deadline of the rest."""
        window = self.reorder_window()
        latest = self.rtt.latest
        quickest = min([r for _, r in self._plane_rack.values()], default=latest)
        hold_window = self._cfg.hold_window
        # no packet is due, nor held, before sent_at + floor
        floor = (quickest if quickest < latest else latest) + (hold_window if hold_window < window else window)
        rack_xseq = self._rack_xseq
        next_due = None
        lost = []
        in_order = self._departures is None  # send times rise with xseq (with bursts, only per NIC)
        for p in self._order:
            if p.xseq >= rack_xseq:
                break
            if p.state != _INFLIGHT:
                continue
            if now < p.sent_at + floor:
                if next_due is None or p.sent_at + floor < next_due:
                    next_due = p.sent_at + floor
                if in_order:
                    break
                continue
            due, held = self._deadlines(p, now, window)
            if held is not None and (next_due is None or held < next_due):
                next_due = held
            if now >= due:
                lost.append(p)
            elif next_due is None or due < next_due:
                next_due = due
        return lost, next_due

    def _deadlines(self, p: _TxPacket, now: float, window: float) -> tuple[float, float | None]:
        """When ``p`` counts lost, and when it holds its path if that is still to come (None: not, or already).

        The loss deadline is its expected RTT plus ``window``: the largest of the latest sample and the latest
        of its plane and path (a plane whose NIC queue is longer, or a path whose switches queue more, is
        slower, not failed), or, once a later packet of the same plane was delivered, the larger of that
        one's RTT and the smoothed RTT. Such a packet holds its path ``hold_window`` after that later packet's
        RTT (see module doc); the hold is taken here once that time has come.
        """
        e = p.ev
        sent = p.sent_at
        evs = self._evs
        latest = self.rtt.latest
        expect = evs.plane_rtt.get(e.plane, 0.0)
        if evs.path_aware and e.path.rtt > expect:
            expect = e.path.rtt
        due = sent + (expect if expect > latest else latest) + window
        rack = self._plane_rack.get(e.plane)
        if rack is None or p.xseq >= rack[0]:
            return due, None
        srtt = self.rtt.srtt or 0.0  # a later packet through the same NIC queue was delivered:
        soon = sent + (rack[1] if rack[1] > srtt else srtt) + window
        if soon < due:
            due = soon
        held = sent + rack[1] + self._cfg.hold_window
        if now < held:
            return due, held
        if now < due:
            evs.hold(e.path, p.xseq)
        return due, None

    def _lose(self, p: _TxPacket, now: float) -> None:
        e = p.ev
        self._evs.release(e.path, p.xseq)
        p.state = _LOST
        p.lost_at = now
        p.losses += 1
        self.inflight -= p.length + DATA_HEADER_LEN
        self._retx.append(p)
        self._counters.lost += 1
        self._evs.lost(e, p.xseq, now)

    def _spurious(self, p: _TxPacket, now: float) -> None:
        """A transmission declared lost was delivered: it was late. Widen the reorder window to what it would
        have needed; its path delivered at that point (which may bring back the path it condemned)."""
        self._counters.spurious_losses += 1
        need = self.reorder_window() + (now - p.lost_at)
        if need > self._learned_reorder:
            self._learned_reorder = need
        p.lost_at = 0.0  # counted once
        self._evs.late(p.ev.path, p.xseq, now)

    def _fail(self, now: float) -> None:
        """Retries exhausted (as RC's retry_cnt): the connection fails with every message it holds."""
        self.failed = True
        for msg_id in self._messages:
            self._events.append(MessageFailed(msg_id, "retries_exhausted"))
        self._counters.messages_failed += len(self._messages)
        self._messages.clear()
        self._queue.clear()
        self._pkts.clear()
        self._order.clear()
        self._retx.clear()
        self.inflight = 0
        self._rack_at = None
        self._evs.release_all()
