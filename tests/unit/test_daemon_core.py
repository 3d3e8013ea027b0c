"""Daemon.cycle on the simulator with simulated time: chains, exactly once, outages, leases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from sqlalchemy import select

from mirage.daemon.cli import _when, segment_line
from mirage.daemon.config import Config
from mirage.daemon.core import Daemon
from mirage.daemon.status import interval_summary, show_chain, stated_intervals, status
from mirage.daemon.store import ChainState, Event, Segment, Store, Submission, SubmissionState
from mirage.policy.base import Decision, DecisionContext, PendingTransition
from mirage.policy.simple import FixedLeadPolicy
from mirage.slurm.parse import parse_sacct_json
from mirage.slurm.types import SlurmJob, SlurmTimeoutError, SubmitRequest
from tests.unit.daemon_support import (
    Crash,
    FaultySim,
    chain_state,
    make_chain,
    make_config,
    make_sim,
    make_store,
    run_cycles,
)


def segments_of(store: Store, chain_id: str) -> list[Segment]:
    with store.sessions() as s:
        return list(
            s.scalars(select(Segment).where(Segment.chain_id == chain_id).order_by(Segment.index))
        )


def events(store: Store, kind: str) -> list[Event]:
    with store.sessions() as s:
        return list(s.scalars(select(Event).where(Event.kind == kind)))


def test_reactive_three_segments_run_to_completion(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=3, limit=3600)
    d = Daemon(store, sim, config=make_config("reactive"))
    run_cycles([d], sim, 0, 4 * 3600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED, c.reason
    assert c.trained_s == 3 * 3600
    segs = segments_of(store, chain.id)
    assert [g.index for g in segs] == [0, 1, 2]
    assert all(not g.presubmitted for g in segs)
    # reactive: each successor starts when (the first cycle after) its predecessor ends
    assert [g.start for g in segs] == [0, 3600, 7200]
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3
    transitions = events(store, "transition")
    assert [e.data["interruption"] for e in transitions] == [0, 0]


def test_fixed_lead_presubmits_and_hands_off(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    sim.handoff_exits = True  # the job checkpoints and exits on the signal
    chain = make_chain(store, segments=3, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600))
    run_cycles([d], sim, 0, 4 * 3600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED, c.reason
    segs = segments_of(store, chain.id)
    assert segs[1].presubmitted and segs[1].submitted_at == 3000
    # successor started at once on the idle cluster: Mirage signalled the predecessor
    assert sim.signals[0] == (segs[0].job_id, "USR1")
    # seen running at the next poll (3060): signalled then, exits then
    assert segs[0].outcome == "CONTINUE" and segs[0].end == 3060
    # --segments 3 = 3 jobs (what users read it as): two cut short by handoffs, the last
    # runs its whole limit; every segment gets the chain's limit
    assert sum((g.end or 0) - (g.start or 0) for g in segs) == c.trained_s
    assert set(sim.tokens().values()) == {1}
    assert len(events(store, "handoff")) == len(segs) - 1
    assert len(segs) == 3 and {g.time_limit_s for g in segs} == {3600}
    assert c.trained_s == 2 * 3060 + 3600
    assert c.reason == "ran its 3 segments"


class StatedLead(FixedLeadPolicy):
    """Fixed lead that states a predicted start with an interval, as the forecasters do:
    the start "now" (the idle test cluster starts a successor at once) and an interval
    ``offsets[k]`` around it for its k-th submission."""

    def __init__(self, lead_s: int, offsets: list[tuple[int, int]]) -> None:
        super().__init__(lead_s)
        self.offsets = offsets
        self.stated = 0

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        out = []
        for d in super().decide(ctx, pending):
            lo, hi = self.offsets[min(self.stated, len(self.offsets) - 1)]
            if d.submit:
                self.stated += 1
            out.append(replace(d, predicted_start=ctx.now, interval=(ctx.now + lo, ctx.now + hi)))
        return out


def test_stated_intervals_are_checked_against_the_starts(tmp_path: Path) -> None:
    """Each pre-submission keeps the interval stated with it; when its transition is
    recorded, the start is counted inside, early or late (the live coverage that
    `mirage evaluate` reports on a test window)."""
    store, sim = make_store(tmp_path), make_sim()
    sim.handoff_exits = True
    chain = make_chain(store, segments=4, limit=3600)
    # the first successor's interval holds its start, the second's lies after it, the
    # third's before it
    policy = StatedLead(600, [(-60, 120), (600, 1200), (-1200, -600)])
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600),
               policies={"fixed-lead": policy})  # fmt: skip
    assert d.metrics.value("mirage_predicted_interval_total", {"outcome": "inside"}) == 0
    run_cycles([d], sim, 0, 6 * 3600)
    segs = segments_of(store, chain.id)
    assert [g.presubmitted for g in segs[:4]] == [False, True, True, True]
    assert all(g.predicted_low is not None and g.predicted_high is not None for g in segs[1:4])
    assert [e.data["interval"] for e in events(store, "transition")][:3] == [
        "inside",
        "early",
        "late",
    ]
    for outcome in ("inside", "early", "late"):
        assert d.metrics.value("mirage_predicted_interval_total", {"outcome": outcome}) >= 1
    assert segs[0].predicted_low is None  # the first segment: no forecast
    shown = show_chain(store, chain.id, None)
    assert shown is not None
    runs = shown["segments_run"]
    assert runs[2]["predicted_interval"] == [segs[2].predicted_low, segs[2].predicted_high]
    assert runs[2]["predicted_interval"][0] - runs[2]["predicted_start"] == 600
    low, high = runs[2]["predicted_interval"]
    now = 6 * 3600
    line = segment_line(runs[2], now)
    assert f"predicted start {_when(runs[2]['predicted_start'], now)}" in line
    assert f"[{_when(low, now)} .. {_when(high, now)}]" in line
    assert "predicted" not in segment_line(runs[0], now)
    # `mirage status`: the last 7 days' transitions by outcome (the run ended at 6 h)
    held = status(store, 6 * 3600, None)["stated_intervals_7d"]
    assert held == {"inside": 1, "early": 1, "late": 1}
    line = interval_summary(held, "last 7 days")
    assert line.startswith("stated 90% intervals, last 7 days: 1 of 3")
    assert stated_intervals(store, 6 * 3600) == {"inside": 0, "early": 0, "late": 0}


def test_no_interval_stated_counts_nothing(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    sim.handoff_exits = True
    make_chain(store, segments=3, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600))
    run_cycles([d], sim, 0, 4 * 3600)
    transitions = events(store, "transition")
    assert transitions and all(e.data["interval"] is None for e in transitions)
    total = sum(
        d.metrics.value("mirage_predicted_interval_total", {"outcome": o})
        for o in ("inside", "early", "late")
    )
    assert total == 0
    assert status(store, 4 * 3600, None)["stated_intervals_7d"] == {
        "inside": 0,
        "early": 0,
        "late": 0,
    }


def _crash_and_recover(tmp_path: Path, point: str) -> tuple[FaultySim, Store, str]:
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=3, limit=3600)
    cfg = make_config("reactive", unknown_timeout_s=600)
    first = Daemon(store, sim, config=cfg, holder="A")
    run_cycles([first], sim, 0, 3540)
    sim.advance_to(3600)
    sim.crash = point
    try:
        first.cycle(3600)
    except Crash:
        pass
    else:
        raise AssertionError("the cycle should have crashed")
    with store.sessions() as s:
        subs = list(s.scalars(select(Submission).where(Submission.index == 1)))
    assert [x.state for x in subs] == [SubmissionState.INTENT]  # committed before sbatch
    second = Daemon(store, sim, config=cfg, holder="B")  # a restarted daemon
    # A's lease (ttl 180 s) must lapse before B acts
    assert second.cycle(3660).skipped == "lease"
    run_cycles([second], sim, 3840, 6 * 3600)
    return sim, store, chain.id


def test_crash_after_submit_before_commit_adopts_by_token(tmp_path: Path) -> None:
    sim, store, chain_id = _crash_and_recover(tmp_path, "after_submit")
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3  # no double submit
    with store.sessions() as s:
        states = [x.state for x in s.scalars(select(Submission).order_by(Submission.index))]
    assert states == [SubmissionState.SUBMITTED, SubmissionState.ADOPTED, SubmissionState.SUBMITTED]
    assert chain_state(store, chain_id).state is ChainState.COMPLETED


def test_crash_after_intent_before_submit_is_lost_then_resubmitted_once(tmp_path: Path) -> None:
    sim, store, chain_id = _crash_and_recover(tmp_path, "before_submit")
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3
    with store.sessions() as s:
        subs = list(s.scalars(select(Submission).order_by(Submission.index)))
    states = [(x.index, x.state) for x in subs]
    assert states == [
        (0, SubmissionState.SUBMITTED),
        (1, SubmissionState.LOST),
        (1, SubmissionState.SUBMITTED),
        (2, SubmissionState.SUBMITTED),
    ]
    lost = next(x for x in subs if x.state is SubmissionState.LOST)
    assert lost.resolved_at is not None and lost.resolved_at - lost.created_at >= 600
    assert chain_state(store, chain_id).state is ChainState.COMPLETED


class TimeoutAfterSubmit(FaultySim):
    """sbatch reached the controller, but the answer never came back."""

    armed = True

    def submit(self, request: SubmitRequest) -> str:
        job_id = super().submit(request)
        if self.armed and self.sim.now > 0:
            self.armed = False
            raise SlurmTimeoutError(["sbatch"], None, "", "sbatch timed out after 60s")
        return job_id


def test_submit_timeout_is_unknown_never_retried_then_adopted(tmp_path: Path) -> None:
    from mirage.sim import Simulation
    from mirage.sim.scenario import toy_profile

    store = make_store(tmp_path)
    sim = TimeoutAfterSubmit(Simulation(toy_profile(4)))
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=make_config("reactive"))
    run_cycles([d], sim, 0, 3540)
    sim.advance_to(3600)
    report = d.cycle(3600)
    assert len(report.unknown) == 1 and report.submitted == []
    token = report.unknown[0]
    report = d.cycle(3600)  # same instant again: the UNKNOWN is adopted, nothing resubmitted
    assert report.adopted == [token]
    assert report.submitted == []
    run_cycles([d], sim, 3660, 3 * 3600)
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 2
    assert chain_state(store, chain.id).state is ChainState.COMPLETED


def test_controller_outage_ends_no_chain_and_backs_off(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=3, limit=3600)
    d = Daemon(store, sim, config=make_config("reactive", backoff_max_s=600))
    run_cycles([d], sim, 0, 3000)
    sim.down = True
    before = sum(sim.reads.values())
    cycles = 0
    t = 3060
    while t <= 3060 + 90 * 60:  # 90 minutes down; segment 0 ends meanwhile (3600)
        sim.advance_to(t)
        report = d.cycle(t)
        assert report.submitted == [] and report.ended == []
        cycles += 1
        t += 60
    c = chain_state(store, chain.id)
    assert c.state is ChainState.ACTIVE and c.trained_s == 0  # nothing concluded
    # backoff: far fewer squeue/sacct attempts than cycles (doubling up to 600 s)
    attempts = sum(sim.reads.values()) - before
    assert attempts <= 2 * 12 < 2 * cycles
    assert d.metrics.value("mirage_slurm_reachable") == 0
    assert d.metrics.value("mirage_poll_errors_total", {"kind": "unreachable"}) >= 5
    sim.down = False
    run_cycles([d], sim, t, t + 4 * 3600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED and c.trained_s == 3 * 3600
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3


def test_two_daemons_on_one_database_only_one_acts(tmp_path: Path) -> None:
    sim = make_sim()
    store_a = make_store(tmp_path)
    store_b = make_store(tmp_path)  # a second engine on the same SQLite file
    chains = [make_chain(store_a, segments=2, limit=1800, name=f"c{i}") for i in range(3)]
    cfg = make_config("fixed-lead", lead_s=300)
    a = Daemon(store_a, sim, config=cfg, holder="A")
    b = Daemon(store_b, sim, config=cfg, holder="B")
    reads_b = []
    t = 0
    while t <= 2 * 3600:
        sim.advance_to(t)
        ra, rb = a.cycle(t), b.cycle(t)
        assert not (ra.acted and rb.acted)
        reads_b.append(rb.slurm_reads)
        t += 60
    assert sum(reads_b) == 0  # B never even polled
    assert b.metrics.value("mirage_cycles_skipped_total", {"why": "lease"}) > 100
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 6
    for c in chains:
        assert chain_state(store_a, c.id).state is ChainState.COMPLETED
    # A stops (crash); B takes over once the lease lapses
    more = make_chain(store_a, segments=1, limit=600, name="late")
    t0 = t
    while chain_state(store_a, more.id).state is ChainState.ACTIVE and t < t0 + 3600:
        sim.advance_to(t)
        b.cycle(t)
        t += 60
    assert chain_state(store_a, more.id).state is ChainState.COMPLETED
    assert store_a.lease_holder("default", t) == "B"


def test_until_file_marker_ends_the_chain(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=None, limit=1800, until_file="done.marker")
    written = {"yes": False}
    d = Daemon(
        store,
        sim,
        config=make_config("reactive"),
        marker_check=lambda c: written["yes"],
    )
    run_cycles([d], sim, 0, 3 * 1800 - 60)
    assert chain_state(store, chain.id).state is ChainState.ACTIVE
    written["yes"] = True  # segment 2 writes the marker before it completes
    run_cycles([d], sim, 3 * 1800, 4 * 1800)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED and "marker" in c.reason
    assert len(sim.tokens()) == 3


def test_user_cancel_stops_chain_and_cancels_presubmitted_successor(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim(nodes=1)
    chain = make_chain(store, segments=4, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=900))
    run_cycles([d], sim, 0, 2760)
    segs = segments_of(store, chain.id)
    assert len(segs) == 2 and segs[1].job_state == "PENDING"  # pre-submitted, queued
    sim.cancel([segs[0].job_id])  # the user scancels the running segment
    run_cycles([d], sim, 2820, 3000)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.STOPPED and "CANCELLED" in c.reason
    segs = segments_of(store, chain.id)
    assert segs[1].cancelled_by_mirage and segs[1].finished
    assert sim.sim.view(segs[1].job_id).state.value == "CANCELLED"  # type: ignore[union-attr]


def test_reads_per_cycle_are_exactly_one_squeue_and_one_sacct(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    for i in range(5):
        make_chain(store, segments=2, limit=1800, name=f"c{i}")
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=300))
    t = 0
    while t <= 4 * 3600:
        sim.advance_to(t)
        before = dict(sim.reads)
        report = d.cycle(t)
        assert report.slurm_reads == 2
        assert sim.reads["squeue"] - before.get("squeue", 0) == 1
        assert sim.reads["sacct"] - before.get("sacct", 0) == 1
        t += 60


def test_test_only_estimates_are_rate_limited_and_counted(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim(nodes=2)
    chains = [make_chain(store, segments=3, limit=3600, name=f"c{i}") for i in range(3)]
    d = Daemon(store, sim, config=make_config("reactive", test_only_per_cycle=1))
    t = 0
    while t <= 1800:
        sim.advance_to(t)
        before = sim.reads["test_only"]
        d.cycle(t)
        assert sim.reads["test_only"] - before <= 1  # the per-cycle limit
        t += 60
    # one estimate per running chain's next segment, then none (cached per segment)
    assert sim.reads["test_only"] == 2
    assert d.metrics.value("mirage_test_only_total") == 2
    running = [c for c in chains if chain_state(store, c.id).slurm_estimate is not None]
    assert len(running) == 2
    for c in running:  # Slurm's will-run: a node frees up at 1 h, plus the area of the
        # third chain's pending 1-node hour (over 2 nodes: 30 min)
        assert chain_state(store, c.id).slurm_estimate == 3600 + 1800


def test_crash_while_signalling_the_predecessor(tmp_path: Path) -> None:
    """The third crash point: the successor is recorded and runs; kill during the handoff."""
    store, sim = make_store(tmp_path), make_sim()
    sim.handoff_exits = True
    chain = make_chain(store, segments=2, limit=3600)
    cfg = make_config("fixed-lead", lead_s=600)
    first = Daemon(store, sim, config=cfg, holder="A")
    run_cycles([first], sim, 0, 3000)  # the successor is pre-submitted at 3000
    sim.advance_to(3060)
    sim.crash = "signal"
    try:
        first.cycle(3060)
    except Crash:
        pass
    else:
        raise AssertionError("the cycle should have crashed")
    second = Daemon(store, sim, config=cfg, holder="B")
    run_cycles([second], sim, 3300, 4 * 3600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED, c.reason
    assert set(sim.tokens().values()) == {1}
    segs = segments_of(store, chain.id)
    assert segs[0].signalled_at == 3300 and segs[0].end == 3300  # signalled after restart
    assert [j for j, _sig in sim.signals].count(segs[0].job_id) == 1


class QueuePolicy(FixedLeadPolicy):
    """Stands for a trained policy that needs every user's jobs in its features."""

    name = "queue-model"
    needs_queue = True


def test_policy_needing_the_queue_falls_back_when_queue_is_private(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=2, limit=3600)
    cfg = make_config("fixed-lead", lead_s=600, sees_all_jobs=False)
    d = Daemon(store, sim, config=cfg, policies={"fixed-lead": QueuePolicy(600)})
    run_cycles([d], sim, 0, 3000)
    c = chain_state(store, chain.id)
    assert (c.policy, c.fallback_for) == ("reactive", "fixed-lead")  # `mirage status` says so
    assert len(segments_of(store, chain.id)) == 1  # reactive: nothing pre-submitted


def test_submit_event_records_the_decision_inputs(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600))
    run_cycles([d], sim, 0, 3000)
    intents = events(store, "submit.intent")
    presub = intents[-1]
    assert presub.data["presubmit"] and presub.data["planned_end"] == 3600
    assert presub.data["remaining_s"] == 600 and presub.data["policy"] == "fixed-lead"
    assert "lead 600s" in presub.reason


def test_requeued_predecessor_is_cancelled_once_the_successor_runs(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim(nodes=2)
    chain = make_chain(store, segments=3, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600, handoff=False))
    run_cycles([d], sim, 0, 3000)  # the successor is pre-submitted and starts at once
    pred, succ = segments_of(store, chain.id)
    sim.requeued.add(pred.job_id)  # a node failed: Slurm requeued segment 1 (same id)
    run_cycles([d], sim, 3060, 3180)
    segs = segments_of(store, chain.id)
    assert segs[0].cancelled_by_mirage and segs[0].outcome == "CONTINUE"
    assert segs[1].job_id == succ.job_id and segs[1].job_state == "RUNNING"
    assert chain_state(store, chain.id).state is ChainState.ACTIVE
    assert len(events(store, "cancel.requeued")) == 1


#: Real `sacct --json -a -X -S now-1minutes -E now-1minutes` of Slurm 22.05.8 (the test
#: cluster, 2026-11-26): an empty window is an "errors" entry (9003), exit status 0.
SACCT_EMPTY = (
    Path(__file__).resolve().parents[1] / "data" / "slurm" / "sacct-empty-window.json"
).read_text()


class EmptySacct(FaultySim):
    """slurmdbd has nothing yet for the first 5 minutes (then the simulator's records)."""

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        if self.sim.now < 300:
            self.reads["sacct"] += 1
            return parse_sacct_json(SACCT_EMPTY)  # what CliSlurmClient returns for it
        return super().accounting(start, end, every_state)


def test_empty_sacct_window_is_not_a_failed_poll(tmp_path: Path) -> None:
    from mirage.sim import Simulation
    from mirage.sim.scenario import toy_profile

    assert parse_sacct_json(SACCT_EMPTY) == []
    store, sim = make_store(tmp_path), EmptySacct(Simulation(toy_profile(4)))
    chain = make_chain(store, segments=2, limit=600)
    d = Daemon(store, sim, config=make_config("reactive"))
    report = d.cycle(0)
    assert report.acted and report.error == "" and len(report.submitted) == 1
    run_cycles([d], sim, 60, 1800)
    assert d.metrics.value("mirage_poll_errors_total", {"kind": "error"}) == 0
    assert chain_state(store, chain.id).state is ChainState.COMPLETED


def guarded_config(margin_s: int) -> Config:
    cfg = make_config("fixed-lead", lead_s=600)
    return replace(cfg, policy=replace(cfg.policy, guard="estimate", guard_margin_s=margin_s))


def test_guard_holds_back_what_slurm_would_start_at_once(tmp_path: Path) -> None:
    """On an idle cluster a fixed lead would start the successor 10 minutes early: the
    shipped guard asks Slurm, which says "now", and the successor goes in at the end."""
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=guarded_config(3600))
    run_cycles([d], sim, 0, 3 * 3600)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    assert not segs[1].presubmitted and segs[1].start == 3600
    assert sim.reads["test_only"] >= 1 and not sim.signals  # asked; nothing to hand over


def test_guard_lets_a_presubmission_go_when_slurm_expects_a_wait(tmp_path: Path) -> None:
    """One node, and another user's 3-hour job queued behind the chain's first segment:
    Slurm puts the successor after it, past the end plus the margin, so the fixed lead
    pre-submits as it would without the guard."""
    store, sim = make_store(tmp_path), make_sim(nodes=1)
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=guarded_config(3600))
    sim.advance_to(0)
    d.cycle(0)
    sim.submit(SubmitRequest(script=b"#!/bin/sh\n", job_name="other", time_limit=3 * 3600))
    run_cycles([d], sim, 60, 6 * 3600)
    segs = segments_of(store, chain.id)
    assert segs[1].presubmitted and segs[1].submitted_at == 3000
    assert segs[1].start == 3600 + 3 * 3600  # after the other user's job, as Slurm said


def test_token_counter_on_empty_sim() -> None:
    assert make_sim().tokens() == {}


def test_a_transition_costs_what_the_jobs_handoff_makes_it(tmp_path: Path) -> None:
    """Each transition's J (its event and mirage_transition_cost_seconds) is the cost of
    record: a successor 600 s early on a 1-hour limit costs h + 600 x (R + I) / (L - R)
    when jobs hand off, and SC'23's 0.5 x 600 with [daemon] handoff = false."""
    from mirage.policy.cost import DEFAULT_COST, HELD_TWICE

    costs = {}
    for handoff in (True, False):
        store, sim = make_store(tmp_path, f"handoff-{handoff}.sqlite"), make_sim()
        sim.handoff_exits = True
        chain = make_chain(store, segments=2, limit=3600)
        d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600, handoff=handoff))
        run_cycles([d], sim, 0, 3 * 3600)
        (t,) = events(store, "transition")
        # the chain's own handoff window, measured on this transition, replaces h's default
        (window,) = [s.handoff_s for s in segments_of(store, chain.id) if s.handoff_s]
        model = replace(DEFAULT_COST, handoff_s=window) if handoff else HELD_TWICE
        want = model.of(t.data["interruption"], t.data["overlap"], 3600)
        assert t.data["overlap"] == 600 and t.data["cost"] == want
        assert d.metrics.value("mirage_transition_cost_seconds_sum") == want
        costs[handoff] = (want, window)
    # on a 1-hour segment 10 minutes early is a fifth of a segment to run again; the
    # simulated predecessor hands over at the daemon's next poll, 60 s after the start
    assert costs[False][0] == 300
    assert costs[True] == (60 + 600 * (600 + 3600) / (3600 - 600), 60)


def test_the_fairness_cap_holds_a_users_presubmissions_beyond_it(tmp_path: Path) -> None:
    """Four of alice's chains fill the 4-node cluster; at 3000 s each wants its successor
    (a 600 s lead). With ``max_presubmitted_per_user = 2`` two go in and stay pending (no
    node is free), the other two wait with a note, counted; no cap, all four go in."""

    def pending_presubmitted(cap: int, where: Path) -> tuple[int, Store, Daemon, list[str]]:
        where.mkdir()
        store, sim = make_store(where), make_sim(4)
        chains = [make_chain(store, segments=2, limit=3600, name=f"c{k}") for k in range(4)]
        cfg = make_config("fixed-lead", lead_s=600)
        cfg = replace(cfg, policy=replace(cfg.policy, max_presubmitted_per_user=cap))
        d = Daemon(store, sim, config=cfg)
        run_cycles([d], sim, 0, 3060)
        n = sum(1 for c in chains for g in segments_of(store, c.id) if g.presubmitted)
        return n, store, d, [chain_state(store, c.id).note or "" for c in chains]

    n, _, d, reasons = pending_presubmitted(2, tmp_path / "capped")
    assert n == 2
    assert sum("max_presubmitted_per_user" in r for r in reasons) == 2
    assert d.metrics.presubmissions.labels("capped")._value.get() >= 2
    assert pending_presubmitted(0, tmp_path / "free")[0] == 4


def test_a_chain_whose_segments_end_early_gets_its_successor_when_they_end(
    tmp_path: Path,
) -> None:
    """One node, one chain of 3 segments of 3600 s, a fixed lead of 3000 s (pre-submit 600 s
    into a segment). Each job ends on its own at 2700 s, 900 s before its limit (more than
    10% of it and than 10 minutes). Segment 1 is pre-submitted: nothing has ended yet.
    Segment 2 is not: segment 0 ended early, so it goes in when segment 1 ends, with a note
    and a count. With the rule off it is pre-submitted; jobs that run to their limits
    (TIMEOUT) are pre-submitted for throughout."""

    def run(where: Path, *, rule: bool, run_s: int | None) -> tuple[list[Segment], Daemon, str]:
        where.mkdir()
        store, sim = make_store(where), make_sim(1)
        sim.runtime = lambda _request: run_s
        chain = make_chain(store, segments=3, limit=3600)
        cfg = make_config("fixed-lead", lead_s=3000)
        cfg = replace(cfg, policy=replace(cfg.policy, presubmit_only_limit_bound=rule))
        d = Daemon(store, sim, config=cfg)
        run_cycles([d], sim, 0, 3400)
        note = chain_state(store, chain.id).note
        run_cycles([d], sim, 3460, 4 * 3600)
        assert chain_state(store, chain.id).state is ChainState.COMPLETED
        return segments_of(store, chain.id), d, note

    segs, d, note = run(tmp_path / "early", rule=True, run_s=2700)
    assert [g.presubmitted for g in segs] == [False, True, False]
    assert segs[0].end == 2700 and segs[1].start == 2700
    assert segs[2].submitted_at >= segs[1].end  # type: ignore[operator]
    assert "15m before its limit" in note and "presubmit_only_limit_bound" in note
    assert chain_state(d.store, segs[0].chain_id).early_end_s == 900
    assert d.metrics.presubmissions.labels("early_end")._value.get() >= 1
    segs, d, _ = run(tmp_path / "off", rule=False, run_s=2700)
    assert [g.presubmitted for g in segs] == [False, True, True]
    assert d.metrics.presubmissions.labels("early_end")._value.get() == 0
    segs, d, _ = run(tmp_path / "to-limit", rule=True, run_s=None)
    assert [g.presubmitted for g in segs] == [False, True, True]
    assert chain_state(d.store, segs[0].chain_id).early_end_s == 0
