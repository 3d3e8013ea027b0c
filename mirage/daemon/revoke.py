"""Revocable pre-submission: cancel a pending successor that a policy finds far too early.

A pre-submitted successor waits in the queue while its predecessor runs. When the queue
drains faster than the policy forecast, the successor would start long before the
predecessor ends (overlap: GPUs held twice). A policy that can revoke
(:attr:`mirage.policy.base.Policy.revocable`) is asked each cycle about every chain whose
pre-submitted successor still pends; where it says so, the daemon cancels the successor,
and the chain is back to "no successor yet": the policy is asked to pre-submit again at
the next cycles, as usual.

Never cancel a job that has started, never lose one, never submit twice:

1. **Intent first.** ``revoke_at`` is committed on the segment (and a ``revoke.intent``
   event) before any Slurm call. A crash after it leaves a marked segment that the next
   cycles finish or undo.
2. **Hold, then cancel only if pending.** ``scontrol hold`` stops a pending job from
   starting; then ``scancel --state=PENDING`` cancels it only if it still pends. scancel
   filters on the state itself, client side, so without the hold a job could start
   between its check and the kill; once held, it cannot. A job that started before the
   hold is left running (Slurm 22.05 accepts the hold of a running job, with rc 0, and
   sets its priority to 0: ``tests/slurm/test_cluster.py`` checks both): the next poll
   shows it running, the daemon releases it (so that a requeue would not leave it held)
   and it is a normal successor again.
3. **Settled by Slurm's word.** The segment is finished as ``REVOKED`` only once squeue or
   sacct shows the job CANCELLED; until then the chain has two live segments and gets no
   new submission (:meth:`mirage.daemon.advance.Advancer.advance`).
4. **Predecessor ended first.** If the predecessor ends while a marked successor still
   pends (a crash between hold and cancel, or a failed scancel), the successor is released
   and kept: it has queued longer than any new submission would.
5. **Bounded.** At most :data:`mirage.policy.base.MAX_REVOCATIONS` per transition.

A pending job that Mirage cancelled is still one job record in accounting (CANCELLED,
never started), the price of a revocation on the controller's side.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mirage.daemon.context import StepContext
from mirage.daemon.outcomes import CycleReport, SegmentOutcome
from mirage.daemon.routing import PolicyRouter
from mirage.daemon.store import Chain, Segment, event_row
from mirage.policy.base import MAX_REVOCATIONS, DecisionContext, PendingTransition, Policy
from mirage.slurm.types import JobState, QueueSnapshot, SlurmError

log = logging.getLogger(__name__)

#: The event committed before the hold and scancel of a revocation.
REVOKE_INTENT = "revoke.intent"
#: A revoked segment's outcome.
REVOKED = SegmentOutcome.REVOKED
#: Slurm's reasons for a held job (squeue %r).
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin")


@dataclass
class Revocable:
    """A chain whose pre-submitted successor still pends while its predecessor runs."""

    chain: Chain
    succ: Segment
    pending: PendingTransition  # the transition, as the policy saw it when submitting


def settle(ctx: StepContext, s: Session, seg: Segment, now: int) -> bool:
    """After a poll, a segment marked for revocation: finished as REVOKED once Slurm shows
    it cancelled (True); released and unmarked if it started first. Pending or unknown:
    unchanged."""
    state = JobState(seg.job_state) if seg.missing_since is None and seg.job_state else None
    if state is JobState.CANCELLED:
        ctx.metrics.revocations.inc()
        seg.finished = True
        seg.outcome = REVOKED
        seg.transition_recorded = True  # no transition: it never ran for the chain
        chain = s.get(Chain, seg.chain_id)
        if chain is not None:
            chain.next_index = min(chain.next_index, seg.index)  # its index is free again
            chain.updated_at = now
        s.add(event_row(now, "segment.revoked", seg.chain_id, "cancelled while pending",
                        job_id=seg.job_id, index=seg.index))  # fmt: skip
        return True
    if state is not None and state not in (JobState.PENDING, JobState.UNKNOWN):
        # it started before the hold: the successor after all. Undo the hold (priority 0,
        # shown as a held reason on the running job) if it took
        chain = s.get(Chain, seg.chain_id)
        if state is JobState.RUNNING and seg.reason in HELD_REASONS and chain is not None:
            try:
                ctx.clients(chain).release([seg.job_id])
            except SlurmError as exc:  # still marked: tried again next cycle
                s.add(event_row(now, "release.failed", seg.chain_id, str(exc), job_id=seg.job_id))
                return False
        seg.revoke_at = None
        s.add(event_row(now, "revoke.too_late", seg.chain_id, f"{state.value} before the hold",
                        job_id=seg.job_id))  # fmt: skip
    return False


def revocations(s: Session, chain_id: str, index: int) -> int:
    """How many successors of this transition were revoked already."""
    n = s.scalar(
        select(func.count())
        .select_from(Segment)
        .where(Segment.chain_id == chain_id, Segment.index == index, Segment.outcome == REVOKED)
    )
    return int(n or 0)


def act(
    ctx: StepContext,
    router: PolicyRouter,
    s: Session,
    *,
    now: int,
    snapshot: QueueSnapshot,
    candidates: list[Revocable],
    report: CycleReport,
) -> None:
    """Finish interrupted revocations; ask the policies about the others (one batched
    call per policy) and revoke where they say so."""
    ask: dict[str, tuple[Policy, list[Revocable]]] = {}
    for c in candidates:
        chain_id = c.chain.id
        try:
            if c.succ.revoke_at is not None:
                why = "an interrupted revocation"
                cancel(ctx, s, c.chain, c.succ, now=now, report=report, why=why)
                continue
            choice = router.policy_for(c.chain)
            if not ctx.cfg.revoke or not choice.policy.revocable:
                continue
            if revocations(s, c.chain.id, c.succ.index) >= MAX_REVOCATIONS:
                continue
        except Exception as exc:  # this chain's, and only its own
            ctx.chain_failed(s, chain_id, "revoke", exc, now=now, report=report)
            continue
        ask.setdefault(choice.label, (choice.policy, []))[1].append(c)
    for label, (policy, group) in ask.items():
        # as for decide: Slurm's estimate where the cycle's --test-only budget allows
        dctx = DecisionContext(now=now, snapshot=snapshot, profile=router.profile,  # type: ignore[arg-type]
                               estimate_start=router.estimate)  # fmt: skip
        answers = _answers(ctx, s, dctx=dctx, policy=policy, group=group, now=now, report=report)
        for c, yes in answers:
            if not yes:
                continue
            why = f"{label}: too early, {c.pending.remaining(now) / 3600:.2f} h left"
            try:
                cancel(ctx, s, c.chain, c.succ, now=now, report=report, why=why)
            except Exception as exc:  # this chain's, and only its own
                ctx.chain_failed(s, c.chain.id, "revoke", exc, now=now, report=report)


def _answers(
    ctx: StepContext,
    s: Session,
    *,
    dctx: DecisionContext,
    policy: Policy,
    group: list[Revocable],
    now: int,
    report: CycleReport,
) -> list[tuple[Revocable, bool]]:
    """The policy's revoke answers for the group; a batch that raises is asked again one
    chain at a time, and a chain whose answer fails keeps its successor (its error
    recorded on it)."""
    try:
        return list(zip(group, policy.revoke(dctx, [c.pending for c in group]), strict=True))
    except Exception:  # some chain's: ask again one at a time to find which
        pass
    out: list[tuple[Revocable, bool]] = []
    for c in group:
        try:
            (yes,) = policy.revoke(dctx, [c.pending])
        except Exception as exc:  # this chain's answer, and only its own, failed
            ctx.chain_failed(s, c.chain.id, "revoke", exc, now=now, report=report)
            continue
        out.append((c, yes))
    return out


def cancel(
    ctx: StepContext,
    s: Session,
    chain: Chain,
    succ: Segment,
    *,
    now: int,
    report: CycleReport,
    why: str,
) -> None:
    """Record the intent (committed), hold the job, cancel it if it still pends."""
    if succ.revoke_at is None:
        succ.revoke_at = now
        s.add(event_row(now, REVOKE_INTENT, chain.id, why, job_id=succ.job_id, index=succ.index))
        s.commit()
    client = ctx.clients(chain)
    try:
        client.hold([succ.job_id])
    except SlurmError as exc:  # the next cycle tries again while it pends
        log.info("revocation of %s: hold failed: %s", succ.job_id, exc)
        s.add(event_row(now, "revoke.failed", chain.id, str(exc), job_id=succ.job_id))
        return
    try:
        client.cancel([succ.job_id], pending_only=True)
    except SlurmError as exc:  # held, so it cannot start: the next cycle cancels again
        log.warning("revocation of %s: scancel failed: %s", succ.job_id, exc)
        s.add(event_row(now, "revoke.failed", chain.id, str(exc), job_id=succ.job_id))
        return
    # counted when the next poll shows it cancelled (it may have started before the hold)
    report.revoked.append(succ.job_id)
    s.add(event_row(now, "revoke", chain.id, why, job_id=succ.job_id, index=succ.index))


def keep(ctx: StepContext, s: Session, chain: Chain, succ: Segment, now: int) -> None:
    """The predecessor ended while its successor, marked for revocation, still pends:
    keep the successor (release it if held: it has queued longer than a new one would)."""
    if succ.reason in HELD_REASONS:
        try:
            ctx.clients(chain).release([succ.job_id])
        except SlurmError as exc:  # still marked and held: tried again next cycle
            log.warning("release of %s failed: %s", succ.job_id, exc)
            s.add(event_row(now, "release.failed", chain.id, str(exc), job_id=succ.job_id))
            return
    succ.revoke_at = None
    s.add(event_row(now, "revoke.kept", chain.id, "the predecessor ended first",
                    job_id=succ.job_id))  # fmt: skip
