"""Odd Slurm records never end, stop or cancel what is running (found by an adversarial
review): a job listed twice, a reused job id, a token under another id, a stale PENDING
record from sacct alone, an unreadable state, two jobs of one submission, an unseen
predecessor. Each scenario runs the daemon on the simulated cluster with its reads
twisted for a while, then checks the chain's state and Slurm's jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from mirage.daemon.core import Daemon
from mirage.daemon.reconcile import merge_records
from mirage.daemon.store import ChainState, Event, Segment, Store
from mirage.sim import Simulation
from mirage.sim.scenario import toy_profile
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmJob,
    SlurmTimeoutError,
    SubmitRequest,
)
from tests.unit.daemon_support import (
    FaultySim,
    chain_state,
    make_chain,
    make_config,
    make_store,
    run_cycles,
)

Twist = Callable[[list[SlurmJob], str], list[SlurmJob]]


class Twisted(FaultySim):
    """The simulated cluster, with ``twist(jobs, "squeue" | "sacct")`` applied to what each
    read returns while it is set."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.twist: Twist | None = None

    def queue(self) -> QueueSnapshot:
        snap = super().queue()
        if self.twist is None:
            return snap
        return dataclasses.replace(snap, jobs=tuple(self.twist(list(snap.jobs), "squeue")))

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        jobs = super().accounting(start, end, every_state)
        return jobs if self.twist is None else self.twist(jobs, "sacct")

    def truth(self, job_id: str) -> JobState:
        twist, self.twist = self.twist, None
        try:
            found = [j for j in self.queue().jobs if j.job_id == job_id]
            found = found or [j for j in self.accounting(0) if j.job_id == job_id]
            return found[0].state
        finally:
            self.twist = twist


def setup(
    tmp_path: Path, policy: str = "reactive", lead_s: int = 600, **daemon: object
) -> tuple[Store, Twisted, Daemon, str]:
    store = make_store(tmp_path)
    sim = Twisted(Simulation(toy_profile(4)))
    chain = make_chain(store, segments=3, limit=3600)
    d = Daemon(store, sim, config=make_config(policy, lead_s, **daemon))
    return store, sim, d, chain.id


def segments(store: Store, chain_id: str) -> list[tuple[str, str, bool, int | None]]:
    with store.sessions() as s:
        rows = s.scalars(
            select(Segment).where(Segment.chain_id == chain_id).order_by(Segment.index)
        )
        return [(g.job_id, g.job_state, g.finished, g.start) for g in rows]


def ignored(d: Daemon, why: str) -> float:
    value = d.metrics.value("mirage_slurm_records_ignored_total", {"reason": why})
    return 0.0 if value is None else value


def finished_as(state: JobState, now: int) -> Callable[[SlurmJob], SlurmJob]:
    return lambda j: dataclasses.replace(j, state=state, raw_state=state.value, end=now)


def test_a_job_listed_twice_keeps_its_active_record(tmp_path: Path) -> None:
    store, sim, d, cid = setup(tmp_path)
    run_cycles([d], sim, 0, 600)
    assert segments(store, cid)[0][:2] == ("1", "RUNNING")
    for first in (True, False):  # a finished copy after the live record, then before it

        def twist(jobs: list[SlurmJob], what: str, first: bool = first) -> list[SlurmJob]:
            if what != "squeue":
                return jobs
            dup = [finished_as(JobState.CANCELLED, sim.sim.now)(j) for j in jobs if j.job_id == "1"]
            return jobs + dup if first else dup + jobs

        sim.twist = twist
        run_cycles([d], sim, 660, 720)
        assert chain_state(store, cid).state is ChainState.ACTIVE
        assert segments(store, cid)[0][:3] == ("1", "RUNNING", False)
    assert ignored(d, "duplicate") == 4
    assert merge_records([], [])[1] == {}


def test_a_reused_job_id_is_not_the_segments_job(tmp_path: Path) -> None:
    """The controller hands job id 1 to another user's job (a state reset): its CANCELLED
    record must not stop the chain, and nothing is sent to that job."""
    store, sim, d, cid = setup(tmp_path)
    run_cycles([d], sim, 0, 600)

    def stranger(jobs: list[SlurmJob], _what: str) -> list[SlurmJob]:
        other = finished_as(JobState.CANCELLED, sim.sim.now)
        return [
            dataclasses.replace(other(j), name="bob-job", comment="", user="bob")
            if j.job_id == "1"
            else j
            for j in jobs
        ]

    sim.twist = stranger
    report = d.cycle(660)
    assert chain_state(store, cid).state is ChainState.ACTIVE
    assert not report.cancelled and not report.ended and not report.submitted
    assert ignored(d, "id_reused") == 1
    with store.sessions() as s:
        seg = s.scalars(select(Segment).where(Segment.chain_id == cid)).one()
        assert seg.missing_since == 660 and seg.job_state == "RUNNING"
    sim.twist = None
    run_cycles([d], sim, 720, 4 * 3600)
    assert chain_state(store, cid).state is ChainState.COMPLETED
    assert set(sim.tokens().values()) == {1}


def test_the_token_under_another_id_is_not_the_segments_job(tmp_path: Path) -> None:
    """Job 1 unseen for a poll; job 999, FAILED, carries its token: 1 is still running."""
    store, sim, d, cid = setup(tmp_path)
    run_cycles([d], sim, 0, 600)

    def swap(jobs: list[SlurmJob], _what: str) -> list[SlurmJob]:
        failed = finished_as(JobState.FAILED, sim.sim.now)
        return [
            dataclasses.replace(failed(j), job_id="999") if j.job_id == "1" else j for j in jobs
        ]

    sim.twist = swap
    run_cycles([d], sim, 660, 720)
    assert chain_state(store, cid).state is ChainState.ACTIVE
    assert segments(store, cid)[0][:3] == ("1", "RUNNING", False)
    assert sim.truth("1") is JobState.RUNNING


def test_a_stale_pending_record_from_sacct_cancels_nothing(tmp_path: Path) -> None:
    """For one poll squeue lacks the running predecessor and sacct (slurmdbd lagging)
    shows it PENDING: not a requeue, so it is not cancelled as one."""
    store, sim, d, cid = setup(tmp_path, "fixed-lead", lead_s=600, handoff=False)
    run_cycles([d], sim, 0, 3060)
    assert [g[1] for g in segments(store, cid)] == ["RUNNING", "RUNNING"]

    def lag(jobs: list[SlurmJob], what: str) -> list[SlurmJob]:
        if what == "squeue":
            return [j for j in jobs if j.job_id != "1"]
        return [
            dataclasses.replace(
                j, state=JobState.PENDING, raw_state="PENDING", start=None, end=None
            )
            if j.job_id == "1"
            else j
            for j in jobs
        ]

    sim.twist = lag
    report = d.cycle(3120)
    assert report.cancelled == [] and ignored(d, "stale_pending") == 1
    sim.twist = None
    run_cycles([d], sim, 3180, 3720)
    first = segments(store, cid)[0]
    assert first[:3] == ("1", "TIMEOUT", True) or first[:3] == ("1", "COMPLETED", True)
    assert sim.truth("1") in (JobState.TIMEOUT, JobState.COMPLETED)
    assert chain_state(store, cid).trained_s >= 3600


def test_an_unreadable_state_says_nothing_of_the_start(tmp_path: Path) -> None:
    """A pending job read as UNKNOWN for a poll, with Slurm's estimated start: the
    estimate is not taken for a start, so no requeue and no transition are invented."""
    store, sim, d, cid = setup(tmp_path)
    mode = {"now": "pending"}

    def odd(jobs: list[SlurmJob], _what: str) -> list[SlurmJob]:
        state = JobState.UNKNOWN if mode["now"] == "unknown" else JobState.PENDING
        raw = "ODD" if state is JobState.UNKNOWN else "PENDING"
        start = sim.sim.now + 600  # Slurm's estimate, for a pending job
        return [
            dataclasses.replace(j, state=state, raw_state=raw, start=start, end=None)
            if j.job_id == "1"
            else j
            for j in jobs
        ]

    sim.twist = odd
    run_cycles([d], sim, 0, 120)
    mode["now"] = "unknown"
    run_cycles([d], sim, 180, 180)
    mode["now"] = "pending"
    run_cycles([d], sim, 240, 240)
    with store.sessions() as s:
        seg = s.scalars(select(Segment).where(Segment.chain_id == cid)).one()
        assert (seg.start, seg.requeued) == (None, False)


def test_a_second_job_of_one_submission_is_cancelled(tmp_path: Path) -> None:
    """sbatch's retried request creates the job twice, then times out: one is adopted,
    the other cancelled, so the segment does not train twice."""

    class Twice(Twisted):
        armed = True

        def submit(self, request: SubmitRequest) -> str:
            job_id = super().submit(request)
            if self.armed and self.sim.now > 0:
                self.armed = False
                super().submit(request)
                raise SlurmTimeoutError(["sbatch"], None, "", "sbatch timed out")
            return job_id

    store = make_store(tmp_path)
    sim = Twice(Simulation(toy_profile(4)))
    cid = make_chain(store, segments=2, limit=3600).id
    d = Daemon(store, sim, config=make_config("reactive"))
    run_cycles([d], sim, 0, 3600 + 300)
    assert sim.tokens().most_common(1)[0][1] == 2  # the submission Slurm created twice
    kept = segments(store, cid)[1][0]
    assert (kept, sim.truth("3")) == ("2", JobState.CANCELLED)
    assert ignored(d, "extra_job") == 1
    with store.sessions() as s:
        assert [e.kind for e in s.scalars(select(Event).where(Event.kind == "cancel.extra"))] == [
            "cancel.extra"
        ]
    run_cycles([d], sim, 3960, 3 * 3600)
    assert chain_state(store, cid).state is ChainState.COMPLETED


def test_no_presubmission_while_the_predecessor_is_unseen(tmp_path: Path) -> None:
    """squeue and sacct return nothing for a while: the last known RUNNING state is a
    memory, and the policy is not asked to pre-submit on it."""
    store, sim, d, cid = setup(tmp_path, "fixed-lead", lead_s=600)
    run_cycles([d], sim, 0, 2400)
    sim.twist = lambda _jobs, _what: []
    submitted: list[str] = []
    for t in range(2460, 3600 + 1, 60):
        sim.advance_to(t)
        submitted += d.cycle(t).submitted
    assert submitted == [] and chain_state(store, cid).state is ChainState.ACTIVE
    sim.twist = None
    run_cycles([d], sim, 3660, 6 * 3600)
    assert chain_state(store, cid).state is ChainState.COMPLETED
    assert set(sim.tokens().values()) == {1}
