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
from collections.abc import Sequence

import numpy as np

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.slurm.types import SubmitRequest

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


class _WaitPolicy(Policy):
    """Submit when now + (predicted wait) reaches the planned end."""

    def __init__(self, window_s: int = 24 * HOUR) -> None:
        self.window_s = window_s

    def predicted_wait(self, waits: np.ndarray) -> float:
        raise NotImplementedError

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        waits = np.zeros(0, dtype=np.int64)
        if ctx.history is not None:
            waits = ctx.history.recent(ctx.now, self.window_s)
        wait = self.predicted_wait(waits) if waits.size else 0.0
        out = []
        for p in pending:
            pred = int(ctx.now + wait)
            out.append(
                Decision(
                    submit=pred >= p.planned_end,
                    predicted_start=max(pred, p.planned_end),
                    reason=f"{self.name}: predicted wait {wait:.0f} s over {waits.size} jobs",
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
