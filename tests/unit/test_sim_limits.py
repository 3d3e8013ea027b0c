"""QOS and association limits in the simulator (mirage.sim.limits): reasons, starts, backfill."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.profile.schema import Association, ClusterProfile, Qos
from mirage.sim import JobSpec, Simulation
from mirage.sim.errors import SimError
from mirage.sim.limits import Limits, is_limit_reason
from mirage.sim.pool import PendingPool
from mirage.sim.scenario import job, toy_profile
from mirage.slurm.types import JobState


def limited(
    qos: tuple[Qos, ...] = (),
    assocs: tuple[Association, ...] = (),
    part_qos: str = "",
    nodes: int = 8,
    **sched: Any,
) -> ClusterProfile:
    prof = toy_profile(nodes, **sched)
    part = dataclasses.replace(prof.partitions[0], qos=part_qos)
    return dataclasses.replace(prof, partitions=(part,), qos=qos, associations=assocs)


def ujob(submit: int, run: int, user: str = "alice", **kw: Any) -> JobSpec:
    return job(submit, run, user=user, **kw)


def pending_reasons(sim: Simulation) -> dict[str, str]:
    return {v.job_id: v.reason for v in sim.pending_jobs()}


def test_no_limits_no_state() -> None:
    assert Simulation(toy_profile(4))._lim is None
    assert Simulation(limited(qos=(Qos("normal"),)))._lim is None  # a QOS with no limit


@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        (limited(qos=(Qos("normal", max_jobs_per_user=2),)), "QOSMaxJobsPerUserLimit"),
        (limited(qos=(Qos("cap", max_jobs_per_user=2),), part_qos="cap"), "QOSMaxJobsPerUserLimit"),
        (limited(qos=(Qos("normal", grp_jobs=2),)), "QOSGrpJobsLimit"),
        (limited(assocs=(Association("*", max_jobs=2),)), "AssocMaxJobsLimit"),
        (limited(assocs=(Association("alice", grp_jobs=2),)), "AssocGrpJobsLimit"),
        (limited(qos=(Qos("normal", max_tres_per_user="gres/gpu=8"),)), "QOSMaxGRESPerUser"),
        (limited(qos=(Qos("normal", max_tres_per_user="node=2"),)), "QOSMaxNodePerUserLimit"),
        (limited(qos=(Qos("normal", max_tres_per_user="cpu=64"),)), "QOSMaxCpuPerUserLimit"),
        (limited(qos=(Qos("normal", grp_tres="gres/gpu=8"),)), "QOSGrpGRES"),
        (limited(qos=(Qos("normal", grp_tres="cpu=64"),)), "QOSGrpCpuLimit"),
        (limited(assocs=(Association("*", grp_tres="gres/gpu=8"),)), "AssocGrpGRES"),
        (limited(assocs=(Association("*", grp_tres="node=2"),)), "AssocGrpNodeLimit"),
    ],
)
def test_limit_holds_third_job_while_nodes_are_free(profile: ClusterProfile, reason: str) -> None:
    # whole-node jobs on 4-GPU, 32-CPU nodes: two of them use 8 GPUs, 2 nodes, 64 CPUs
    sim = Simulation(profile)
    a, b, c = sim.add_jobs([ujob(0, 100), ujob(0, 200), ujob(0, 50)])
    sim.run_until(10)
    assert sim.view(a).state is JobState.RUNNING
    assert sim.view(b).state is JobState.RUNNING
    assert pending_reasons(sim) == {c: reason}
    assert is_limit_reason(reason)
    assert sum(sim.free.values()) == 6  # nodes are free: the limit holds it
    # another user is not held
    [d] = sim.add_jobs([ujob(10, 10, user="bob")])
    sim.run_until(10)
    if reason.startswith("QOSGrp"):  # a group limit holds everyone
        assert sim.view(d).reason == reason
    else:
        assert sim.view(d).state is JobState.RUNNING
    sim.run()
    assert sim.view(c).start == 100  # starts once the user's count drops


def test_limit_held_job_does_not_block_its_partition() -> None:
    # alice's third job has the highest priority (oldest) but is held: bob's starts
    sim = Simulation(limited(qos=(Qos("normal", max_jobs_per_user=2),), nodes=4))
    _, _, a3 = sim.add_jobs([ujob(0, 100), ujob(0, 100), ujob(0, 100)])
    [b] = sim.add_jobs([ujob(5, 100, user="bob")])
    sim.run_until(5)
    assert sim.view(b).state is JobState.RUNNING
    assert sim.view(b).start == 5
    assert sim.view(a3).reason == "QOSMaxJobsPerUserLimit"


def test_resources_reason_goes_to_the_first_unheld_job() -> None:
    sim = Simulation(limited(qos=(Qos("normal", max_jobs_per_user=1),), nodes=1))
    _, a2 = sim.add_jobs([ujob(0, 100), ujob(0, 100)])
    [b] = sim.add_jobs([ujob(1, 100, user="bob")])
    sim.run_until(1)
    assert pending_reasons(sim) == {a2: "QOSMaxJobsPerUserLimit", b: "Resources"}


def test_backfill_gives_no_reservation_to_a_held_job_and_goes_on() -> None:
    # 2 nodes. alice runs 1 job (limit 1); her 2-node job is held. bob's 2-node job
    # must wait for alice's first; his 1-node short job backfills beside it.
    prof = limited(qos=(Qos("normal", max_jobs_per_user=1),), nodes=2)
    sim = Simulation(prof)
    sim.add_jobs([ujob(0, 1000)])
    sim.run_until(0)
    [a2] = sim.add_jobs([ujob(1, 1000, nodes=2)])
    [b1, b2] = sim.add_jobs([ujob(2, 1000, user="bob", nodes=2), ujob(3, 60, user="bob")])
    sim.run_until(60)
    assert sim.view(a2).estimate is None  # held by a limit: no reservation
    assert sim.view(a2).reason == "QOSMaxJobsPerUserLimit"
    assert sim.view(b1).estimate == 1020  # a1's planned end (0 + 1000, at bf_resolution)
    assert sim.view(b2).state is JobState.RUNNING  # did not stop at the held job


def test_backfill_start_counts_for_the_next_job_in_the_same_pass() -> None:
    prof = limited(qos=(Qos("normal", max_jobs_per_user=1),), nodes=4)
    sim = Simulation(prof)
    sim.add_jobs([ujob(0, 1000, user="bob", nodes=3)])
    sim.run_until(0)
    [_, x, y] = sim.add_jobs(
        [ujob(1, 100, user="carol", nodes=2), ujob(2, 30, user="alice"), ujob(3, 30, user="alice")]
    )
    sim.run_until(45)
    # x backfilled (or started) on the free node; y is held by the limit, not started too
    assert sim.view(x).state is JobState.RUNNING
    assert sim.view(y).reason == "QOSMaxJobsPerUserLimit"


def test_partition_qos_ranks_before_job_qos() -> None:
    prof = limited(
        qos=(Qos("cap", max_jobs_per_user=1), Qos("high", max_jobs_per_user=5)),
        part_qos="cap",
    )
    sim = Simulation(prof)
    _, b = sim.add_jobs([ujob(0, 100, qos="high"), ujob(0, 100, qos="high")])
    sim.run_until(0)
    assert sim.view(b).reason == "QOSMaxJobsPerUserLimit"
    # OverPartQOS: the job QOS's 5 hides the partition QOS's 1
    prof2 = dataclasses.replace(
        prof,
        qos=(Qos("cap", max_jobs_per_user=1), Qos("high", max_jobs_per_user=5, over_part_qos=True)),
    )
    sim2 = Simulation(prof2)
    ids = sim2.add_jobs([ujob(0, 100, qos="high") for _ in range(3)])
    sim2.run_until(0)
    assert all(sim2.view(i).state is JobState.RUNNING for i in ids)


def test_qos_max_jobs_hides_the_association_max_jobs() -> None:
    prof = limited(
        qos=(Qos("normal", max_jobs_per_user=3),), assocs=(Association("*", max_jobs=1),)
    )
    sim = Simulation(prof)
    ids = sim.add_jobs([ujob(0, 100) for _ in range(4)])
    sim.run_until(0)
    assert [sim.view(i).state for i in ids].count(JobState.RUNNING) == 3
    assert sim.view(ids[3]).reason == "QOSMaxJobsPerUserLimit"


def test_max_wall_holds_for_ever_and_sets_a_missing_limit() -> None:
    prof = limited(qos=(Qos("normal", max_wall_s=600),))
    sim = Simulation(prof)
    long, short = sim.add_jobs([ujob(0, 100, limit=1200), ujob(0, 100, limit=600)])
    sim.run()
    assert sim.view(long).state is JobState.PENDING
    assert sim.view(long).reason == "QOSMaxWallDurationPerJobLimit"
    assert sim.view(short).state is JobState.COMPLETED


def test_max_wall_is_the_default_time_limit() -> None:
    prof = limited(assocs=(Association("*", max_wall_s=600),))
    sim = Simulation(prof)
    [a] = sim.add_jobs(
        [JobSpec(submit=0, run=5000, time_limit=None, nodes=1, partition="gpu", user="alice")]
    )
    sim.run()
    v = sim.view(a)
    assert (v.state, v.end) == (JobState.TIMEOUT, 600)


def test_max_submit_refuses_now_and_later() -> None:
    prof = limited(qos=(Qos("normal", max_submit_jobs_per_user=2),))
    sim = Simulation(prof)
    sim.add_jobs([ujob(0, 100), ujob(0, 100)])
    with pytest.raises(SimError) as err:
        sim.add_job(ujob(0, 100))
    assert err.value.reason == "QOSMaxSubmitJobPerUserLimit"
    assert len(sim.specs) == 2
    # future submits are refused at their submit time, counted in skipped
    ids = sim.add_jobs([ujob(50, 10), ujob(150, 10)])
    sim.run()
    assert sim.view(ids[0]).state is JobState.CANCELLED
    assert sim.skipped == {"QOSMaxSubmitJobPerUserLimit": 1}
    assert sim.view(ids[1]).state is JobState.COMPLETED  # the first two ended at 100
    # a refused job's dependents learn it: afterok never, afterany now
    sim3 = Simulation(limited(qos=(Qos("normal", max_submit_jobs_per_user=1),)))
    p, c_ok, c_any = sim3.add_jobs(
        [ujob(10, 10), ujob(10, 10, user="bob", dependency="afterok:1"),
         ujob(10, 10, user="carol", dependency="afterany:1")]
    )  # fmt: skip
    sim3.add_job(ujob(0, 100))  # alice's one submit slot is taken until 100
    sim3.run_until(20)
    assert sim3.view(p).state is JobState.CANCELLED
    assert sim3.view(c_ok).reason == "DependencyNeverSatisfied"
    assert sim3.view(c_any).state is JobState.COMPLETED
    # the association's MaxSubmitJobs has its own reason
    sim2 = Simulation(limited(assocs=(Association("*", max_submit_jobs=1),)))
    sim2.add_job(ujob(0, 100))
    ids = sim2.add_jobs_skipping_invalid([ujob(0, 100)])
    assert ids == [""] and sim2.skipped == {"AssocMaxSubmitJobLimit": 1}


def test_cancel_releases_submit_and_run_counts() -> None:
    prof = limited(qos=(Qos("normal", max_jobs_per_user=1, max_submit_jobs_per_user=2),))
    sim = Simulation(prof)
    a, b = sim.add_jobs([ujob(0, 1000), ujob(0, 100)])
    sim.run_until(10)
    assert sim.view(b).reason == "QOSMaxJobsPerUserLimit"
    sim.cancel(a)
    sim.run_until(20)
    assert sim.view(b).state is JobState.RUNNING
    sim.add_job(ujob(20, 10))  # a's submit count was released


def test_unknown_qos_is_refused() -> None:
    sim = Simulation(limited(qos=(Qos("normal", max_jobs_per_user=1),)))
    with pytest.raises(SimError) as err:
        sim.add_job(ujob(0, 10, qos="nope"))
    assert err.value.reason == "invalid qos"


def test_fork_copies_limit_state() -> None:
    prof = limited(qos=(Qos("normal", max_jobs_per_user=2),))
    sim = Simulation(prof)
    sim.add_jobs([ujob(t, 300) for t in range(0, 600, 20)])
    sim.run_until(250)
    child = sim.fork()
    assert child._lim is not sim._lim
    assert child._lim is not None and sim._lim is not None
    assert child._lim.used == sim._lim.used
    # driving the fork leaves the parent alone; both then reach the same schedule
    child.add_jobs([ujob(260, 10, user="bob")])
    child.run()
    assert sim._lim.used != child._lim.used
    sim.add_jobs([ujob(260, 10, user="bob")])
    sim.run()
    assert [v.start for v in sim.all_jobs()] == [v.start for v in child.all_jobs()]
    assert all(v == 0 for v in sim._lim.used.values())


def test_simulated_squeue_shows_the_limit_reason() -> None:
    from mirage.sim.backend import SimSlurmClient
    from mirage.slurm.types import SubmitError, SubmitRequest

    prof = limited(qos=(Qos("cap", max_jobs_per_user=2, max_submit_jobs_per_user=3),),
                   part_qos="cap")  # fmt: skip
    client = SimSlurmClient(Simulation(prof), user="alice")
    ids = [client.submit(SubmitRequest(job_name=f"j{k}", time_limit=600)) for k in range(3)]
    jobs = client.queue().by_id()
    assert [jobs[i].state for i in ids] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert jobs[ids[2]].reason == "QOSMaxJobsPerUserLimit"
    with pytest.raises(SubmitError, match="QOSMaxSubmitJobPerUserLimit"):
        client.submit(SubmitRequest(job_name="j3", time_limit=600))


def test_simulated_sbatch_qos_option() -> None:
    from mirage.sim.backend import SimSlurmClient, qos_request
    from mirage.slurm.types import SubmitError, SubmitRequest

    assert qos_request(["--qos=high"]) == qos_request(["-q", "high"]) == "high"
    assert qos_request(["-qhigh", "-c", "2"]) == "high" and qos_request(["-c", "2"]) == ""
    prof = limited(qos=(Qos("normal", max_jobs_per_user=1), Qos("high", max_jobs_per_user=3)))
    client = SimSlurmClient(Simulation(prof), user="alice")
    ids = [
        client.submit(SubmitRequest(job_name="j", time_limit=600, extra_args=("--qos=high",)))
        for _ in range(3)
    ]
    assert all(j.state is JobState.RUNNING for j in client.queue().jobs if j.job_id in ids)
    [b] = [client.submit(SubmitRequest(job_name="n", time_limit=600)) for _ in range(1)]
    assert client.queue().by_id()[b].state is JobState.RUNNING  # "normal" counts apart
    with pytest.raises(SubmitError, match="invalid QOS"):
        client.submit(SubmitRequest(job_name="x", time_limit=600, extra_args=("-q", "nope")))


# ---- inference from a trace (mirage.trace.limits) ----------------------------------


def _trace(rows: list[tuple[str, int, int, int]]) -> Any:
    import pandas as pd

    return pd.DataFrame(
        {
            "user": pd.array([r[0] for r in rows], dtype="string"),
            "start": pd.array([r[1] for r in rows], dtype="Int64"),
            "end": pd.array([r[2] for r in rows], dtype="Int64"),
            "nodes": pd.array([r[3] for r in rows], dtype="Int64"),
            "gpus": pd.array([None] * len(rows), dtype="Int64"),
        }
    )


def test_infer_limit_many_users_hit_exactly() -> None:
    from mirage.trace.limits import infer_user_limits

    rows = []
    for u in ("a", "b", "c", "d"):  # four users run 3 at once, never 4
        rows += [(u, 0, 100, 1), (u, 10, 100, 1), (u, 20, 100, 1), (u, 100, 200, 1)]
    rows += [("e", 0, 50, 2), ("e", 50, 90, 1)]  # back to back: never 2 at once
    jobs, nodes = infer_user_limits(_trace(rows))  # no GPUs in the trace: not measured
    assert (jobs.measure, jobs.ceiling, jobs.users_at_ceiling, jobs.users) == ("jobs", 3, 4, 5)
    assert jobs.is_limit and jobs.top_peaks == ((3, 4), (1, 1))
    assert (nodes.ceiling, nodes.users_at_ceiling) == (3, 4)
    # one user once is a peak, not a limit
    rows.append(("f", 0, 10, 1))
    rows += [("f", 1, 10, 1) for _ in range(5)]
    jobs = infer_user_limits(_trace(rows))[0]
    assert (jobs.ceiling, jobs.users_at_ceiling, jobs.is_limit) == (6, 1, False)
    gpus = infer_user_limits(_trace(rows), gpus_per_node=3)[2]
    assert (gpus.measure, gpus.ceiling) == ("gpus", 18)


def test_infer_ls6_max_jobs_per_user_is_8() -> None:
    from pathlib import Path

    from mirage.trace.limits import infer_user_limits
    from mirage.trace.readers import load_trace

    # the shared traces beside the checkout, as tests/unit/test_trace_chains.py finds them
    path = Path(__file__).resolve().parents[3] / "shared" / "traces" / "tacc_ls6_a100"
    path = path / "ls6-a100.log.gz"
    if not path.exists():
        pytest.skip(f"shared traces not present at {path}")
    jobs, nodes, gpus = infer_user_limits(load_trace(path).jobs, gpus_per_node=3)
    assert (jobs.ceiling, jobs.is_limit) == (8, True)
    assert jobs.users_at_ceiling == 26
    assert not nodes.is_limit and not gpus.is_limit


# ---- the look-ahead and features see limits ------------------------------------------


def test_lookahead_request_is_held_by_its_users_limit() -> None:
    from mirage.policy.lookahead import Request, lookahead_starts
    from mirage.slurm.types import QueueSnapshot, SlurmJob

    h = 3600

    def rec(job_id: str, user: str, state: JobState, **kw: Any) -> SlurmJob:
        base: dict[str, Any] = dict(
            job_id=job_id,
            name="x",
            user=user,
            account="a",
            partition="gpu",
            state=state,
            reason="None",
            submit=0,
            eligible=0,
            start=None,
            end=None,
            time_limit=10 * h,
            nodes=1,
            cpus=32,
            gpus=4,
            priority=None,
            dependency="",
            comment="",
        )
        base.update(kw)
        return SlurmJob(**base)

    class OneHour:
        def predict_job(self, job: SlurmJob, now: int) -> int:
            return h

    running = tuple(rec(str(k), "ann", JobState.RUNNING, start=0) for k in (1, 2))
    held = rec("3", "ann", JobState.PENDING, reason="QOSMaxJobsPerUserLimit", priority=100)
    snap = QueueSnapshot(0, (*running, held))
    prof = limited(qos=(Qos("cap", max_jobs_per_user=2),), part_qos="cap", nodes=8)
    ann, bob = Request("gpu", 1, 0, 4 * h, "ann"), Request("gpu", 1, 0, 4 * h, "bob")
    # nodes are free, but ann runs 2 (her limit): her request waits until both end at 1 h
    # (then her held job and the request take her 2 slots); bob's starts now
    starts = lookahead_starts(snap, prof, 0, OneHour(), [ann, bob])
    assert starts == [h, 0]
    # without limits the user is ignored: both start now, one shared simulation
    assert lookahead_starts(snap, toy_profile(8), 0, OneHour(), [ann, bob]) == [0, 0]


def test_features_tell_limit_held_jobs_apart() -> None:
    from mirage.policy.features import is_competing, is_limit_held
    from mirage.slurm.types import SlurmJob

    base: dict[str, Any] = dict(
        job_id="1", name="x", user="u", account="a", partition="gpu", state=JobState.PENDING,
        reason="QOSMaxJobsPerUserLimit", submit=0, eligible=0, start=None, end=None,
        time_limit=60, nodes=1, cpus=1, gpus=0, priority=None, dependency="", comment="",
    )  # fmt: skip
    held = SlurmJob(**base)
    assert is_limit_held(held) and is_competing(held, 10)  # counted as before (shapes fixed)
    for reason in ("Resources", "Priority", "Dependency", "JobHeldUser"):
        assert not is_limit_held(SlurmJob(**{**base, "reason": reason}))
    assert is_limit_held(SlurmJob(**{**base, "reason": "AssocGrpGRES"}))


def test_cli_infer_limits_on_the_committed_slice() -> None:
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from mirage.cli import main

    path = Path(__file__).resolve().parents[2] / "traces" / "ls6-a100-slice.log.gz"
    res = CliRunner().invoke(main, ["trace", "infer-limits", str(path), "--gpus-per-node", "3"])
    assert res.exit_code == 0, res.output
    assert "max_jobs_per_user = 8  # inferred: 7 of 142 users reach it" in res.output
    res = CliRunner().invoke(main, ["trace", "infer-limits", str(path), "--json"])
    jobs = json.loads(res.stdout)[0]
    assert (jobs["measure"], jobs["ceiling"], jobs["is_limit"]) == ("jobs", 8, True)


def test_dropping_jobs_held_at_a_pass_start_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Passes drop the jobs a limit holds at their start (Limits.held), and a backfill
    pass that finds every pending job held skips building its plan: starts and estimates
    are those of passes that check every job one by one as they reach it (held forced to
    "none")."""
    import random

    import numpy as np

    from mirage.sim import limits as limits_mod

    rng = random.Random(7)
    specs = [
        ujob(
            rng.randrange(0, 4000),
            rng.randrange(30, 900),
            user=rng.choice("abc"),
            limit=rng.choice([900, 1800]),
            nodes=rng.choice([1, 1, 2]),
        )
        for _ in range(150)
    ]
    specs.sort(key=lambda j: j.submit)

    def run() -> list[tuple[int | None, int | None]]:
        prof = limited(qos=(Qos("normal", max_jobs_per_user=2),))
        sim = Simulation(prof, track_estimates=True)
        sim.add_jobs(specs)
        sim.run()
        return [(v.start, v.estimate) for v in sim.all_jobs()]

    all_held = []
    real = limits_mod.Limits.held

    def counted(self: limits_mod.Limits, jobs: Any) -> tuple[Any, Any]:
        pre, post = real(self, jobs)
        all_held.append(bool((pre | post).all()))
        return pre, post

    def none(self: limits_mod.Limits, jobs: Any) -> tuple[Any, Any]:
        return np.zeros(len(jobs), dtype=bool), np.zeros(len(jobs), dtype=bool)

    monkeypatch.setattr(limits_mod.Limits, "held", counted)
    fast = run()
    assert sum(all_held) > 10  # passes found every pending job held
    monkeypatch.setattr(limits_mod.Limits, "held", none)
    assert fast == run()
    assert all(start is not None for start, _ in fast)


def test_backfill_order_counts_post_select_skips_against_the_cap() -> None:
    """_attempt_backfill: a pre-select failure is skipped before bf_max_job_test counts
    it, a post-select failure after; both lose their estimates; nothing after the cap-th
    tested job is looked at."""
    from mirage.sim.limits import Limits

    lim = object.__new__(Limits)  # two rule groups: 0 (no rules), 1 (always fails)
    lim._dirty = set()
    lim._gf = [False, True]
    lim._gp = [0, 1, 0, 0, 1]  # jobs 1 and 4 fail a pre-select rule
    lim._gq = [0, 0, 1, 0, 0]  # job 2 a post-select one
    est: list[int | None] = [7] * 5
    assert list(lim.backfill_order(iter(range(5)), 2, est)) == [0]
    assert est == [7, None, None, 7, 7]  # job 4 (pre-held) is past the cap: not looked at
    est = [7] * 5
    assert list(lim.backfill_order(iter(range(5)), 3, est)) == [0, 3]
    assert est == [7, None, None, 7, 7]
    assert list(lim.backfill_order(iter(range(5)), 0, est)) == []


@pytest.mark.parametrize("tracked", [False, True])
def test_all_held_shortcut_changes_nothing(monkeypatch: pytest.MonkeyPatch, tracked: bool) -> None:
    """While every eligible pending job is held by a limit the passes skip their work
    (PendingPool.all_held, one of Simulation._idle's tests). With begin times, holds
    released later, dependencies and forks, starts and estimates are those of passes
    that always do it."""
    import random

    rng = random.Random(11)
    specs = []
    for k, submit in enumerate(sorted(rng.randrange(0, 4000) for _ in range(160))):
        extra: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.1:
            extra["begin"] = submit + rng.randrange(0, 2000)
        elif roll < 0.2:
            extra["hold"] = True
        elif roll < 0.3 and k > 5:  # on an earlier job (ids count from 1)
            extra["dependency"] = f"afterany:{1 + rng.randrange(0, k)}"
        specs.append(
            ujob(
                submit,
                rng.randrange(30, 900),
                user=rng.choice("aabbccz"),  # z: rarely at its limit
                limit=rng.choice([900, 1800]),
                nodes=rng.choice([1, 1, 2]),
                **extra,
            )
        )
    prof = limited(
        qos=(Qos("normal", max_jobs_per_user=2),),
        assocs=(Association("*", grp_tres="node=3"),),
        nodes=12,
    )
    skipped: list[int] = []
    real = PendingPool.all_held

    def counted(self: PendingPool, lim: Limits | None, now: int) -> bool:
        got = real(self, lim, now)
        skipped.append(got)
        return got

    def run() -> list[tuple[int | None, int | None]]:
        sim = Simulation(prof, track_estimates=tracked)
        ids = sim.add_jobs(specs)
        views = []
        for t in range(500, 9000, 500):
            sim.run_until(t)
            for jid, spec in zip(ids, specs, strict=True):
                if spec.hold and int(jid) % 3 == t // 500 % 3 and sim.view(jid).held:
                    sim.set_hold(jid, False)
            fork = sim.fork()
            fork.add_job(ujob(t, 1200, user="a", limit=1800, nodes=3))
            fork.run_until(t + 3000)
            views += [(v.start, v.estimate) for v in fork.all_jobs()]
            pool = fork._pool
            assert pool.candidates == int(pool.ok[: pool.n].sum())  # kept count: exact
        sim.run()
        return views + [(v.start, v.estimate) for v in sim.all_jobs()]

    monkeypatch.setattr(PendingPool, "all_held", counted)
    fast = run()
    assert sum(skipped) > 5  # the shortcut was taken
    monkeypatch.setattr(PendingPool, "all_held", lambda self, lim, now: False)
    assert fast == run()


def _two_partitions(cap: int, backfill: str, batches: bool) -> ClusterProfile:
    """gpu (6 nodes, QOS "cap": 2 running jobs per user) and cpu (4 nodes), disjoint, with
    every user's nodes capped at 5 by the association: both kinds of rule, both
    partitions planned apart (mirage.sim.backfill._counts)."""
    prof = limited(
        qos=(Qos("cap", max_jobs_per_user=2),),
        assocs=(Association("*", grp_tres="node=5"),),
        part_qos="cap",
        nodes=6,
        backfill=backfill,
        bf_max_job_test=cap,
        bf_resolution_s=60,
        bf_will_run_batches=batches,
    )
    cpu = dataclasses.replace(prof.partitions[0], name="cpu", nodes=4, qos="", default=False)
    return dataclasses.replace(prof, partitions=(prof.partitions[0], cpu))


_limited_jobs = st.lists(
    st.builds(
        ujob,
        submit=st.integers(0, 900),
        run=st.integers(30, 3000),
        user=st.sampled_from("aabcde"),
        nodes=st.integers(1, 3),
        limit=st.sampled_from([120, 600, 3000, 6000]),
        partition=st.sampled_from(["gpu", "gpu", "cpu"]),
        begin=st.one_of(st.none(), st.integers(0, 2500)),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    _limited_jobs,
    st.sampled_from([1, 2, 4, 1000]),
    st.sampled_from(["slurm", "easy"]),
    st.booleans(),
)
def test_lazy_backfill_under_limits_starts_the_same_jobs(
    specs: list[JobSpec], cap: int, backfill: str, batches: bool
) -> None:
    """Without estimates, backfill walks only the jobs that can start now and counts the
    others against bf_max_job_test (mirage.sim.backfill._counts_lazy): limits holding
    jobs before and during a pass, a small cap, two partitions, EASY and Slurm's batches
    give the starts of the full walk."""
    prof = _two_partitions(cap, backfill, batches)

    def starts(tracked: bool) -> list[tuple[int | None, int | None]]:
        sim = Simulation(prof, track_estimates=tracked)
        sim.add_jobs(sorted(specs, key=lambda s: s.submit))
        sim.run()
        return [(v.start, v.end) for v in sim.all_jobs()]

    full = starts(tracked=True)
    assert all(start is not None for start, _ in full)  # every job ran: a real schedule
    assert starts(tracked=False) == full


@pytest.mark.parametrize("tracked", [True, False])
def test_job_held_by_a_start_in_the_same_pass_is_not_counted(tracked: bool) -> None:
    """_attempt_backfill counts a job against bf_max_job_test only if no pre-select rule
    holds it when the walk reaches it: a start earlier in the same pass can bring its
    owner to MaxJobsPerUser, and the job then costs the walk nothing."""
    prof = limited(
        qos=(Qos("cap", max_jobs_per_user=2),), part_qos="cap", nodes=6, bf_max_job_test=3
    )
    sim = Simulation(prof, track_estimates=tracked)
    sim.add_jobs([ujob(0, 1000, user="a", nodes=2), ujob(0, 1000, user="x", nodes=2)])
    # 2 nodes free until 1000; the top job needs all 6: the walk reserves it (1st test),
    # starts j2 (2nd; alice now has 2 running, so j3 is held), skips j3 uncounted, and
    # reaches j4 as its 3rd test
    _, j2, j3, j4 = sim.add_jobs(
        [
            ujob(10, 500, user="b", nodes=6, limit=2000),
            ujob(10, 200, user="a", limit=300),
            ujob(10, 200, user="a", limit=3000),
            ujob(10, 200, user="c", limit=300),
        ]
    )
    sim.run_until(200)
    assert sim.view(j2).state is JobState.RUNNING
    assert sim.view(j3).reason == "QOSMaxJobsPerUserLimit"
    assert sim.view(j4).start == sim.view(j2).start  # the same pass started both
