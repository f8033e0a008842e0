"""The step loop of a run: post a step's transfers, wait for its last byte, apply faults as their time comes.

It fills an `Outcome` (metrics.outcome) from the agents' events, snapshots the senders' last
sends around each path cut for `avoid_s`, and samples the agents' counters every
`SAMPLE_INTERVAL_S`; the runner owns everything around it (the lab, teardown, the files).
"""
from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass, replace

from . import timeline
from .actions import ACTIONS, clears_target
from .addressing import conn_id
from .agents import Agents
from .metrics import avoid
from .metrics.outcome import Delivery, EvChange, Fired, MessageKey, NicChange, Outcome, Posted, Step, Unfired
from .progress import Progress
from .routing import ROUTINGS
from .spec import Scenario
from .workload import ideal_step_seconds, step_transfers

log = logging.getLogger("mrclab.runner")  # runner.log names the run's lines alike, wherever they come from


def warm_pairs(scenario: Scenario) -> list[tuple[str, int, int]]:
    """(host, connection, peer) of every transfer the workload will make, once each."""
    topo, workload = scenario.topology, scenario.workload
    pairs = {(t.src, t.dst) for step in range(workload.steps) for t in step_transfers(workload, step, scenario.seed)}
    return [(src, conn_id(topo.host_index(src), topo.host_index(dst)), topo.host_index(dst))
            for src, dst in sorted(pairs)]


SAMPLE_INTERVAL_S = 0.25


@dataclass(frozen=True)
class _OpenCut:
    """A path cut awaiting its avoid_s snapshot: its record in `Outcome.fired`, when it happened, and the
    DATA packets per [src][dst][ev] senders had sent by then."""

    index: int
    t_mono: float
    sent: dict


class Execution:
    """One run's step loop; `run()` returns its Outcome."""

    def __init__(self, scenario: Scenario, fabric, agents: Agents):
        self.s, self.fabric, self.agents = scenario, fabric, agents
        self.topo = scenario.topology
        self.outcome = Outcome()
        self.progress = Progress(scenario.workload.steps)
        self.queue: list[timeline.Action] = []
        self.open_cuts: dict[str, _OpenCut] = {}  # target -> its cut

    def run(self) -> Outcome:
        o, s = self.outcome, self.s
        o.t0 = time.monotonic()
        deadline = o.t0 + s.duration_limit_s
        self.queue = list(timeline.timed_actions(s.events))
        heapq.heapify(self.queue)
        for step in range(s.workload.steps):
            for action in timeline.step_actions(s.events, step, time.monotonic() - o.t0):
                heapq.heappush(self.queue, action)
            self._fire_due()
            if not self._run_step(step, deadline):
                break
        o.t_end = time.monotonic()
        self._snapshot_open_cuts()
        for action in sorted(self.queue):  # placed by time beyond the end of the workload
            if all(u.event_index != action.event_index for u in o.unfired):
                o.unfired.append(Unfired(action.event_index, action.action, action.target, round(action.t_s, 6)))
                log.warning("event %d (%s %s at %.3f s) never fired: the workload ended at %.3f s",
                            action.event_index, action.action, action.target, action.t_s, o.t_end - o.t0)
        return o

    def _run_step(self, step: int, deadline: float) -> bool:
        o, p = self.outcome, self.progress
        transfers = step_transfers(self.s.workload, step, self.s.seed)
        o.ideal_s.append(ideal_step_seconds(transfers, self.topo))
        keys = set()
        start = time.monotonic()
        p.step, p.step_started = step, start
        for t in transfers:
            src, dst = self.topo.host_index(t.src), self.topo.host_index(t.dst)
            key = MessageKey(conn_id(src, dst), step)
            keys.add(key)
            o.posted[key] = Posted(t.size, start)
            self.agents.post(t.src, conn=key.conn, peer=dst, msg=step, size=t.size)
        while any(o.status(k) == "unfinished" for k in keys):
            now = time.monotonic()
            if now >= deadline:
                o.aborted = f"duration_limit of {self.s.duration_limit_s:g}s reached in step {step}"
                return False
            next_action = self.queue[0].t_s + o.t0 if self.queue else deadline
            self.agents.poll(max(0.0, min(next_action, deadline, now + 0.2) - now))
            self._drain_events()
            self._fire_due()
            self._sample_due()
        last = o.finished_at(keys) or time.monotonic()
        o.steps.append(Step(step, round(start - o.t0, 6), round(last - start, 6)))
        p.last_step_s = last - start
        return True

    def _sample_due(self) -> None:
        o = self.outcome
        now = time.monotonic() - o.t0
        last = max(o.sample_times.values(), default=-SAMPLE_INTERVAL_S)
        if now - last >= SAMPLE_INTERVAL_S:
            round_no = len(o.sample_times)
            o.sample_times[round_no] = round(now, 6)
            self.agents.sample(round_no)

    def _drain_events(self) -> None:
        o, p = self.outcome, self.progress
        while self.agents.events:
            e = self.agents.events.popleft()
            kind = e.get("event")
            if kind in ("delivered", "completed", "failed"):
                key = MessageKey(e["conn"], e["msg"])
            if kind == "delivered":
                o.delivered[key] = Delivery(e["t"], e["bytes"], e["verified"])
                p.delivered_bytes += e["bytes"]
                if not e["verified"]:
                    o.failed[key] = "bytes did not match what was sent"
            elif kind == "completed":
                o.completed[key] = e["t"]
            elif kind == "failed":
                o.failed[key] = e.get("reason", "failed")
            elif kind == "ev_state":
                plane, spine = self.topo.plan.ev_path(e["ev"])
                o.ev_changes.append(EvChange(round(e["t"] - o.t0, 6), e["host"], self.topo.host_names[e["peer"]],
                                             e["ev"], plane, f"p{plane}s{spine}", e["old"], e["new"]))
            elif kind == "nic":
                owner = self.topo.host_names[e["of"]] if "of" in e else e["host"]
                o.nic_changes.append(NicChange(round(e["t"] - o.t0, 6), owner, e["plane"], e["state"], e["host"]))
        p.failed = len(o.failed)

    def _fire_due(self) -> None:
        o = self.outcome
        while self.queue and self.queue[0].t_s <= time.monotonic() - o.t0:
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
                                                         self._per_ev(self.agents.call_all("stats"))[1])
            self._track_active(action)

    def _track_active(self, action: timeline.Action) -> None:
        active = self.progress.active_faults
        if clears_target(action.action, action.loss_probability):
            active.pop(action.target, None)
        else:
            active[action.target] = action.action

    def _per_ev(self, stats: dict) -> tuple[dict, dict]:
        """(last DATA send time, DATA packets) per [src][dst][ev] from every agent's stats reply."""
        last_send, ev_sent = ({self.topo.host_index(host): {int(peer): {int(ev): v for ev, v in evs.items()}
                                                            for peer, evs in reply.get(key, {}).items()}
                               for host, reply in stats.items()} for key in ("last_send", "ev_sent"))
        return last_send, ev_sent

    def _snapshot(self, cut: _OpenCut) -> None:
        """avoid_s of a cut that is about to be mended (or still open at the end), and the DATA packets
        senders put into it while it lasted (OVS does not count a send into a downed cable)."""
        last_send, sent = self._per_ev(self.agents.call_all("stats"))
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
