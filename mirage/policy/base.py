"""The policy interface: the harness, the daemon and the simulator demo call the same code.

At every decision step, for every tracked chain whose current segment runs and whose
successor is not yet submitted, a policy answers "submit the successor now, or wait",
optionally with a predicted successor start and an interval. All pending transitions are
decided in one batched call (one feature matrix, one model call).

A policy may also **revoke** a pre-submission: asked again while the successor it had
submitted still pends, it may find it far too early (the queue drained since). The daemon
then cancels the pending successor (only while it pends: ``scancel --state=PENDING``) and
asks again at the next steps, at most :data:`MAX_REVOCATIONS` times per transition.
:func:`revocable_step` is that rule on a recorded sample, for evaluation and tuning.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mirage.profile.schema import ClusterProfile
from mirage.slurm.types import QueueSnapshot, SlurmJob, StartEstimate, SubmitRequest


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
    # the successor's job id once it was pre-submitted (asked whether to revoke it), else ""
    succ_job_id: str = ""

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
    own estimate: ``sbatch --test-only`` on a real cluster, its model in the simulator,
    :meth:`mirage.sim.engine.Simulation.test_only`); it may be rate-limited and return
    ``StartEstimate(start=None)``.
    """

    now: int
    snapshot: QueueSnapshot
    profile: ClusterProfile
    estimate_start: Callable[[SubmitRequest], StartEstimate] | None = None
    history: WaitHistory | None = None  # recent waits (sacct), for wait-based baselines
    # This step's accounting records (``sacct -a``, overlapping windows), for policies that
    # learn from finished jobs (``lookahead``'s run times)
    accounting: Sequence[SlurmJob] | None = None
    # The queue features of ``snapshot`` per partition, when already computed from it (the
    # evaluation harness records them in the simulator instead of whole snapshots).
    queue_rows: Mapping[str, np.ndarray] | None = None
    # The look-ahead start of a transition's successor, when recorded (the evaluation
    # harness replays recorded curves; the daemon's guard simulates its snapshot instead).
    lookahead_start: Callable[[PendingTransition], int | None] | None = None


class Policy(abc.ABC):
    """Decides, for a batch of pending transitions, which successors to submit now."""

    name: str = "policy"
    #: Seconds of accounting history the policy wants before its first decision: the
    #: daemon reads them once, in one extra sacct, and passes them to :meth:`observe`.
    warmup_s: int = 0
    #: Whether its decisions need every user's jobs in the queue (a daemon that sees only
    #: its own user's, ``sees_all_jobs = false``, uses its fallback instead).
    needs_queue: bool = True

    @abc.abstractmethod
    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        """One decision per pending transition, in the same order."""

    def observe(self, ctx: DecisionContext) -> None:  # noqa: B027 - optional hook
        """Called once per decision step before ``decide`` (e.g. to track recent waits)."""

    @property
    def revocable(self) -> bool:
        """Whether :meth:`revoke` can ever say yes (the daemon skips asking otherwise)."""
        return False

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        """For transitions whose successor was pre-submitted and still pends: cancel it now
        (it would start far too early)? One answer per transition; by default never."""
        return [False] * len(pending)


#: Revocations of one transition's pre-submitted successor, at most: a forecaster that
#: flip-flops must not churn the controller (each is a cancelled job in accounting).
MAX_REVOCATIONS = 3


def revocable_step(
    submit: np.ndarray,
    revoke: np.ndarray,
    succ_start: np.ndarray,
    steps: np.ndarray,
    limit: int = MAX_REVOCATIONS,
) -> tuple[int, int]:
    """The step of the submission that stands, and the revocations before it, on a
    recorded sample.

    ``submit``/``revoke``: the policy's answers at each decision step (length K);
    ``succ_start``: the successor's start if submitted at step k (length K + 1, the last
    the planned end); ``steps``: the step times (K + 1). A submission at k can be revoked
    at a later step j only while it still pends (``steps[j] < succ_start[k]``); the
    outcome is the last submission's (a cancelled pending job is assumed not to have
    changed the queue for others). K: never submitted, so at the planned end.
    """
    n_steps = len(submit)
    hits = np.flatnonzero(submit)
    if not len(hits):
        return n_steps, 0
    k, revoked = int(hits[0]), 0
    while revoked < limit:
        pends_until = int(np.searchsorted(steps[:n_steps], succ_start[k], side="left"))
        late = np.flatnonzero(revoke[k + 1 : pends_until])
        if not len(late):
            break
        revoked += 1
        r = k + 1 + int(late[0])
        again = np.flatnonzero(submit[r + 1 :])
        if not len(again):
            return n_steps, revoked
        k = r + 1 + int(again[0])
    return k, revoked
