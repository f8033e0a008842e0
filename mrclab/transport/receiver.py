"""The receiving half of a connection: out-of-order placement, SACK/NACK, end-to-end digest.

Every DATA packet carries its message's length, its own offset and the message digest,
so the first packet of a message (whichever arrives first) allocates the buffer and
every packet lands at its offset at once: reordering across paths costs nothing.
Duplicates are recognised by PSN (a PSN keeps its number through retransmissions).
A message is delivered when all its bytes are in and its XXH3-64 digest matches;
a mismatch is reported as failed, never delivered.

SACKs are coalesced: a packet makes one *due* after ``sack_every`` packets, or at once
when it opens a hole (loss detection waits on it), carries ECN, or is the last packet of
its message or completes one (the sender's completion waits on it); ``sack_delay`` after
the first packet not yet acknowledged one is due in any case (with ``sack_delay`` 0, at once). A due SACK is built when
the owner next takes the datagrams to send, so the packets of one wake-up share one SACK
that echoes the newest of them (its RTT sample subtracts the time it waited). Some answers
cannot wait: a duplicate is SACKed at once, flagged DUP_ECHO (the sender is resending
what already arrived, and the echo must name that very copy); what is pending is SACKed
before the bitmap (the newest 64 PSNs) moves past it, or back for a packet far behind the
newest, which gets a SACK of its own. A trimmed packet is NACKed at once. Answers travel on
the EV of the packet that caused them.

With ``go_back_n`` (RoCE RC) only the next PSN in order is taken: a packet beyond a gap is
discarded, and the first one of each gap brings a sequence NAK naming the PSN expected.
"""
from __future__ import annotations

from .config import TransportConfig
from .events import MessageDelivered, MessageFailed
from .wire import (
    DUP_ECHO,
    ECN_CE,
    ECN_ECHO,
    LAST,
    NACK_SEQUENCE,
    SACK_BITS,
    TRIMMED,
    Data,
    Probe,
    encode_nack,
    encode_probe,
    encode_sack,
    message_digest,
    unwrap,
)

_MASK = (1 << SACK_BITS) - 1
_NONE = 1 << 62
MAX_REORDER = 1 << 20
"""PSNs further than this ahead of the cumulative PSN are refused (it bounds the receive bitmap)."""


class _RxMessage:
    __slots__ = ("buf", "length", "digest", "received")

    def __init__(self, length: int, digest: int) -> None:
        self.buf = bytearray(length)
        self.length = length
        self.digest = digest
        self.received = 0


class Receiver:
    def __init__(self, conn_id: int, config: TransportConfig, events: list, counters) -> None:
        self._conn_id = conn_id
        self._sack_every = config.sack_every
        self._sack_delay = config.sack_delay
        self._max_message = config.max_message
        self._go_back_n = config.go_back_n
        self._naked = False  # go-back-N: the current gap was NAKed
        self._events = events
        self._counters = counters
        self.out: list[tuple[int, bytes]] = []  # answers waiting for datagrams_to_send
        self._messages: dict[int, _RxMessage] = {}
        self._cum = 0  # every PSN below arrived
        self._bits = 0  # bit i: PSN cum + i arrived (bit 0 is always clear)
        self._pending = 0  # packets not yet acknowledged
        self._due = False  # a SACK goes out with the next take()
        self._low = _NONE  # lowest PSN received since the last SACK
        self._ecn = 0
        self._flush_at: float | None = None
        self._last_psn = 0  # the packet the next SACK answers
        self._high = 0  # highest PSN received: the SACK bitmap ends there, so it covers the newest arrivals
        self._last_ev = 0
        self._last_ts = 0
        self._last_at = 0.0
        self._last_reply_ev = 0
        self.nic_down = 0  # this host's planes whose NIC is down, carried in every SACK (bit k: plane k)

    def on_data(self, d: Data, reply_ev: int, now: float, ce: bool = False) -> None:
        """``ce``: the packet arrived marked Congestion Experienced; its SACK, sent at once, echoes it and names its
        EV (a SACK names one EV, and coalescing it with later packets would name theirs)."""
        rel = unwrap(d.psn, self._cum) - self._cum
        if self._answered_at_once(d, rel, reply_ev, now):
            return
        msg = self._message_of(d)
        if msg is None:
            return
        far, hole = self._mark_received(rel, now)
        urgent = far or hole or d.flags & LAST  # a new hole below it, or its message's tail
        length = d.length
        if length:
            offset = d.offset
            msg.buf[offset:offset + length] = d.payload
            msg.received += length
        counters = self._counters
        counters.data_received += 1
        counters.bytes_received += length
        self._note(d, reply_ev, now)
        self._pending += 1
        if ce or d.flags & ECN_CE:
            counters.ce_received += 1
            self._ecn += 1
            far = True  # a SACK of its own
        if msg.received >= msg.length:
            del self._messages[d.msg_id]
            self._complete(d.msg_id, msg)
            urgent = True
        self._schedule_sack(far=far, urgent=bool(urgent), now=now)

    def _answered_at_once(self, d: Data, rel: int, reply_ev: int, now: float) -> bool:
        """A packet that is not placed: a duplicate (SACKed at once), one too far ahead (dropped), or a trimmed
        one (NACKed at once)."""
        counters = self._counters
        if rel < 0 or (self._bits >> rel) & 1:
            counters.duplicates += 1
            self._note(d, reply_ev, now)
            self._sack(now, DUP_ECHO)
            return True
        if rel >= MAX_REORDER:
            counters.malformed += 1
            return True
        if d.flags & TRIMMED:
            counters.nacks += 1
            nack = encode_nack(conn_id=self._conn_id, psn=d.psn, cum_psn=self._cum, ev=d.ev, ts_echo=d.ts)
            self.out.append((reply_ev, nack))
            return True
        if self._go_back_n:
            if rel:
                counters.out_of_order += 1
                if not self._naked:
                    self._naked = True
                    counters.seq_naks += 1
                    self.out.append((reply_ev, encode_nack(conn_id=self._conn_id, psn=self._cum, cum_psn=self._cum,
                                                           ev=d.ev, ts_echo=d.ts, reason=NACK_SEQUENCE)))
                return True
            self._naked = False
        return False

    def _message_of(self, d: Data) -> _RxMessage | None:
        """The message the packet belongs to, its buffer made by whichever packet came first; None (counted
        malformed) when the packet is too large or contradicts the packets of its message before it."""
        msg = self._messages.get(d.msg_id)
        if msg is None:
            if d.msg_len > self._max_message:
                self._counters.malformed += 1
                return None
            msg = self._messages[d.msg_id] = _RxMessage(d.msg_len, d.digest)
        elif msg.length != d.msg_len or msg.digest != d.digest:
            self._counters.malformed += 1
            return None
        return msg

    def _mark_received(self, rel: int, now: float) -> tuple[bool, bool]:
        """Set the packet's bit (advancing the cumulative PSN over what is now contiguous); whether it is far
        behind the newest 64 PSNs (only a SACK of its own can report it) and whether it opens a new hole."""
        cum, high = self._cum, self._high
        psn = cum + rel
        far = psn < high - (SACK_BITS - 1)
        if self._pending and (far or psn - (SACK_BITS - 1) > self._low):
            self._sack(now)  # report what is pending before the bitmap moves (back for it, or on past them)
        if psn < self._low:
            self._low = psn
        if psn > high:
            self._high = psn
        bits = self._bits | (1 << rel)
        if rel == 0:
            run = (~bits & (bits + 1)).bit_length() - 1
            bits >>= run
            self._cum = cum + run
        self._bits = bits
        return far, psn > high + 1

    def _schedule_sack(self, *, far: bool, urgent: bool, now: float) -> None:
        if far:
            self._sack(now)  # its own: the next packet may move the bitmap on again
        elif urgent or self._pending >= self._sack_every or not self._sack_delay:
            self._due = True
        elif self._flush_at is None:
            self._flush_at = now + self._sack_delay

    def on_probe(self, p: Probe, reply_ev: int) -> None:
        self.out.append((reply_ev, encode_probe(self._conn_id, p.ev, p.seq, p.ts, reply=True)))

    def on_timer(self, now: float) -> None:
        if self._flush_at is not None and now >= self._flush_at:
            self._due = True

    def next_timer(self) -> float | None:
        return None if self._due else self._flush_at

    def take(self, now: float) -> list:
        """The answers to send, a due SACK last."""
        if self._due:
            self._sack(now)
        out = self.out
        self.out = []
        return out

    def _note(self, d: Data, reply_ev: int, now: float) -> None:
        self._last_psn = unwrap(d.psn, self._cum)
        self._last_ev = d.ev
        self._last_ts = d.ts
        self._last_at = now
        self._last_reply_ev = reply_ev

    def _sack(self, now: float, flags: int = 0) -> None:
        cum = self._cum
        base = self._high - (SACK_BITS - 1)  # the newest 64 PSNs, unless the packet answered is older than those
        if base > self._last_psn:
            base = self._last_psn
        if base < cum:
            base = cum
        bitmap = (self._bits >> (base - cum)) & _MASK
        self.out.append((self._last_reply_ev, encode_sack(
            flags=flags | (ECN_ECHO if self._ecn else 0), conn_id=self._conn_id, cum_psn=cum, sack_base=base,
            bitmap=bitmap, ack_psn=self._last_psn, ev=self._last_ev, ecn_count=self._ecn, ts_echo=self._last_ts,
            ack_delay=int((now - self._last_at) * 1e9), nic_down=self.nic_down)))
        self._counters.sacks += 1
        self._pending = 0
        self._ecn = 0
        self._flush_at = None
        self._due = False
        self._low = _NONE

    def _complete(self, msg_id: int, msg: _RxMessage) -> None:
        counters = self._counters
        if message_digest(msg.buf) != msg.digest:
            counters.digest_failures += 1
            self._events.append(MessageFailed(msg_id, "digest_mismatch"))
            return
        counters.messages_delivered += 1
        counters.bytes_delivered += msg.length
        self._events.append(MessageDelivered(msg_id, msg.buf))
