"""Where a plan's queue comes from: a Slurm client (the real cluster or the simulator),
read once; or the daemon's last poll (:mod:`mirage.daemon`), which serves everyone."""

from __future__ import annotations

from collections.abc import Sequence

from mirage.plan.predict import WaitForecast
from mirage.plan.queue import Snapshot
from mirage.plan.shapes import UNLIMITED_MAX_S, Shape, shape_of
from mirage.plan.work import PlanInputError, Work
from mirage.policy.base import DecisionContext, PendingTransition, Policy
from mirage.policy.lookahead import LookaheadPolicy, RunTimes
from mirage.profile.schema import ClusterProfile
from mirage.slurm.client import SlurmClient

#: Accounting history read for run times: what the look-ahead policy warms up with.
HISTORY_S = LookaheadPolicy.warmup_s


def read_snapshot(
    client: SlurmClient, profile: ClusterProfile, *, now: int | None = None, user: str = ""
) -> Snapshot:
    """One ``squeue`` and one ``sacct`` (the last :data:`HISTORY_S`): the queue, and the
    run times of finished jobs that predict how long the queued ones run."""
    snap = client.queue()
    at = snap.taken_at if now is None else now
    runtimes = RunTimes()
    runtimes.observe(client.accounting(at - HISTORY_S, at))
    runtimes.observe(snap.jobs)
    return Snapshot(snap, profile, at, runtimes, user=user)


def habitual_shape(profile: ClusterProfile, work: Work, partition: str | None = None) -> Shape:
    """What researchers submit by habit: the work's own size at the partition's longest
    limit (the default partition unless named)."""
    part = profile.partition(partition)
    shape = shape_of(part, work.base[0], work.unit, part.max_time_s or UNLIMITED_MAX_S)
    if shape is None:
        raise PlanInputError(
            f"{work.base[0]} {work.unit}(s) do not fit partition {part.name!r} of {profile.name!r}"
        )
    return shape


def policy_forecast(policy: Policy, ctx: DecisionContext, user: str = "") -> WaitForecast:
    """A trained forecaster's waits for each shape: ask ``policy`` about a successor
    due now (its predecessor ending at ``ctx.now``) and read its predicted start and
    stated interval; None where a decision states no interval (a baseline)."""

    def forecast(shapes: Sequence[Shape]) -> list[tuple[int, int, int] | None]:
        pending = [_due_now(s, ctx.now, user) for s in shapes]
        out: list[tuple[int, int, int] | None] = []
        for d in policy.decide(ctx, pending):
            if d.interval is None or d.predicted_start is None:
                out.append(None)
                continue
            lo, hi = d.interval
            now = ctx.now
            out.append((max(0, lo - now), max(0, d.predicted_start - now), max(0, hi - now)))
        return out

    return forecast


def _due_now(shape: Shape, now: int, user: str) -> PendingTransition:
    return PendingTransition(
        chain_id="plan",
        pred_job_id="",
        pred_start=now - shape.time_limit,
        pred_time_limit=shape.time_limit,
        succ_nodes=shape.nodes,
        succ_gpus=shape.gpus,
        succ_time_limit=shape.time_limit,
        partition=shape.partition,
        user=user,
    )
