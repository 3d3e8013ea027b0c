"""What ``mirage status`` / ``mirage chain list|show`` report, as plain JSON-able dicts.

Read straight from the database (same host). Only the caller's own chains unless
``uid`` is None (root).

What a job's state says must be true now, not what Slurm said once: a segment the daemon
finished (cancelled, revoked) keeps the last state it read, so a finished segment shows
its outcome; a live segment of an ended chain shows its state "cancel pending" until the
daemon's next cycle cancels it. Text fields are "" when there is nothing to say (never
"None"), times and counts are null.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirage.daemon import health
from mirage.daemon.core import CURSOR_KEY, QUEUE_POLL_KEY
from mirage.daemon.metrics import INTERVAL_OUTCOMES
from mirage.daemon.policies import model_key
from mirage.daemon.store import Chain, ChainState, Event, Segment, Store, Submission
from mirage.slurm.types import JobState

#: Outcomes the daemon records when it ends a job itself: the job's last read state is
#: older than that act (the daemon never reads a finished segment again).
_DAEMON_ENDED = frozenset({"CANCELLED", "REVOKED"})


def _own(uid: int | None) -> Any:
    q = select(Chain).order_by(Chain.created_at)
    return q if uid is None else q.where(Chain.uid == uid)


def slurm_reason(raw: str | None) -> str:
    """Slurm's pending reason, "" for none (squeue says "None" for a job without one)."""
    return "" if raw is None or raw == "None" else raw


def _is_live(job_state: str) -> bool:
    """Whether Slurm's last word on a job says it may still hold or get an allocation
    (an unreadable or empty state may: nothing says it ended)."""
    try:
        return not JobState(job_state).is_finished
    except ValueError:
        return True


def job_view(g: Segment | None, chain_state: ChainState) -> dict[str, Any]:
    """One segment's job as it truly stands: ``job_state`` (its outcome once the daemon
    ended it), ``job_reason`` (Slurm's pending reason), ``cancel_pending`` (the chain
    ended, the job may still run: the daemon cancels it at its next cycle) and
    ``missing_since`` (Slurm's last poll listed it nowhere)."""
    if g is None:
        return {"job_state": "", "job_reason": "", "cancel_pending": False, "missing_since": None}
    state = g.job_state
    if g.finished and g.outcome in _DAEMON_ENDED:
        state = g.outcome
    pending = state == JobState.PENDING.value
    return {
        "job_state": state,
        "job_reason": slurm_reason(g.reason) if pending else "",
        "cancel_pending": chain_state.is_final and not g.finished and _is_live(state),
        "missing_since": None if g.finished else g.missing_since,
    }


def _segments(s: Session, chain_id: str) -> list[Segment]:
    return list(
        s.scalars(select(Segment).where(Segment.chain_id == chain_id).order_by(Segment.index))
    )


def current_and_successor(segs: list[Segment]) -> tuple[Segment | None, Segment | None]:
    """The segment that trains (or last did) and its pre-submitted successor. Once none is
    live, the last one that started: a successor cancelled before it ran is not the
    chain's last word on training."""
    live = [g for g in segs if not g.finished]
    if live:
        return live[0], (live[1] if len(live) > 1 else None)
    started = [g for g in segs if g.start is not None] or segs
    return (started[-1] if started else None), None


def chain_summary(chain: Chain) -> dict[str, Any]:
    return {
        "id": chain.id,
        "name": chain.name,
        "owner": chain.owner,
        "state": chain.state.value,
        "reason": chain.reason or "",
        "segments": chain.segments_target,
        "until_file": chain.until_file,
        "time_limit_s": chain.time_limit_s,
        "trained_s": chain.trained_s,
        "partition": chain.partition,
        # the shape every segment is submitted with, and the plan it came from
        "nodes": chain.nodes,
        "gpus_per_node": chain.gpus_per_node,
        "cpus_per_node": chain.planned_cpus_per_node,
        "plan": plan_view(chain.plan),
        "policy": policy_label(chain),
        "script_sha256": chain.script_sha256,
        "created_at": chain.created_at,
        "updated_at": chain.updated_at,
        # this chain's own trouble (the cycle goes on for the others), and why it is not
        # pre-submitted as its policy would
        "error": chain.error or "",
        "error_at": chain.error_at,
        "errors": chain.errors or 0,
        "note": chain.note or "",
    }


def plan_view(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the status views show of a chain's plan: its work, when it was made and for
    which segment, and the whole chain's predicted completion with its interval."""
    if not plan:
        return None
    return {
        "work": (plan.get("request") or {}).get("work"),
        "planned_at": plan.get("planned_at"),
        "for_segment": plan.get("for_segment", 0),
        "completion": plan.get("completion"),
        "interval": plan.get("interval"),
        "replans": plan.get("replans", 0),
    }


def _summary_with_job(s: Session, chain: Chain) -> dict[str, Any]:
    cur, _ = current_and_successor(_segments(s, chain.id))
    out = chain_summary(chain)
    out["segment"] = None if cur is None else cur.index + 1
    out["job_id"] = None if cur is None else cur.job_id
    out.update(job_view(cur, chain.state))
    return out


def list_chains(
    store: Store, uid: int | None, *, include_ended: bool = True
) -> list[dict[str, Any]]:
    """The caller's chains, each with its current segment and job (``include_ended``
    False: the ACTIVE ones only)."""
    with store.sessions() as s:
        rows = [_summary_with_job(s, c) for c in s.scalars(_own(uid))]
    return rows if include_ended else hide_ended(rows)[0]


def hide_ended(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The ACTIVE chains of ``rows``, and how many ended ones were left out."""
    kept = [r for r in rows if r["state"] == ChainState.ACTIVE.value]
    return kept, len(rows) - len(kept)


def segment_dict(g: Segment, chain_state: ChainState = ChainState.ACTIVE) -> dict[str, Any]:
    view = job_view(g, chain_state)
    return {
        "index": g.index,
        "job_id": g.job_id,
        "state": view["job_state"],
        "reason": view["job_reason"],
        "cancel_pending": view["cancel_pending"],
        "missing_since": view["missing_since"],
        "submitted_at": g.submitted_at,
        "presubmitted": g.presubmitted,
        "start": g.start,
        "end": g.end,
        "time_limit_s": g.time_limit_s,
        "outcome": g.outcome,
        "handoff_signalled_at": g.signalled_at,
        "revoke_at": g.revoke_at,
        "slurm_estimate": g.slurm_estimate,
        # the forecast it was pre-submitted on, and its stated 90% interval
        "predicted_start": g.predicted_start,
        "predicted_interval": _interval(g.predicted_low, g.predicted_high),
    }


def _interval(low: int | None, high: int | None) -> list[int] | None:
    return None if low is None or high is None else [low, high]


def show_chain(store: Store, chain_id: str, uid: int | None) -> dict[str, Any] | None:
    with store.sessions() as s:
        chain = s.scalars(_own(uid).where(Chain.id == chain_id)).first()
        if chain is None:
            return None
        out = _summary_with_job(s, chain)
        out["chdir"] = chain.chdir
        out["export"] = chain.export
        out["sbatch_args"] = list(chain.sbatch_args)
        out["segments_run"] = [segment_dict(g, chain.state) for g in _segments(s, chain.id)]
        out["submissions"] = [
            {"token": x.token, "index": x.index, "state": x.state.value, "job_id": x.job_id}
            for x in s.scalars(
                select(Submission)
                .where(Submission.chain_id == chain.id)
                .order_by(Submission.created_at)
            )
        ]
        out["events"] = [
            {"at": e.at, "kind": e.kind, "reason": e.reason or "", "data": e.data}
            for e in s.scalars(
                select(Event).where(Event.chain_id == chain.id).order_by(Event.id.desc()).limit(50)
            )
        ]
        return out


def policy_label(chain: Chain) -> str:
    """The chain's policy as shown: ``"reactive (fallback: xgb)"`` when the fallback stands
    in for the configured one (why: the chain's ``note``)."""
    if chain.fallback_for:
        return f"{chain.policy} (fallback: {chain.fallback_for})"
    return chain.policy


def _model_age(store: Store, policy: str, now: int) -> int | None:
    """Age of the trained model of the chain's deciding policy (None for a baseline)."""
    created = store.get_value(model_key(policy)) if policy else None
    return max(0, now - int(created)) if created else None


def _slurm_estimate(c: Chain, succ: Segment | None) -> int | None:
    """Slurm's start estimate for the successor: its job's, or ``sbatch --test-only``'s
    for the one not yet submitted."""
    if succ is not None:
        return succ.slurm_estimate
    return c.slurm_estimate if c.slurm_estimate_for == c.next_index else None


def _policy_fields(store: Store, c: Chain, now: int) -> dict[str, Any]:
    return {
        "policy": policy_label(c),
        "policy_used": c.policy,
        "policy_fallback": bool(c.fallback_for),
        "fallback": c.fallback_for,
        "model_age_s": _model_age(store, c.policy, now),
    }


def _successor_fields(succ: Segment | None, chain_state: ChainState) -> dict[str, Any]:
    view = job_view(succ, chain_state)
    return {
        "successor_job_id": None if succ is None else succ.job_id,
        "successor_submitted_at": None if succ is None else succ.submitted_at,
        "successor_state": None if succ is None else view["job_state"],
        "successor_reason": view["job_reason"],
        "successor_cancel_pending": view["cancel_pending"],
    }


def _time_left(cur: Segment | None, now: int) -> int | None:
    if cur is None or cur.start is None or not cur.time_limit_s or cur.finished:
        return None
    return max(0, cur.start + cur.time_limit_s - now)


def _status_row(store: Store, s: Session, c: Chain, now: int) -> dict[str, Any]:
    cur, succ = current_and_successor(_segments(s, c.id))
    row = chain_summary(c)
    row.update(
        segment=None if cur is None else cur.index + 1,
        job_id=None if cur is None else cur.job_id,
        job_start=None if cur is None else cur.start,
        time_left_s=_time_left(cur, now),
        predicted_start=c.predicted_start,
        predicted_interval=_interval(c.predicted_low, c.predicted_high),
        slurm_estimate=_slurm_estimate(c, succ),
        decided_at=c.decided_at,
    )
    row.update(job_view(cur, c.state))
    row.update(_successor_fields(succ, c.state))
    row.update(_policy_fields(store, c, now))
    return row


def daemon_facts(store: Store, now: int, cluster: str) -> dict[str, Any]:
    """What the daemon last said about itself: how it started, whether the lease holder
    is that daemon, its last cycle and the cycles that failed so far."""
    start = health.read(store, health.START_KEY)
    cycle = health.read(store, health.CYCLE_KEY)
    lease = store.lease_info(cluster, now)
    holder = None if lease is None else lease.holder
    return {
        "start": start,
        "lease_holder": holder,
        # False: the holder is a dead process on this host (kill -9): the next daemon to
        # start takes the lease at once; None: another host's, or unknown
        "holder_alive": None if lease is None else lease.alive,
        # the started daemon is the one acting only while it holds the lease
        "live": bool(start and holder and start.get("holder") == holder),
        "last_cycle": cycle,
        "cycle_failures": None if cycle is None else cycle.get("failures_total"),
    }


def slurm_facts(store: Store) -> dict[str, Any]:
    """Whether the daemon's last poll reached Slurm (null: no poll recorded), the error
    and since when."""
    out = _reach(health.read(store, health.SLURM_KEY) or {})
    out["accounting"] = _reach(health.read(store, health.ACCOUNTING_KEY) or {})
    return out


def _reach(got: dict[str, Any]) -> dict[str, Any]:
    reachable, since = got.get("reachable"), got.get("since")
    return {
        "reachable": reachable if isinstance(reachable, bool) else None,
        "error": str(got.get("error") or ""),
        "since": since if isinstance(since, int) else None,
    }


def status(
    store: Store,
    now: int,
    uid: int | None,
    *,
    cluster: str = "default",
    include_ended: bool = True,
) -> dict[str, Any]:
    """The daemon, Slurm's reachability and per chain: current segment and job, time left,
    successor, prediction, estimate, policy, error and note (``include_ended`` False:
    ACTIVE chains only, with the count of the others in ``ended_hidden``)."""
    with store.sessions() as s:
        rows = [_status_row(store, s, c, now) for c in s.scalars(_own(uid))]
    out: dict[str, Any] = {
        "now": now,
        "lease_holder": store.lease_holder(cluster, now),
        "last_poll": int(v)
        if (v := store.get_value(QUEUE_POLL_KEY) or store.get_value(CURSOR_KEY))
        else None,
        "stated_intervals_7d": stated_intervals(store, now - INTERVAL_WINDOW_S),
        "daemon": daemon_facts(store, now, cluster),
        "slurm": slurm_facts(store),
        "chains": rows,
    }
    if not include_ended:
        out["chains"], out["ended_hidden"] = hide_ended(rows)
    return out


#: the window of ``mirage status``'s interval summary, as the Grafana panel's
INTERVAL_WINDOW_S = 7 * 86400


def stated_intervals(store: Store, since: int) -> dict[str, int]:
    """Transitions recorded since ``since`` (every user's: counts only) by where the
    successor started against the 90% interval stated when it was pre-submitted."""
    out = dict.fromkeys(INTERVAL_OUTCOMES, 0)
    with store.sessions() as s:
        q = select(Event.data).where(Event.kind == "transition", Event.at >= since)
        for data in s.scalars(q):
            where = (data or {}).get("interval")
            if where in out:
                out[where] += 1
    return out


def interval_summary(held: dict[str, int], window: str) -> str:
    """One line on the stated 90% intervals (``mirage status``, the simulated demo)."""
    n = sum(held.values())
    return (
        f"stated 90% intervals, {window}: {held.get('inside', 0)} of {n} pre-submitted "
        f"successors started inside ({held.get('early', 0)} before, {held.get('late', 0)} after)"
    )
