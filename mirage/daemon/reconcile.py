"""Reconciliation: Slurm's records (one squeue, one sacct per cycle) into segment states.

Pure bookkeeping of what Slurm says, before anything is decided: one record per job id
(:func:`merge_records`), each segment's own record only (:func:`own_record`: an id the
controller reused is not the segment's job), the segment's fields from it
(:func:`update_segment`), second jobs of one submission cancelled (:func:`cancel_extras`),
and the transitions observed for the metrics (:func:`observe_transitions`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from mirage.daemon.context import StepContext
from mirage.daemon.ledger import find_token
from mirage.daemon.metrics import interval_outcome
from mirage.daemon.outcomes import CycleReport, SegmentOutcome
from mirage.daemon.store import Chain, Segment, event_row
from mirage.daemon.timing import ReportError, chain_cost
from mirage.policy.cost import CostModel, Transition
from mirage.slurm.types import JobState, SlurmError, SlurmJob

log = logging.getLogger(__name__)


def merge_records(
    queue: Sequence[SlurmJob], accounting: Sequence[SlurmJob]
) -> tuple[dict[str, SlurmJob], dict[str, int]]:
    """One record per job id, squeue's over sacct's (the controller is current), and the
    records left out, counted by why:

    * ``duplicate``: squeue listed one id twice with different states. The active record
      is kept: a finished copy must not end a running segment.

    A record from sacct alone stays (a job that left the queue), even PENDING, for token
    adoption; :func:`own_record` decides whether a segment may read it.
    """
    ignored: dict[str, int] = defaultdict(int)
    current: dict[str, SlurmJob] = {}
    for job in queue:
        seen = current.get(job.job_id)
        if seen is not None and seen.state is not job.state:
            ignored["duplicate"] += 1
            log.warning(
                "squeue lists job %s twice (%s, %s)", job.job_id, seen.state.value, job.state.value
            )
            if not seen.state.is_finished:
                continue
        current[job.job_id] = job
    records: dict[str, SlurmJob] = {}
    for job in accounting:
        if job.job_id not in current:
            records[job.job_id] = job
    records.update(current)
    return records, dict(ignored)


def own_record(
    ctx: StepContext, seg: Segment, records: Mapping[str, SlurmJob], queued: frozenset[str]
) -> SlurmJob | None:
    """The segment's job's record, only when it is the segment's job: a record under its
    id that carries another token (or none) is another job, after the controller reused
    the id (a state reset, or MaxJobId wrapping); applying it would end the chain on a
    stranger's state. The segment then reads as missing (WAIT), and the anomaly is
    counted. A record with the same token under another id is never taken for it
    either: it is a second job of one submission (:func:`cancel_extras`)."""
    job = records.get(seg.job_id)
    if job is None:
        return None
    if job.state is JobState.PENDING and seg.start is not None and job.job_id not in queued:
        # A started job PENDING again is a requeue, which the controller shows: from
        # sacct alone it is slurmdbd lagging behind (or a partial squeue list), and
        # read as a requeue it would make Mirage cancel a running predecessor.
        ctx.metrics.records_ignored.labels("stale_pending").inc()
        return None
    if find_token(job) != seg.token:
        log.warning(
            "job %s no longer carries token %s (id reused?): segment %d of chain %s "
            "reads as missing",
            seg.job_id,
            seg.token,
            seg.index,
            seg.chain_id,
        )
        ctx.metrics.records_ignored.labels("id_reused").inc()
        return None
    return job


def update_segment(seg: Segment, job: SlurmJob | None, now: int) -> None:
    if job is None:
        if seg.missing_since is None:
            seg.missing_since = now
        return
    seg.missing_since = None
    if seg.job_state != job.state.value:
        seg.job_state = job.state.value
    if seg.reason != job.reason:
        seg.reason = job.reason[:128]
    if job.state is JobState.UNKNOWN:
        return  # a state Mirage cannot read says nothing of start or end (a pending
        # job's start time is only Slurm's estimate): keep what is known
    if job.time_limit is not None and seg.time_limit_s != job.time_limit:
        seg.time_limit_s = job.time_limit
    if job.state is JobState.PENDING:
        if seg.start is not None:  # requeued under the same id: it will start again
            seg.start = None
            seg.end = None
            seg.requeued = True
        if seg.slurm_estimate != job.start:
            seg.slurm_estimate = job.start
        return
    if job.start is not None and seg.start != job.start:
        seg.start = job.start
    if job.state.is_finished and job.end is not None and seg.end != job.end:
        seg.end = job.end


def cancel_extras(
    ctx: StepContext,
    s: Session,
    now: int,
    extras: Mapping[str, list[SlurmJob]],
    report: CycleReport,
) -> None:
    """Cancel the extra jobs of a submission that Slurm created twice (sbatch retried a
    request whose reply was lost): two live jobs with one token would train the same
    segment twice, checkpointing into one place. Only jobs of the chain's owner that
    carry a token Mirage tracks, under an id other than the tracked one, and that have
    not finished."""
    for token, jobs in extras.items():
        seg = s.scalars(select(Segment).where(Segment.token == token)).first()
        chain = None if seg is None else s.get(Chain, seg.chain_id)
        if seg is None or chain is None:
            continue
        ids = [
            j.job_id
            for j in jobs
            if j.job_id != seg.job_id and not j.state.is_finished and j.user == chain.owner
        ]
        if not ids:
            continue
        ctx.metrics.records_ignored.labels("extra_job").inc(len(ids))
        try:
            ctx.clients(chain).cancel(ids)
        except SlurmError as exc:
            s.add(event_row(now, "cancel.failed", chain.id, str(exc), job_ids=ids))
            continue
        report.cancelled.extend(ids)
        why = f"second job(s) of one submission: segment {seg.index} is {seg.job_id}"
        s.add(event_row(now, "cancel.extra", chain.id, why, job_ids=ids, token=token))
        log.warning("cancelled %s: %s", ids, why)


def observe_transitions(ctx: StepContext, s: Session, now: int) -> None:
    """Observe interruption/overlap for successors that started after an ended segment."""
    started = s.scalars(
        select(Segment).where(
            Segment.transition_recorded.is_(False),
            Segment.index > 0,
            Segment.start.is_not(None),
            Segment.job_state != JobState.PENDING.value,
        )
    ).all()
    for seg in started:
        pred = s.scalars(
            select(Segment).where(
                Segment.chain_id == seg.chain_id,
                Segment.index == seg.index - 1,
                Segment.end.is_not(None),
                or_(Segment.outcome.is_(None), Segment.outcome != SegmentOutcome.REVOKED),
            )
        ).first()
        if pred is None or pred.start is None or pred.end is None or seg.start is None:
            continue
        t = Transition(pred.start, pred.time_limit_s or 0, pred.end, seg.start)
        ctx.metrics.interruption.observe(t.interruption)
        ctx.metrics.overlap.observe(t.overlap)
        # both segments ran at once: signalled by the successor's helper, the daemon or
        # Slurm's own warning, every such window is measured (the handoff's real cost)
        window = max(0, pred.end - seg.start)
        if window > 0:
            ctx.metrics.handoff_window.observe(window)
            seg.handoff_s = window
        cost = t.cost(own_cost(ctx, s, seg.chain_id))
        ctx.metrics.transition_cost.observe(cost)
        error = None
        if seg.predicted_start is not None:
            error = abs(seg.predicted_start - seg.start)
            ctx.metrics.prediction_error.observe(error)
        where = interval_outcome(seg.start, seg.predicted_low, seg.predicted_high)
        if where is not None:
            ctx.metrics.predicted_interval.labels(where).inc()
        seg.transition_recorded = True
        s.add(
            event_row(
                now,
                "transition",
                seg.chain_id,
                f"{pred.job_id} -> {seg.job_id}",
                index=seg.index,
                interruption=t.interruption,
                overlap=t.overlap,
                handoff_window=window,
                signalled_by_daemon=pred.signalled_at is not None,
                gap=t.gap,
                cost=cost,
                prediction_error=error,
                interval=where,
                presubmitted=seg.presubmitted,
            )
        )


def own_cost(ctx: StepContext, s: Session, chain_id: str) -> CostModel:
    """The cost of record for this chain's transitions: the daemon's, with the chain's own
    restart overhead and handoff window where they have been measured
    (:func:`mirage.daemon.timing.chain_cost`)."""
    rows = s.execute(
        select(Segment.restart_s, Segment.handoff_s)
        .where(Segment.chain_id == chain_id)
        .order_by(Segment.index)
    ).all()
    return chain_cost(ctx.cost, [r for r, _ in rows], [h for _, h in rows])


def read_timings(ctx: StepContext, s: Session, now: int, chains: Mapping[str, Chain]) -> None:
    """Read the timing report of each running segment that resumed from a checkpoint and
    has no restart overhead yet (each at most every RETRY_S): the job's own measure of R.
    A report that cannot be used is the chain's note, counted, never the cycle's error."""
    running = s.scalars(
        select(Segment).where(
            Segment.finished.is_(False),
            Segment.index > 0,
            Segment.job_state == JobState.RUNNING.value,
            Segment.restart_s.is_(None),
        )
    ).all()
    ctx.timings.forget(seg.id for seg in running)
    for seg in running:
        chain = chains.get(seg.chain_id)
        if chain is None or not ctx.timings.due(seg.id, now):
            continue
        try:
            timing = ctx.timings.timing(chain, seg.index + 1, seg.job_id)
        except ReportError as exc:
            ctx.metrics.timing_reports.labels("unusable").inc()
            log.warning("chain %s, job %s: %s", chain.id, seg.job_id, exc)
            continue
        if timing is None or timing.restart_s is None:
            continue  # no report (a job without the helper), or training not resumed yet
        seg.restart_s = round(timing.restart_s, 3)
        ctx.metrics.restart_overhead.observe(timing.restart_s)
        ctx.metrics.timing_reports.labels("read").inc()
        s.add(
            event_row(
                now,
                "segment.resumed",
                chain.id,
                f"{seg.job_id} resumed training {timing.restart_s:.0f} s after taking over",
                index=seg.index,
                restart_s=seg.restart_s,
                waited_s=round(timing.took_over - timing.began, 3),
            )
        )
