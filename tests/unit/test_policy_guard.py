"""The estimate guard and the daemon-side wait tracker of the wait-statistic baselines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.baselines import FixedLead, Qbets, WaitTracker
from mirage.policy.guard import SHIPPED, EstimateGuard, Guard, guard_policy
from mirage.policy.simple import FixedLeadPolicy
from mirage.profile.schema import ClusterProfile, Partition
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob, StartEstimate, SubmitRequest

H = 3600
PROFILE = ClusterProfile("t", (Partition("gpu", 8, 1000, nodes=4, gpus_per_node=2),))


def pending(
    chain: str = "c", start: int = 0, nodes: int = 1, limit: int = 48 * H
) -> PendingTransition:
    return PendingTransition(chain, "1", pred_start=start, pred_time_limit=limit,
                             succ_nodes=nodes, succ_gpus=2 * nodes, succ_time_limit=limit,
                             partition="gpu")  # fmt: skip


class Estimates:
    """Slurm's estimate as a function of the request, counting the calls."""

    def __init__(self, start: int | None) -> None:
        self.start = start
        self.calls: list[SubmitRequest] = []

    def __call__(self, req: SubmitRequest) -> StartEstimate:
        self.calls.append(req)
        return StartEstimate(None, self.start)


def ctx(now: int, est: Estimates | None) -> DecisionContext:
    return DecisionContext(now, QueueSnapshot(now, ()), PROFILE, est)


class Always(Policy):
    name = "always"

    def decide(self, ctx: DecisionContext, pending: object) -> list[Decision]:
        return [Decision(True, reason="always") for _ in pending]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("est_h", "submits"),
    [
        (0.0, False),  # Slurm would start it now, 10 h before the end: wait
        (48.0, False),  # at the end exactly: still inside the 2 h margin
        (49.9, False),
        (50.0, True),  # 2 h after the end: the guard lets it go
        (None, True),  # no estimate (none given, or the budget spent): the policy decides
    ],
)
def test_guard_vetoes_what_slurm_expects_to_start_early(est_h: float | None, submits: bool) -> None:
    est = Estimates(None if est_h is None else int(est_h * H))
    guard = EstimateGuard(Always(), margin_s=2 * H)
    d = guard.decide(ctx(38 * H, est), [pending()])[0]
    assert d.submit is submits
    assert ("guard" in d.reason) is (not submits)
    assert guard.revoke(ctx(38 * H, est), [pending()]) == [not submits]


@pytest.mark.parametrize(
    ("limit_h", "after_end_min", "submits"),
    [
        (48, 7 * 60, False),  # 7 h after a 48 h segment's end: inside its 8 h (1/6)
        (48, 8 * 60, True),
        (2, 15, False),  # a 2 h segment: the same share is 20 min, not 8 h
        (2, 20, True),
    ],
)
def test_shipped_margin_is_a_share_of_the_segment_limit(
    limit_h: int, after_end_min: int, submits: bool
) -> None:
    """The shipped guard holds the same share of every segment: an 8 h margin would hold
    back every pre-submission of a 2 h chain, whose early starts cost a twelfth as much."""
    p = pending(limit=limit_h * H)
    est = Estimates(p.planned_end + after_end_min * 60)
    guard = guard_policy(Always(), "estimate", None, margin_fraction=SHIPPED.guard_margin_fraction)
    assert SHIPPED.guard_margin_s is None and SHIPPED.guard_margin_fraction == pytest.approx(1 / 6)
    assert guard.decide(ctx(p.planned_end - H // 2, est), [p])[0].submit is submits
    # a fixed margin, where one is set, wins over the share (the daemon's guard_margin_s)
    fixed = guard_policy(Always(), "estimate", 0, margin_fraction=SHIPPED.guard_margin_fraction)
    assert fixed.decide(ctx(p.planned_end - H // 2, est), [p])[0].submit
    with pytest.raises(ValueError, match="needs a margin"):
        guard_policy(Always(), "estimate", None)


def test_guard_never_adds_a_submission() -> None:
    guard = EstimateGuard(FixedLead(H), margin_s=2 * H)
    est = Estimates(100 * H)  # a deep queue: the guard would let anything go
    assert [d.submit for d in guard.decide(ctx(40 * H, est), [pending()])] == [False]
    assert est.calls == []  # nothing to check: no test-only call spent


def test_guard_asks_one_estimate_per_request_shape() -> None:
    est = Estimates(0)
    guard = EstimateGuard(Always(), margin_s=0)
    batch = [pending("a"), pending("b", start=H), pending("c", nodes=2)]
    assert [d.submit for d in guard.decide(ctx(40 * H, est), batch)] == [False] * 3
    assert len(est.calls) == 2  # a and b share a shape


def test_guard_keeps_the_inner_policys_capabilities() -> None:
    guard = EstimateGuard(Qbets(0.75))
    assert guard.name == "qbets" and guard.revocable
    assert guard.warmup_s == 24 * H and guard.needs_queue
    assert (
        guard.margin_s is None and guard.estimate_margin_fraction == SHIPPED.guard_margin_fraction
    )


def job(job_id: str, start: int | None, eligible: int | None, *, partition: str = "gpu",
        state: JobState = JobState.RUNNING) -> SlurmJob:  # fmt: skip
    return SlurmJob(job_id, "j", "u", "a", partition, state, "", eligible, eligible, start,
                    None, H, 1, 8, 2, None, "", "")  # fmt: skip


def test_wait_tracker_counts_started_jobs_once_per_partition() -> None:
    t = WaitTracker(keep_s=24 * H)
    t.observe([job("1", 10 * H, 4 * H), job("2", 12 * H, 12 * H), job("3", None, 11 * H)], 12 * H)
    # a pending job's start is Slurm's estimate, never a wait
    t.observe([job("1", 10 * H, 4 * H), job("4", 20 * H, 5 * H, state=JobState.PENDING),
               job("5", 11 * H, 10 * H, partition="cpu")], 12 * H)  # fmt: skip
    h = t.history("gpu")
    assert h.starts.tolist() == [10 * H, 12 * H] and h.waits.tolist() == [6 * H, 0]
    assert t.history("cpu").waits.tolist() == [H]
    assert sorted(t.history("").waits.tolist()) == [0, H, 6 * H]
    t.observe([], 35 * H)  # a day later: only what started after 11 h is kept
    assert t.history("gpu").waits.tolist() == [0]


def test_qbets_in_the_daemon_learns_waits_from_its_polls() -> None:
    q = Qbets(0.5)
    p = pending()
    snap = QueueSnapshot(40 * H, tuple(job(str(i), 39 * H, 39 * H - 10 * H) for i in range(30)))
    c = DecisionContext(40 * H, snap, PROFILE, None, None, accounting=())
    q.observe(c)
    assert q.decide(c, [p])[0].submit  # 10 h waits, 8 h left: submit
    fresh = Qbets(0.5)
    assert not fresh.decide(c, [p])[0].submit  # nothing observed: no wait known
    assert np.all(q.tracker.history("gpu").waits == 10 * H)


# ---- the look-ahead veto ---------------------------------------------------------------


def held(job_id: str, start: int | None, limit_h: float, state: JobState = JobState.RUNNING,
         *, user: str = "u") -> SlurmJob:  # fmt: skip
    """A whole-node job of PROFILE's partition (8 CPUs), submitted at 0."""
    return SlurmJob(job_id, "j", user, "a", "gpu", state, "", 0, 0, start, None,
                    int(limit_h * H), 1, 8, 2, None, "", "")  # fmt: skip


def snap_ctx(now: int, jobs: list[SlurmJob], est: Estimates | None = None) -> DecisionContext:
    return DecisionContext(now, QueueSnapshot(now, tuple(jobs)), PROFILE, est, accounting=())


def lookahead_guard(margin_h: float, inner: Policy | None = None) -> Guard:
    return Guard(inner or Always(), estimate_margin_s=None, lookahead_margin_s=int(margin_h * H))


def test_lookahead_veto_holds_back_a_successor_that_would_start_at_once() -> None:
    """The predecessor (job 1) ends at 48 h; at 40 h three of the four nodes are free:
    the look-ahead starts the successor now, 8 h early, and the guard waits."""
    now = 40 * H
    quiet = [held("1", 0, 48)]
    d = lookahead_guard(0).decide(snap_ctx(now, quiet), [pending()])[0]
    assert not d.submit
    assert (
        "guard: the look-ahead starts it 8h00m before the planned end; the guard pre-submits"
        " only when it is at or after it" in d.reason
    )


def test_lookahead_veto_lets_go_where_the_queue_holds_the_successor_to_the_end() -> None:
    """Every other node is held past the end (no history: jobs run to their limits), so the
    successor starts when the predecessor's node frees, at the end: no veto at margin 0;
    a margin of 2 h (start before end + 2 h) vetoes it."""
    now = 40 * H
    busy = [held("1", 0, 48), *(held(str(i), 30 * H, 100) for i in (2, 3, 4))]
    assert lookahead_guard(0).decide(snap_ctx(now, busy), [pending()])[0].submit
    assert not lookahead_guard(2).decide(snap_ctx(now, busy), [pending()])[0].submit


def test_lookahead_veto_learns_run_times_from_accounting() -> None:
    """A busy queue (nodes held from 35 h for 100 h): unknown run times run to their
    limits, no veto. Once accounting shows its user's jobs run a tenth of their limits, the
    look-ahead frees those nodes at 45 h, before the end, and the guard waits."""
    now = 40 * H
    busy = [held("1", 0, 48), *(held(str(i), 35 * H, 100, user="v") for i in (2, 3, 4))]
    assert lookahead_guard(0).decide(snap_ctx(now, busy), [pending()])[0].submit
    done = [replace(held(str(100 + k), 0, 100, JobState.COMPLETED, user="v"), end=10 * H)
            for k in range(5)]  # fmt: skip
    guard = lookahead_guard(0)
    guard.observe(DecisionContext(now, QueueSnapshot(now, ()), PROFILE, accounting=done))
    assert len(guard.runtimes) == 5
    assert not guard.decide(snap_ctx(now, busy), [pending()])[0].submit


def test_lookahead_veto_takes_the_pending_successor_out_of_the_queue_when_revoking() -> None:
    """A pre-submitted successor (job 9) pends behind the busy nodes. Asked to revoke, the
    guard simulates it as the request in its own place: it starts at the end (48 h), inside
    a 10 h margin, so it is revoked. Left in the queue it would hold the predecessor's node
    against its own copy (start 130 h: no revocation)."""
    now = 40 * H
    busy = [held("1", 0, 48), *(held(str(i), 30 * H, 100) for i in (2, 3, 4)),
            held("9", None, 48, JobState.PENDING)]  # fmt: skip
    guard = lookahead_guard(10)
    mine = replace(pending(), succ_job_id="9")
    assert guard.revoke(snap_ctx(now, busy), [mine]) == [True]
    assert guard.revoke(snap_ctx(now, busy), [pending()]) == [False]


def test_recorded_lookahead_start_is_read_not_simulated() -> None:
    """The harness' contexts carry the recorded start: the guard reads it (None: no veto)."""
    now = 40 * H
    quiet = snap_ctx(now, [held("1", 0, 48)])  # would simulate a start at once
    for recorded, submits in ((50 * H, True), (47 * H, False), (None, True)):
        c = replace(quiet, lookahead_start=lambda _p, r=recorded: r)  # type: ignore[misc]
        assert lookahead_guard(0).decide(c, [pending()])[0].submit is submits


def test_either_veto_holds_it_back() -> None:
    """guard = "estimate+lookahead": Slurm's late date alone would let it go, the
    look-ahead does not."""
    now = 40 * H
    guard = guard_policy(Always(), "estimate+lookahead", 2 * H, 0)
    assert isinstance(guard, Guard) and guard.warmup_s == 14 * 24 * H
    lead = FixedLeadPolicy(H)  # needs no queue of its own
    assert guard.needs_queue and not guard_policy(lead, "estimate", 0).needs_queue
    assert guard_policy(lead, "lookahead", 0).needs_queue  # it simulates every user's jobs
    late = Estimates(100 * H)
    assert EstimateGuard(Always(), 2 * H).decide(snap_ctx(now, [], late), [pending()])[0].submit
    d = guard.decide(snap_ctx(now, [held("1", 0, 48)], late), [pending()])[0]
    assert not d.submit and "look-ahead" in d.reason
    assert guard_policy(Always(), "none", 0).decide(snap_ctx(now, []), [pending()])[0].submit


def test_lookahead_veto_holds_back_a_chain_it_cannot_simulate() -> None:
    """A chain in a partition the profile lacks cannot be simulated: its pre-submission
    waits for the predecessor's end (reactive, which harms no quiet queue), a pending one
    is kept; the other chains are judged as before (here a busy queue lets one go)."""
    now = 40 * H
    busy = [held("1", 0, 48), *(held(str(i), 30 * H, 100) for i in (2, 3, 4))]
    other = replace(pending("x"), partition="cpu")
    guard = lookahead_guard(0)
    ds = guard.decide(snap_ctx(now, busy), [pending(), other])
    assert [d.submit for d in ds] == [True, False]
    assert "no look-ahead for this partition" in ds[1].reason
    assert guard.revoke(snap_ctx(now, busy), [other]) == [False]
