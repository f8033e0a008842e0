"""The loop of a run: its workloads side by side, each driven by its own `Driver` (a collective posts a step's
transfers and waits for their last byte; a stream keeps transfers going for its duration; a trace's replay runs
its ops as their dependencies finish, in `replay`), while faults are applied as their time comes.

It fills an `Outcome` (metrics.outcome) from the agents' events, snapshots the senders' last
sends around each path cut for `avoid_s`, and samples the agents' counters every
`SAMPLE_INTERVAL_S` of the engine's clock (or what the run sets); the runner owns everything around it (the
lab, teardown, the files).
"""
from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from . import timeline
from .actions import ACTIONS, clears_target
from .addressing import conn_hosts, conn_id
from .agent.messages import Completed, Delivered, EvChanged, Failed, NicChanged, Report, Stats
from .agents import Agents
from .driver import Driver
from .metrics import avoid
from .metrics.outcome import Bins, Delivery, EvChange, Fired, MessageKey, NicChange, Outcome, Step, Unfired
from .progress import Progress
from .replay import Replay
from .routing import ROUTINGS
from .spec import Scenario, Workload
from .workload import ideal_step_seconds, step_transfers
from .workload.trace_plan import replay_pairs

log = logging.getLogger("mrclab.runner")  # runner.log names the run's lines alike, wherever they come from


def qp_bases(scenario: Scenario) -> list[int]:
    """The first QP index of each workload: workloads of one run use connections of their own."""
    bases, base = [], 0
    for w in scenario.workloads:
        bases.append(base)
        base += w.connections
    return bases


def workload_pairs(scenario: Scenario, index: int) -> set[tuple[str, str]]:
    """Every (src, dst) the workload sends on."""
    w = scenario.workloads[index]
    if w.stream:
        return set(w.flows)
    if w.trace is not None:
        return replay_pairs(w, scenario.topology)
    return {(t.src, t.dst) for step in range(w.steps) for t in step_transfers(w, step, scenario.seed)}


def warm_pairs(scenario: Scenario) -> list[tuple[str, int, int]]:
    """(host, connection, peer) of every connection the workloads will use, once each."""
    topo, out = scenario.topology, set()
    for index, base in enumerate(qp_bases(scenario)):
        for src, dst in workload_pairs(scenario, index):
            for qp in range(base, base + scenario.workloads[index].connections):
                out.add((src, conn_id(topo.host_index(src), topo.host_index(dst), qp), topo.host_index(dst)))
    return sorted(out)


SAMPLE_INTERVAL_S = 0.25
STREAM_DEPTH = 2  # messages a stream keeps outstanding per QP: one in flight while the next is acknowledged


@dataclass(frozen=True)
class _OpenCut:
    """A path cut awaiting its avoid_s snapshot: its record in `Outcome.fired`, when it happened, and the
    DATA packets per [src][dst][ev] senders had sent by then."""

    index: int
    t_mono: float
    sent: dict


class _Collective(Driver):
    """Steps separated by a barrier; each transfer split evenly over the pair's QPs."""

    def start(self) -> None:
        self.step = -1
        self.keys: set[MessageKey] = set()
        self.waiting: set[MessageKey] = set()  # the step's messages still out
        self._next_step()

    def _next_step(self) -> None:
        ex, o = self.ex, self.ex.outcome
        self.step += 1
        if self.step >= self.w.steps:
            self.done = True
            return
        if self.index == 0:  # at_step counts the first workload's steps
            for action in timeline.step_actions(ex.s.events, self.step, self.ex.clock() - o.t0):
                heapq.heappush(ex.queue, action)
            ex.fire_due()  # a fault at a step's start comes before its first packet
            ex.progress.step, ex.progress.step_started = self.step, self.ex.clock()
        transfers = step_transfers(self.w, self.step, ex.s.seed)
        self.ideal = ideal_step_seconds(transfers, ex.topo)
        self.started = self.ex.clock()
        self.keys = self.post_transfers(transfers, self.step)
        self.waiting = {k for k in self.keys if self.ex.outcome.status(k) == "unfinished"}

    def advance(self, finished: MessageKey | None) -> None:
        o = self.ex.outcome
        if finished is not None and finished in self.waiting and o.status(finished) != "unfinished":
            self.waiting.discard(finished)
        if self.done or self.waiting:  # a message finishes only by an event, which names it: no scan per poll
            return
        ends = [o.ends.pop(k) for k in self.keys if k in o.ends]  # delivered *and* acknowledged: the step is over
        last = max(ends) if ends else self.ex.clock()  # only then (a lost ACK stalls it as surely)
        o.record_step(self.w.name, Step(self.step, round(self.started - o.t0, 6), round(last - self.started, 6),
                                        self.ideal), first=self.index == 0)
        if self.index == 0:
            self.ex.progress.last_step_s = last - self.started
        self._next_step()


class _Stream(Driver):
    """Transfers kept going on every flow's QPs (``STREAM_DEPTH`` outstanding on each) until the duration ends;
    then what is out is waited for."""

    def start(self) -> None:
        self.end = self.ex.outcome.t0 + self.w.duration_s
        self.next_msg: dict[int, int] = {}
        self.flow_of: dict[int, tuple[str, str, int]] = {}
        self.out: set[MessageKey] = set()
        for src, dst in self.w.flows:
            for qp in range(self.w.connections):
                for _ in range(STREAM_DEPTH):
                    self._post(src, dst, qp)

    def _post(self, src: str, dst: str, qp: int) -> None:
        conn = conn_id(self.ex.topo.host_index(src), self.ex.topo.host_index(dst), self.qp_base + qp)
        msg = self.next_msg.get(conn, 0)
        self.next_msg[conn] = msg + 1
        self.flow_of[conn] = (src, dst, qp)
        self.out.add(self.post(src, dst, msg, self.w.message_bytes, qp))

    def advance(self, finished: MessageKey | None) -> None:
        if finished is not None and finished in self.out:
            self.out.discard(finished)
            self.ex.outcome.ends.pop(finished, None)
            if self.ex.clock() < self.end and finished not in self.ex.outcome.failed:
                self._post(*self.flow_of[finished.conn])
        if self.ex.clock() >= self.end:
            o = self.ex.outcome
            self.out = {k for k in self.out if o.status(k) == "unfinished"}
            self.done = not self.out


def driver_of(w: Workload) -> type[Driver]:
    """The driver of a workload: a trace's replay, a stream, or a collective's steps."""
    if w.trace is not None:
        return Replay
    return _Stream if w.stream else _Collective


class Execution:
    """One run's workloads, side by side; `run()` returns its Outcome."""

    def __init__(self, scenario: Scenario, fabric, agents: Agents, rows: Callable[[list], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sample_interval: float = SAMPLE_INTERVAL_S):
        """``rows`` takes messages.csv's row of each message as it finishes; ``clock`` is the engine's (the
        monotonic clock in the lab, simulated time in the simulator), ``sample_interval`` in its seconds."""
        self.s, self.fabric, self.agents, self.clock = scenario, fabric, agents, clock
        self.sample_interval = sample_interval
        self.topo = scenario.topology
        self.outcome = Outcome(rows=rows)
        for index, w in enumerate(scenario.workloads):
            if w.stream:
                self.outcome.binning[index] = Bins(w.bin_s, math.ceil(w.duration_s / w.bin_s - 1e-9), w.duration_s)
        self.progress = Progress(scenario.workload.steps, clock=clock, simulated=clock is not time.monotonic)
        self.queue: list[timeline.Action] = []
        self.open_cuts: dict[str, _OpenCut] = {}  # target -> its cut

    def run(self) -> Outcome:
        o, s = self.outcome, self.s
        o.t0, o.started = self.clock(), True
        deadline = o.t0 + s.duration_limit_s
        self.queue = list(timeline.timed_actions(s.events))
        heapq.heapify(self.queue)
        drivers = [driver_of(w)(self, i, base) for i, (w, base) in enumerate(zip(s.workloads, qp_bases(s),
                                                                                         strict=True))]
        try:
            self.fire_due()
            for driver in drivers:
                driver.start()
            self.fire_due()
            while not all(d.done for d in drivers):
                now = self.clock()
                if now >= deadline:
                    o.aborted = f"duration_limit of {s.duration_limit_s:g}s reached" + (
                        f" in step {self.progress.step}" if not s.workload.stream else "")
                    break
                next_action = self.queue[0].t_s + o.t0 if self.queue else deadline
                wake = min(d.wake for d in drivers)
                self.agents.poll(max(0.0, min(next_action, deadline, now + 0.05, wake) - now))
                for key, workload in self._drain_events():
                    drivers[workload].advance(key)
                for driver in drivers:
                    driver.advance(None)
                self.fire_due()
                self._sample_due()
        finally:  # a loop that stops on an error or a signal ends here too
            o.t_end = self.clock()
        self._snapshot_open_cuts()
        for action in sorted(self.queue):  # placed by time beyond the end of the workload
            if all(u.event_index != action.event_index for u in o.unfired):
                o.unfired.append(Unfired(action.event_index, action.action, action.target, round(action.t_s, 6)))
                log.warning("event %d (%s %s at %.3f s) never fired: the workload ended at %.3f s",
                            action.event_index, action.action, action.target, action.t_s, o.t_end - o.t0)
        return o

    def _sample_due(self) -> None:
        o = self.outcome
        now = self.clock() - o.t0
        interval = self.sample_interval
        if now - (o.sample_times[-1] if o.sample_times else -interval) >= interval:
            o.sample_times.append(round(now, 6))
            self.agents.sample()  # its round number is the index of this time

    def _drain_events(self) -> list[tuple[MessageKey, int]]:
        """Record the agents' events; the messages they finished (completed or failed), with their workloads."""
        o, p = self.outcome, self.progress
        finished = []
        while self.agents.events:
            host, e = self.agents.events.popleft()
            if isinstance(e, (Delivered, Completed, Failed)):
                key = MessageKey(e.conn, e.msg)
                workload = o.workload_of.get(key)
                if isinstance(e, Delivered):
                    o.deliver(key, Delivery(e.t, e.bytes, e.verified), *conn_hosts(key.conn))
                    p.delivered_bytes += e.bytes
                elif isinstance(e, Completed):
                    o.complete(key, e.t)
                else:
                    o.fail(key, e.reason)
                if workload is not None and key not in o.workload_of:
                    finished.append((key, workload))
            elif isinstance(e, EvChanged):
                plane, spine = self.topo.plan.ev_path(e.ev)
                o.ev_changes.append(EvChange(round(e.t - o.t0, 6), host, self.topo.host_names[e.peer], e.ev, plane,
                                             f"p{plane}s{spine}", e.old, e.new))
            elif isinstance(e, NicChanged):
                owner = host if e.of is None else self.topo.host_names[e.of]
                o.nic_changes.append(NicChange(round(e.t - o.t0, 6), owner, e.plane, e.state, host))
        p.failed = len(o.failed)
        return finished

    def fire_due(self) -> None:
        o = self.outcome
        while self.queue and self.queue[0].t_s <= self.clock() - o.t0:
            action = heapq.heappop(self.queue)
            opened = self.open_cuts.get(action.target)
            if opened is not None and o.fired[opened.index].action in ACTIONS[action.action].clears:
                self._snapshot(opened)
                del self.open_cuts[action.target]
            t = self.fabric.apply(action.action, action.target, loss_probability=action.loss_probability,
                                  rate_bps=action.rate_bps)
            o.fired.append(Fired(round(t - o.t0, 6), action.action, action.target, action.event_index,
                                 action.rate_field))
            event = self.s.events[action.event_index]
            tracked = ACTIONS[action.action].cuts and event.action == action.action  # a flap's cuts are not
            if tracked and ROUTINGS[self.s.routing].avoid_measurable:
                self.open_cuts[action.target] = _OpenCut(len(o.fired) - 1, t,
                                                         self._per_ev(self.agents.call_all(Stats))[1])
            self._track_active(action)

    def _track_active(self, action: timeline.Action) -> None:
        active = self.progress.active_faults
        if clears_target(action.action, action.loss_probability):
            active.pop(action.target, None)
        else:
            active[action.target] = action.action

    def _per_ev(self, reports: dict[str, Report]) -> tuple[dict, dict]:
        """(last DATA send time, DATA packets) per [src][dst][ev] from every agent's stats report."""
        last_send, ev_sent = ({self.topo.host_index(host): {int(peer): {int(ev): v for ev, v in evs.items()}
                                                            for peer, evs in report.stats.get(key, {}).items()}
                               for host, report in reports.items()} for key in ("last_send", "ev_sent"))
        return last_send, ev_sent

    def _snapshot(self, cut: _OpenCut) -> None:
        """avoid_s of a cut that is about to be mended (or still open at the end), and the DATA packets
        senders put into it while it lasted (OVS does not count a send into a downed cable)."""
        last_send, sent = self._per_ev(self.agents.call_all(Stats))
        fired = self.outcome.fired[cut.index]
        value = avoid.avoid_seconds(self.topo, fired.target, cut.t_mono, last_send)
        into = avoid.sent_into(self.topo, fired.target, cut.sent, sent)
        self.outcome.fired[cut.index] = replace(fired, avoid_s=None if value is None else round(value, 6),
                                                sent_into_fault=sum(into.values()))
        for hop, n in into.items():
            self.outcome.sent_into_faults[hop] = self.outcome.sent_into_faults.get(hop, 0) + n

    def _snapshot_open_cuts(self) -> None:
        for cut in self.open_cuts.values():
            self._snapshot(cut)
        self.open_cuts.clear()
