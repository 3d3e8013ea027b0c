"""The submission ledger: every segment submitted exactly once, even across crashes.

A submission's row (a fresh token, state INTENT) is committed before sbatch runs; sbatch
carries the token in ``--comment`` and in the job name. A timeout or a lost connection
during sbatch makes it UNKNOWN; :func:`resolve_submissions` adopts any INTENT/UNKNOWN
whose token appears in squeue or sacct, and declares it LOST only after
``unknown_timeout_s`` with successful polls whose sacct window covered it. A chain with an
unresolved submission gets no new one (:mod:`mirage.daemon.advance`).

Also here: what a segment's sbatch request is (:func:`build_request`, with the chain's
warning signal fitted to the segment's limit) and how a chain is registered.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirage.daemon.chains import script_directives
from mirage.daemon.context import StepContext
from mirage.daemon.outcomes import CycleReport, SubmitOutcome
from mirage.daemon.store import (
    Chain,
    Segment,
    Store,
    Submission,
    SubmissionState,
    event_row,
    new_token,
)
from mirage.policy.base import Decision, PendingTransition
from mirage.slurm.client import SlurmClient
from mirage.slurm.syntax import digits
from mirage.slurm.types import (
    SlurmError,
    SlurmJob,
    SlurmTimeoutError,
    SlurmUnreachableError,
    SubmitError,
    SubmitRequest,
)

log = logging.getLogger(__name__)

TOKEN_RE = re.compile(r"(?<![0-9A-Za-z])(mg[0-9a-f]{16})(?![0-9A-Za-z])")


def find_token(job: SlurmJob) -> str | None:
    """The Mirage token in a job's comment, else in its name."""
    for text in (job.comment, job.name):
        m = TOKEN_RE.search(text or "")
        if m:
            return m.group(1)
    return None


def index_tokens(
    records: Iterable[SlurmJob],
) -> tuple[dict[str, SlurmJob], dict[str, list[SlurmJob]]]:
    """token -> its job, and token -> every job carrying it where there are several (one
    submission that Slurm created twice). Of several, the lowest id (the first created)
    is the token's job, so that adoption picks the same one every cycle."""
    jobs: dict[str, list[SlurmJob]] = defaultdict(list)
    for job in records:
        tok = find_token(job)
        if tok is not None:
            jobs[tok].append(job)
    first = {tok: min(js, key=_id_order) for tok, js in jobs.items()}
    extras = {tok: js for tok, js in jobs.items() if len(js) > 1}
    return first, extras


def _id_order(job: SlurmJob) -> tuple[int, str]:
    head = job.job_id.split("_")[0].split("+")[0]
    return (int(head), job.job_id) if digits(head) else (2**63, job.job_id)


def job_name(chain_name: str, token: str) -> str:
    return f"{chain_name[:64]}.{token}"


#: The warning signal a chain asks for (``--signal=[R|B:]SIG[@LEAD]``, sbatch's syntax).
SIGNAL_RE = re.compile(r"^(?P<pre>(?:[RB]{1,2}:)?)(?P<sig>[A-Za-z0-9]+)(?:@(?P<lead>[0-9]{1,7}))?$")
#: sbatch's lead when ``@LEAD`` is left out.
DEFAULT_SIGNAL_LEAD_S = 60
#: The shortest lead Mirage shortens a warning to.
SIGNAL_LEAD_MIN_S = 10


def signal_lead(time_limit: int) -> int:
    """The longest warning lead a segment of ``time_limit`` keeps: a tenth of it (at least
    10 s). A lead of 300 s, usual for hours-long jobs, would otherwise take a 2-minute
    segment's whole run."""
    return max(SIGNAL_LEAD_MIN_S, time_limit // 10)


def _signal_options(args: Sequence[str]) -> tuple[list[str], str | None]:
    """``args`` without their ``--signal`` options, and the last one's value (sbatch keeps
    the last)."""
    rest: list[str] = []
    value = None
    it = iter(args)
    for a in it:
        if a == "--signal":
            value = next(it, None)
        elif a.startswith("--signal="):
            value = a.removeprefix("--signal=")
        else:
            rest.append(a)
    return rest, value


def warning_options(chain: Chain, time_limit: int) -> list[str]:
    """The chain's own sbatch options, with the warning signal it asks for (its options
    over its ``#SBATCH`` lines) shortened to :func:`signal_lead` of this segment's limit.
    A chain that asks for no signal gets none: a batch shell that does not trap it would
    die of it (Slurm's own end, SIGTERM at the limit, is left as it is)."""
    rest, value = _signal_options(chain.sbatch_args)
    if value is None:
        _, value = _signal_options(script_directives(chain.script or b""))
        rest = list(chain.sbatch_args)
        if value is None:
            return rest
    else:
        rest.append(f"--signal={value}")
    m = SIGNAL_RE.match(value)
    if m is None:
        return list(chain.sbatch_args)  # sbatch judges what Mirage cannot read
    lead = int(m["lead"]) if m["lead"] else DEFAULT_SIGNAL_LEAD_S
    cap = signal_lead(time_limit)
    if lead <= cap:
        return list(chain.sbatch_args)
    own = [a for a in rest if not a.startswith("--signal=")]
    return [*own, f"--signal={m['pre']}{m['sig']}@{cap}"]


#: What every segment Mirage submits is told of its place in the chain (the job-side
#: helper reads them: it signals and waits for that predecessor only, mirage.daemon.handoff).
CHAIN_VARIABLE, SEGMENT_VARIABLE = "MIRAGE_CHAIN_ID", "MIRAGE_SEGMENT"
PREV_JOB_VARIABLE = "MIRAGE_PREV_JOB_ID"


def export_option(
    export: str, segment: int | None, prev_job_id: str | None, chain_id: str = ""
) -> str:
    """sbatch's ``--export`` value: the chain's, with its id, the segment's number
    (1-based) and its predecessor's job id added. ``NONE`` and a list of names both export only what
    they name (and Slurm's own variables), so ``NONE`` becomes the list of Mirage's."""
    export = export or "ALL"
    if segment is None:
        return export
    ours = [f"{CHAIN_VARIABLE}={chain_id}"] if chain_id else []
    ours.append(f"{SEGMENT_VARIABLE}={segment}")
    if prev_job_id:
        ours.append(f"{PREV_JOB_VARIABLE}={prev_job_id}")
    if export.split(",")[0].upper() == "NONE":
        return ",".join(ours)
    return ",".join([export, *ours])


def build_request(
    chain: Chain,
    token: str,
    time_limit: int,
    *,
    segment: int | None = None,
    prev_job_id: str | None = None,
) -> SubmitRequest:
    """The sbatch request of one segment, from the chain's snapshot (script on stdin); a
    warning signal the chain asks for is shortened to fit the segment's limit.
    ``segment`` (1-based) and ``prev_job_id`` reach the job as :data:`SEGMENT_VARIABLE`
    and :data:`PREV_JOB_VARIABLE`."""
    extra = warning_options(chain, time_limit)
    if chain.export or segment is not None:
        extra.append(f"--export={export_option(chain.export, segment, prev_job_id, chain.id)}")
    return SubmitRequest(
        script=chain.script,
        job_name=job_name(chain.name, token),
        comment=f"mirage:{token}",
        time_limit=time_limit,
        nodes=chain.nodes,
        gres=chain.gres,
        partition=chain.partition,
        chdir=chain.chdir,
        extra_args=tuple(extra),
    )


def record_intent(
    s: Session,
    chain: Chain,
    *,
    index: int,
    time_limit: int,
    now: int,
    presubmit: bool,
    reason: str,
    predicted_start: int | None = None,
    inputs: dict[str, Any] | None = None,
) -> Submission:
    """Add (not commit) an INTENT row with a fresh token, and its event (with the inputs)."""
    sub = Submission(
        token=new_token(),
        chain_id=chain.id,
        index=index,
        state=SubmissionState.INTENT,
        time_limit_s=time_limit,
        presubmitted=presubmit,
        created_at=now,
        error="",
    )
    s.add(sub)
    s.add(
        event_row(
            now,
            "submit.intent",
            chain.id,
            reason,
            token=sub.token,
            index=index,
            time_limit=time_limit,
            presubmit=presubmit,
            policy=chain.policy,
            predicted_start=predicted_start,
            **(inputs or {}),
        )
    )
    return sub


def submit(
    ctx: StepContext,
    s: Session,
    chain: Chain,
    *,
    index: int,
    time_limit: int,
    now: int,
    report: CycleReport,
    presubmit: bool = False,
    decision: Decision | None = None,
    pending: PendingTransition | None = None,
) -> tuple[Submission, SubmitOutcome]:
    """Record the intent (committed), run sbatch as the owner, record what happened (the
    report, the metrics; not committed). Ending a chain that Slurm keeps refusing is the
    caller's, in the same commit."""
    reason = decision.reason if decision is not None else "predecessor ended"
    predicted = decision.predicted_start if decision is not None else None
    sub = record_intent(
        s,
        chain,
        index=index,
        time_limit=time_limit,
        now=now,
        presubmit=presubmit,
        reason=reason,
        predicted_start=predicted,
        inputs={} if pending is None else _decision_inputs(pending, now),
    )
    s.commit()  # the intent is durable before sbatch runs
    ctx.fault_point("after-intent")
    ctx.metrics.slurm_commands.labels("sbatch").inc()
    outcome = perform_submission(s, chain, sub, ctx.clients(chain), now)
    ctx.fault_point("after-sbatch")  # the job exists; its id is not committed
    if outcome is SubmitOutcome.REJECTED:
        report.rejected.append(sub.token)
        ctx.metrics.presubmissions.labels("rejected").inc()
    elif outcome.unresolved:
        report.unknown.append(sub.token)
        report.submit_stalled = report.submit_stalled or outcome.stalls
        ctx.metrics.presubmissions.labels("unknown").inc()
    else:
        assert sub.job_id is not None
        report.submitted.append(sub.job_id)
        ctx.metrics.presubmissions.labels("presubmitted" if presubmit else "reactive").inc()
    return sub, outcome


def _decision_inputs(pending: PendingTransition, now: int) -> dict[str, Any]:
    """What the policy saw, recorded with the intent (``mirage chain show``)."""
    return {
        "pred_job_id": pending.pred_job_id,
        "pred_start": pending.pred_start,
        "planned_end": pending.planned_end,
        "remaining_s": pending.remaining(now),
        "now": now,
    }


def perform_submission(
    s: Session,
    chain: Chain,
    sub: Submission,
    client: SlurmClient,
    now: int,
) -> SubmitOutcome:
    """Run sbatch for a committed intent; what came of it (:class:`SubmitOutcome`). Not
    committed.

    A refusal (SubmitError) means no job exists: REJECTED, and so does a request that
    could not be started at all (a NUL byte in a value, a user the system cannot switch
    to: ValueError, OSError). Any other failure may hide a job: UNKNOWN, resolved by its
    token.
    """
    try:
        request = build_request(
            chain,
            sub.token,
            sub.time_limit_s,
            segment=sub.index + 1,
            prev_job_id=predecessor_job_id(s, chain.id, sub.index),
        )
        job_id = client.submit(request)
    except (SubmitError, ValueError, OSError) as exc:
        sub.state = SubmissionState.REJECTED
        sub.resolved_at = now
        sub.error = str(exc)[:2000]
        chain.rejections += 1
        s.add(event_row(now, "submit.rejected", chain.id, str(exc), token=sub.token))
        return SubmitOutcome.REJECTED
    except SlurmError as exc:
        sub.state = SubmissionState.UNKNOWN
        sub.error = str(exc)[:2000]
        s.add(event_row(now, "submit.unknown", chain.id, str(exc), token=sub.token))
        if isinstance(exc, SlurmUnreachableError):
            return SubmitOutcome.UNREACHABLE
        if isinstance(exc, SlurmTimeoutError):
            return SubmitOutcome.UNKNOWN
        return SubmitOutcome.UNANSWERED
    sub.state = SubmissionState.SUBMITTED
    sub.job_id = job_id
    sub.resolved_at = now
    chain.rejections = 0
    new_segment(s, chain, sub, now)
    s.add(event_row(now, "submit", chain.id, "", token=sub.token, job_id=job_id, index=sub.index))
    return SubmitOutcome.SUBMITTED


def predecessor_job_id(s: Session, chain_id: str, index: int) -> str | None:
    """The job id of the segment before segment ``index`` (0-based): the chain's segment
    of the highest lower index (a revoked pre-submission gave its index back)."""
    q = (
        select(Segment.job_id)
        .where(Segment.chain_id == chain_id, Segment.index < index)
        .order_by(Segment.index.desc(), Segment.id.desc())
        .limit(1)
    )
    return s.scalars(q).first()


def new_segment(s: Session, chain: Chain, sub: Submission, now: int) -> Segment:
    """The segment of a submission whose job id is known (submitted, or adopted by its
    token); the chain's next index moves past it."""
    assert sub.job_id is not None
    seg = Segment(
        chain_id=chain.id,
        index=sub.index,
        token=sub.token,
        job_id=sub.job_id,
        submitted_at=sub.created_at,
        presubmitted=sub.presubmitted,
        predicted_start=chain.predicted_start if sub.presubmitted else None,
        predicted_low=chain.predicted_low if sub.presubmitted else None,
        predicted_high=chain.predicted_high if sub.presubmitted else None,
        time_limit_s=sub.time_limit_s,
        job_state="PENDING",
        finished=False,
        cancelled_by_mirage=False,
        requeued=False,
        transition_recorded=False,
    )
    s.add(seg)
    chain.next_index = max(chain.next_index, sub.index + 1)
    chain.updated_at = now
    return seg


def resolve_submissions(
    ctx: StepContext,
    s: Session,
    *,
    now: int,
    by_token: dict[str, SlurmJob],
    chains: dict[str, Chain],
    report: CycleReport,
    may_lose: bool = True,
) -> dict[str, list[Submission]]:
    """Adopt INTENT/UNKNOWN submissions whose token Slurm shows, declare LOST those
    unseen for too long (only when ``may_lose``: sacct answered, so a job that already
    left squeue would have been seen); the rest, per chain, are still unresolved."""
    unresolved: dict[str, list[Submission]] = defaultdict(list)
    for sub in s.scalars(
        select(Submission).where(
            Submission.state.in_([SubmissionState.INTENT, SubmissionState.UNKNOWN])
        )
    ):
        found = by_token.get(sub.token)
        chain = chains.get(sub.chain_id) or s.get(Chain, sub.chain_id)
        if found is not None and chain is not None:
            sub.state = SubmissionState.ADOPTED
            sub.job_id = found.job_id
            sub.resolved_at = now
            new_segment(s, chain, sub, now)
            report.adopted.append(sub.token)
            ctx.metrics.presubmissions.labels("adopted").inc()
            s.add(
                event_row(
                    now,
                    "submission.adopted",
                    sub.chain_id,
                    "token found in Slurm",
                    token=sub.token,
                    job_id=found.job_id,
                )
            )
        elif may_lose and now - sub.created_at >= ctx.cfg.unknown_timeout_s:
            sub.state = SubmissionState.LOST
            sub.resolved_at = now
            report.lost.append(sub.token)
            ctx.metrics.presubmissions.labels("lost").inc()
            s.add(
                event_row(
                    now,
                    "submission.lost",
                    sub.chain_id,
                    f"token in neither squeue nor sacct for {now - sub.created_at}s",
                    token=sub.token,
                )
            )
        else:
            unresolved[sub.chain_id].append(sub)
    return unresolved


def register_chain(
    store: Store, chain: Chain, now: int, *, first_intent: bool = True
) -> Submission | None:
    """Store a new chain, and (by default) the intent of its first segment, in one commit.

    The caller then runs ``perform_submission`` for the returned intent (the CLI does, as
    the user, so segment 1 starts at once); if it never does, the daemon resolves the
    intent by its token like any other.
    """
    chain.created_at = chain.updated_at = now
    with store.session() as s:
        s.add(chain)
        s.add(
            event_row(
                now,
                "chain.register",
                chain.id,
                "",
                owner=chain.owner,
                script_sha256=chain.script_sha256,
                segments=chain.segments_target,
                until_file=chain.until_file,
            )
        )
        sub = None
        if first_intent:
            s.flush()
            sub = record_intent(
                s,
                chain,
                index=0,
                time_limit=first_limit(chain),
                now=now,
                presubmit=False,
                reason="registered",
            )
    return sub


def first_limit(chain: Chain) -> int:
    return chain.time_limit_s
