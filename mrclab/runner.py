"""One scenario end to end: fabric -> controller -> agents -> workload (with its fault timeline) -> metrics.

Everything the run creates is recorded in a RunState first and torn down on every
way out: success, failure, Ctrl-C and SIGTERM (turned into an exception here so the
`finally` blocks run). Results are written even when the run fails, is interrupted or
hits its duration limit, marked with its `status` and the reason, so a researcher can
see how far it got; runner.log says why too.
"""
from __future__ import annotations

import heapq
import logging
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import timeline
from .agents import Agents, effective_options
from .capture import Recording
from .errors import MrclabError, Terminated
from .metrics import avoid, expectations, results
from .metrics.cost import CpuMeter
from .metrics.fidelity import CpuSampler, latency_split
from .progress import JsonlWriter, Progress, done_record, start_record, view
from .runstate import RunState
from .spec import Scenario
from .transport.cc import rtt_mean
from .workload import ideal_step_seconds, step_transfers

log = logging.getLogger("mrclab.runner")


class RunFailed(MrclabError):
    """The run stopped on an error; what it measured up to then is in its results directory."""


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
    sent_into_faults: dict = field(default_factory=dict)  # (from, to) -> DATA packets sent into a downed hop

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
                plane, spine = self.topo.plan.ev_path(e["ev"])
                o.ev_changes.append({"t_s": round(e["t"] - o.t0, 6), "host": e["host"],
                                     "peer": self.topo.host_names[e["peer"]], "ev": e["ev"], "plane": plane,
                                     "spine": f"p{plane}s{spine}", "old": e["old"], "new": e["new"]})
        p.failed = len(o.failed)

    def _fire_due(self) -> None:
        o = self.outcome
        while self.queue and self.queue[0].t_s <= time.monotonic() - o.t0:
            action = heapq.heappop(self.queue)
            opened = self.open_faults.get(action.target)
            if opened is not None and timeline.CLEARS.get(opened["action"]) == action.action:
                self._snapshot(opened)
                del self.open_faults[action.target]
            t = self.fabric.apply(action.action, action.target, loss_probability=action.loss_probability,
                                  rate_bps=action.rate_bps)
            record = {"t_s": round(t - o.t0, 6), "action": action.action, "target": action.target,
                      "event_index": action.event_index}
            if action.rate_field is not None:
                record["rate"] = action.rate_field
            o.fired.append(record)
            event = self.s.events[action.event_index]
            tracked = action.action in timeline.CLEARS and event.action == action.action
            if tracked and avoid.measurable(self.s.routing):
                record["_t_mono"] = t
                record["_sent"] = self._per_ev(self.agents.call_all("stats"))[1]
                self.open_faults[action.target] = record
            self._track_active(action)

    def _track_active(self, action: timeline.Action) -> None:
        active = self.progress.active_faults
        if action.action in ("link_up", "switch_up", "restore") or (action.action == "loss" and not action.loss_probability):
            active.pop(action.target, None)
        else:
            active[action.target] = action.action

    def _per_ev(self, stats: dict) -> tuple[dict, dict]:
        """(last DATA send time, DATA packets) per [src][dst][ev] from every agent's stats reply."""
        return tuple({self.topo.host_index(host): {int(peer): {int(ev): v for ev, v in evs.items()}
                                                   for peer, evs in reply.get(key, {}).items()}
                      for host, reply in stats.items()} for key in ("last_send", "ev_sent"))

    def _snapshot(self, record: dict) -> None:
        """avoid_s of a fault that is about to be cleared (or still open at the end), and the DATA packets
        senders put into it while it lasted (OVS does not count a send into a downed cable)."""
        last_send, sent = self._per_ev(self.agents.call_all("stats"))
        value = avoid.avoid_seconds(self.topo, record["target"], record.pop("_t_mono"), last_send)
        record["avoid_s"] = None if value is None else round(value, 6)
        into = avoid.sent_into(self.topo, record["target"], record.pop("_sent"), sent)
        record["sent_into_fault"] = sum(into.values())
        for hop, n in into.items():
            self.outcome.sent_into_faults[hop] = self.outcome.sent_into_faults.get(hop, 0) + n

    def _snapshot_open_faults(self) -> None:
        for record in self.open_faults.values():
            self._snapshot(record)
        self.open_faults.clear()


class _Building:
    """The spinner from the start of the run until the agents answer, then the teardown's."""

    def __init__(self, console):
        self.console, self.status = console, None

    def show(self, text: str) -> None:
        self.hide()
        if self.console is not None:
            self.status = self.console.status(text)
            self.status.start()

    def hide(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _logger(path: Path) -> logging.Handler:
    """runner.log. Importing Mininet installs its logger class, which gives every logger created
    afterwards a level of its own (above INFO) and a console handler of its own: mrclab's loggers are set
    back to inherit this one, and write nowhere else."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    top = logging.getLogger("mrclab")
    top.setLevel(logging.INFO)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.split(".")[0] == "mrclab" and isinstance(logger, logging.Logger):
            for other in [h for h in logger.handlers if type(h) is not logging.FileHandler]:
                logger.removeHandler(other)  # Mininet's console handler: the CLI prints what users need, once
            if logger is not top:
                logger.setLevel(logging.NOTSET)
    top.addHandler(handler)
    return handler


def run_scenario(scenario: Scenario, out_dir: Path, console=None, overrides: dict | None = None,
                 progress_jsonl: Path | None = None) -> dict:
    """Run it, write DIR, return the results document. `console` (stderr) gets the live view,
    `progress_jsonl` its records (mrclab.progress).

    A run that fails or is interrupted still leaves a results.json saying so (`status`, `error`),
    and runner.log records why."""
    from rich.live import Live

    from .fabric.net import Fabric

    out_dir = out_dir.resolve()  # the agents start in their own folder, not the user's
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
    building = _Building(console)
    log.info("run %s: scenario %s, out %s, overrides %s", state.run_id, scenario.source, out_dir, overrides or {})
    building.show(f"building {scenario.topology.name} and starting the agents")
    execution: Execution | None = None
    recording: Recording | None = None
    failure: BaseException | None = None
    doc = None
    try:
        with terminate_as_exception(), Fabric(scenario.topology, state, out_dir, routing=scenario.routing,
                                              convergence_delay=scenario.convergence_delay_s,
                                              datapath=scenario.datapath, seed=scenario.seed) as fabric:
            log.info("datapath %s: %s", fabric.datapath.name, fabric.datapath_detail)
            sampler = meter = None
            try:
                if scenario.capture.on:  # before the agents' first packet
                    recording = Recording(scenario.capture, fabric, state, out_dir)
                    recording.start()
                agents.start(scenario, {h: fabric.host(h) for h in scenario.workload.hosts}, state, out_dir)
                if not agents.warm(warm_pairs(scenario)):
                    log.warning("warm-up: some paths did not answer their probe before the clock started")
                execution = Execution(scenario, fabric, agents)
                sampler = CpuSampler({**agents.pids(), **fabric.packet_pids()})
                sampler.start()
                meter = CpuMeter({**agents.pids(), **fabric.packet_pids(), os.getpid(): "runner"})
                meter.start()
                building.hide()
                if stream is not None:
                    stream.follow(execution.progress)
                if console is not None:
                    with Live(console=console, refresh_per_second=4, transient=True,
                              get_renderable=lambda: view(header, execution.progress.record(time.monotonic()))):
                        execution.run()
                else:
                    execution.run()
            except BaseException as exc:  # noqa: BLE001  what was measured is written, marked with why it stopped
                failure = exc
                log.error("run stopped: %s", describe(exc))
            try:
                outcome = execution.outcome if execution is not None else Outcome()
                outcome.t_end = outcome.t_end or time.monotonic()
                outcome.t0 = outcome.t0 or outcome.t_end
                doc = _collect(scenario, state.run_id, started_at, outcome, agents, fabric, sampler, meter, recording,
                               failure)
                doc["overrides"] = dict(overrides or {})
            finally:
                building.show("stopping the agents and tearing the fabric down")
                agents.stop()
                if recording is not None:
                    recording.stop()
    except BaseException as exc:
        failure = failure or exc
        log.error("run stopped: %s", describe(exc))
        if doc is None:  # it stopped before anything was measured: say so where the results would be
            results.write_unfinished(out_dir, status="failed" if isinstance(exc, Exception) else "interrupted",
                                     error=describe(exc), run_id=state.run_id, started_at=started_at,
                                     scenario=scenario, overrides=overrides or {})
        raise
    finally:
        state.teardown()
        building.hide()
        for stderr in out_dir.glob("agent-*.stderr"):  # an agent that said nothing leaves no empty file
            if stderr.stat().st_size == 0:
                stderr.unlink()
        log.info("run %s: torn down", state.run_id)
        logging.getLogger("mrclab").removeHandler(handler)
        handler.close()
        if stream is not None:
            stream.stop()
        if doc is not None:
            results.write(out_dir, doc)
            results.write_messages(out_dir, _message_rows(outcome))
            if stream is not None:
                stream.write(done_record(doc, out_dir))
            if recording is not None:  # after the results, which a failing merge must not cost
                recording.finish()
        if stream is not None:
            stream.file.close()
    if failure is not None:
        if not isinstance(failure, Exception):
            raise failure
        raise RunFailed(f"run failed: {describe(failure)}; what it measured is in {out_dir / 'results.json'}")
    return doc


def describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(exc, Terminated):
        return f"interrupted ({exc})"
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > 128:  # the fabric's SIGTERM
        return f"interrupted ({signal.Signals(exc.code - 128).name})"
    return str(exc) if isinstance(exc, MrclabError) else f"{type(exc).__name__}: {exc}"


def _collect(scenario: Scenario, run_id: str, started_at: str, outcome: Outcome, agents: Agents, fabric,
             sampler: CpuSampler | None, meter: CpuMeter | None, recording: Recording | None,
             failure: BaseException | None) -> dict:
    """The results document; after a failure, whatever can still be read (the rest left empty)."""
    if meter is not None:
        meter.stop()
    captured = recording.stop() if recording is not None else None
    def read(what: str, fn, default):
        if failure is None:
            return fn()
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001  the run already failed: keep what can be had
            log.error("after the failure, %s could not be read: %s", what, exc)
            return default
    links = read("link counters", lambda: results.with_sends_into_faults(fabric.link_counters(),
                                                                          outcome.sent_into_faults), [])
    stats = read("agent stats", lambda: agents.call_all("stats", timeout=2.0) if agents.links else {}, {})
    wall = outcome.t_end - outcome.t0
    summary = results.summary(outcome, stats)
    summary["link_drops"] = results.link_drops(links)
    if meter is not None:
        summary["cpu_s_per_mib"] = meter.per_mib(summary["bytes"]["delivered"])
    fidelity = read("fidelity", lambda: sampler.stop(
        emulator_drops=sum(link["emulator_drops"] for link in links),
        goodput_fraction=sum(outcome.ideal_s[:len(outcome.steps)]) / wall if outcome.steps and wall > 0 else None,
        latency=latency_split(rtt_mean(results.rtt_histogram(stats)), summary["base_rtt_s"],
                              *fabric.queue_waits())), {"cpu_busy_pct": None, "ok": False, "notes": ["not measured"]})
    controller = read("controller stats", fabric.controller_stats, {"flow_mods_boot": None,
                                                                   "flow_mods_after_boot": None})
    if captured is not None:
        fidelity["notes"].append(recording.note(captured))
    doc = _document(scenario, run_id, started_at, outcome, summary, agents.samples, links, controller, fidelity,
                    agents.marks, datapath=(fabric.datapath.name, fabric.datapath_detail))
    if captured is not None:  # packet time (epoch) - t0_epoch_s = the t_s of events.csv and steps.csv
        doc["capture"] = {**captured, "packets_kept": scenario.capture.packets,
                          "t0_epoch_s": round(time.time() - time.monotonic() + outcome.t0, 6)}
    if failure is not None:
        doc["status"] = "failed" if isinstance(failure, Exception) else "interrupted"
        doc["error"] = describe(failure)
        doc["expectations"].insert(0, {"name": "run", "expected": "completed", "actual": doc["error"], "ok": False})
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
              agents_samples: dict, links: list[dict], controller: dict, fidelity: dict, marks: dict, *,
              datapath: tuple[str, str]) -> dict:
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
        "transport": scenario.transport, "routing": scenario.routing,
        "datapath": datapath[0], "datapath_detail": datapath[1], "seed": scenario.seed,
        "transport_options": effective_options(scenario),
        "status": "duration_limit" if outcome.aborted else "completed",
        "started_at": started_at, "duration_s": round(outcome.t_end - outcome.t0, 6),
        "steps": outcome.steps,
        "summary": summary,
        "events": events,
        "unfired_events": outcome.unfired,
        "ev_changes": outcome.ev_changes,
        "series": results.series(outcome.sample_times, agents_samples),
        "recovery": results.recovery(marks, outcome.t0),
        "links": links,
        "controller": controller,
        "fidelity": fidelity,
    }
    checks = expectations.evaluate(scenario.expect, doc)
    for u in outcome.unfired:
        checks.insert(0, {"name": "events_fired", "expected": f"event {u['event_index']} fires",
                          "actual": f"{u['action']} {u['target']} at {u['t_s']:g} s never fired: the workload "
                                    f"ended at {outcome.t_end - outcome.t0:.3g} s", "ok": False})
    if outcome.aborted:
        checks.insert(0, {"name": "duration_limit", "expected": scenario.duration_limit_s,
                          "actual": outcome.aborted, "unit": "s", "ok": False})
    doc["expectations"] = checks
    return doc
