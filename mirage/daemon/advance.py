"""Advancing a chain: its segments' Slurm states through the state table, to what comes next.

For each active chain, once its segments are reconciled with Slurm's records: a finished
segment continues or stops the chain (:func:`mirage.daemon.states.segment_action`); a
successor that starts while its predecessor runs gets the predecessor signalled (the
handoff, intent recorded first); a chain that ends has its live segments cancelled. What
is left is what to submit (:class:`mirage.daemon.outcomes.Want`) and the pending
pre-submission a policy may revoke (:class:`mirage.daemon.revoke.Revocable`).
"""

from __future__ import annotations

import dataclasses
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirage.daemon import replan, revoke
from mirage.daemon.context import StepContext, set_note
from mirage.daemon.outcomes import CycleReport, SegmentOutcome, Want
from mirage.daemon.planning import Planner
from mirage.daemon.routing import PolicyRouter
from mirage.daemon.states import Action, is_ended, segment_action
from mirage.daemon.store import Chain, ChainState, Event, Segment, event_row
from mirage.fmt import duration
from mirage.policy.base import PendingTransition
from mirage.slurm.types import JobState, SlurmError

log = logging.getLogger(__name__)

#: The event committed before a handoff signal is sent (the "handoff" event follows it).
HANDOFF_INTENT = "handoff.intent"


class Advancer:
    """Applies the state table to chains; acts (handoff, cancel) as each chain's owner."""

    def __init__(self, ctx: StepContext, router: PolicyRouter) -> None:
        self.ctx = ctx
        self.router = router
        # [plan] replan: a planned chain's next segment planned again (replan.py)
        self.planner: Planner | None = None
        self.replan_min_gain_s = 0  # [plan] replan_min_gain_s
        self.limit_bound_only = True  # [policy] presubmit_only_limit_bound

    def advance(
        self,
        s: Session,
        chain: Chain,
        segs: list[Segment],
        *,
        has_unresolved: bool,
        now: int,
        report: CycleReport,
    ) -> Want | None:
        """Apply the state table to the chain's oldest live segment(s); what to submit."""
        while segs:
            cur = segs[0]
            state = JobState(cur.job_state) if cur.missing_since is None else None
            marker = None
            if chain.until_file and is_ended(state):
                marker = self.ctx.marker_check(chain)
            by_mirage = (
                cur.signalled_at is not None
                or cur.cancelled_by_mirage
                # a crash may have cut the handoff after its durable intent: the job may
                # have had the signal, so its end is the handoff's
                or (
                    state in (JobState.CANCELLED, JobState.FAILED)
                    and self._handoff_intent(s, cur) is not None
                )
            )
            verdict = segment_action(
                state,
                cur.reason,
                until_file=bool(chain.until_file),
                marker=marker,
                by_mirage=by_mirage,
            )
            if verdict.action is Action.WAIT:
                self._maybe_handoff(s, chain, segs, now, report)
                break
            cur.finished = True
            cur.outcome = SegmentOutcome(verdict.action.value)
            succ = segs[1] if len(segs) > 1 else None
            handed_over = (  # the successor's own helper may signal before the daemon does
                succ is not None and succ.start is not None and cur.end is not None
                and succ.start < cur.end
            )  # fmt: skip
            if not (by_mirage or handed_over):
                record_early_end(chain, cur, state)
            if cur.start is not None and cur.end is not None:
                chain.trained_s += max(0, cur.end - cur.start)
            chain.updated_at = now
            s.add(
                event_row(
                    now,
                    "segment.end",
                    chain.id,
                    verdict.reason,
                    job_id=cur.job_id,
                    index=cur.index,
                    state=cur.job_state,
                    action=verdict.action.value,
                    trained_s=chain.trained_s,
                )
            )
            segs = segs[1:]
            if verdict.action is Action.STOP:
                final = ChainState.COMPLETED if verdict.completed else ChainState.STOPPED
                self.end_chain(
                    s, chain, final, reason=verdict.reason, rest=segs, now=now, report=report
                )
                return None
            if not segs and segments_done(chain):
                reason = f"ran its {chain.segments_target} segments"
                self.end_chain(
                    s, chain, ChainState.COMPLETED, reason=reason, rest=[], now=now, report=report
                )
                return None
        if has_unresolved:
            set_note(chain, "a submission's outcome is not known yet: no new one until then")
            return None  # never a new submission while one may exist
        if self.planner is not None and replan.due(chain, segs, now):
            replan.replan(s, chain, segs, self.planner, now, self.replan_min_gain_s)
        return self._next_want(chain, segs, now)

    def _next_want(self, chain: Chain, segs: list[Segment], now: int) -> Want | None:
        """No live segment: submit now. One running: ask the policy. Else nothing.

        ``--segments N`` is N jobs: the N-th segment gets no successor. Every segment gets
        the chain's time limit.
        """
        limit = chain.time_limit_s
        if not segs:
            set_note(chain, self.router.policy_for(chain).note)
            return Want(chain, chain.next_index, limit, presubmit=False)
        pred = segs[0]
        if (
            len(segs) > 1
            or pred.job_state != JobState.RUNNING.value
            or pred.start is None
            or pred.missing_since is not None  # unseen this poll: its state is a memory
        ):
            if len(segs) == 1 and pred.job_state == JobState.PENDING.value:
                set_note(chain, self.router.policy_for(chain).note)
            return None
        if segments_done(chain):
            set_note(
                chain,
                f"segment {pred.index + 1} of {chain.segments_target} is the last: "
                "no successor to pre-submit",
            )
            return None
        if self.limit_bound_only and ends_early(chain):
            set_note(chain, early_end_note(chain))
            self.ctx.metrics.presubmissions.labels("early_end").inc()
            return None
        pending = self.transition(chain, pred, limit, self.router.resolve_partition(chain))
        return Want(chain, chain.next_index, limit, presubmit=True, pending=pending)

    @staticmethod
    def transition(
        chain: Chain, pred: Segment, limit: int, partition: str | None
    ) -> PendingTransition:
        """The transition from the running segment ``pred`` to a successor of ``limit``."""
        assert pred.start is not None
        return PendingTransition(
            chain_id=chain.id,
            pred_job_id=pred.job_id,
            pred_start=pred.start,
            pred_time_limit=pred.time_limit_s or chain.time_limit_s,
            succ_nodes=chain.nodes,
            succ_gpus=chain.nodes * chain.gpus_per_node,
            succ_time_limit=limit,
            partition=partition or "",
            user=chain.owner,
            segment_index=pred.index,
        )

    def _maybe_handoff(
        self, s: Session, chain: Chain, segs: list[Segment], now: int, report: CycleReport
    ) -> None:
        if len(segs) < 2 or any(g.missing_since is not None for g in segs[:2]):
            return  # act only on what this poll saw
        pred, succ = segs[0], segs[1]
        running = JobState.RUNNING.value
        if pred.requeued and pred.job_state == JobState.PENDING.value and succ.job_state == running:
            # Slurm requeued the predecessor (node failure, preemption) and the successor
            # already resumes from its checkpoint: running the predecessor again would train
            # the same steps twice. Cancel it (by Mirage: the chain continues).
            self._cancel_requeued(s, chain, pred, succ, now=now, report=report)
            return
        if (
            not self.ctx.cfg.handoff
            or pred.job_state != running
            or succ.job_state != running
            or pred.signalled_at
        ):
            return
        # The intent is committed before the signal: a crash between the two must not
        # leave a signalled job that Mirage has no record of (its non-zero exit would
        # then stop the chain). An intent without a recorded signal is sent again while
        # the predecessor runs: at least once, since "checkpoint and exit" is idempotent
        # and a lost signal would keep the successor waiting on the predecessor's limit.
        if self._handoff_intent(s, pred) is None:
            s.add(
                event_row(
                    now,
                    HANDOFF_INTENT,
                    chain.id,
                    f"successor {succ.job_id} started while {pred.job_id} runs",
                    job_id=pred.job_id,
                    succ_job_id=succ.job_id,
                    signal=self.ctx.cfg.handoff_signal,
                )
            )
            s.commit()
        try:
            self.ctx.clients(chain).signal(pred.job_id, self.ctx.cfg.handoff_signal, True)
        except SlurmError as exc:
            log.warning("handoff signal to %s failed: %s", pred.job_id, exc)
            s.add(event_row(now, "handoff.failed", chain.id, str(exc), job_id=pred.job_id))
            return
        self.ctx.fault_point("during-handoff")  # signal sent, not yet recorded
        pred.signalled_at = now
        report.signalled.append(pred.job_id)
        self.ctx.metrics.handoffs.inc()
        s.add(
            event_row(
                now,
                "handoff",
                chain.id,
                f"successor {succ.job_id} started while {pred.job_id} runs",
                pred_job_id=pred.job_id,
                succ_job_id=succ.job_id,
                signal=self.ctx.cfg.handoff_signal,
            )
        )

    @staticmethod
    def _handoff_intent(s: Session, seg: Segment) -> Event | None:
        """The recorded handoff intent for this segment's job, if any.

        Looked up only for a segment not yet marked signalled (a crash cut its handoff,
        or it is about to start), among its chain's few intents (events are indexed by
        chain; their JSON data is not, portably, so the job id is matched here).
        """
        rows = s.scalars(
            select(Event).where(Event.chain_id == seg.chain_id, Event.kind == HANDOFF_INTENT)
        )
        return next((e for e in rows if e.data.get("job_id") == seg.job_id), None)

    def _cancel_requeued(
        self,
        s: Session,
        chain: Chain,
        pred: Segment,
        succ: Segment,
        *,
        now: int,
        report: CycleReport,
    ) -> None:
        try:
            self.ctx.clients(chain).cancel([pred.job_id])
        except SlurmError as exc:
            s.add(event_row(now, "cancel.failed", chain.id, str(exc), job_ids=[pred.job_id]))
            return
        pred.cancelled_by_mirage = True
        report.cancelled.append(pred.job_id)
        s.add(
            event_row(
                now,
                "cancel.requeued",
                chain.id,
                f"{pred.job_id} was requeued after {succ.job_id} started",
                job_id=pred.job_id,
            )
        )

    def end_chain(
        self,
        s: Session,
        chain: Chain,
        state: ChainState,
        *,
        reason: str,
        rest: list[Segment],
        now: int,
        report: CycleReport,
    ) -> None:
        chain.state = state
        chain.reason = reason
        chain.updated_at = now
        chain.note = ""  # an ended chain is pre-submitted no more: its reason says why
        report.ended.append(chain.id)
        s.add(event_row(now, "chain.end", chain.id, reason, state=state.value))
        self.stop_segments(s, chain, rest, now, report)
        # The environment snapshot may hold secrets and is needed only to submit: an ended
        # chain submits nothing more (a cancel runs with the minimal environment).
        chain.environment = {}

    def stop_segments(
        self, s: Session, chain: Chain, segs: list[Segment], now: int, report: CycleReport
    ) -> None:
        ids = [g.job_id for g in segs if not g.finished]
        if not ids:
            return
        try:
            self.ctx.clients(chain).cancel(ids)
        except SlurmError as exc:
            log.warning("cancel %s failed: %s", ids, exc)
            s.add(event_row(now, "cancel.failed", chain.id, str(exc), job_ids=ids))
            return  # live segments stay unfinished: retried next cycle
        for g in segs:
            g.cancelled_by_mirage = True
            g.finished = True
            g.outcome = SegmentOutcome.CANCELLED
        report.cancelled.extend(ids)
        s.add(event_row(now, "cancel", chain.id, "chain ended", job_ids=ids))

    def revocable(
        self, s: Session, chain: Chain, segs: list[Segment], now: int
    ) -> revoke.Revocable | None:
        """The chain's pre-submitted successor, if it pends while its predecessor runs (a
        policy may revoke it). A successor marked for revocation whose predecessor ended
        first is kept (:func:`mirage.daemon.revoke.keep`)."""
        pending = JobState.PENDING.value
        if (
            len(segs) == 2
            and segs[0].job_state == JobState.RUNNING.value
            and segs[0].start is not None
            and segs[0].missing_since is None
            and segs[1].job_state == pending
            and segs[1].missing_since is None
            and segs[1].presubmitted
            and not segs[1].requeued
        ):
            limit = segs[1].time_limit_s or chain.time_limit_s
            move = self.transition(chain, segs[0], limit, self.router.resolve_partition(chain))
            # the guard's look-ahead takes the pending successor out of its queue
            move = dataclasses.replace(move, succ_job_id=segs[1].job_id or "")
            return revoke.Revocable(chain, segs[1], move)
        for g in segs:
            if g.revoke_at is not None and g.job_state == pending and g is segs[0]:
                revoke.keep(self.ctx, s, chain, g, now)
        return None


#: A segment "ends early" when it ends on its own more than this share of its limit, and
#: more than EARLY_END_MIN_S, before the limit: beyond what a checkpoint taken on Slurm's
#: own warning signal (--signal=B:USR1@300, docs/users/chain-ready-job.md) or a poll
#: interval explains.
EARLY_END_FRACTION = 0.1
EARLY_END_MIN_S = 600


def record_early_end(chain: Chain, seg: Segment, state: JobState | None) -> None:
    """Keep how long before its limit a segment that ended on its own ended.

    Only COMPLETED and TIMEOUT count: a handoff's end is Mirage's doing, a node failure or
    a preemption the cluster's, a failure the job's; none says how long the chain's
    segments run.
    """
    if state not in (JobState.COMPLETED, JobState.TIMEOUT):
        return
    if seg.start is None or seg.end is None:
        return
    limit = seg.time_limit_s or chain.time_limit_s
    ran = max(0, seg.end - seg.start)
    chain.early_end_s = 0 if state is JobState.TIMEOUT else max(0, limit - ran)


def ends_early(chain: Chain) -> bool:
    """Whether the chain's last segment that ended on its own ended well before its limit.

    Pre-submission aims a successor's start at its predecessor's limit. A chain whose
    segments end hours before their limits (a resubmission after a crash, a fixed number
    of steps per job) would have its successor start early and cut its predecessor short:
    more segments, more restarts, and its successors pending ahead of other users' jobs,
    for idle time the chain would not have had. Such a chain's successors go in as its
    segments end, until one runs to its limit again.
    """
    early = chain.early_end_s
    if early is None:
        return False
    return early > max(EARLY_END_FRACTION * chain.time_limit_s, EARLY_END_MIN_S)


def early_end_note(chain: Chain) -> str:
    early = chain.early_end_s or 0
    return (
        f"its last segment ended on its own {duration(early, minutes=True)} before its limit: the "
        "successor goes in when this segment ends, not before "
        "([policy] presubmit_only_limit_bound)"
    )


def segments_done(chain: Chain) -> bool:
    """Whether the chain has had all its ``--segments N`` (each submitted segment counts;
    a revoked pre-submission gives its index back)."""
    target = chain.segments_target
    return target is not None and chain.next_index >= target
