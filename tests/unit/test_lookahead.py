"""The look-ahead policy: run-time model, snapshot simulation, policy and harness rule."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from mirage.evaluate.lookahead import TrueRunTimes
from mirage.policy.base import DecisionContext, PendingTransition
from mirage.policy.cost import HELD_TWICE
from mirage.policy.lookahead import (
    LookaheadPolicy,
    Request,
    RunTimes,
    lookahead_starts,
    queue_specs,
)
from mirage.sim import JobSpec, Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import job, toy_profile
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob

H = 3600


def record(job_id: str, user: str, state: JobState, **kw: object) -> SlurmJob:
    base = dict(
        job_id=job_id, name="x", user=user, account="a", partition="gpu", state=state,
        reason="None", submit=0, eligible=0, start=None, end=None, time_limit=10 * H,
        nodes=1, cpus=32, gpus=4, priority=None, dependency="", comment="",
    )  # fmt: skip
    base.update(kw)
    return SlurmJob(**base)  # type: ignore[arg-type]


# ---- the run-time model -------------------------------------------------------------------


def test_run_times_per_user_median_conditional_on_elapsed() -> None:
    rt = RunTimes(min_user=3)
    for r in (0.1, 0.2, 0.5, 1.0):
        rt.add("ann", int(r * 10 * H), 10 * H)
    # ann's runs for a 10 h limit: 1, 2, 5, 10 h; median 3.5 h
    assert rt.predict("ann", 10 * H) == int(3.5 * H)
    # having run 3 h, only 5 h and 10 h remain possible: median 7.5 h
    assert rt.predict("ann", 10 * H, elapsed_s=3 * H) == int(7.5 * H)
    # past every run in the history: its limit
    assert rt.predict("ann", 10 * H, elapsed_s=10 * H) == 10 * H
    # a user with too short a history gets everyone's ratios
    rt.add("bob", 9 * H, 10 * H)
    assert rt.ratios("bob").size == 5
    # no history at all: the limit
    assert RunTimes().predict("carl", 4 * H) == 4 * H


def test_jobs_that_end_at_once_count_for_pending_jobs_not_running_ones() -> None:
    """Runs of 0 s (one ls6 job in seven) are part of a pending job's distribution; a job
    already running is past them."""
    rt = RunTimes(min_user=1)
    for run_h in (0, 0, 5, 10):
        rt.add("ann", run_h * H, 10 * H)
    assert rt.predict("ann", 10 * H) == int(2.5 * H)
    assert rt.predict("ann", 10 * H, elapsed_s=H) == int(7.5 * H)
    assert rt.draw("ann", 10 * H, 0, 0.1) == 1  # ends at once (1 s, as the engine runs it)
    rt.add("ann", 10 * H, 10 * H)  # predictions are memoised until the next run is added
    assert rt.predict("ann", 10 * H) == 5 * H


def test_run_times_statistics_mean_and_quantile() -> None:
    ratios = (0.1, 0.2, 0.5, 1.0)  # runs of 1, 2, 5, 10 h for a 10 h limit
    fitted = {}
    for stat in ("median", "mean", "q25"):
        rt = RunTimes(min_user=1, stat=stat)
        for r in ratios:
            rt.add("ann", int(r * 10 * H), 10 * H)
        fitted[stat] = rt
    assert fitted["median"].predict("ann", 10 * H) == int(3.5 * H)
    assert fitted["mean"].predict("ann", 10 * H) == int(4.5 * H)
    assert fitted["q25"].predict("ann", 10 * H) == int(1.75 * H)  # numpy's linear quantile
    # conditional on 3 h elapsed: 5 and 10 h remain; the mean 7.5 h, the 25% point 6.25 h
    assert fitted["mean"].predict("ann", 10 * H, elapsed_s=3 * H) == int(7.5 * H)
    assert fitted["q25"].predict("ann", 10 * H, elapsed_s=3 * H) == int(6.25 * H)


@pytest.mark.parametrize("stat", ["average", "q0", "q100", "25", "q2.5"])
def test_run_times_reject_unknown_statistics(stat: str) -> None:
    with pytest.raises(ValueError, match=r"median, mean or q1\.\.q99"):
        RunTimes(stat=stat)


def test_run_times_observe_counts_each_finished_job_once() -> None:
    rt = RunTimes(min_user=1)
    done = record("7", "ann", JobState.COMPLETED, start=0, end=2 * H)
    timeout = record("8", "ann", JobState.TIMEOUT, start=0, end=10 * H + 40)  # capped at 1
    running = record("9", "ann", JobState.RUNNING, start=0, end=10 * H)
    cancelled = record("10", "ann", JobState.CANCELLED, start=0, end=H)
    assert rt.observe([done, timeout, running, cancelled]) == 2
    assert rt.observe([done, timeout]) == 0  # overlapping accounting windows
    assert sorted(rt.ratios("ann").tolist()) == [0.2, 1.0]


# ---- the snapshot simulation ----------------------------------------------------------------


def busy_workload(seed: int, chained: float = 0.0) -> list[JobSpec]:
    """120 jobs; a ``chained`` share of them waits (afterany) for the job before."""
    rng = random.Random(seed)
    t, out = 0, []
    for k in range(120):
        t += rng.randint(0, 900)
        run = rng.randint(600, 6 * H)
        dep = f"afterany:{k}" if k and rng.random() < chained else ""  # ids count from 1
        out.append(job(t, run, nodes=rng.choice([1, 1, 2, 3]), limit=run + rng.randint(0, 4 * H),
                       dependency=dep))  # fmt: skip
    return out


def test_snapshot_simulation_with_exact_run_times_matches_a_fork_without_arrivals() -> None:
    """From the squeue snapshot alone (running jobs restarted at now for what is left of
    them, pending ones in priority order, dependent ones after their parents) the request
    starts when it would in a fork of the full simulation with later arrivals dropped,
    given the same run times. Age counts to the second here, so that a dependent job,
    eligible after the request, ranks below it (with Slurm's coarse default weight, age
    ties in the first minutes go to the older job id). Backfill plans on a 60 s grid
    counted from each job's start, which a restarted running job shifts: rarely, a job
    that just fits a hole in one does not in the other (here once, by 15 minutes)."""
    profile = toy_profile(4, priority_weight_age=10**6)
    request = Request("gpu", 2, 0, 3 * H)
    spec = JobSpec(submit=0, run=3 * H, time_limit=3 * H, nodes=2, partition="gpu",
                   exclusive=True, name="succ")  # fmt: skip
    diffs = []
    for seed, chained in [(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.3), (5, 0.3)]:
        sim = Simulation(profile)
        sim.add_jobs(busy_workload(seed, chained))
        for cut in range(10 * H, 30 * H, 2 * H):
            sim.run_until(cut)
            snapshot = SimSlurmClient(sim).queue()
            if not any(j.state is JobState.PENDING for j in snapshot.jobs):
                continue
            fork = sim.fork()
            fork.drop_future_submits()
            truth = fork.run_until_started(fork.add_job(replace(spec, submit=cut)))
            assert truth is not None
            (start,) = lookahead_starts(snapshot, profile, cut, TrueRunTimes(sim), [request])
            diffs.append(start - truth)
    exact = sum(d == 0 for d in diffs)
    assert len(diffs) >= 40 and exact >= 0.95 * len(diffs), diffs
    assert max(abs(d) for d in diffs) <= 15 * 60, diffs


def test_queue_specs_orders_pending_by_priority_and_skips_blocked_jobs() -> None:
    profile = toy_profile(4)
    jobs = (
        record("1", "a", JobState.RUNNING, start=0, time_limit=4 * H),
        record("2", "b", JobState.PENDING, eligible=50, priority=10),
        record("3", "c", JobState.PENDING, eligible=10, priority=30),
        record(
            "4",
            "d",
            JobState.PENDING,
            eligible=None,
            reason="Dependency",
            priority=0,
            dependency="afterok:1(unfulfilled)",
        ),
        record("5", "e", JobState.PENDING, eligible=20, reason="JobHeldUser", priority=0),
        record("6", "f", JobState.PENDING, eligible=20, partition="other", priority=50),
    )
    snap = QueueSnapshot(taken_at=H, jobs=jobs)
    plan = queue_specs(snap, profile, H, RunTimes(), to_limit={"1"})
    assert [s.name for s in plan.ahead] == ["1", "3", "2"]
    # the running job from now: what is left of its limit (no history: it runs to it)
    first = plan.ahead[0]
    assert (first.submit, first.run, first.time_limit) == (H, 3 * H, 3 * H)
    # the dependent job follows, waiting for job 1
    assert [(s.name, ps) for s, ps in plan.after] == [("4", ("1",))]


def test_policy_submits_when_the_simulated_start_reaches_the_planned_end() -> None:
    """Two nodes: ann's job (limit 10 h; her jobs run a fifth of their limit) and the
    chain's running segment (to its limit, 4 h). A one-node successor would start when
    ann's job ends: at 2 h by her history (too early: wait), at 4 h without any history
    (Slurm's view: submit, it starts as the segment ends)."""
    profile = toy_profile(2)
    ann = record("1", "ann", JobState.RUNNING, start=0, time_limit=10 * H)
    segment = record("2", "me", JobState.RUNNING, start=0, time_limit=4 * H)
    ctx = DecisionContext(now=H, snapshot=QueueSnapshot(H, (ann, segment)), profile=profile)
    pend = PendingTransition("c", "2", 0, 4 * H, 1, 0, 4 * H, "gpu", "me")
    rt = RunTimes(min_user=1)
    for _ in range(3):
        rt.add("ann", 2 * H, 10 * H)
    (d,) = LookaheadPolicy(margin_s=0, runtimes=rt).decide(ctx, [pend])
    assert (d.submit, d.predicted_start) == (False, 4 * H)
    assert "would start 3600 s from now" in d.reason
    (d,) = LookaheadPolicy(margin_s=2 * H, runtimes=rt).decide(ctx, [pend])
    assert d.submit
    (d,) = LookaheadPolicy(margin_s=0).decide(ctx, [pend])
    assert (d.submit, d.predicted_start) == (True, 4 * H)


def test_draws_see_the_first_of_many_running_jobs_end_early() -> None:
    """Four running jobs of ann, whose runs for a 10 h limit are 1, 2, 8, 9 or 10 h: one
    median each (8 h) says a one-node request waits 8 h; the first of four to end comes
    far sooner, which simulations with each job's run drawn from ann's history see. Draws
    are the same at every call (a job's uniform comes from its id)."""
    profile = toy_profile(4)
    jobs = tuple(record(str(i), "ann", JobState.RUNNING, start=0) for i in range(1, 5))
    snap = QueueSnapshot(0, jobs)
    rt = RunTimes(min_user=1)
    for run_h in (1, 2, 8, 9, 10):
        rt.add("ann", run_h * H, 10 * H)
    assert rt.draw("ann", 10 * H, 0, 0.5) == rt.predict("ann", 10 * H) == 8 * H
    assert rt.draw("ann", 10 * H, 0, 0.125) == int(1.5 * H)
    assert rt.draw("ann", 10 * H, 3 * H, 0.01) > 8 * H  # conditional on 3 h elapsed
    req = Request("gpu", 1, 0, 4 * H)
    (single,) = lookahead_starts(snap, profile, 0, rt, [req])
    assert single == 8 * H
    (drawn,) = lookahead_starts(snap, profile, 0, rt, [req], draws=9)
    assert drawn < 4 * H
    assert lookahead_starts(snap, profile, 0, rt, [req], draws=9) == [drawn]
    # the start of one draw: the first of the four drawn runs to end
    firsts = [min(rt.drawn(k).predict_job(j, 0) for j in jobs) for k in range(9)]
    assert drawn == sorted(firsts)[4]


class OneHour:
    """A predictor that is not RunTimes: every job runs 1 h."""

    def predict_job(self, job: SlurmJob, now: int) -> int:
        return H


def test_any_predictor_gives_one_run_per_job_and_only_run_times_give_draws() -> None:
    profile = toy_profile(1)
    snap = QueueSnapshot(0, (record("1", "ann", JobState.RUNNING, start=0),))
    req = Request("gpu", 1, 0, 4 * H)
    assert lookahead_starts(snap, profile, 0, OneHour(), [req]) == [H]
    with pytest.raises(TypeError, match="draws need RunTimes"):
        lookahead_starts(snap, profile, 0, OneHour(), [req], draws=3)


def test_policy_learns_run_times_from_accounting_records() -> None:
    policy = LookaheadPolicy()
    done = [record(str(i), "ann", JobState.COMPLETED, start=0, end=H) for i in range(5)]
    ctx = DecisionContext(now=H, snapshot=QueueSnapshot(H, ()), profile=toy_profile(1),
                          accounting=done)  # fmt: skip
    policy.observe(ctx)
    policy.observe(ctx)
    assert len(policy.runtimes) == 5
    assert policy.runtimes.predict("ann", 10 * H) == H


def test_harness_lookahead_rule_tuning_and_selection() -> None:
    """The harness decides ``lookahead`` from its recorded curve with a tuned margin. On
    the hand-made scenario (tests/unit/test_eval_harness.py) only a successor submitted
    at step 0 or 1 avoids the 12 h gap; a curve that says "too early" at step 0 and "at
    the planned end" from step 1 on makes the margin-0 rule submit at step 1."""
    from mirage.evaluate.harness import LOOKAHEAD, Walker, evaluate, select, tune
    from mirage.evaluate.protocol import Protocol
    from tests.unit.test_eval_harness import TWO, scenario

    s = scenario()
    curve = np.full(len(s.steps), s.planned_end, dtype=np.int64)
    curve[0] = 20 * H
    w = Walker([s], Protocol(step_s=30 * 60), TWO, "gpu", lookahead=[curve])
    assert w.curve_rule(LOOKAHEAD, 0.0).step.tolist() == [1]
    assert w.curve_rule(LOOKAHEAD, 30 * H).step.tolist() == [0]  # 20 h + 30 h >= 48 h
    tuned = tune(w, [LOOKAHEAD, "reactive"], cost_model=HELD_TWICE)
    res = evaluate(w, [LOOKAHEAD], tuned.params, HELD_TWICE)
    assert res[LOOKAHEAD].cost(HELD_TWICE).tolist() == [0.0]
    chosen, scores = select(w, ["reactive", LOOKAHEAD], tuned.params, cost_model=HELD_TWICE)
    assert (chosen, scores["reactive"]) == (LOOKAHEAD, 12.0)
    with pytest.raises(ValueError, match="curves"):
        Walker([s], Protocol(step_s=30 * 60), TWO, "gpu").curve_rule(LOOKAHEAD, 0.0)


def test_curve_recorder_learns_only_from_jobs_that_have_finished() -> None:
    """The harness feeds run times as a daemon learns them: from jobs that have ended,
    each once (a running job's end is known to the simulator, not to a daemon)."""
    from mirage.evaluate.lookahead import FinishedRuns
    from mirage.policy.lookahead import RUN_STATES

    sim = Simulation(toy_profile(4))
    sim.add_jobs(busy_workload(1))
    sim.run_until(10 * H)

    def finished() -> int:
        return sum(sim.state[i] in RUN_STATES for i in range(len(sim.specs)))

    rt = RunTimes()
    feed = FinishedRuns(sim, rt)
    assert sim.running and len(rt) == finished() > 0
    sim.run_until(14 * H)
    feed.catch_up()
    assert len(rt) == finished()
