"""A run over servers: the runner's `Run` whose fabric and agents are every server's share (`mrclab run SCENARIO
--servers A,B` or ``--cluster FILE``).

Everything but where the lab lives is a run on one machine's: the workload drivers and the fault timeline
(`execution`), the metrics, results.json and the report. The runner builds nothing itself: each server builds its
share and starts its hosts' agents (`run_part`), a fault goes to the servers that hold its ends
(`cluster.fabric`), and the agents speak to the runner over their servers' SSH connections (`cluster.agents`),
their times put on the runner's clock. Each server judges its own CPU; results.json adds `cluster` (the placement,
each server's share, run id and clock) and `fidelity` says which server, if any, was not faithful.

A server that goes away mid-run (its connection closes, its share fails, or it falls silent) stops the run with
one line naming it and exit code 3; the others are torn down and what was measured up to then is written.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import MrclabError, UsageError
from ..metrics import document, fidelity, results
from ..metrics.cost import CpuMeter
from ..routing import ROUTINGS
from ..runner import Run, log
from ..runstate import RunState
from ..spec import Scenario
from . import messages as msg
from .agents import ClusterAgents
from .fabric import ClusterFabric
from .server import boot_id
from .servers import Cluster, ServerLost


def refuse(scenario: Scenario, cluster: Cluster) -> None:
    """A run the servers cannot carry is refused (exit 2) before anything is built."""
    if scenario.engine != "lab":
        raise UsageError(f"--servers: a lab over servers runs real packets (engine lab), not engine {scenario.engine}")
    if scenario.datapath not in ("auto", "linux"):
        raise UsageError(f"--servers: a lab over servers runs the linux datapath, not {scenario.datapath} (a cable "
                         "between servers is a VXLAN tunnel per direction)")
    if not ROUTINGS[scenario.routing].source_routed:
        raise UsageError(f"--servers: a lab over servers routes statically (static-srv6), not {scenario.routing}: a "
                         "reconverging control plane would need every server's link states")
    if scenario.capture.on:
        raise UsageError("--servers: packet capture records interfaces of one machine; leave capture off")
    crossing = cluster.assignment.crossing["host-leaf"]
    if crossing:
        raise UsageError(f"--servers: placement {cluster.assignment.placement} puts {crossing} host cables between "
                         "two servers: place each host with its leaves (placement: pods)")


class ClusterRun(Run):
    """The scenario over the servers of `cluster` (not built yet)."""

    agents: ClusterAgents

    def __init__(self, *args, cluster: Cluster) -> None:
        self.cluster = cluster
        self.spent: dict[int, msg.Spent] = {}
        self.meter = CpuMeter({os.getpid(): "runner"})
        super().__init__(*args)

    def _begin(self) -> str:
        """The runner's own record: it builds nothing here (the shares keep theirs), but a live run is seen."""
        self.state = RunState.create(f"run {self.s.name} over servers")
        self.state.out_dir = str(self.out_dir)
        self.state.save()
        return self.state.run_id

    def _agents(self) -> ClusterAgents:
        return ClusterAgents(self.cluster, sampled=results.PACKET_KEYS)

    @contextlib.contextmanager
    def network(self) -> Iterator[ClusterFabric]:
        with self.cluster:
            log.info("servers %s: shares %s", ", ".join(self.cluster.servers),
                     ", ".join(b.run_id for b in self.cluster.built))
            yield ClusterFabric(self.cluster)

    def _start(self, fabric) -> None:
        self.cluster.watch()
        self.agents.start_over(self.s)

    def _watch(self, fabric) -> None:
        """Each server counts from here and samples its own CPU; the lab's processes on its machine (other shares
        there, the sessions carrying them, this runner) are not "outside" it."""
        cluster, mine = self.cluster, boot_id()
        runs = [self.run_id, *(b.run_id for b in cluster.built)]
        requests = {}
        for i in cluster.live():
            boot = cluster.built[i].boot_id
            lab = [pid for j, b in enumerate(cluster.built) if j != i and b.boot_id == boot for pid in b.lab_pids or []]
            requests[i] = msg.Watch(lab + ([os.getpid()] if boot == mine else []), runs)
        cluster.ask_all(requests, msg.Watching)
        self.meter.start()

    def _quiesce(self) -> None:
        """The workload stopped: the CPU meters stop and the clocks are read once more."""
        cluster = self.cluster
        self.meter.stop()
        try:
            live = cluster.live()
            self.spent = cluster.ask_all(dict.fromkeys(live, msg.Quiesce()), msg.Spent) if live else {}
            cluster.offsets["end"] = cluster.read_clocks()
        except ServerLost as exc:
            self.stopped(exc)

    def _reader(self):
        """A server that goes away while the figures are read fails the run; the others' are still read."""
        read = super()._reader()

        def read_servers(what: str, fn, default):
            try:
                return read(what, fn, default)
            except ServerLost as exc:
                self.stopped(exc)
                return read(what, fn, default)
        return read_servers

    def _report(self, fabric, read, links: list[dict], stats: dict) -> dict:
        o, cluster = self.outcome, self.cluster
        judged = read("fidelity", lambda: self._judge(fabric, links, stats), {})
        described = cluster.describe()
        verdicts = {spec: (judged[i].fidelity if i in judged else None) for i, spec in enumerate(cluster.servers)}
        machines: dict[str, list[str]] = {}
        for spec, built in zip(cluster.servers, cluster.built, strict=True):
            machines.setdefault(built.boot_id, []).append(spec)
        verdict = fidelity.over_servers(verdicts, {d["server"]: d["time_uncertainty_s"] for d in described},
                                        results.base_rtt(stats), list(machines.values()))
        placement = cluster.assignment
        detail = (f"Linux SRv6 routers over {len(cluster.servers)} servers ({placement.placement}; "
                  f"{sum(placement.crossing.values())} cables between servers, a VXLAN tunnel per direction)")
        return dict(datapath=("linux", detail),
                    fidelity=verdict, cost=self._cost(machines), capture=None, t0_epoch_s=document.epoch_of(o.t0))

    def _judge(self, fabric, links: list[dict], stats: dict) -> dict[int, msg.Judged]:
        """Each server's verdict on its own CPU, given the run's figures and its own emulator drops."""
        cluster = self.cluster
        inputs = document.fidelity_inputs(self.outcome, links, stats, fabric.queue_waits(), self.s.topology)
        load = inputs["link_load"]
        requests = {i: msg.Judge(sum(row["emulator_drops"] for row in links if cluster.server_of[row["from"]] == i),
                                 inputs["goodput_fraction"], inputs["latency"], None if load is None else list(load))
                    for i in cluster.live()}
        return cluster.ask_all(requests, msg.Judged) if requests else {}

    def _cost(self, machines: dict[str, list[str]]) -> dict | None:
        """CPU seconds per delivered MiB over every server (what is the machine's, softirq and its kernel threads,
        counted once per machine)."""
        if not self.spent:
            return None
        total = CpuMeter({})
        total.used = dict(self.meter.used)
        first_of = {specs[0] for specs in machines.values()}
        for i, spent in self.spent.items():
            spec = self.cluster.servers[i]
            for label, cpu in spent.used.items():
                if spec in first_of or not label.startswith("ksoftirqd"):
                    total.used[label if label.startswith("agent ") else f"{label} on {spec}"] = cpu
            total.softirq += spent.softirq if spec in first_of else 0.0
            total.agent_wakeups += spent.wakeups
        return total.per_mib(self.outcome.delivered_bytes)

    def collect(self, fabric) -> None:
        try:
            super().collect(fabric)
        finally:
            if self.doc is not None:
                placement = self.cluster.assignment
                self.doc["cluster"] = {"placement": placement.placement, "crossing_cables": placement.crossing,
                                       "servers": self.cluster.describe()}

    def _stop(self) -> None:
        """The agents have stopped: their logs come here from every server still there."""
        live = self.cluster.live()
        try:
            logged = self.cluster.ask_all(dict.fromkeys(live, msg.Logs()), msg.Logged, 60.0) if live else {}
        except MrclabError as exc:
            log.error("the agents' logs could not be fetched: %s", exc)
            return
        for answer in logged.values():
            for name, text in answer.files.items():
                Path(self.out_dir, Path(name).name).write_text(text)

    def _teardown(self) -> None:
        self.state.teardown()

    def exit_code(self) -> int:
        return self.failure.exit_code if isinstance(self.failure, ServerLost) else super().exit_code()
