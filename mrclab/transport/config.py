"""Every knob of the MRC transport, with its default; a scenario's ``transport_options`` feed it.

Times are seconds, sizes bytes. Defaults suit the shipped labs: 25-100 Mbit ports, 64 KiB switch
queues, MTU 9000, Python agents whose timers are good to about a millisecond; the runner derives
pacing and the delay target from the topology's links (``link_defaults``).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..units import seconds, size_bytes
from .congestion import CONGESTION_CONTROLS
from .wire import DATA_HEADER_LEN, ETHERNET_HEADER, IP_UDP_OVERHEAD, MAX_PAYLOAD

CC_TARGET_DELAY_FLOOR = 0.004  # s: the delay target's default, and its floor when the links set it


@dataclass(frozen=True)
class TransportConfig:
    mss: int = 8192
    """Payload bytes per DATA packet. The UDP payload is mss plus the MRC header, so mss fits an MTU up to
    :func:`mss_for_mtu` (MTU - 96: the IPv6, UDP and MRC headers)."""
    ev_count: int = 64
    """Active EVs per connection, spread evenly over planes; EVs given beyond this wait in reserve."""
    ev_spares: int = 1 << 16
    """EVs an owner gives a connection beyond ``ev_count``, in reserve to replace retired ones (the agent gives every
    path of the fabric, up to this many). 0 keeps a connection to its ``ev_count`` EVs, as in an experiment that
    pins flows to chosen paths."""
    ev_min_active: int = 2
    """Retirement never leaves fewer usable EVs than this (losses then retransmit on the survivors)."""
    probe_interval: float = 0.005
    """Seconds between probes of each bad path (each ASSUMED_BAD EV without ``ev_path``). A path comes back
    ``probe_successes`` intervals after it heals at the soonest; 5 ms is a few RTTs of the lab, well above its
    timer granularity, and costs one 24-byte probe per bad path per 5 ms (200/s) - noise beside the data."""
    probe_interval_max: float = 0.1
    """Ceiling of the probe back-off: an unanswered probe doubles the path's interval up to this, so a
    path that stays dead costs 10 probes/s per connection; a restored one is found within this plus
    ``probe_successes`` fast probes."""
    probe_successes: int = 3
    """Consecutive probe replies that bring an ASSUMED_BAD EV back to GOOD."""
    rto_min: float = 0.05
    """Floor of the retransmission timeout (srtt + 4 rttvar, per packet). A timeout retires the packet's path, so
    it must sit above the fabric's worst RTT: the userspace-OVS lab shows up to ~20 ms at idle. Losses are found
    by RACK long before this whenever later packets are acknowledged; the timeout is the last resort."""
    rto_initial: float = 0.1
    """Retransmission timeout before the first RTT sample."""
    rto_max: float = 0.5
    """Ceiling of the exponentially backed-off timeout."""
    max_retransmits: int = 50
    """Losses of one packet (found by RACK or a timeout) before the connection fails, as RC's retry_cnt counts
    timeouts. A trim NACK never counts: it says the fabric is busy, not that a path is dead."""
    reorder_window: float = 0.002
    """RACK: a packet sent before one already SACKed is lost once outstanding this long beyond that packet's RTT.
    The window used is the largest of this, the base RTT, ``reorder_rttvar`` x rttvar and what packets wrongly
    declared lost so far would have needed, capped at ``reorder_window_max``."""
    reorder_rttvar: float = 4.0
    """Multiple of the RTT variance in the reorder window (how far paths' delays spread)."""
    reorder_window_max: float = 0.02
    """Ceiling of the reorder window: past it a failed path costs more time than a false alarm, which probing
    (or the late packet's own SACK) undoes."""
    hold_window: float = 0.0005
    """A packet outstanding this long beyond the RTT of a later packet of its plane that was delivered holds its
    path: no new data goes there until the packet is acknowledged or declared lost. Holding costs a path a few
    turns, where a false loss costs a retransmission and a retirement, so it can act a reorder window sooner and
    on the latest RTT alone. On the default lab over Linux routers, 0.5 ms held a cut path after 13-16 ms where
    2 ms took 21-52 ms, at the same goodput (docs/performance.md). A large value (1 s) turns holding off."""
    skip_rtts: float = 2.0
    """An EV whose packet came back with an ECN echo sits out its turns for this many smoothed RTTs (and one turn
    at least, as after a trim NACK): long enough for the marked queue to drain while spraying goes elsewhere."""
    sack_every: int = 4
    """The receiver SACKs every N data packets (and at once on ECN, duplicates and message completion)."""
    sack_delay: float = 0.0002
    """...or this long after the first packet it has not yet acknowledged (0: with the next datagrams the owner
    takes; the agents take them once per wake-up, so what one wake-up received shares one SACK)."""
    cc: bool = True
    """Congestion control on; off, the window stays at cc_max_window and the rate at the pacer's."""
    cc_algorithm: str = "nscc"
    """The congestion control (a row of :data:`~mrclab.transport.congestion.CONGESTION_CONTROLS`): ``nscc``, MRC's
    delay- and trim-driven window, or ``dcqcn``, RoCE's ECN-driven rate (the ``roce`` transport's)."""
    dcqcn_period: float = 0.001
    """DCQCN's period: at most one rate cut per period, and one step of recovery per period without a CNP."""
    dcqcn_g: float = 1 / 16
    """DCQCN's gain of alpha, the running share of periods that brought a CNP (a cut takes alpha/2)."""
    dcqcn_ai: float = 0.02
    """DCQCN's additive increase of the target rate per period, as a fraction of the line rate."""
    cc_init_window: int = 131072
    """Initial congestion window, bytes."""
    cc_max_window: int = 4 << 20
    """Largest congestion window, bytes."""
    cc_base_rtt: float = float("inf")
    """RTT of an idle path, if known (NSCC configures it network-wide); the lowest RTT measured is used when lower,
    so the default (inf) means "measure". A flow that starts into a standing queue overestimates it on its own."""
    cc_target_delay: float = CC_TARGET_DELAY_FLOOR
    """Queueing delay (RTT minus base RTT) the window aims for. It must exceed the delay noise of an idle fabric,
    or noise reads as queueing: the userspace-OVS lab's idle RTT is ~1 ms at best, ~3 ms typical."""
    cc_delay_filter: int = 1
    """The delay the window reacts to is the lowest of the last this-many RTT samples (1: the latest). Larger
    values read less jitter as queueing and see a queue build more slowly (see :mod:`.cc`)."""
    cc_ai: float = 1.0
    """Additive increase, MSS per RTT, while delay is under target."""
    cc_fi: float = 1.0
    """Proportional increase: window fraction per RTT at zero queueing, tapering to 0 at the target."""
    cc_md: float = 0.5
    """Largest delay-driven decrease (fraction of the window), at most once per RTT."""
    cc_trim_md: float = 0.3
    """Decrease on a trim NACK or ECN echo, at most once per RTT."""
    pace_rate: float = 0.0
    """Bytes of UDP payload per second the sender hands to its NICs at most, all planes together (0: no
    pacing). A real NIC puts a packet on the wire at line rate; a sender that hands it a whole window at
    once dates every packet by the handing, so the tail of the burst, queued on the host, looks late to
    RTT sampling, to RACK and to the retransmission timeout. The runner sets it to the host's line rate."""
    pace_depth: int = 0
    """Bytes the pacer may send back to back after a pause (its bucket); at least one packet when pacing.
    The runner sets two packets per plane: enough to refill each NIC's queue after the agent slept, little
    enough that the host queue stays a couple of packets deep."""
    pace_slack: float = 0.0
    """Seconds ahead of its time a paced packet may leave: the owner's timer granularity. An owner that wakes
    for anything (a SACK, another timer) sends what falls due before it could wake again, instead of waking
    once more for it; the bucket runs that far into debt, so the rate is kept."""
    pace_ahead: float = 0.0
    """Seconds of the pacer's schedule handed to the NICs at once, in bursts: a sender woken for pacing (or
    anything else) sends what falls due within this, and asks to wake again only when the next packet is
    ``pace_slack`` from due, so each pacing wake-up carries several packets while the NICs, each draining at
    ``nic_rate``, put them on the wire at line rate. Each DATA packet is then dated by when its NIC sends it,
    not when it was handed over (an owner's model of its NICs: :mod:`.departures`), so RTT samples, loss
    detection and the pacing rate mean what they mean without bursts. Needs ``nic_rate``; 0 (or less than
    ``pace_slack``): no bursts."""
    nic_rate: float = 0.0
    """Bytes of UDP payload per second one of the host's NICs puts on the wire (its line rate; 0: unknown): what
    ``pace_ahead`` dates packets by. The runner sets it from the host links."""
    single_path: bool = False
    """One EV per connection, never retired, never probed (the ``single-path`` and ``roce`` transports)."""
    go_back_n: bool = False
    """RoCE RC's reliability: the receiver takes packets in order only and NAKs the first gap; the sender resends
    everything from the NAKed packet, or on a timeout from the oldest unacknowledged one."""
    max_message: int = 1 << 30
    """Largest message a receiver accepts (it allocates the whole buffer on the first packet)."""

    def __post_init__(self) -> None:
        checks = (
            ("mss", 1 <= self.mss <= MAX_PAYLOAD, f"between 1 and {MAX_PAYLOAD}"),
            ("ev_count", self.ev_count >= 1, ">= 1"),
            ("ev_spares", self.ev_spares >= 0, ">= 0"),
            ("ev_min_active", 1 <= self.ev_min_active <= self.ev_count, "between 1 and ev_count"),
            ("probe_interval", self.probe_interval > 0, "> 0"),
            ("probe_interval_max", self.probe_interval_max >= self.probe_interval, ">= probe_interval"),
            ("probe_successes", self.probe_successes >= 1, ">= 1"),
            ("rto_min", 0 < self.rto_min <= self.rto_max, "> 0 and <= rto_max"),
            ("rto_initial", self.rto_initial > 0, "> 0"),
            ("max_retransmits", self.max_retransmits >= 0, ">= 0"),
            ("reorder_window", self.reorder_window >= 0, ">= 0"),
            ("reorder_rttvar", self.reorder_rttvar >= 0, ">= 0"),
            ("reorder_window_max", self.reorder_window_max >= self.reorder_window, ">= reorder_window"),
            ("hold_window", self.hold_window >= 0, ">= 0"),
            ("skip_rtts", self.skip_rtts >= 0, ">= 0"),
            ("sack_every", self.sack_every >= 1, ">= 1"),
            ("sack_delay", self.sack_delay >= 0, ">= 0"),
            ("cc_init_window", self.cc_init_window >= 1, ">= 1"),
            ("cc_max_window", self.cc_max_window >= self.mss, ">= mss"),
            ("cc_base_rtt", self.cc_base_rtt > 0, "> 0"),
            ("cc_target_delay", self.cc_target_delay > 0, "> 0"),
            ("cc_delay_filter", self.cc_delay_filter >= 1, ">= 1"),
            ("cc_ai", self.cc_ai >= 0, ">= 0"),
            ("cc_fi", self.cc_fi >= 0, ">= 0"),
            ("cc_md", 0 < self.cc_md < 1, "between 0 and 1"),
            ("cc_trim_md", 0 <= self.cc_trim_md < 1, "between 0 and 1"),
            ("max_message", self.max_message >= 0, ">= 0"),
            ("cc_algorithm", self.cc_algorithm in CONGESTION_CONTROLS, f"one of {', '.join(CONGESTION_CONTROLS)}"),
            ("dcqcn_period", self.dcqcn_period > 0, "> 0"),
            ("dcqcn_g", 0 < self.dcqcn_g <= 1, "between 0 and 1"),
            ("dcqcn_ai", 0 <= self.dcqcn_ai <= 1, "between 0 and 1"),
            ("pace_rate", self.pace_rate >= 0, ">= 0"),
            ("pace_slack", self.pace_slack >= 0, ">= 0"),
            ("pace_ahead", self.pace_ahead >= 0, ">= 0"),
            ("nic_rate", self.nic_rate >= 0, ">= 0"),
            ("pace_depth", self.pace_rate == 0 or self.pace_depth >= self.packet_size,
             f">= one packet (mss + {DATA_HEADER_LEN}) when pace_rate is set"),
        )
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"transport option {name}={getattr(self, name)!r}: must be {allowed}")

    @property
    def packet_size(self) -> int:
        """Largest UDP payload this configuration sends."""
        return DATA_HEADER_LEN + self.mss

    @staticmethod
    def link_defaults(link_rate_bps: int, mtu: int, planes: int) -> dict[str, float | int]:
        """Defaults that depend on the host links the transport runs over (the runner knows them; the
        state machine does not).

        ``cc_target_delay``: six full packets' serialization at the host link, at least 4 ms. Below
        that, a sender's own NIC queue (a few packets, its socket buffer) already reads as congestion
        and the window starves: measured on the default lab at 25 Mbit, 4 ms reached 37% of line rate,
        10 ms 41%, 17 ms (this rule) 47%; 50 ms overshot into trims.

        ``pace_rate``: the host's line rate over all planes, in UDP payload bytes (a frame adds
        Ethernet, IPv6 and UDP headers to the payload); ``nic_rate``: one NIC's; ``pace_depth``: two full
        packets per plane."""
        payload = mtu - IP_UDP_OVERHEAD
        nic_rate = link_rate_bps / 8 * payload / (mtu + ETHERNET_HEADER)
        return {"cc_target_delay": max(CC_TARGET_DELAY_FLOOR, 6 * mtu * 8 / link_rate_bps),
                "pace_rate": planes * nic_rate, "nic_rate": nic_rate, "pace_depth": planes * 2 * payload}

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> TransportConfig:
        """Build from a scenario's ``transport_options``; unknown keys and wrong types raise ValueError."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in (options or {}).items():
            if key not in fields:
                raise ValueError(f"unknown transport option {key!r}; allowed: {', '.join(sorted(fields))}")
            kind = type(fields[key].default)
            if kind is float and type(value) is int:
                value = float(value)
            if type(value) is not kind:
                raise ValueError(f"transport option {key!r} must be {kind.__name__}, got {value!r}")
            values[key] = value
        return cls(**values)


UNITS: dict[str, str] = {
    "mss": "bytes", "ev_count": "count", "ev_spares": "count", "ev_min_active": "count", "probe_interval": "s",
    "probe_interval_max": "s", "probe_successes": "count", "rto_min": "s", "rto_initial": "s", "rto_max": "s",
    "max_retransmits": "count", "reorder_window": "s", "reorder_rttvar": "x", "reorder_window_max": "s",
    "hold_window": "s", "skip_rtts": "x", "sack_every": "count", "sack_delay": "s", "cc": "bool",
    "cc_init_window": "bytes", "cc_max_window": "bytes", "cc_base_rtt": "s", "cc_target_delay": "s",
    "cc_delay_filter": "count", "cc_algorithm": "name", "dcqcn_period": "s", "dcqcn_g": "x", "dcqcn_ai": "x",
    "cc_ai": "x", "cc_fi": "x", "cc_md": "x", "cc_trim_md": "x", "pace_rate": "bytes/s", "pace_depth": "bytes",
    "pace_slack": "s", "pace_ahead": "s", "nic_rate": "bytes/s", "single_path": "bool", "go_back_n": "bool",
    "max_message": "bytes",
}
"""The unit of every option: ``s`` takes ``5ms`` or a number of seconds, ``bytes`` takes ``64KiB`` or a number,
``count`` a whole number, ``x`` a plain number, ``bytes/s`` a number, ``name`` a string (`PARSERS`). Ranges are
`TransportConfig`'s checks; no value may exceed the ceiling of its unit (`CEILINGS`), so no option is infinite
or absurd."""
CEILINGS = {"s": 3600.0, "bytes": float(1 << 32), "count": float(1 << 20), "x": 1e6, "bytes/s": 1e12}


def mss_for_mtu(mtu: int) -> int:
    """Payload bytes per DATA packet that fill, and do not exceed, one MTU."""
    return mtu - IP_UDP_OVERHEAD - DATA_HEADER_LEN


def _typed(kind: tuple[type, ...], what: str) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        ok = isinstance(value, kind) and (bool in kind or not isinstance(value, bool))
        if not ok:
            raise ValueError(f"expected {what}, got {value!r:.40}")
        return float(value) if kind == (int, float) else value
    return parse


PARSERS: dict[str, Callable[[Any], Any]] = {
    "s": seconds, "bytes": size_bytes, "count": _typed((int,), "a whole number"),
    "x": _typed((int, float), "a number"), "bytes/s": _typed((int, float), "a number"),
    "bool": _typed((bool,), "true or false"), "name": _typed((str,), "a name"),
}
"""How a scenario's value of each unit becomes the config's (seconds, bytes, ...)."""


def parse_option(name: str, value: Any) -> Any:
    """A scenario's value of option `name` in the config's own terms (seconds, bytes); ValueError naming it."""
    unit = UNITS.get(name)
    if unit is None:
        raise ValueError(f"unknown transport option {name!r}; allowed: {', '.join(sorted(UNITS))}")
    try:
        parsed: Any = PARSERS[unit](value)
        if unit in CEILINGS and (not math.isfinite(parsed) or abs(parsed) > CEILINGS[unit]):
            raise ValueError(f"must be finite and at most {CEILINGS[unit]:g} {unit}")
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"transport option {name} ({unit}): {exc}") from None
    return parsed


def validate_options(options: Mapping[str, Any], *, mtu: int, link_rate_bps: int, planes: int) -> dict[str, Any]:
    """A scenario's ``transport_options`` parsed and checked as the agents will use them, over the defaults
    that follow from the links; ValueError naming the first option that cannot run."""
    parsed = {name: parse_option(name, value) for name, value in options.items()}
    for_mtu({**TransportConfig.link_defaults(link_rate_bps, mtu, planes), **parsed}, mtu)
    return parsed


def for_mtu(options: Mapping[str, Any], mtu: int) -> TransportConfig:
    """The configuration of `options`, ``mss`` filling the MTU unless set; ValueError when it cannot run."""
    config = TransportConfig.from_options({"mss": mss_for_mtu(mtu), **options})
    if config.mss > mss_for_mtu(mtu):
        raise ValueError(f"transport option mss={config.mss} does not fit MTU {mtu} (at most {mss_for_mtu(mtu)})")
    return config
