"""Revocable pre-submission in the daemon, on the simulator with simulated time.

A scripted policy pre-submits like fixed-lead and says "revoke" at chosen times; the
simulator plays Slurm (``hold`` refuses a job that no longer pends, as scontrol does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select

from mirage.daemon.core import Daemon
from mirage.daemon.outcomes import CycleReport
from mirage.daemon.revoke import REVOKED, cancel
from mirage.daemon.store import ChainState, Event, Segment, Store
from mirage.policy.base import MAX_REVOCATIONS, DecisionContext, PendingTransition
from mirage.policy.simple import FixedLeadPolicy
from mirage.sim import Simulation
from mirage.slurm.types import JobState, QueueSnapshot, SubmitRequest
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


class Revoker(FixedLeadPolicy):
    """Fixed lead; revokes a pending pre-submission while ``now`` is before ``until``."""

    name = "revoker"

    def __init__(self, lead_s: int, until: int) -> None:
        super().__init__(lead_s)
        self.until = until
        self.asked: list[int] = []

    @property
    def revocable(self) -> bool:
        return True

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        self.asked.append(ctx.now)
        return [ctx.now < self.until] * len(pending)


class CrashySim(FaultySim):
    """Crashes at a point of a revocation: "hold" (before it) or "cancel" (after the hold)."""

    def hold(self, job_ids: Sequence[str]) -> None:
        if self.crash == "hold":
            self.crash = ""
            raise Crash("killed before the hold")
        super().hold(job_ids)

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        if self.crash == "cancel":
            self.crash = ""
            raise Crash("killed between the hold and the scancel")
        super().cancel(job_ids, pending_only)


class HoldsRunning(FaultySim):
    """Holds a running job as Slurm 22.05 does: accepted, and squeue shows it running
    with a held reason (priority 0) until it is released."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.held_running: set[str] = set()
        self.released: list[str] = []

    def hold(self, job_ids: Sequence[str]) -> None:
        running = {j.job_id for j in super().queue().jobs if j.state is JobState.RUNNING}
        self.held_running |= set(job_ids) & running
        super().hold(job_ids)

    def release(self, job_ids: Sequence[str]) -> None:
        self.released.extend(job_ids)
        self.held_running -= set(job_ids)
        super().release(job_ids)

    def queue(self) -> QueueSnapshot:
        snap = super().queue()
        jobs = tuple(
            dataclasses.replace(j, reason="JobHeldUser") if j.job_id in self.held_running else j
            for j in snap.jobs
        )
        return dataclasses.replace(snap, jobs=jobs)


def segments_of(store: Store, chain_id: str) -> list[Segment]:
    with store.sessions() as s:
        q = select(Segment).where(Segment.chain_id == chain_id).order_by(Segment.id)
        return list(s.scalars(q))


def kinds(store: Store) -> list[str]:
    with store.sessions() as s:
        return [e.kind for e in s.scalars(select(Event).order_by(Event.id))]


def block(sim: FaultySim, nodes: int, seconds: int) -> str:
    """Another job holding ``nodes`` nodes for ``seconds`` (keeps successors pending)."""
    return sim.submit(SubmitRequest(time_limit=seconds, nodes=nodes, partition="gpu"))


def setup(tmp_path: Path, until: int, sim: FaultySim | None = None, busy: int = 3300) -> tuple:  # type: ignore[type-arg]
    store, sim = make_store(tmp_path), sim or make_sim()
    block(sim, 3, busy)  # the other 3 nodes are busy until then
    chain = make_chain(store, segments=2, limit=3600)
    cfg = make_config("fixed-lead", lead_s=600)
    policy = Revoker(600, until)
    d = Daemon(store, sim, config=cfg, policies={"fixed-lead": policy})
    return store, sim, chain, cfg, policy, d


def test_revoked_presubmission_is_cancelled_while_pending_and_submitted_again(
    tmp_path: Path,
) -> None:
    store, sim, chain, _cfg, policy, d = setup(tmp_path, until=3100)
    run_cycles([d], sim, 0, 4 * 3600)
    c = chain_state(store, chain.id)
    assert c.state is ChainState.COMPLETED, c.reason
    first, revoked, succ = segments_of(store, chain.id)
    # pre-submitted at 3000 (pending: no free node); revoked at 3060, settled at 3120
    assert (revoked.index, revoked.submitted_at, revoked.outcome) == (1, 3000, REVOKED)
    assert revoked.revoke_at == 3060 and revoked.finished
    view = sim.sim.view(revoked.job_id)
    assert view.state is JobState.CANCELLED and view.start is None  # it never ran
    # submitted again once the revocation was settled, never while the first was live
    assert (succ.index, succ.submitted_at, succ.presubmitted) == (1, 3120, True)
    assert succ.start == 3300 and succ.outcome == "CONTINUE"
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3
    assert d.metrics.value("mirage_revocations_total") == 1
    k = kinds(store)
    assert k.index("revoke.intent") < k.index("revoke") < k.index("segment.revoked")
    with store.sessions() as s:
        moves = list(s.scalars(select(Event).where(Event.kind == "transition")))
    assert [e.reason for e in moves] == [f"{first.job_id} -> {succ.job_id}"]
    # asked only while a pre-submission pended and its predecessor ran
    assert policy.asked[0] == 3060 and all(3060 <= t < 3300 for t in policy.asked)


def test_revocations_per_transition_are_bounded(tmp_path: Path) -> None:
    # always "revoke"; the cluster stays full long enough for every revocation allowed
    store, sim, chain, _cfg, _policy, d = setup(tmp_path, until=10**9, busy=3500)
    run_cycles([d], sim, 0, 4 * 3600)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    assert [g.outcome for g in segs].count(REVOKED) == MAX_REVOCATIONS
    assert segs[-1].outcome == "CONTINUE" and segs[-1].index == 1 and segs[-1].start == 3500
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == MAX_REVOCATIONS + 2
    assert d.metrics.value("mirage_revocations_total") == MAX_REVOCATIONS


def test_a_started_successor_is_never_cancelled(tmp_path: Path) -> None:
    """The race: the successor starts between the poll and the revocation. The hold does
    not stop it, ``scancel --state=PENDING`` leaves it running, and the next poll releases
    and un-marks it."""
    store, sim = make_store(tmp_path), HoldsRunning(make_sim().sim)
    sim.handoff_exits = True
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=make_config("fixed-lead", lead_s=600))
    run_cycles([d], sim, 0, 3000)  # pre-submitted at 3000 on a free cluster: it runs
    succ = segments_of(store, chain.id)[1]
    assert sim.sim.view(succ.job_id).state is JobState.RUNNING
    with store.sessions() as s:
        seg = s.get(Segment, succ.id)
        assert seg is not None
        cancel(d.ctx, s, chain_state(store, chain.id), seg, now=3010, report=CycleReport(3010),
               why="test")  # fmt: skip
        s.commit()
    assert sim.sim.view(succ.job_id).state is JobState.RUNNING
    run_cycles([d], sim, 3060, 4 * 3600)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    assert segs[1].revoke_at is None and segs[1].outcome == "CONTINUE"
    assert sim.released == [succ.job_id]  # the hold that took on the running job, undone
    k = kinds(store)
    assert k.index("revoke.intent") < k.index("revoke") < k.index("revoke.too_late")
    assert REVOKED not in [g.outcome for g in segs]
    assert d.metrics.value("mirage_revocations_total") == 0


def crashed_at(tmp_path: Path, point: str, busy: int = 3300) -> tuple:  # type: ignore[type-arg]
    """A daemon pre-submits at 3000 and is killed at ``point`` of its revocation at 3060."""
    store, sim, chain, cfg, _policy, first = setup(
        tmp_path, until=3100, sim=CrashySim(make_sim().sim), busy=busy
    )
    run_cycles([first], sim, 0, 3000)
    sim.advance_to(3060)
    sim.crash = point
    try:
        first.cycle(3060)
    except Crash:
        pass
    else:
        raise AssertionError("the cycle should have crashed")
    return store, sim, chain, cfg


def test_crash_before_the_hold_finishes_the_revocation_after_restart(tmp_path: Path) -> None:
    store, sim, chain, cfg = crashed_at(tmp_path, "hold", busy=3500)
    marked = segments_of(store, chain.id)[1]
    assert marked.revoke_at == 3060  # the intent was committed before the hold
    # the restarted daemon's policy no longer wants to revoke: the intent is still honoured
    second = Daemon(store, sim, config=cfg, holder="B", policies={"fixed-lead": Revoker(600, 0)})
    run_cycles([second], sim, 3300, 4 * 3600)  # once A's lease has lapsed
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    assert [g.outcome for g in segs] == ["CONTINUE", REVOKED, "CONTINUE"]
    assert segs[1].job_id != segs[2].job_id and segs[2].submitted_at == 3360
    assert set(sim.tokens().values()) == {1} and len(sim.tokens()) == 3


def test_predecessor_ending_first_keeps_the_held_successor(tmp_path: Path) -> None:
    """A crash between the hold and the scancel, and the predecessor ends before the daemon
    is back: the successor (held, still pending) is released and kept, not replaced."""
    store, sim, chain, cfg = crashed_at(tmp_path, "cancel")
    held = segments_of(store, chain.id)[1]
    assert sim.queue().by_id()[held.job_id].reason == "JobHeldUser"
    second = Daemon(store, sim, config=cfg, holder="B", policies={"fixed-lead": Revoker(600, 0)})
    run_cycles([second], sim, 3660, 4 * 3600)  # the predecessor ended at 3600
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    segs = segments_of(store, chain.id)
    assert [g.job_id for g in segs] == [segs[0].job_id, held.job_id]  # no new submission
    assert segs[1].revoke_at is None and segs[1].start == 3660
    assert "revoke.kept" in kinds(store) and len(sim.tokens()) == 2


def test_revoke_switched_off_in_the_config(tmp_path: Path) -> None:
    store, sim = make_store(tmp_path), make_sim()
    block(sim, 3, 3300)
    chain = make_chain(store, segments=2, limit=3600)
    policy = Revoker(600, 10**9)
    cfg = make_config("fixed-lead", lead_s=600, revoke=False)
    d = Daemon(store, sim, config=cfg, policies={"fixed-lead": policy})
    run_cycles([d], sim, 0, 4 * 3600)
    assert chain_state(store, chain.id).state is ChainState.COMPLETED
    assert len(segments_of(store, chain.id)) == 2 and policy.asked == []
