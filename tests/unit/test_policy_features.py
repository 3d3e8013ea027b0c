"""Policy features: names and shapes, exact values, normalisation, invariances, and parity
between the simulator's ``squeue`` and the recorded real one."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.policy import features as F
from mirage.policy.base import PendingTransition
from mirage.profile.schema import ClusterProfile, Partition
from mirage.sim import Simulation, scenario
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import TESTBED_NODES, toy_profile
from mirage.sim.workload import JobSpec
from mirage.slurm.parse import parse_squeue_json
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob

DATA = Path(__file__).parent.parent / "data" / "slurm"
H = 3600
# Wednesday 2026-11-25 18:00:00 UTC (12:00 in America/Chicago, UTC-6 in November)
NOW = int(datetime(2026, 11, 25, 18, 0, tzinfo=UTC).timestamp())


def sj(
    job_id: str,
    state: JobState = JobState.PENDING,
    *,
    partition: str = "gpu",
    reason: str = "Priority",
    submit: int | None = None,
    eligible: int | None = None,
    start: int | None = None,
    time_limit: int | None = H,
    nodes: int = 1,
    gpus: int = 4,
    priority: int | None = 100,
    array_task_id: str | None = None,
) -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        name="j",
        user="u",
        account="a",
        partition=partition,
        state=state,
        reason=reason if state is JobState.PENDING else "None",
        submit=submit,
        eligible=eligible,
        start=start,
        end=None,
        time_limit=time_limit,
        nodes=nodes,
        cpus=nodes,
        gpus=gpus,
        priority=priority,
        dependency="",
        comment="",
        array_job_id=job_id.split("_", maxsplit=1)[0] if array_task_id else None,
        array_task_id=array_task_id,
    )


def hand_snapshot() -> QueueSnapshot:
    """Two running, three pending records (one an array remainder of 3 tasks, one held)."""
    return QueueSnapshot(
        taken_at=NOW,
        jobs=(
            sj("1", JobState.RUNNING, start=NOW - 2 * H, time_limit=10 * H, nodes=2, gpus=8),
            sj("2", JobState.RUNNING, start=NOW - 6 * H, time_limit=8 * H, nodes=1, gpus=4),
            sj("3", submit=NOW - 3 * H, eligible=NOW - 2 * H, time_limit=4 * H, gpus=4),
            sj(
                "4_[0-2]",
                submit=NOW - H,
                eligible=NOW - H,
                time_limit=H,
                gpus=2,
                array_task_id="0-2",
            ),
            sj(
                "5",
                reason="JobHeldUser",
                submit=NOW - 5 * H,
                time_limit=2 * H,
                nodes=2,
                gpus=8,
                priority=0,
            ),
        ),
    )


def chain(partition: str = "gpu", **kw: int) -> PendingTransition:
    base = {
        "pred_start": NOW - 6 * H,
        "pred_time_limit": 8 * H,
        "succ_nodes": 1,
        "succ_gpus": 4,
        "succ_time_limit": 8 * H,
    }
    base.update(kw)
    return PendingTransition(
        chain_id="c",
        pred_job_id="2",
        partition=partition,
        **base,  # type: ignore[arg-type]
    )


def col(name: str) -> int:
    return F.FEATURE_NAMES.index(name)


# ------------------------------------------------------------------------ names, shapes


def test_names_and_shapes() -> None:
    assert isinstance(F.FEATURE_SET, str) and F.FEATURE_SET
    assert isinstance(F.FEATURE_VERSION, int)
    assert F.FEATURE_NAMES == F.QUEUE_FEATURE_NAMES + F.TRANSITION_FEATURE_NAMES
    assert len(set(F.FEATURE_NAMES)) == len(F.FEATURE_NAMES) == 27
    prof = toy_profile(4, 4)
    x = F.features(hand_snapshot(), prof, [chain(), chain(succ_nodes=2)], NOW)
    assert x.shape == (2, len(F.FEATURE_NAMES)) and x.dtype == np.float64
    empty = F.features(hand_snapshot(), prof, [], NOW)
    assert empty.shape == (0, len(F.FEATURE_NAMES)) and empty.dtype == np.float64


# ------------------------------------------------------------------------ exact values


def test_hand_made_snapshot_exact_values() -> None:
    # toy partition "gpu": 4 nodes x 4 GPUs -> N = 4, G = 16; profile zone UTC
    x = F.features(hand_snapshot(), toy_profile(4, 4), [chain()], NOW)[0]
    got = dict(zip(F.FEATURE_NAMES, x.tolist(), strict=True))
    expected = {
        # pending: job 3 (1 node, 4 GPUs), 3 array tasks (1 node, 2 GPUs each), held job 5
        # (2 nodes, 8 GPUs): 5 jobs, 6 nodes, 18 GPUs
        "pend_jobs": 5 / 4,
        "pend_nodes": 6 / 4,
        "pend_gpus": 18 / 16,
        # competing: all but the held job: 4 jobs, 4 nodes, 10 GPUs
        "ahead_jobs": 4 / 4,
        "ahead_nodes": 4 / 4,
        "ahead_gpus": 10 / 16,
        "run_jobs": 2 / 4,
        "run_nodes": 3 / 4,
        "run_gpus": 12 / 16,
        # limits (h), tasks counted one by one: [1, 1, 1, 2, 4]
        "pend_limit_p50_h": 1.0,
        "pend_limit_p90_h": 2 + 0.6 * (4 - 2),
        # ages (h): job 3 from its eligible time (2), tasks 1, 1, 1, held job 5 from its
        # submit (5): [1, 1, 1, 2, 5]
        "pend_age_p50_h": 1.0,
        "pend_age_p90_h": 2 + 0.6 * (5 - 2),
        # running: elapsed [2, 6], left by limit [8, 2]
        "run_elapsed_p50_h": 4.0,
        "run_elapsed_p90_h": 2 + 0.9 * 4,
        "run_left_p50_h": 5.0,
        "run_left_p90_h": 2 + 0.9 * 6,
        "succ_nodes": 1 / 4,
        "succ_gpus": 4 / 16,
        "succ_limit_h": 8.0,
        "pred_elapsed_h": 6.0,
        "pred_progress": 0.75,
        "pred_left_h": 2.0,
        # 18:00 UTC on a Wednesday (weekday 2)
        "tod_sin": math.sin(2 * math.pi * 0.75),
        "tod_cos": math.cos(2 * math.pi * 0.75),
        "dow_sin": math.sin(2 * math.pi * 2.75 / 7),
        "dow_cos": math.cos(2 * math.pi * 2.75 / 7),
    }
    assert set(expected) == set(got)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name


def test_time_of_day_in_the_profile_zone_and_tz_override() -> None:
    prof = dataclasses.replace(toy_profile(4, 4), timezone="America/Chicago")
    local = F.features(hand_snapshot(), prof, [chain()], NOW)[0]
    # 12:00 local on Wednesday
    assert local[col("tod_sin")] == pytest.approx(0.0, abs=1e-12)
    assert local[col("tod_cos")] == pytest.approx(-1.0)
    assert local[col("dow_sin")] == pytest.approx(math.sin(2 * math.pi * 2.5 / 7))
    utc = F.features(hand_snapshot(), prof, [chain()], NOW, tz="UTC")[0]
    assert utc[col("tod_cos")] == pytest.approx(0.0, abs=1e-12)
    assert np.array_equal(utc[: col("tod_sin")], local[: col("tod_sin")])
    with pytest.raises(F.FeatureError, match="time zone"):
        F.features(hand_snapshot(), prof, [chain()], NOW, tz="Mars/Olympus")


def test_progress_is_clipped_and_remaining_not_negative() -> None:
    late = chain(pred_start=NOW - 9 * H, pred_time_limit=8 * H)
    future = chain(pred_start=NOW + H)
    x = F.features(hand_snapshot(), toy_profile(4, 4), [late, future], NOW)
    assert x[0, col("pred_progress")] == 1.0 and x[0, col("pred_left_h")] == 0.0
    assert x[1, col("pred_progress")] == 0.0 and x[1, col("pred_elapsed_h")] == 0.0


# ----------------------------------------------------------------------- normalisation


DEMAND = (
    "pend_jobs",
    "pend_nodes",
    "pend_gpus",
    "ahead_jobs",
    "ahead_nodes",
    "ahead_gpus",
    "run_jobs",
    "run_nodes",
    "run_gpus",
    "succ_nodes",
    "succ_gpus",
)


def test_doubling_capacity_halves_normalised_demand() -> None:
    snap, pend = hand_snapshot(), [chain(), chain(succ_nodes=2, succ_gpus=8)]
    small = F.features(snap, toy_profile(4, 4), pend, NOW)
    big = F.features(snap, toy_profile(8, 4), pend, NOW)
    demand = [col(n) for n in DEMAND]
    rest = [c for c in range(len(F.FEATURE_NAMES)) if c not in demand]
    np.testing.assert_allclose(big[:, demand], small[:, demand] / 2, rtol=1e-15)
    assert np.array_equal(big[:, rest], small[:, rest])
    # twice the GPUs per node (same nodes): only the GPU columns halve
    gpus = [col(n) for n in DEMAND if n.endswith("gpus")]
    wide = F.features(snap, toy_profile(4, 8), pend, NOW)
    np.testing.assert_allclose(wide[:, gpus], small[:, gpus] / 2, rtol=1e-15)
    others = [c for c in range(len(F.FEATURE_NAMES)) if c not in gpus]
    assert np.array_equal(wide[:, others], small[:, others])


def test_unknown_node_count_and_unknown_partition_raise() -> None:
    part = Partition("gpu", cpus_per_node=16, memory_mb_per_node=1000, gpus_per_node=4)
    prof = ClusterProfile("nocap", (part,))
    with pytest.raises(F.UnknownCapacityError, match="'gpu' has no node count"):
        F.features(hand_snapshot(), prof, [chain()], NOW)
    with pytest.raises(F.FeatureError, match="no partition 'other'"):
        F.features(hand_snapshot(), toy_profile(4, 4), [chain("other")], NOW)


def test_cpu_partition_normalises_gpus_by_one() -> None:
    part = Partition("cpu", cpus_per_node=16, memory_mb_per_node=1000, nodes=10)
    prof = ClusterProfile("cpu", (part,))
    snap = QueueSnapshot(NOW, (sj("1", partition="cpu", submit=NOW, eligible=NOW, gpus=0),))
    x = F.features(snap, prof, [chain("cpu", succ_gpus=0)], NOW)[0]
    assert x[col("pend_jobs")] == 0.1 and x[col("pend_gpus")] == 0.0
    assert x[col("succ_gpus")] == 0.0


# ------------------------------------------------------------------------- invariances


FINISHED = [s for s in JobState if s.is_finished]


def test_other_partitions_and_finished_jobs_are_ignored() -> None:
    prof = scenario.testbed_profile()
    base = hand_snapshot()
    noise = [
        sj("90", partition="debug", submit=NOW - H, eligible=NOW - H, gpus=1),
        sj("91", JobState.RUNNING, partition="debug", start=NOW - H, gpus=4),
        sj("92", partition="elsewhere", submit=NOW - 9 * H, eligible=NOW - 9 * H),
    ] + [
        sj(f"{100 + k}", s, submit=NOW - 3 * H, eligible=NOW - 3 * H, start=NOW - 2 * H)
        for k, s in enumerate(FINISHED)
    ]
    noisy = QueueSnapshot(NOW, base.jobs + tuple(noise))
    pend = [chain()]
    assert np.array_equal(F.features(noisy, prof, pend, NOW), F.features(base, prof, pend, NOW))
    # but the debug partition's own features do see its jobs
    d = F.features(noisy, prof, [chain("debug", succ_gpus=1)], NOW)[0]
    assert d[col("pend_jobs")] == 1.0 and d[col("run_gpus")] == 1.0


def test_multi_partition_pending_job_counts_in_each() -> None:
    prof = scenario.testbed_profile()
    snap = QueueSnapshot(NOW, (sj("1", partition="gpu,debug", submit=NOW, eligible=NOW),))
    x = F.features(snap, prof, [chain("gpu"), chain("debug")], NOW)
    assert x[0, col("pend_jobs")] == 1 / 4 and x[1, col("pend_jobs")] == 1.0


def test_batched_rows_equal_single_calls_and_job_order_is_irrelevant() -> None:
    prof = scenario.testbed_profile()
    snap = hand_snapshot()
    pend = [chain(), chain("debug", succ_gpus=1), chain(pred_start=NOW - H, succ_nodes=3)]
    batch = F.features(snap, prof, pend, NOW)
    single = np.vstack([F.features(snap, prof, [p], NOW) for p in pend])
    assert np.array_equal(batch, single)
    shuffled = QueueSnapshot(NOW, tuple(reversed(snap.jobs)))
    assert np.array_equal(F.features(shuffled, prof, pend, NOW), batch)


def test_non_finite_values_raise_a_typed_error() -> None:
    bad = chain(pred_start=math.nan)  # type: ignore[arg-type]
    with pytest.raises(F.NonFiniteFeatureError, match="pred_elapsed_h"):
        F.features(hand_snapshot(), toy_profile(4, 4), [bad], NOW)
    m = np.zeros((2, len(F.FEATURE_NAMES)))
    m[1, col("run_gpus")] = np.inf
    with pytest.raises(F.NonFiniteFeatureError, match=r"run_gpus \(rows \[1\]\)"):
        F.check_finite(m)


@pytest.mark.parametrize(
    ("tasks", "count"),
    [(None, 1), ("7", 1), ("3-5", 3), ("1,4,7-9", 5), ("0-9:2", 5), ("0-99%4", 100), ("x", 1)],
)
def test_task_count(tasks: str | None, count: int) -> None:
    assert F.task_count(sj("9", array_task_id=tasks)) == count


# ---------------------------------------------------------------------------- parity


#: When the recorded ``squeue --json`` ran. The file has no timestamp (22.05 writes no
#: ``last_update``); the record script submitted its last job at 1795648967 and slept 4 s,
#: and the latest time in the file (``last_sched_evaluation``) is 1795648971.
RECORDED_AT = 1795648971


def mirror_in_simulator(real: QueueSnapshot, profile: ClusterProfile) -> SimSlurmClient:
    """A simulation of the test cluster fed the jobs of the recorded snapshot.

    Each real job becomes one simulated job at its real submit time with its limit, nodes,
    GPUs (shared nodes, 1 CPU per node as the recording's jobs had), dependency and hold;
    an array remainder becomes one job per task. Real Slurm started jobs up to 1 s after
    their submit (its next scheduling pass) and made array tasks eligible 1 s after the
    array's submit; the simulator starts a job at once, so such a job gets a begin time
    (``sbatch --begin``) equal to the real start (running) or eligible time (pending).
    Finished jobs are replayed too (they ran and ended before the snapshot).
    """
    sim = Simulation(profile, partition_nodes=TESTBED_NODES, start_time=RECORDED_AT - 3600)
    sim_ids: dict[str, str] = {}
    for job in sorted(real.jobs, key=lambda j: (j.submit or 0, int(j.job_id.split("_")[0]))):
        assert job.submit is not None
        begin = job.start if job.state is not JobState.PENDING else job.eligible
        run = 10 * 86400  # far beyond the snapshot: only limits are visible anyway
        if job.state.is_finished:
            assert job.start is not None and job.end is not None
            run = job.end - job.start
        dependency = ""
        if job.dependency:  # "afterok:8(unfulfilled)"
            kind, _, parent = job.dependency.split("(")[0].partition(":")
            dependency = f"{kind}:{sim_ids[parent]}"
        for _ in range(F.task_count(job)):
            spec = JobSpec(
                submit=job.submit,
                run=run,
                time_limit=job.time_limit,
                nodes=job.nodes,
                partition=job.partition,
                gpus=job.gpus,
                cpus=job.nodes,
                exclusive=False,
                begin=begin if begin is not None and begin > job.submit else None,
                dependency=dependency,
                hold=job.reason.startswith("JobHeld"),
                fails=job.state is JobState.FAILED,
                name=job.name,
                user=job.user,
            )
            sim_ids[job.job_id] = sim.add_job(spec)
    client = SimSlurmClient(sim)
    client.advance_to(RECORDED_AT)
    return client


def transition_for(snapshot: QueueSnapshot, name: str) -> PendingTransition:
    """The transition a daemon derives from the running job ``name`` in a snapshot."""
    (job,) = [j for j in snapshot.jobs if j.name == name and j.state is JobState.RUNNING]
    assert job.start is not None and job.time_limit is not None
    return PendingTransition(
        chain_id=name,
        pred_job_id=job.job_id,
        pred_start=job.start,
        pred_time_limit=job.time_limit,
        succ_nodes=job.nodes,
        succ_gpus=job.gpus,
        succ_time_limit=job.time_limit,
        partition=job.partition,
    )


def test_parity_simulated_backend_and_recorded_real_squeue() -> None:
    text = (DATA / "squeue.json").read_text(encoding="utf-8")
    real = parse_squeue_json(text, taken_at=RECORDED_AT)
    profile = scenario.testbed_profile()
    sim = mirror_in_simulator(real, profile).queue()
    # the two snapshots really are different records of the same queue
    assert sim.slurm_version == "sim" and real.slurm_version == "22.05.8"
    assert len(real.jobs) == 17 and len(sim.jobs) == 13  # finished rows; 9_[3-5] is 3 jobs
    assert any(j.state.is_finished for j in real.jobs)
    assert {j.reason for j in sim.jobs if j.state is JobState.PENDING} >= {
        "Dependency",
        "JobHeldUser",
    }
    # Transitions as a daemon derives them from each snapshot (ids differ, nothing else)
    names = ("mirage-train", "mirage-timeout")  # chain c2 (1 node, 4 GPUs, 1 day); 0 GPUs
    pending = [transition_for(real, n) for n in names]
    from_sim = [transition_for(sim, n) for n in names]
    assert [dataclasses.replace(p, pred_job_id="") for p in pending] == [
        dataclasses.replace(p, pred_job_id="") for p in from_sim
    ]
    pending.append(dataclasses.replace(pending[0], partition="debug"))
    from_sim.append(dataclasses.replace(from_sim[0], partition="debug"))
    # at the snapshot's time, and (same snapshots) half an hour later, where ages differ
    for now in (RECORDED_AT, RECORDED_AT + 1800):
        x_real = F.features(real, profile, pending, now)
        x_sim = F.features(sim, profile, from_sim, now)
        # bit-for-bit: the mirror reproduces every time Slurm recorded, so no tolerance
        np.testing.assert_allclose(x_sim, x_real, rtol=0, atol=0)
    # and the queue really is busy: 3 pending nodes of array tasks + job 14's 4 + job 15's
    x = F.features(real, profile, pending[:1], RECORDED_AT)[0]
    assert x[col("run_gpus")] == 1.0
    assert x[col("ahead_nodes")] == (3 + 4 + 1) / 4
    assert x[col("pend_nodes")] == (3 + 1 + 4 + 1 + 1) / 4


# ---------------------------------------------------------------------------- property


STATES = list(JobState)
PARTS = ["gpu", "debug", "gpu,debug", "other"]
REASONS = ["Priority", "Resources", "Dependency", "JobHeldUser", "BeginTime", "None"]
TASKS = [None, "3", "0-5", "1,3,5-9", "0-99:3%2", "bad"]

opt_time = st.one_of(st.none(), st.integers(NOW - 30 * 86400, NOW + 86400))
jobs = st.builds(
    lambda i, state, part, reason, submit, elig, start, limit, nodes, gpus, prio, tasks: sj(
        str(i),
        state,
        partition=part,
        reason=reason,
        submit=submit,
        eligible=elig,
        start=start,
        time_limit=limit,
        nodes=nodes,
        gpus=gpus,
        priority=prio,
        array_task_id=tasks,
    ),
    st.integers(1, 10**6),
    st.sampled_from(STATES),
    st.sampled_from(PARTS),
    st.sampled_from(REASONS),
    opt_time,
    opt_time,
    opt_time,
    st.one_of(st.none(), st.integers(0, 10 * 86400)),
    st.integers(0, 64),
    st.integers(0, 256),
    st.one_of(st.none(), st.integers(0, 2**32)),
    st.sampled_from(TASKS),
)
transitions = st.builds(
    lambda part, start, limit, nodes, gpus, succ_limit: chain(
        part,
        pred_start=start,
        pred_time_limit=limit,
        succ_nodes=nodes,
        succ_gpus=gpus,
        succ_time_limit=succ_limit,
    ),
    st.sampled_from(["gpu", "debug"]),
    st.integers(NOW - 10 * 86400, NOW + 86400),
    st.integers(0, 10 * 86400),
    st.integers(0, 8),
    st.integers(0, 32),
    st.integers(0, 10 * 86400),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(jobs, max_size=30),
    st.lists(transitions, min_size=1, max_size=5),
    st.integers(NOW - 86400, NOW + 86400),
    st.sampled_from(["UTC", "America/Chicago", "Asia/Kolkata"]),
)
def test_random_snapshots_are_finite_and_deterministic(
    js: list[SlurmJob], pend: list[PendingTransition], now: int, tz: str
) -> None:
    prof = scenario.testbed_profile()
    snap = QueueSnapshot(now, tuple(js))
    x = F.features(snap, prof, pend, now, tz=tz)
    assert x.shape == (len(pend), len(F.FEATURE_NAMES))
    assert np.isfinite(x).all()
    assert np.array_equal(x, F.features(snap, prof, pend, now, tz=tz))
    shuffled = QueueSnapshot(now, tuple(reversed(js)))
    assert np.array_equal(x, F.features(shuffled, prof, pend, now, tz=tz))
    counts = [col(n) for n in DEMAND]
    assert (x[:, counts] >= 0).all()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-1e6, 1e6, allow_nan=False), st.integers(1, 5)),
        min_size=1,
        max_size=12,
    )
)
def test_weighted_percentiles_match_numpy_on_the_repetition(
    pairs: list[tuple[float, int]],
) -> None:
    v = np.array([p[0] for p in pairs])
    w = np.array([p[1] for p in pairs])
    expected = np.percentile(np.repeat(v, w), [50.0, 90.0])
    assert F._percentiles(v, w) == (float(expected[0]), float(expected[1]))
