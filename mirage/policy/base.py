"""The policy interface: the harness, the daemon and the simulator demo call the same code.

At every decision step, for every tracked chain whose current segment runs and whose
successor is not yet submitted, a policy answers "submit the successor now, or wait",
optionally with a predicted successor start and an interval. All pending transitions are
decided in one batched call (one feature matrix, one model call).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mirage.profile.schema import ClusterProfile
from mirage.slurm.types import QueueSnapshot, StartEstimate, SubmitRequest


@dataclass(frozen=True)
class PendingTransition:
    """One chain waiting for the decision to pre-submit its next segment.

    ``pred_*`` describe the running segment k; ``succ_*`` the request of segment k+1
    (normally the same as k's). Times are epoch seconds, durations seconds.
    """

    chain_id: str
    pred_job_id: str
    pred_start: int
    pred_time_limit: int
    succ_nodes: int
    succ_gpus: int
    succ_time_limit: int
    partition: str
    user: str = ""
    segment_index: int = 0  # k, counted from 0

    @property
    def planned_end(self) -> int:
        return self.pred_start + self.pred_time_limit

    def remaining(self, now: int) -> int:
        """Seconds until the running segment reaches its time limit."""
        return max(0, self.planned_end - now)


@dataclass(frozen=True)
class Decision:
    submit: bool
    predicted_start: int | None = None
    interval: tuple[int, int] | None = None  # (low, high) of the predicted start
    reason: str = ""


@dataclass(frozen=True)
class WaitHistory:
    """Waits of jobs that have started, as ``sacct`` shows them to a live daemon.

    ``starts`` (sorted) and ``waits`` (start - eligible, seconds) are parallel int64 arrays;
    only jobs that started at or before the decision time may be in them.
    """

    starts: np.ndarray
    waits: np.ndarray

    def recent(self, now: int, span_s: int) -> np.ndarray:
        """Waits of the jobs that started in ``(now - span_s, now]``."""
        lo = int(np.searchsorted(self.starts, now - span_s, side="right"))
        hi = int(np.searchsorted(self.starts, now, side="right"))
        out: np.ndarray = self.waits[lo:hi]
        return out


@dataclass(frozen=True)
class DecisionContext:
    """What a policy may look at: only what a live daemon can see.

    ``estimate_start`` answers "when would this request start if submitted now" (Slurm's
    own estimate: ``sbatch --test-only`` on a real cluster, a forked probe in the
    simulator); it may be rate-limited and return ``StartEstimate(start=None)``.
    """

    now: int
    snapshot: QueueSnapshot
    profile: ClusterProfile
    estimate_start: Callable[[SubmitRequest], StartEstimate] | None = None
    history: WaitHistory | None = None  # recent waits (sacct), for wait-based baselines
    # The queue features of ``snapshot`` per partition, when already computed from it (the
    # evaluation harness records them in the simulator instead of whole snapshots).
    queue_rows: Mapping[str, np.ndarray] | None = None


class Policy(abc.ABC):
    """Decides, for a batch of pending transitions, which successors to submit now."""

    name: str = "policy"

    @abc.abstractmethod
    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        """One decision per pending transition, in the same order."""

    def observe(self, ctx: DecisionContext) -> None:  # noqa: B027 - optional hook
        """Called once per decision step before ``decide`` (e.g. to track recent waits)."""
