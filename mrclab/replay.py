"""A trace's replay: the driver of a `trace` workload (driver.Driver).

Each iteration runs the whole graph of ops (trace.graph) from scratch, as the trace's iteration ran it: an op
starts as soon as every op it depends on is done. A compute op holds its rank for its duration as replayed (a
rank computes one op at a time, in the order they became ready, as one GPU stream does); a collective or a
send/recv posts its first phase of transfers (workload.trace_plan) and each next phase once the last message of
the one before has been delivered and acknowledged. The next iteration starts when every op of this one is done,
so an iteration's time is the job's step time, the figure a training run is judged by. `at_step` faults count
iterations. Every op's start and end go into the outcome's spans, which metrics.trace turns into results.
"""
from __future__ import annotations

import heapq
from collections import deque

from .driver import Driver
from .metrics.outcome import MessageKey, Span, Step
from .metrics.records import Records
from .timeline import step_actions
from .trace.graph import COMPUTE
from .workload.trace_plan import plan


class Replay(Driver):
    def start(self) -> None:
        spec = self.w.trace
        assert spec is not None
        self.ops = spec.trace.ops
        self.plan = plan(spec, self.ex.topo)
        self.users: list[list[int]] = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            for dep in op.deps:
                self.users[dep].append(i)
        self.spans = self.ex.outcome.spans.setdefault(self.index, Records(Span))
        self.msg = 0  # a message number per phase posted: a pair sends once per phase, so (conn, msg) is unique
        self.iteration = -1
        self._next_iteration()

    def _next_iteration(self) -> None:
        ex, o = self.ex, self.ex.outcome
        self.iteration += 1
        if self.iteration >= self.w.steps:
            self.done, self.wake = True, float("inf")
            return
        if self.index == 0:  # at_step counts the first workload's iterations
            for action in step_actions(ex.s.events, self.iteration, ex.clock() - o.t0):
                heapq.heappush(ex.queue, action)
            ex.fire_due()
            ex.progress.step, ex.progress.step_started = self.iteration, ex.clock()
        self.started = self.latest = ex.clock()
        self.deps_left = [len(op.deps) for op in self.ops]
        self.left = len(self.ops)
        self.phase = [0] * len(self.ops)
        self.begun = [0.0] * len(self.ops)
        self.last_end = [0.0] * len(self.ops)  # the latest message end of the op's phases so far
        self.pending = [0] * len(self.ops)  # messages of the op's phase still out
        self.owner: dict[MessageKey, int] = {}
        self.computing: dict[int, int] = {}  # rank -> the compute op it runs
        self.queued: dict[int, deque[int]] = {}  # rank -> compute ops waiting for it, in the order they became ready
        self.timers: list[tuple[float, int]] = []  # (end, compute op)
        self.ready: deque[tuple[int, float]] = deque((i, self.started) for i, n in enumerate(self.deps_left) if n == 0)
        self._run_ready()

    def _run_ready(self) -> None:
        """Start every op whose dependencies are done (a loop, not recursion: chains of empty ops are long)."""
        while self.ready:
            i, now = self.ready.popleft()
            op = self.ops[i]
            if op.kind != COMPUTE:
                self.begun[i] = now
                self._post_phase(i, now)
            elif op.ranks[0] in self.computing:
                self.queued.setdefault(op.ranks[0], deque()).append(i)
            else:
                self._compute(i, op.ranks[0], now)
        self.wake = self.timers[0][0] if self.timers else float("inf")
        if self.left == 0:
            self._end_iteration()

    def _compute(self, i: int, rank: int, now: float) -> None:
        self.computing[rank] = i
        self.begun[i] = now
        heapq.heappush(self.timers, (now + self.plan.compute_s[i], i))

    def _post_phase(self, i: int, now: float) -> None:
        """Post the op's current phase, or the next one when every message of it is done already (an op with no
        phase left is done)."""
        o = self.ex.outcome
        while self.phase[i] < len(self.plan.phases[i]):
            keys = self.post_transfers(list(self.plan.phases[i][self.phase[i]]), self.msg)
            self.msg += 1
            waiting = [k for k in keys if o.status(k) == "unfinished"]
            for k in keys:
                if k not in self.owner and o.status(k) != "unfinished":
                    self.last_end[i] = max(self.last_end[i], o.ends.pop(k, now))
            if waiting:
                self.pending[i] = len(waiting)
                self.owner.update((k, i) for k in waiting)
                return
            self.phase[i] += 1
        self._finish(i, max(self.last_end[i], self.begun[i]))

    def _finish(self, i: int, end: float) -> None:
        t0 = self.ex.outcome.t0
        self.spans.append(Span(self.iteration, i, round(self.begun[i] - t0, 6), round(end - t0, 6)))
        self.latest = max(self.latest, end)
        self.left -= 1
        for user in self.users[i]:
            self.deps_left[user] -= 1
            if self.deps_left[user] == 0:
                self.ready.append((user, end))

    def advance(self, finished: MessageKey | None) -> None:
        if self.done:
            return
        o, now = self.ex.outcome, self.ex.clock()
        if finished is not None and finished in self.owner and o.status(finished) != "unfinished":
            i = self.owner.pop(finished)
            self.last_end[i] = max(self.last_end[i], o.ends.pop(finished, now))
            self.pending[i] -= 1
            if self.pending[i] == 0:
                self.phase[i] += 1
                self._post_phase(i, now)
        while self.timers and self.timers[0][0] <= now:
            end, i = heapq.heappop(self.timers)
            rank = self.ops[i].ranks[0]
            del self.computing[rank]
            waiting = self.queued.get(rank)
            if waiting:
                self._compute(waiting.popleft(), rank, end)
            self._finish(i, end)
        self._run_ready()

    def _end_iteration(self) -> None:
        o = self.ex.outcome
        o.record_step(self.w.name, Step(self.iteration, round(self.started - o.t0, 6),
                                        round(self.latest - self.started, 6), self.plan.iteration_ideal_s),
                      first=self.index == 0)
        if self.index == 0:
            self.ex.progress.last_step_s = self.latest - self.started
        self._next_iteration()
