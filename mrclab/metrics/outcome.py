"""The raw record of an executed workload: what the runner saw, before metrics turn it into results.json.

Messages are keyed by `MessageKey` (connection, message number = step); the other records
are one frozen value per step, fired action, unfired event, EV state change and NIC change.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import NamedTuple


class MessageKey(NamedTuple):
    conn: int
    msg: int


@dataclass(frozen=True)
class Posted:
    size: int
    at: float  # monotonic


@dataclass(frozen=True)
class Delivery:
    t: float  # monotonic, as the receiver's agent saw it
    bytes: int
    verified: bool


@dataclass(frozen=True)
class Step:
    index: int
    start_s: float
    duration_s: float


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


@dataclass(frozen=True)
class Unfired:
    """An event placed after the workload ended."""

    event_index: int
    action: str
    target: str
    t_s: float


@dataclass(frozen=True)
class EvChange:
    t_s: float
    host: str
    peer: str
    ev: int
    plane: int
    spine: str
    old: str
    new: str


@dataclass(frozen=True)
class NicChange:
    """A host's NIC on a plane went down (lost its link) or came back, as ``seen_by`` heard of it: the host itself
    (netlink), or a peer (the bitmap in the host's SACKs)."""

    t_s: float
    host: str
    plane: int
    state: str  # "down" | "up"
    seen_by: str


@dataclass
class Outcome:
    """Filled in by the runner's step loop; read by `metrics.results` and `metrics.document`."""

    t0: float = 0.0
    t_end: float = 0.0
    steps: list[Step] = field(default_factory=list)  # the first workload's (a collective's)
    ideal_s: list[float] = field(default_factory=list)  # ... and a perfect fabric's time for each
    workload_steps: dict[str, list[tuple[Step, float]]] = field(default_factory=dict)  # name -> (step, ideal_s)
    workload_of: dict[MessageKey, int] = field(default_factory=dict)  # message -> its workload's index
    posted: dict[MessageKey, Posted] = field(default_factory=dict)
    delivered: dict[MessageKey, Delivery] = field(default_factory=dict)
    completed: dict[MessageKey, float] = field(default_factory=dict)  # monotonic time its sender saw it acknowledged
    failed: dict[MessageKey, str] = field(default_factory=dict)  # why
    fired: list[Fired] = field(default_factory=list)
    unfired: list[Unfired] = field(default_factory=list)
    ev_changes: list[EvChange] = field(default_factory=list)
    nic_changes: list[NicChange] = field(default_factory=list)
    sample_times: dict[int, float] = field(default_factory=dict)  # sampling round -> t_s
    aborted: str | None = None
    # (from, to) -> DATA packets senders put into a downed hop
    sent_into_faults: dict[tuple[str, str], int] = field(default_factory=dict)

    def record_step(self, workload: str, step: Step, ideal_s: float, *, first: bool) -> None:
        """A finished step of the named workload; the first workload's also go to `steps` and `ideal_s`."""
        if first:
            self.steps.append(step)
            self.ideal_s.append(ideal_s)
        self.workload_steps.setdefault(workload, []).append((step, ideal_s))

    def finished_at(self, keys: Iterable[MessageKey]) -> float | None:
        """When the last of these messages was delivered *and* acknowledged to its sender: the step is over
        only then, since the next one cannot start before (a lost acknowledgement stalls it as surely as
        lost data). None when none was delivered."""
        ends = [max(self.delivered[k].t, self.completed.get(k, 0.0)) for k in keys if k in self.delivered]
        return max(ends, default=None)

    def status(self, key: MessageKey) -> str:
        """"completed" (delivered, verified and acknowledged), "failed", or "unfinished" (still out)."""
        if key in self.failed:
            return "failed"
        return "completed" if key in self.delivered and key in self.completed else "unfinished"

    @property
    def wall_s(self) -> float:
        return self.t_end - self.t0

    @property
    def delivered_bytes(self) -> int:
        return sum(d.bytes for d in self.delivered.values())


def rows(records: Iterable) -> list[dict]:
    """Frozen records as results.json rows."""
    return [asdict(r) for r in records]
