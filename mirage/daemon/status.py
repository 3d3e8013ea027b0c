"""What ``mirage status`` / ``mirage chain list|show`` report, as plain JSON-able dicts.

Read straight from the database (same host). Only the caller's own chains unless
``uid`` is None (root).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from mirage.daemon.core import CURSOR_KEY
from mirage.daemon.metrics import INTERVAL_OUTCOMES
from mirage.daemon.policies import model_key
from mirage.daemon.store import Chain, Event, Segment, Store, Submission


def _own(uid: int | None) -> Any:
    q = select(Chain).order_by(Chain.created_at)
    return q if uid is None else q.where(Chain.uid == uid)


def chain_summary(chain: Chain) -> dict[str, Any]:
    return {
        "id": chain.id,
        "name": chain.name,
        "owner": chain.owner,
        "state": chain.state.value,
        "reason": chain.reason,
        "segments": chain.segments_target,
        "until_file": chain.until_file,
        "time_limit_s": chain.time_limit_s,
        "trained_s": chain.trained_s,
        "budget_s": chain.budget_s,
        "partition": chain.partition,
        "policy": chain.policy,
        "script_sha256": chain.script_sha256,
        "created_at": chain.created_at,
    }


def list_chains(store: Store, uid: int | None) -> list[dict[str, Any]]:
    with store.sessions() as s:
        return [chain_summary(c) for c in s.scalars(_own(uid))]


def segment_dict(g: Segment) -> dict[str, Any]:
    return {
        "index": g.index,
        "job_id": g.job_id,
        "state": g.job_state,
        "reason": g.reason,
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
        "predicted_interval": (
            None
            if g.predicted_low is None or g.predicted_high is None
            else [g.predicted_low, g.predicted_high]
        ),
    }


def show_chain(store: Store, chain_id: str, uid: int | None) -> dict[str, Any] | None:
    with store.sessions() as s:
        chain = s.scalars(_own(uid).where(Chain.id == chain_id)).first()
        if chain is None:
            return None
        out = chain_summary(chain)
        out["chdir"] = chain.chdir
        out["export"] = chain.export
        out["sbatch_args"] = list(chain.sbatch_args)
        out["segments_run"] = [
            segment_dict(g)
            for g in s.scalars(
                select(Segment).where(Segment.chain_id == chain.id).order_by(Segment.index)
            )
        ]
        out["submissions"] = [
            {"token": x.token, "index": x.index, "state": x.state.value, "job_id": x.job_id}
            for x in s.scalars(
                select(Submission)
                .where(Submission.chain_id == chain.id)
                .order_by(Submission.created_at)
            )
        ]
        out["events"] = [
            {"at": e.at, "kind": e.kind, "reason": e.reason, "data": e.data}
            for e in s.scalars(
                select(Event).where(Event.chain_id == chain.id).order_by(Event.id.desc()).limit(50)
            )
        ]
        return out


def _model_age(store: Store, policy: str, now: int) -> int | None:
    """Age of the trained model behind a chain's policy label (None for a baseline)."""
    name = policy.split(" ", 1)[0]
    created = store.get_value(model_key(name)) if name else None
    return max(0, now - int(created)) if created else None


def status(store: Store, now: int, uid: int | None, *, cluster: str = "default") -> dict[str, Any]:
    """Per active chain: current segment, time left, successor, prediction, estimate, policy."""
    rows = []
    with store.sessions() as s:
        chains = list(s.scalars(_own(uid)))
        for c in chains:
            segs = list(
                s.scalars(select(Segment).where(Segment.chain_id == c.id).order_by(Segment.index))
            )
            live = [g for g in segs if not g.finished]
            cur = live[0] if live else (segs[-1] if segs else None)
            succ = live[1] if len(live) > 1 else None
            left = None
            if cur is not None and cur.start is not None and cur.time_limit_s and not cur.finished:
                left = max(0, cur.start + cur.time_limit_s - now)
            rows.append(
                {
                    "id": c.id,
                    "name": c.name,
                    "state": c.state.value,
                    "segment": None if cur is None else cur.index + 1,
                    "segments": c.segments_target,
                    "job_id": None if cur is None else cur.job_id,
                    "job_state": None if cur is None else cur.job_state,
                    "time_left_s": left,
                    "successor_job_id": None if succ is None else succ.job_id,
                    "successor_submitted_at": None if succ is None else succ.submitted_at,
                    "successor_state": None if succ is None else succ.job_state,
                    "predicted_start": c.predicted_start,
                    "predicted_interval": (
                        None
                        if c.predicted_low is None or c.predicted_high is None
                        else [c.predicted_low, c.predicted_high]
                    ),
                    "slurm_estimate": (
                        c.slurm_estimate
                        if succ is None and c.slurm_estimate_for == c.next_index
                        else None
                        if succ is None
                        else succ.slurm_estimate
                    ),
                    "policy": c.policy,
                    "policy_fallback": "fallback" in c.policy,
                    "model_age_s": _model_age(store, c.policy, now),
                    "decided_at": c.decided_at,
                    "trained_s": c.trained_s,
                    "reason": c.reason,
                }
            )
    return {
        "now": now,
        "lease_holder": store.lease_holder(cluster, now),
        "last_poll": int(v) if (v := store.get_value(CURSOR_KEY)) else None,
        "stated_intervals_7d": stated_intervals(store, now - INTERVAL_WINDOW_S),
        "chains": rows,
    }


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
