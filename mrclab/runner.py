"""One scenario end to end: fabric -> controller -> agents -> workload (with its fault timeline) -> metrics.

The step loop is `execution`; results.json is assembled by `metrics.document`; this module
owns the run's life: what it starts, what it reads when the workload stops, and the files.
`Run` is that life on any engine (`engines.ENGINES`); an engine's subclass makes the fabric
and the hosts and says what they report: `LabRun` here (real packets), `simulation.run.Run`
(simulated time).

Everything the run creates is recorded in a RunState first and torn down on every
way out: success, failure, Ctrl-C and SIGTERM (which the fabric turns into `Terminated`
so the `finally` blocks run). Results are written even when the run fails, is interrupted or
hits its duration limit, marked with its `status` and the reason, so a researcher can
see how far it got; runner.log says why too.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from .agent.messages import Stats
from .agents import Agents
from .capture import Recording
from .engines import ENGINES
from .errors import MrclabError, Terminated
from .execution import SAMPLE_INTERVAL_S, Execution, warm_pairs
from .metrics import document, results
from .metrics.cost import CpuMeter
from .metrics.fidelity import CpuSampler
from .metrics.outcome import Outcome
from .progress import JsonlWriter, done_record, start_record, view
from .runstate import RunState, live_runs, write_status
from .spec import Scenario

log = logging.getLogger("mrclab.runner")


class RunFailed(MrclabError):
    """The run stopped on an error; what it measured up to then is in its results directory."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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


class Run:
    """One run's pieces, held so that every way out tears them down and writes what was measured."""

    clock: Callable[[], float] = staticmethod(time.monotonic)  # the engine's; Execution times the run with it
    sample_interval = SAMPLE_INTERVAL_S  # of that clock: how often the agents' counters are sampled

    def __init__(self, scenario: Scenario, out_dir: Path, console, overrides: dict, progress_jsonl: Path | None):
        self.s, self.out_dir, self.console, self.overrides = scenario, out_dir, console, overrides
        self.handler = _logger(out_dir / "runner.log")
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.run_id = self._begin()
        write_status(out_dir, f"running: run {self.run_id}, runner pid {os.getpid()}, since {self.started_at}")
        self.agents = self._agents()
        self.header = start_record(scenario, self.run_id)
        self.stream = JsonlWriter(progress_jsonl) if progress_jsonl is not None else None
        if self.stream is not None:
            self.stream.write(self.header)
        self.building = _Building(console)
        self.failure: BaseException | None = None
        self.outcome = Outcome()
        self.messages: results.MessageLog | None = None
        self.doc: dict | None = None

    # -- what an engine's run says ----------------------------------------------------------------------

    def _begin(self) -> str:
        """Record what the run is about to create; its id."""
        raise NotImplementedError

    def _agents(self) -> Agents:
        raise NotImplementedError

    def network(self) -> contextlib.AbstractContextManager:
        """The fabric, built on entry and torn down on exit."""
        raise NotImplementedError

    def _start(self, fabric) -> None:
        """Everything that must run before the agents' first packet."""

    def _watch(self, fabric) -> None:
        """What watches the workload while it runs (counters, samplers), started just before it."""

    def _quiesce(self) -> None:
        """The workload stopped: stop what watched it, before anything is read."""

    def _report(self, fabric, read, links: list[dict], stats: dict) -> dict:
        """The engine's own part of `document.Lab`: datapath, fidelity, cost, capture, t0_epoch_s."""
        raise NotImplementedError

    def _stop(self) -> None:
        """Stop what `_start` started; the document is built by then."""

    def _teardown(self) -> None:
        """Remove what the run created."""

    def _finish(self) -> None:
        """What is written after results.json, which a failure here must not cost."""

    # -- the run's life ----------------------------------------------------------------------------------

    def stopped(self, exc: BaseException) -> None:
        """Recorded and logged; a bug (not a run's own error, nor a signal) leaves its traceback in runner.log."""
        self.failure = self.failure or exc
        bug = not isinstance(exc, (MrclabError, Terminated, KeyboardInterrupt))
        log.error("run stopped: %s", describe(exc), exc_info=exc if bug else None)

    def measure(self, fabric) -> None:
        """Start the agents and run the workload; a failure is recorded, not raised, so that what was
        measured up to then is still collected."""
        try:
            self._start(fabric)
            if not self.agents.warm(warm_pairs(self.s)):
                log.warning("warm-up: some paths did not answer their probe before the clock started")
            self.messages = results.MessageLog(self.out_dir / "messages.csv")
            execution = Execution(self.s, fabric, self.agents, rows=self.messages.write, clock=self.clock,
                                  sample_interval=self.sample_interval)
            self.outcome = execution.outcome
            self._watch(fabric)
            self.building.hide()
            if self.stream is not None:
                self.stream.follow(execution.progress)
            if self.console is None:
                execution.run()
                return
            from rich.live import Live
            with Live(console=self.console, refresh_per_second=4, transient=True,
                      get_renderable=lambda: view(self.header, execution.progress.record())):
                execution.run()
        except BaseException as exc:  # noqa: BLE001  what was measured is written, marked with why it stopped
            self.stopped(exc)

    def collect(self, fabric) -> None:
        """The results document, then the agents and the capture stop (the document needs their last word)."""
        try:
            o = self.outcome
            if not o.started:  # it stopped before the workload's clock started: a run of no length
                o.t0 = o.t_end = self.clock()
            failure = None if self.failure is None else (
                "failed" if isinstance(self.failure, Exception) else "interrupted", describe(self.failure))
            self.doc = document.build(scenario=self.s, run_id=self.run_id, started_at=self.started_at,
                                      outcome=o, lab=self._lab(fabric), failure=failure, overrides=self.overrides)
        finally:
            self.building.show("stopping the agents and tearing the fabric down")
            self.agents.stop()
            self._stop()

    def _lab(self, fabric) -> document.Lab:
        """What the run reports; after a failure, whatever can still be read (the rest left empty)."""
        self._quiesce()
        read = self._reader()
        o = self.outcome
        links = read("link counters", lambda: results.with_sends_into_faults(fabric.link_counters(),
                                                                              o.sent_into_faults), [])
        stats = read("agent stats", lambda: {host: report.stats for host, report in self.agents.call_all(
            Stats, timeout=2.0).items()} if self.agents.answering else {}, {})
        controller = read("controller stats", fabric.controller_stats, document.NO_CONTROLLER)
        return document.Lab(build=self.agents.build(), stats=stats, samples=self.agents.sample_row,
                            marks=self.agents.marks, links=links, controller=controller,
                            **self._report(fabric, read, links, stats))

    def _reader(self):
        """Read a figure; once the run has failed, a figure that cannot be read is logged and left empty."""
        def read(what: str, fn, default):
            if self.failure is None:
                return fn()
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001  the run already failed: keep what can be had
                log.error("after the failure, %s could not be read: %s", what, exc)
                return default
        return read

    def close(self) -> None:
        """Tear the run down, then write its files: results after teardown, the capture's merge last."""
        self._teardown()
        self.building.hide()
        for stderr in self.out_dir.glob("agent-*.stderr"):  # an agent that said nothing leaves no empty file
            if stderr.stat().st_size == 0:
                stderr.unlink()
        log.info("run %s: torn down", self.run_id)
        logging.getLogger("mrclab").removeHandler(self.handler)
        self.handler.close()
        if self.stream is not None:
            self.stream.stop()
        if self.doc is not None:
            results.write(self.out_dir, self.doc)
            if self.stream is not None:
                self.stream.write(done_record(self.doc, self.out_dir))
            self._finish()
        if self.messages is not None:  # every message out at the end is a row too, written or not
            self.outcome.close()
            self.messages.close()
        if self.stream is not None:
            self.stream.file.close()
        write_status(self.out_dir, self.final_status())

    def exit_code(self) -> int:
        """The exit code of a run that failed: 1 (a run over servers says 3 when a server went away)."""
        return RunFailed.exit_code

    def final_status(self) -> str:
        """The run folder's last word: results.json's status, and why when it is not `completed`."""
        if self.doc is not None:
            return self.doc["status"] + (f": {self.doc['error']}" if self.doc.get("error") else "")
        if self.failure is None:
            return "failed: nothing was measured"
        return ("failed" if isinstance(self.failure, Exception) else "interrupted") + f": {describe(self.failure)}"


class LabRun(Run):
    """Real packets: Mininet's fabric, the agents in their namespaces, the CPU watched for fidelity."""

    def _begin(self) -> str:
        self.state = RunState.create(f"run {self.s.name}")
        self.state.out_dir = str(self.out_dir)
        self.state.save()
        self.recording: Recording | None = None
        self.captured: dict | None = None
        self.sampler: CpuSampler | None = None
        self.meter: CpuMeter | None = None
        return self.state.run_id

    def _agents(self) -> Agents:
        return Agents(sampled=results.PACKET_KEYS)

    def network(self) -> contextlib.AbstractContextManager:
        from .fabric.net import Fabric
        s = self.s
        return Fabric(s.topology, self.state, self.out_dir, routing=s.routing, convergence_delay=s.convergence_delay_s,
                      datapath=s.datapath, seed=s.seed)

    def _start(self, fabric) -> None:
        log.info("datapath %s: %s", fabric.datapath.name, fabric.datapath_detail)
        if self.s.capture.on:  # before the agents' first packet
            self.recording = Recording(self.s.capture, fabric, self.state, self.out_dir)
            self.recording.start()
        self.agents.start(self.s, {h: fabric.host(h) for h in self.s.hosts}, self.state, self.out_dir)

    def _watch(self, fabric) -> None:
        fabric.start_counting()
        self.sampler = CpuSampler({**self.agents.pids(), **fabric.packet_pids()},
                                  others=functools.partial(live_runs, self.state.run_id))
        self.sampler.start()
        self.meter = CpuMeter({**self.agents.pids(), **fabric.packet_pids(), os.getpid(): "runner"})
        self.meter.start()

    def _quiesce(self) -> None:
        if self.meter is not None:
            self.meter.stop()
        if self.recording is not None:
            self.captured = self.recording.stop()

    def _report(self, fabric, read, links: list[dict], stats: dict) -> dict:
        sampler, recording, captured, o = self.sampler, self.recording, self.captured, self.outcome
        fidelity = read("fidelity", lambda: document.NOT_MEASURED if sampler is None else sampler.stop(
            **document.fidelity_inputs(o, links, stats, fabric.queue_waits(), self.s.topology)).to_dict(),
                        document.NOT_MEASURED)
        return dict(datapath=(fabric.datapath.name, fabric.datapath_detail), fidelity=fidelity,
                    cost=None if self.meter is None else self.meter.per_mib(o.delivered_bytes),
                    capture=(None if captured is None or recording is None
                             else {"counts": captured, "note": recording.note(captured)}),
                    t0_epoch_s=document.epoch_of(o.t0))

    def _stop(self) -> None:
        if self.recording is not None:
            self.recording.stop()

    def _teardown(self) -> None:
        self.state.teardown()

    def _finish(self) -> None:
        if self.recording is not None:
            self.recording.finish()


def run_scenario(scenario: Scenario, out_dir: Path, console=None, overrides: dict | None = None,
                 progress_jsonl: Path | None = None, run_class: Callable[..., Run] | None = None) -> dict:
    """Run it on its engine, write DIR, return the results document. `console` (stderr) gets the live view,
    `progress_jsonl` its records (mrclab.progress); `run_class` makes the run instead of its engine's (a run over
    servers: `cluster.run.ClusterRun`).

    A run that fails or is interrupted still leaves a results.json saying so (`status`, `error`),
    and runner.log records why."""
    out_dir = out_dir.resolve()  # the agents start in their own folder, not the user's
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scenario.yaml").write_text(scenario.to_yaml())
    make = run_class or ENGINES[scenario.engine].run_class()
    run: Run = make(scenario, out_dir, console, dict(overrides or {}), progress_jsonl)
    log.info("run %s: scenario %s, engine %s, out %s, overrides %s", run.run_id, scenario.source, scenario.engine,
             out_dir, overrides or {})
    run.building.show(f"building {scenario.topology.name} and starting the agents")
    try:
        with run.network() as fabric:
            run.measure(fabric)
            run.collect(fabric)
    except BaseException as exc:
        run.stopped(exc)
        if run.doc is None:  # it stopped before anything was measured: say so where the results would be
            results.write_unfinished(out_dir, status="failed" if isinstance(exc, Exception) else "interrupted",
                                     error=describe(exc), run_id=run.run_id, started_at=run.started_at,
                                     scenario=scenario, overrides=run.overrides)
        raise
    finally:
        run.close()
    if run.failure is not None:
        if not isinstance(run.failure, Exception):
            raise run.failure
        raise RunFailed(f"run failed: {describe(run.failure)}; what it measured is in {out_dir / 'results.json'}",
                        run.exit_code())
    assert run.doc is not None, "a run that did not fail has written its results"
    return run.doc


def describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(exc, Terminated):
        return f"interrupted ({exc})"
    return str(exc) if isinstance(exc, MrclabError) else f"{type(exc).__name__}: {exc}"
