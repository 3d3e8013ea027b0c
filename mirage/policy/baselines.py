"""Baseline policies: reactive, a fixed lead, Slurm's estimate, recent-wait statistics.

Each implements :class:`mirage.policy.base.Policy`, so the harness, the daemon and the
simulator demo call the same code. All of them look only at what a live daemon sees:
the decision time, the chain's own times, Slurm's start estimate for a successor
submitted now (``ctx.estimate_start``) and the waits of jobs that have started
(``ctx.history``, from sacct). Tunable constants (the lead, the average's factor, the
quantile) are tuned on the tuning split by :mod:`mirage.evaluate.harness`, never on test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy, WaitHistory
from mirage.slurm.types import JobState, SlurmJob, SubmitRequest

HOUR = 3600


class Reactive(Policy):
    """Submit the successor only when the predecessor ends (what users do by hand)."""

    name = "reactive"

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        return [Decision(submit=False, reason="reactive: wait for the end") for _ in pending]


class FixedLead(Policy):
    """Submit a constant ``lead_s`` before the predecessor's planned end."""

    name = "fixed-lead"

    def __init__(self, lead_s: int = HOUR) -> None:
        if lead_s < 0:
            raise ValueError(f"lead must be >= 0, got {lead_s}")
        self.lead_s = lead_s

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        return [
            Decision(
                submit=p.planned_end - ctx.now <= self.lead_s,
                predicted_start=p.planned_end,
                reason=f"lead {self.lead_s} s",
            )
            for p in pending
        ]


def successor_request(p: PendingTransition) -> SubmitRequest:
    """The successor's request, as sbatch --test-only would get it."""
    per_node = p.succ_gpus // max(1, p.succ_nodes)
    return SubmitRequest(
        job_name=f"{p.chain_id}.{p.segment_index + 1}",
        time_limit=p.succ_time_limit,
        nodes=p.succ_nodes,
        gres=f"gpu:{per_node}" if per_node > 0 else None,
        partition=p.partition or None,
    )


class SlurmEstimate(Policy):
    """Submit at the last decision step at which Slurm's own estimate still has the
    successor start by the planned end.

    Read literally ("submit once the estimate lands at or before planned_end") the rule
    fires at the first step on any cluster with spare capacity, 40-odd hours early: a
    straw man. What a user would do with ``sbatch --test-only`` is to wait while there is
    time, and submit when waiting one more step (``lookahead_s``, the decision step) would
    push the estimated start past the planned end: ``estimate + lookahead >= planned_end``.
    No estimate: wait (the successor is submitted at the end regardless).
    """

    name = "slurm-estimate"

    def __init__(self, lookahead_s: int = 600) -> None:
        if lookahead_s < 0:
            raise ValueError("lookahead_s must be >= 0")
        self.lookahead_s = lookahead_s

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        out = []
        for p in pending:
            est = None
            if ctx.estimate_start is not None:
                est = ctx.estimate_start(successor_request(p)).start
            submit = est is not None and est + self.lookahead_s >= p.planned_end
            out.append(Decision(submit=submit, predicted_start=est, reason="slurm estimate"))
        return out


class WaitTracker:
    """The waits (start - eligible) of jobs seen starting, per partition, as a live daemon
    learns them from its polls: each cycle's ``sacct`` records and ``squeue``'s running
    jobs. A job counts once (by id); waits older than ``keep_s`` are dropped."""

    def __init__(self, keep_s: int) -> None:
        self.keep_s = keep_s
        self._seen: dict[str, tuple[str, int, int]] = {}  # job id -> (partition, start, wait)

    def observe(self, jobs: Iterable[SlurmJob], now: int) -> None:
        for job in jobs:
            if job.state is JobState.PENDING or job.start is None or job.start > now:
                continue  # a pending job's "start" is Slurm's estimate, not a start
            eligible = job.eligible if job.eligible is not None else job.submit
            if eligible is None or eligible <= 0 or job.job_id in self._seen:
                continue
            self._seen[job.job_id] = (job.partition, job.start, max(0, job.start - eligible))
        cutoff = now - self.keep_s
        self._seen = {k: v for k, v in self._seen.items() if v[1] > cutoff}

    def history(self, partition: str) -> WaitHistory:
        """This partition's waits (every partition's when none was named)."""
        mine = (v for v in self._seen.values() if not partition or v[0] == partition)
        rows = sorted((start, wait) for _part, start, wait in mine)
        arr = np.array(rows, dtype=np.int64).reshape(-1, 2)
        return WaitHistory(arr[:, 0].copy(), arr[:, 1].copy())


class _WaitPolicy(Policy):
    """Submit when now + (predicted wait) reaches the planned end.

    The evaluation harness hands it the recorded waits (``ctx.history``); in the daemon it
    learns them itself from the polls it observes (:class:`WaitTracker`, per partition,
    after a warm-up read of ``warmup_s`` of accounting). It needs every user's jobs
    (``sees_all_jobs``): the waits of Mirage's own jobs alone say little of the queue."""

    def __init__(self, window_s: int = 24 * HOUR) -> None:
        self.window_s = window_s
        self.warmup_s = window_s
        self.tracker = WaitTracker(window_s)

    def predicted_wait(self, waits: np.ndarray) -> float:
        raise NotImplementedError

    def observe(self, ctx: DecisionContext) -> None:
        if ctx.history is not None:
            return  # recorded waits given: nothing to learn
        if ctx.accounting is not None:
            self.tracker.observe(ctx.accounting, ctx.now)
        self.tracker.observe(ctx.snapshot.jobs, ctx.now)

    def _waits(self, ctx: DecisionContext, partition: str) -> np.ndarray:
        history = ctx.history if ctx.history is not None else self.tracker.history(partition)
        return history.recent(ctx.now, self.window_s)

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        out = []
        by_part: dict[str, tuple[float, int]] = {}
        for p in pending:
            if p.partition not in by_part:
                waits = self._waits(ctx, p.partition)
                wait = self.predicted_wait(waits) if waits.size else 0.0
                by_part[p.partition] = (wait, int(waits.size))
            wait, n_waits = by_part[p.partition]
            pred = int(ctx.now + wait)
            out.append(
                Decision(
                    submit=pred >= p.planned_end,
                    predicted_start=max(pred, p.planned_end),
                    reason=f"{self.name}: predicted wait {wait:.0f} s over {n_waits} jobs",
                )
            )
        return out


class RunningAverage(_WaitPolicy):
    """Predicted wait = ``factor`` x the mean wait of jobs started in the last window."""

    name = "running-average"

    def __init__(self, factor: float = 1.0, window_s: int = 24 * HOUR) -> None:
        super().__init__(window_s)
        self.factor = factor

    def predicted_wait(self, waits: np.ndarray) -> float:
        return self.factor * float(waits.mean())


def binomial_upper_index(n: int, q: float, confidence: float) -> int:
    """QBETS' order statistic: the smallest k (1-based) with P(Binom(n, q) < k) >= confidence,
    so that the k-th smallest of n waits bounds the q-quantile from above at ``confidence``;
    n + 1 when even the largest does not."""
    if n <= 0:
        return 1
    cdf = 0.0
    for j in range(n):
        cdf += math.comb(n, j) * q**j * (1 - q) ** (n - j)
        if cdf >= confidence:
            return j + 1
    return n + 1


class Qbets(_WaitPolicy):
    """QBETS-style: an upper confidence bound on the ``quantile`` of recent waits."""

    name = "qbets"

    def __init__(
        self, quantile: float = 0.5, confidence: float = 0.95, window_s: int = 24 * HOUR
    ) -> None:
        super().__init__(window_s)
        if not 0 < quantile < 1 or not 0 < confidence < 1:
            raise ValueError("quantile and confidence must lie in (0, 1)")
        self.quantile = quantile
        self.confidence = confidence

    def predicted_wait(self, waits: np.ndarray) -> float:
        n = int(waits.size)
        if n > 200:  # normal approximation of the binomial, for speed
            z = 1.6448536269514722 if abs(self.confidence - 0.95) < 1e-9 else _z(self.confidence)
            k = math.ceil(
                n * self.quantile + z * math.sqrt(n * self.quantile * (1 - self.quantile))
            )
        else:
            k = binomial_upper_index(n, self.quantile, self.confidence)
        ordered = np.sort(waits)
        return float(ordered[min(n, max(1, k)) - 1])


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(confidence)
