"""The raw record of an executed workload: what the runner saw, before metrics turn it into results.json.

Messages are keyed by `MessageKey` (connection, message number = step); the other records
are one frozen value per step, fired action, unfired event, EV state change and NIC change.
"""
from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import NamedTuple

from ..addressing import conn_hosts
from .records import Records


class MessageKey(NamedTuple):
    conn: int
    msg: int


@dataclass(frozen=True, slots=True)
class Posted:
    size: int
    at: float  # monotonic


@dataclass(frozen=True, slots=True)
class Delivery:
    t: float  # monotonic, as the receiver's agent saw it
    bytes: int
    verified: bool


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    start_s: float
    duration_s: float
    ideal_s: float  # a perfect fabric's time for it


@dataclass(frozen=True, slots=True)
class Span:
    """An op of a replayed trace in one of its iterations: when it started and ended (seconds since t0)."""

    iteration: int
    op: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Fired:
    """An action the fabric applied; `avoid_s` and `sent_into_fault` once its path cut was measured."""

    t_s: float
    action: str
    target: str
    event_index: int
    rate: float | None = None
    avoid_s: float | None = None
    sent_into_fault: int | None = None  # set, with avoid_s, when the cut was measured

    def to_dict(self) -> dict:
        out = {"t_s": self.t_s, "action": self.action, "target": self.target, "event_index": self.event_index}
        if self.rate is not None:
            out["rate"] = self.rate
        if self.sent_into_fault is not None:
            out.update(avoid_s=self.avoid_s, sent_into_fault=self.sent_into_fault)
        return out


@dataclass(frozen=True, slots=True)
class Unfired:
    """An event placed after the workload ended."""

    event_index: int
    action: str
    target: str
    t_s: float


@dataclass(frozen=True, slots=True)
class EvChange:
    t_s: float
    host: str
    peer: str
    ev: int
    plane: int
    spine: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class NicChange:
    """A host's NIC on a plane went down (lost its link) or came back, as ``seen_by`` heard of it: the host itself
    (netlink), or a peer (the bitmap in the host's SACKs)."""

    t_s: float
    host: str
    plane: int
    state: str  # "down" | "up"
    seen_by: str


@dataclass
class Totals:
    """One workload's messages, summed as they are posted and delivered: what its row of results.json needs."""

    sent: int = 0
    completed: int = 0
    bytes_sent: int = 0
    delivered: int = 0
    verified: int = 0
    in_window: int = 0  # verified bytes delivered within a stream's duration


@dataclass(frozen=True)
class Bins:
    """How a stream's deliveries are binned: `bin_s` wide, `count` of them from t0, within `window_s`."""

    bin_s: float
    count: int
    window_s: float


@dataclass
class Outcome:
    """Filled in by the run's loop; read by `metrics.results` and `metrics.document`.

    Memory stays flat however long a run lasts: a message is kept only while it is out; once it completes or
    fails it leaves one row through `rows` (messages.csv, written as the run goes) and its figures in `totals`
    and `bins`. Failures keep their reason (they are few, and each matters)."""

    t0: float = 0.0
    t_end: float = 0.0
    started: bool = False  # the workload's clock started (t0 is set; 0.0 is a time like any other on sim)
    steps: Records[Step] = field(default_factory=lambda: Records(Step))  # the first workload's (a collective's)
    workload_steps: dict[str, Records[Step]] = field(default_factory=dict)  # every workload's, by name
    workload_of: dict[MessageKey, int] = field(default_factory=dict)  # a message out -> its workload's index
    spans: dict[int, Records[Span]] = field(default_factory=dict)  # a trace workload's index -> its ops' spans
    posted: dict[MessageKey, Posted] = field(default_factory=dict)  # messages out
    delivered: dict[MessageKey, Delivery] = field(default_factory=dict)  # ... delivered, not yet acknowledged
    completed: dict[MessageKey, float] = field(default_factory=dict)  # ... acknowledged (monotonic), not delivered
    failed: dict[MessageKey, str] = field(default_factory=dict)  # every failed message: why
    ends: dict[MessageKey, float] = field(default_factory=dict)  # finished: when, until its workload takes it
    totals: dict[int, Totals] = field(default_factory=dict)  # workload index -> its figures
    bins: dict[tuple[int, int, int], list[float]] = field(default_factory=dict)  # (workload, src, dst) -> bytes
    binning: dict[int, Bins] = field(default_factory=dict)  # stream workloads' bins
    rows: Callable[[list], None] | None = None  # messages.csv: one row as each message finishes
    fired: list[Fired] = field(default_factory=list)
    unfired: list[Unfired] = field(default_factory=list)
    ev_changes: Records[EvChange] = field(default_factory=lambda: Records(EvChange))
    nic_changes: list[NicChange] = field(default_factory=list)
    sample_times: array = field(default_factory=lambda: array("d"))  # sampling round (index) -> t_s
    aborted: str | None = None
    # (from, to) -> DATA packets senders put into a downed hop
    sent_into_faults: dict[tuple[str, str], int] = field(default_factory=dict)

    def record_step(self, workload: str, step: Step, *, first: bool) -> None:
        """A finished step of the named workload; the first workload's are `steps` as well."""
        self.workload_steps.setdefault(workload, self.steps if first else Records(Step)).append(step)

    # -- a message's life ------------------------------------------------------------------------------

    def post(self, key: MessageKey, size: int, at: float, workload: int = 0) -> None:
        self.posted[key] = Posted(size, at)
        self.workload_of[key] = workload
        t = self.totals.setdefault(workload, Totals())
        t.sent += 1
        t.bytes_sent += size

    def deliver(self, key: MessageKey, delivery: Delivery, src: int, dst: int) -> None:
        """The receiver's agent delivered it (``verified``: every byte checked); a mismatch fails it."""
        workload = self.workload_of.get(key)
        if workload is None or key in self.delivered:
            return  # finished already, or never ours
        self.delivered[key] = delivery
        t = self.totals[workload]
        t.delivered += delivery.bytes
        if delivery.verified:
            t.verified += delivery.bytes
            bins = self.binning.get(workload)
            if bins is not None and delivery.t - self.t0 < bins.window_s:
                t.in_window += delivery.bytes
                slot = int((delivery.t - self.t0) / bins.bin_s)
                if 0 <= slot < bins.count:
                    self.bins.setdefault((workload, src, dst), [0.0] * bins.count)[slot] += delivery.bytes
        else:
            self.failed[key] = "bytes did not match what was sent"
        self._settle(key)

    def complete(self, key: MessageKey, t: float) -> None:
        """Its sender saw it acknowledged."""
        if key in self.workload_of:
            self.completed[key] = t
            self._settle(key)

    def fail(self, key: MessageKey, why: str) -> None:
        if key in self.workload_of:
            self.failed.setdefault(key, why)
            self._settle(key)

    def _settle(self, key: MessageKey) -> None:
        """A message that completed or failed leaves its row and its end time, and is forgotten."""
        status = self.status(key)
        if status == "unfinished":
            return
        posted, delivery = self.posted.pop(key), self.delivered.pop(key, None)
        acked = self.completed.pop(key, None)
        workload = self.workload_of.pop(key)
        if status == "completed":
            self.totals[workload].completed += 1
        if delivery is not None:
            self.ends[key] = max(delivery.t, acked or 0.0)
        self._row(key, posted, delivery, status)

    def close(self) -> None:
        """At the end of the run: the rows of the messages still out (unfinished: they count as failed)."""
        for key in list(self.posted):
            status = self.status(key)
            self._row(key, self.posted.pop(key), self.delivered.pop(key, None), status)

    def _row(self, key: MessageKey, posted: Posted, delivery: Delivery | None, status: str) -> None:
        if self.rows is not None:
            src, dst = conn_hosts(key.conn)
            self.rows([key.msg, f"h{src}", f"h{dst}", posted.size, round(posted.at - self.t0, 6),
                       round(delivery.t - self.t0, 6) if delivery else "", status])

    def status(self, key: MessageKey) -> str:
        """"completed" (delivered, verified and acknowledged), "failed", or "unfinished" (still out)."""
        if key in self.failed:
            return "failed"
        if key not in self.posted:
            return "completed"  # finished, and not failed
        return "completed" if key in self.delivered and key in self.completed else "unfinished"

    # -- totals ----------------------------------------------------------------------------------------

    @property
    def wall_s(self) -> float:
        return self.t_end - self.t0

    def total(self) -> Totals:
        """Every workload's figures together."""
        names = [f.name for f in fields(Totals)]
        return Totals(*(sum(getattr(t, name) for t in self.totals.values()) for name in names))

    @property
    def ideal_time_s(self) -> float:
        """A perfect fabric's time for the first workload's steps."""
        return sum(self.steps.column("ideal_s"))

    @property
    def delivered_bytes(self) -> int:
        return sum(t.delivered for t in self.totals.values())


def rows(records: Iterable) -> list[dict]:
    """Frozen records as results.json rows."""
    return [asdict(r) for r in records]
