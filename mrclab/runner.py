"""One scenario end to end: fabric -> controller -> agents -> workload (with its fault timeline) -> metrics.

Everything the run creates is recorded in a RunState first and torn down on every
way out: success, failure, Ctrl-C and SIGTERM (turned into an exception here so the
`finally` blocks run). Results are written even when the run fails or hits its
duration limit, so a researcher can see how far it got.
"""
from __future__ import annotations

import heapq
import logging
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import timeline
from .agents import Agents, effective_options
from .errors import Terminated
from .metrics import avoid, expectations, results
from .metrics.fidelity import CpuSampler, latency_split
from .progress import JsonlWriter, Progress, done_record, start_record, view
from .runstate import RunState
from .spec import Scenario
from .transport.cc import rtt_mean
from .workload import ideal_step_seconds, step_transfers

log = logging.getLogger("mrclab.runner")


@contextmanager
def terminate_as_exception():
    def handler(signum, frame):
        raise Terminated(signal.Signals(signum).name)
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def conn_id(src: int, dst: int) -> int:
    return (src << 16) | dst


def warm_pairs(scenario: Scenario) -> list[tuple[str, int, int]]:
    """(host, connection, peer) of every transfer the workload will make, once each."""
    topo, workload = scenario.topology, scenario.workload
    pairs = {(t.src, t.dst) for step in range(workload.steps) for t in step_transfers(workload, step, scenario.seed)}
    return [(src, conn_id(topo.host_index(src), topo.host_index(dst)), topo.host_index(dst))
            for src, dst in sorted(pairs)]


@dataclass
class Outcome:
    """The raw record of an executed workload, turned into results.json by metrics.results."""

    t0: float = 0.0
    t_end: float = 0.0
    steps: list = field(default_factory=list)
    ideal_s: list = field(default_factory=list)
    posted: dict = field(default_factory=dict)        # (conn, msg) -> size
    posted_at: dict = field(default_factory=dict)     # (conn, msg) -> monotonic time
    delivered: dict = field(default_factory=dict)     # (conn, msg) -> (t, bytes, verified)
    completed: dict = field(default_factory=dict)     # (conn, msg) -> monotonic time its sender saw it acknowledged
    failed: dict = field(default_factory=dict)        # (conn, msg) -> reason
    fired: list = field(default_factory=list)         # [{t_s, action, target, event_index, ...}]
    unfired: list = field(default_factory=list)       # events placed after the workload ended
    ev_changes: list = field(default_factory=list)    # [{t_s, host, peer, ev, old, new}]
    sample_times: dict = field(default_factory=dict)  # round -> t_s
    aborted: str | None = None

    def finished_at(self, keys) -> float | None:
        """When the last of these messages was delivered *and* acknowledged to its sender: the step is over
        only then, since the next one cannot start before (a lost acknowledgement stalls it as surely as
        lost data). None when none was delivered."""
        ends = [max(self.delivered[k][0], self.completed.get(k, 0.0)) for k in keys if k in self.delivered]
        return max(ends, default=None)

    def status(self, key) -> str:
        """"completed" (delivered, verified and acknowledged), "failed", or "unfinished" (still out)."""
        if key in self.failed:
            return "failed"
        return "completed" if key in self.delivered and key in self.completed else "unfinished"


SAMPLE_INTERVAL_S = 0.25


class Execution:
    """The step loop: post a step's transfers, wait for its last byte, apply faults as their time comes."""

    def __init__(self, scenario: Scenario, fabric, agents: Agents):
        self.s, self.fabric, self.agents = scenario, fabric, agents
        self.topo = scenario.topology
        self.outcome = Outcome()
        self.progress = Progress(scenario.workload.steps)
        self.queue: list[timeline.Action] = []
        self.open_faults: dict[str, dict] = {}   # target -> fired record awaiting its avoid_s snapshot

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
        self._snapshot_open_faults()
        for action in sorted(self.queue):  # placed by time beyond the end of the workload
            if all(u["event_index"] != action.event_index for u in o.unfired):
                o.unfired.append({"event_index": action.event_index, "action": action.action,
                                  "target": action.target, "t_s": round(action.t_s, 6)})
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
            key = (conn_id(src, dst), step)
            keys.add(key)
            o.posted[key] = t.size
            o.posted_at[key] = start
            self.agents.post(t.src, conn=key[0], peer=dst, msg=step, size=t.size)
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
        o.steps.append({"index": step, "start_s": round(start - o.t0, 6), "duration_s": round(last - start, 6)})
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
                key = (e["conn"], e["msg"])
            if kind == "delivered":
                o.delivered[key] = (e["t"], e["bytes"], e["verified"])
                p.delivered_bytes += e["bytes"]
                if not e["verified"]:
                    o.failed[key] = "bytes did not match what was sent"
            elif kind == "completed":
                o.completed[key] = e["t"]
            elif kind == "failed":
                o.failed[key] = e.get("reason", "failed")
            elif kind == "ev_state":
                o.ev_changes.append({"t_s": round(e["t"] - o.t0, 6), "host": e["host"], "peer": e.get("peer"),
                                     "ev": e["ev"], "old": e["old"], "new": e["new"]})
        p.failed = len(o.failed)

    def _fire_due(self) -> None:
        o = self.outcome
        while self.queue and self.queue[0].t_s <= time.monotonic() - o.t0:
            action = heapq.heappop(self.queue)
            opened = self.open_faults.get(action.target)
            if opened is not None and timeline.CLEARS.get(opened["action"]) == action.action:
                self._snapshot(opened)
                del self.open_faults[action.target]
            t = self.fabric.apply(action.action, action.target, rate=action.rate)
            record = {"t_s": round(t - o.t0, 6), "action": action.action, "target": action.target,
                      "event_index": action.event_index}
            if action.rate is not None:
                record["rate"] = action.rate
            o.fired.append(record)
            event = self.s.events[action.event_index]
            tracked = action.action in timeline.CLEARS and event.action == action.action
            if tracked and avoid.measurable(self.s.routing):
                record["_t_mono"] = t
                self.open_faults[action.target] = record
            self._track_active(action)

    def _track_active(self, action: timeline.Action) -> None:
        active = self.progress.active_faults
        if action.action in ("link_up", "switch_up", "restore") or (action.action == "loss" and not action.rate):
            active.pop(action.target, None)
        else:
            active[action.target] = action.action

    def _snapshot(self, record: dict) -> None:
        """avoid_s of a fault that is about to be cleared (or still open at the end)."""
        stats = self.agents.call_all("stats")
        last_send = {self.topo.host_index(host): {int(peer): {int(ev): t for ev, t in evs.items()}
                                                  for peer, evs in reply.get("last_send", {}).items()}
                     for host, reply in stats.items()}
        value = avoid.avoid_seconds(self.topo, record["target"], record.pop("_t_mono"), last_send)
        record["avoid_s"] = None if value is None else round(value, 6)

    def _snapshot_open_faults(self) -> None:
        for record in self.open_faults.values():
            self._snapshot(record)
        self.open_faults.clear()


def _logger(path: Path) -> logging.Handler:
    """runner.log. Importing Mininet installs its logger class, which gives every logger created
    afterwards a level of its own (above INFO): mrclab's loggers are set back to inherit this one."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    top = logging.getLogger("mrclab")
    top.addHandler(handler)
    top.setLevel(logging.INFO)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("mrclab.") and isinstance(logger, logging.Logger):
            logger.setLevel(logging.NOTSET)
    return handler


def run_scenario(scenario: Scenario, out_dir: Path, console=None, progress_jsonl: Path | None = None) -> dict:
    """Run it, write DIR, return the results document. `console` (stderr) gets the live view,
    `progress_jsonl` its records (mrclab.progress)."""
    from rich.live import Live

    from .fabric.net import Fabric

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scenario.yaml").write_text(scenario.to_yaml())
    handler = _logger(out_dir / "runner.log")
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state = RunState.create(f"run {scenario.name}")
    agents = Agents()
    stream = JsonlWriter(progress_jsonl) if progress_jsonl is not None else None
    header = start_record(scenario, state.run_id)
    if stream is not None:
        stream.write(header)
    log.info("run %s: scenario %s, out %s", state.run_id, scenario.source, out_dir)
    try:
        with terminate_as_exception(), Fabric(scenario.topology, state, out_dir, routing=scenario.routing,
                                              convergence_delay=scenario.convergence_delay_s) as fabric:
            try:
                agents.start(scenario, {h: fabric.host(h) for h in scenario.workload.hosts}, state, out_dir)
                if not agents.warm(warm_pairs(scenario)):
                    log.warning("warm-up: some paths did not answer their probe before the clock started")
                execution = Execution(scenario, fabric, agents)
                sampler = CpuSampler({**agents.pids(), **fabric.packet_pids()})
                sampler.start()
                if stream is not None:
                    stream.follow(execution.progress)
                if console is not None:
                    with Live(console=console, refresh_per_second=4, transient=True,
                              get_renderable=lambda: view(header, execution.progress.record(time.monotonic()))):
                        outcome = execution.run()
                else:
                    outcome = execution.run()
                links = fabric.link_counters()
                stats = agents.call_all("stats")
                wall = outcome.t_end - outcome.t0
                summary = results.summary(outcome, stats)
                fidelity = sampler.stop(emulator_drops=sum(link["emulator_drops"] for link in links),
                                        goodput_fraction=sum(outcome.ideal_s[:len(outcome.steps)]) / wall
                                        if outcome.steps and wall > 0 else None,
                                        latency=latency_split(rtt_mean(results.rtt_histogram(stats)),
                                                              summary["base_rtt_s"], *fabric.queue_waits()))
                doc = _document(scenario, state.run_id, started_at, outcome, summary, agents.samples,
                                links, fabric.controller_stats(), fidelity)
            finally:
                agents.stop()
    finally:
        state.teardown()
        logging.getLogger("mrclab").removeHandler(handler)
        handler.close()
        if stream is not None:
            stream.stop()
    results.write(out_dir, doc)
    results.write_messages(out_dir, _message_rows(outcome))
    if stream is not None:
        stream.write(done_record(doc, out_dir))
        stream.file.close()
    return doc


def _message_rows(o: Outcome) -> list[list]:
    rows = []
    for key, size in o.posted.items():
        conn, msg = key
        delivered = o.delivered.get(key)
        rows.append([msg, f"h{conn >> 16}", f"h{conn & 0xFFFF}", size, round(o.posted_at[key] - o.t0, 6),
                     round(delivered[0] - o.t0, 6) if delivered else "", o.status(key)])
    return rows


def _document(scenario: Scenario, run_id: str, started_at: str, outcome: Outcome, summary: dict,
              agents_samples: dict, links: list[dict], controller: dict, fidelity: dict) -> dict:
    topo = scenario.topology
    events = [{k: v for k, v in record.items() if not k.startswith("_")} for record in outcome.fired]
    for event in events:
        if event["action"] in ("link_up", "switch_up") and scenario.transport != "tcp":
            value = avoid.revive_seconds(topo, event["target"], event["t_s"], outcome.ev_changes)
            event["revive_s"] = None if value is None else round(value, 6)
    doc = {
        "schema": results.SCHEMA,
        "run_id": run_id,
        "scenario": {"name": scenario.name, "file": scenario.source},
        "topology": {"name": topo.name, "planes": topo.planes, "leaves": topo.leaves, "spines": topo.spines,
                     "hosts": topo.hosts},
        "transport": scenario.transport, "routing": scenario.routing, "seed": scenario.seed,
        "transport_options": effective_options(scenario),
        "started_at": started_at, "duration_s": round(outcome.t_end - outcome.t0, 6),
        "steps": outcome.steps,
        "summary": summary,
        "events": events,
        "unfired_events": outcome.unfired,
        "ev_changes": outcome.ev_changes,
        "series": results.series(outcome.sample_times, agents_samples),
        "links": links,
        "controller": controller,
        "fidelity": fidelity,
    }
    checks = expectations.evaluate(scenario.expect, doc)
    if outcome.aborted:
        checks.insert(0, {"name": "duration_limit", "expected": scenario.duration_limit_s,
                          "actual": outcome.aborted, "ok": False})
    doc["expectations"] = checks
    return doc
