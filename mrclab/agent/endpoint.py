"""A host's MRC connections without their sockets: what the agent's datapath and the simulator's hosts share.

An endpoint makes one :class:`~mrclab.transport.Connection` per (peer, connection id) from its
workload's configuration, with the EVs it may use (a pool of every path equally often and as
many again in reserve; a single-path QP's one EV picked by a flow hash), splits the host's line
rate between the connections sending at once, turns the connections' events into the agent's
event records (``delivered``, ``completed``, ``failed``, ``ev_state``, ``nic``), checks every
delivered byte against the seeded payload, and answers ``stats``. Where the datagrams go (UDP
sockets in the lab, the discrete-event network in the simulator) and when the connections are
serviced is the subclass's: it implements ``_mark``, which says a connection has work to do.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from ..addressing import Plan, conn_qp
from ..transport import (
    Connection,
    EvState,
    EvStateChanged,
    MessageCompleted,
    MessageDelivered,
    MessageFailed,
    NicStateChanged,
    TransportConfig,
)
from ..transport.config import for_mtu
from ..transport.departures import Departures
from .ecmp import flow_hash
from .loop import TIMER_GRANULARITY
from .messages import Completed, Delivered, Emit, EvChanged, Failed, NicChanged
from .payload import Payloads

CONNECTION_KEYS = ("data_sent", "retransmitted", "trimmed", "ce_received", "ecn_skips", "bytes_delivered")
"""The counters each connection reports on its own (stats `connections`): what a researcher compares between
the connections of a run, ECN's signal and the EV turns it cost among them."""
RECOVERY_KEYS = ("trimmed", "retransmitted", "timeouts")
MARK_BIN_S = 0.001
"""When each of RECOVERY_KEYS grew, in bins of MARK_BIN_S of the endpoint's clock, so the report plots
loss recovery at the time it happened rather than at the runner's 0.25 s samples."""
SPARE_FACTOR = 2  # EVs in a connection's pool per active EV (the MRC paper's QPs pick 128-256)
FIRST_SLOT_MIX = 0x9E3779B1
"""Each connection starts spraying at its own slot (Knuth's multiplicative hash of its id): a collective starts
all its connections together, and were they all to start at slot 0, their first packets would meet on one
path per plane (64-way all-to-all in the simulator: 22% of packets trimmed at the leaves' uplinks)."""
PACE_AHEAD = 0.004
"""The agent's pacing bursts (``TransportConfig.pace_ahead``): a pacing wake-up hands its NICs what falls due within
4 ms and the loop sleeps about 3 ms (4 less the timer granularity) before the next, about four 9000-byte packets
per wake-up at quickstart's 100 Mbit per host, under two per NIC queued at once (its 32 KiB socket buffer holds
four)."""
IO_COUNTERS = ("send_retries", "socket_errors", "strangers", "nic_down_discards")
"""What the datapath's sockets count (stats `counters`): always 0 where no socket is."""



class Peer:
    """One connection with one peer, and what the datapath keeps beside it."""

    __slots__ = ("peer", "conn", "evs", "addrs", "timer", "queued", "sending", "recovery")

    def __init__(self, peer: int, conn: Connection, evs: list[int]) -> None:
        self.peer = peer
        self.conn = conn
        self.evs = evs
        self.addrs: dict[int, tuple] = {}
        self.timer: float | None = None
        self.queued = False  # in the datapath's dirty list
        self.sending = False  # this end has posted messages on it
        self.recovery = (0, 0, 0)  # RECOVERY_KEYS as last seen


class MrcEndpoint:
    """One host's connections; ``clock`` is the time its events carry (the lab's monotonic clock, or simulated)."""

    def __init__(self, plan: Plan, host: int, config: TransportConfig, payloads: Payloads, emit: Emit, *,
                 qp_configs: Sequence[tuple[int, int, TransportConfig]] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._qp_configs = list(qp_configs)  # (first QP, QP past the last, config): a workload's own
        self._plan = plan
        self._host = host
        self._config = config
        self._clock = clock
        self.ev_path = plan.ev_path  # EVs name whole paths (SRv6), so losses condemn paths
        self._payloads = payloads
        self._emit = emit
        paths = plan.paths_per_pair
        # every path equally often, and as many again in reserve: a retired path's slots go to spares on the good
        # paths of its plane, so each NIC keeps its share of the packets (its plane's link is the bottleneck)
        most = max([config.ev_count] + [c.ev_count for _, _, c in qp_configs])
        self._hashed = -(-most // paths) * paths  # the EVs a single-path QP's flow hash picks among
        self._ev_pool = list(range(SPARE_FACTOR * self._hashed))
        self._peers: dict[tuple[int, int], Peer] = {}
        self._busy: set[Peer] = set()  # peers with messages in flight: they share the host's pacing rate
        self._nic_down = 0  # bitmap of the planes whose NIC is down
        self._far_down: dict[int, int] = {}  # peer -> its planes whose NIC is down, as its SACKs said
        self._marks: dict[str, dict[int, int]] = {key: {} for key in RECOVERY_KEYS}
        # the host's NICs, shared by its connections: what dates the packets of a paced burst (pace_ahead)
        bursts = config.nic_rate > 0 and config.pace_ahead > config.pace_slack
        self._departures = Departures(plan.planes, config.nic_rate) if bursts else None
        self.counters = dict(messages_sent=0, bytes_sent=0, bytes_verified=0, verify_failures=0,
                             **dict.fromkeys(IO_COUNTERS, 0))

    @property
    def host(self) -> int:
        """This host's index."""
        return self._host

    def _mark(self, p: Peer) -> None:
        """``p``'s connection has something to do (send, report, re-arm its timer): the owner services it."""
        raise NotImplementedError

    # -- application side ------------------------------------------------------------------------

    def post(self, conn_id: int, peer: int, msg: int, size: int) -> None:
        """Start sending message ``msg`` of ``size`` bytes to ``peer`` on connection ``conn_id``."""
        self._plan.check_peer(self._host, peer)
        limit = self._config_of(conn_id).max_message
        if size > limit:
            raise ValueError(f"message of {size} bytes exceeds max_message {limit}")
        p = self._peer_of(peer, conn_id)
        p.conn.send_message(msg, self._payloads.message(self._host, peer, msg, size))
        p.sending = True
        if p not in self._busy:
            self._busy.add(p)
            self._share_pacing()
        self.counters["messages_sent"] += 1
        self.counters["bytes_sent"] += size
        self._mark(p)

    def warm(self, conn_id: int, peer: int) -> int:
        """One probe down every path to ``peer`` (see ``Connection.warm``); how many."""
        self._plan.check_peer(self._host, peer)
        p = self._peer_of(peer, conn_id)
        probes = p.conn.warm()
        self._mark(p)
        return probes

    # -- the host's NICs -----------------------------------------------------------------------------

    def set_nic_down(self, planes: int, now: float) -> int:
        """The host's NICs of ``planes`` (a bitmap; 0: all up) are down. Every connection stops sending on those
        planes at once and tells its peers in its SACKs; connections made later start from the same state.
        Returns the planes that went down just now."""
        gone = planes & ~self._nic_down
        self._nic_down = planes
        for p in self._peers.values():
            p.conn.set_nic_down(planes, now)
            self._mark(p)
        self._share_pacing()
        return gone

    # -- events and state --------------------------------------------------------------------------

    def _dispatch(self, p: Peer, events: list) -> None:
        conn_id, peer = p.conn.conn_id, p.peer
        for event in events:
            kind = event.__class__
            if kind is EvStateChanged:
                self._emit(EvChanged(conn_id, peer, event.ev, event.old.name, event.new.name, event.now))
            elif kind is MessageDelivered:
                self._delivered(conn_id, peer, event.msg_id, event.data)
            elif kind is MessageCompleted:
                self._emit(Completed(conn_id, peer, event.msg_id, self._clock()))
            elif kind is MessageFailed:
                self._emit(Failed(conn_id, peer, event.msg_id, event.reason, self._clock()))
            elif kind is NicStateChanged:
                self._far_nics(peer, event.remote, event.now)
        if p in self._busy and not p.conn.busy:
            self._busy.discard(p)
            self._share_pacing()

    def _far_nics(self, peer: int, down: int, now: float) -> None:
        """A connection heard from ``peer``'s SACKs which of its NICs are down: report each plane that changed, once
        per peer (its other connections hear the same)."""
        changed = down ^ self._far_down.get(peer, 0)
        if not changed:
            return
        self._far_down[peer] = down
        for plane in range(self._plan.planes):
            if changed >> plane & 1:
                self._emit(NicChanged(plane, "down" if down >> plane & 1 else "up", now, of=peer))

    def _note_recovery(self, p: Peer, seen: tuple, now: float) -> None:
        slot = int(now / MARK_BIN_S)
        for key, new, old in zip(RECOVERY_KEYS, seen, p.recovery, strict=True):
            if new != old:
                bins = self._marks[key]
                bins[slot] = bins.get(slot, 0) + new - old
        p.recovery = seen

    def _share_pacing(self) -> None:
        """The pacing rate is the host's line rate: connections sending at once split it evenly, as a
        NIC's scheduler would, so that together they never outrun the NICs into the host backlog. A
        single-path connection (QP) has one NIC: it splits that NIC's rate with the others on its plane. NICs
        that are down carry nothing, so sprayed connections share the rate of those left."""
        planes = self._plan.planes
        if any(not p.conn.config.single_path for p in self._busy):  # sprayed ones over every NIC: an even share
            up = planes - bin(self._nic_down & ((1 << planes) - 1)).count("1")
            share = max(up, 1) / planes / max(1, len(self._busy))
            for p in self._busy:
                p.conn.set_pace_share(share)
            return
        on_plane: dict[int, list[Peer]] = {}
        for p in self._busy:
            on_plane.setdefault(self._plane_of(p.evs[0]), []).append(p)
        for peers in on_plane.values():
            for p in peers:
                p.conn.set_pace_share(1.0 / (planes * len(peers)))

    def _delivered(self, conn_id: int, peer: int, msg: int, data: bytearray) -> None:
        verified = self._payloads.matches(peer, self._host, msg, data)
        now = self._clock()
        self._emit(Delivered(conn_id, peer, msg, len(data), verified, now))
        if verified:
            self.counters["bytes_verified"] += len(data)
        else:
            self.counters["verify_failures"] += 1
            self._emit(Failed(conn_id, peer, msg, "payload_mismatch", now))

    def stats(self) -> dict:
        """Counters summed over connections, and some of each on its own (`CONNECTION_KEYS`); EV states, last
        DATA send and DATA packets per (peer, EV) of sending ones."""
        totals: dict[str, int] = {}
        ev_states = {state.name: 0 for state in EvState}
        last_send: dict[str, dict[str, float]] = {}
        ev_sent: dict[str, dict[str, int]] = {}  # peer -> EV -> DATA packets, over connections
        rtts = []
        hist: dict[int, int] = {}
        connections = []
        for p in self._peers.values():
            conn = p.conn
            mine = conn.counters.as_dict()
            for name, value in mine.items():
                totals[name] = totals.get(name, 0) + value
            connections.append({"conn": conn.conn_id, "peer": p.peer, **{k: mine.get(k, 0) for k in CONNECTION_KEYS}})
            if not p.sending:
                continue
            per_ev = last_send.setdefault(str(p.peer), {})
            sent = ev_sent.setdefault(str(p.peer), {})
            for ev in p.evs:
                ev_states[conn.ev_state(ev).name] += 1
                t = conn.ev_last_send(ev)
                if t is not None and t > per_ev.get(str(ev), 0.0):
                    per_ev[str(ev)] = t
                n = conn.ev_sent(ev)
                if n:
                    sent[str(ev)] = sent.get(str(ev), 0) + n
            if conn.min_rtt is not None:
                rtts.append(conn.min_rtt)
            for bucket, n in conn.rtt_histogram.items():
                hist[bucket] = hist.get(bucket, 0) + n
        own = self.counters
        counters = {
            "data_sent": totals.get("data_sent", 0),
            "retransmitted": totals.get("retransmitted", 0),
            "trimmed": totals.get("trimmed", 0),
            "timeouts": totals.get("timeouts", 0),
            "nacks": totals.get("nacks", 0),
            "probes": totals.get("probes", 0),
            "warm_probes": totals.get("warm_probes", 0),
            "warm_replies": totals.get("warm_replies", 0),
            "bytes_sent": own["bytes_sent"],
            "bytes_delivered": totals.get("bytes_delivered", 0),
            "bytes_verified": own["bytes_verified"],
            "messages_sent": own["messages_sent"],
            "messages_completed": totals.get("messages_completed", 0),
            "messages_failed": (totals.get("messages_failed", 0) + totals.get("digest_failures", 0)
                                + own["verify_failures"]),
            "wire_payload_bytes": totals.get("bytes_sent", 0),
        }
        for name in ("sacks", "lost", "ev_retired", "ev_restored", "paths_retired", "paths_restored",
                     "retirements_undone",
                     "paths_held", "skips", "duplicates", "malformed", "digest_failures", "ce_received", "ecn_skips"):
            counters[name] = totals.get(name, 0)
        for name in ("verify_failures", "send_retries", "socket_errors", "strangers", "nic_down_discards"):
            counters[name] = own[name]
        marks = {key: {str(slot): n for slot, n in bins.items()} for key, bins in self._marks.items() if bins}
        self._marks = {key: {} for key in RECOVERY_KEYS}  # each stats reply carries what is new since the last
        return {"counters": counters, "ev_states": ev_states, "last_send": last_send, "ev_sent": ev_sent,
                "marks": marks, "connections": connections,
                "base_rtt_s": min(rtts) if rtts else None, "rtt_hist": {str(b): n for b, n in hist.items()}}

    # -- internals -------------------------------------------------------------------------------------

    def _peer_of(self, peer: int, conn_id: int) -> Peer:
        key = (peer, conn_id)
        p = self._peers.get(key)
        if p is None:
            config = self._config_of(conn_id)
            evs = self._evs_for(peer, conn_id, config)
            conn = Connection(conn_id, evs, self._plane_of, config=config, ev_path=self.ev_path,
                              first_slot=conn_id * FIRST_SLOT_MIX >> 16, departures=self._departures)
            if self._nic_down:
                conn.set_nic_down(self._nic_down, self._clock())
            p = self._peers[key] = Peer(peer, conn, evs)
        return p

    def _config_of(self, conn_id: int) -> TransportConfig:
        """The configuration of a connection: its workload's (by its QP index), else the agent's."""
        qp = conn_qp(conn_id)
        return next((config for first, end, config in self._qp_configs if first <= qp < end), self._config)

    def _evs_for(self, peer: int, conn_id: int, config: TransportConfig) -> list[int]:
        """The pool's first ``ev_count + ev_spares`` EVs; in single-path mode the one a flow hash of (src, dst, conn)
        picks."""
        pool = self._ev_pool
        if config.single_path:
            return [pool[flow_hash(self._host, peer, conn_id) % self._hashed]]
        return pool[:config.ev_count + config.ev_spares]

    def _plane_of(self, ev: int) -> int:
        return self._plan.ev_path(ev)[0]


def configure(options: dict, mtu: int, single_path: bool, *, pace_slack: float = TIMER_GRANULARITY,
              pace_ahead: float = PACE_AHEAD) -> TransportConfig:
    """The transport's configuration: the scenario's options over the endpoint's defaults. ``mss`` fills the
    MTU. ``sack_delay`` is 0: an owner takes a connection's answers once per service, which already coalesces
    the SACKs of what one service received. ``pace_slack`` is the owner's timer granularity (the agent loop's
    by default): a service sends what the pacer would release before the owner could service the connection
    again. ``pace_ahead``: the bursts a pacing wake-up hands out (the agent's by default; 0 for an owner whose
    timers are exact, as the simulator's)."""
    config = for_mtu({"sack_delay": 0.0, "pace_slack": pace_slack, "pace_ahead": pace_ahead, **options}, mtu)
    return dataclasses.replace(config, single_path=True) if single_path else config
