"""A run on the simulator engine: the runner's `Run`, with the fabric and the hosts in simulated time.

Everything but where packets move is the lab's: the workload drivers and the fault timeline
(`execution`), the metrics, results.json and the report. The run builds nothing on the machine
(no namespaces, switches or processes) and needs no root; it is seeded by the scenario's seed,
so the same scenario gives the same results.json apart from its run id and wall-clock times.

Fidelity means something else here: the model has queues, serialization, propagation, trimming,
ECN marking and the fabric's faults, and not the endpoints' CPU, kernels or scheduling jitter
(hosts are infinitely fast). `fidelity.ok` is false when a run hit a limit of the model.
"""
from __future__ import annotations

import contextlib
import secrets
import string
import time

from .. import build
from ..execution import SAMPLE_INTERVAL_S
from ..metrics import results
from ..runner import Run
from ..transport.sim import Network
from .fabric import HOP_DELAY_S, HOST_QUEUE_BYTES, SimFabric, timer_scale
from .hosts import SimAgents

MODELLED = ("serialization at each link's rate", "FIFO queues with the topology's depth",
            "trimming of MRC data that does not fit a queue (priority lane for headers and control)",
            "ECN CE marking between ecn_min and ecn_max on switch-to-switch ports",
            f"propagation and switching, {HOP_DELAY_S * 1e6:g} us per hop",
            "the timeline's faults, ECMP reconvergence after convergence_delay")
NOT_MODELLED = ("endpoint CPU and the kernel: hosts answer at once", "scheduling jitter and timer granularity",
                "PFC and link-level flow control", "a NIC's own back-pressure (its queue is "
                f"{HOST_QUEUE_BYTES >> 20} MiB instead)")


class SimRun(Run):
    """The scenario on the discrete-event network: `clock` is simulated time, `network` builds nothing."""

    def _begin(self) -> str:
        self.net = Network(lambda src, dst, ev: self.fabric.route(src, dst, ev), seed=self.s.seed)
        self.clock = lambda: self.net.now
        self.epoch0, self.wall0, self.cpu0 = time.time(), time.monotonic(), time.process_time()
        return "s" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(3))

    def _agents(self) -> SimAgents:
        self.sample_interval = SAMPLE_INTERVAL_S * timer_scale(self.s.topology)  # as many samples per round trip
        agents = SimAgents(self.net, self.s, sampled=results.PACKET_KEYS)
        s = self.s
        self.fabric = SimFabric(s.topology, self.net, routing=s.routing, convergence_delay=s.convergence_delay_s,
                                on_nic=agents.nic, seed=s.seed)
        return agents

    def network(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(self.fabric)

    def _report(self, fabric, read, links: list[dict], stats: dict) -> dict:
        return dict(datapath=("sim", "discrete-event network (mrclab.transport.sim), hosts in one process"),
                    fidelity=self._fidelity(links), cost=None, capture=None, t0_epoch_s=self.epoch0)

    def _fidelity(self, links: list[dict]) -> dict:
        """What the model covers, what it does not, whether the run hit one of its limits, and what it cost."""
        nic_drops = sum(row["queue_drops"] for row in links if row["from"].startswith("h"))
        limits = [f"hosts' NIC queues dropped {nic_drops} packets: a real NIC holds its host's packets back; "
                  "the transport sent faster than its host's links (lower pace_rate or the message size)"
                  ] if nic_drops else []
        wall, cpu = time.monotonic() - self.wall0, time.process_time() - self.cpu0
        simulated = self.outcome.wall_s
        return {"engine": "sim", "ok": not limits, "cpu_busy_pct": None, "emulator_drops": 0,
                "modelled": list(MODELLED), "not_modelled": list(NOT_MODELLED), "limits": limits,
                "simulated_s": round(simulated, 6), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                "events": self.net.events, "build": build.running()["build"],
                "notes": limits or [f"simulated {simulated:.4g} s in {wall:.3g} s of wall time "
                                    f"({self.net.events} events); endpoint CPU and kernel jitter are not modelled"]}
