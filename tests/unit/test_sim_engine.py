"""Simulator engine: hand-made scenarios with exact answers."""

from __future__ import annotations

from typing import Any

from mirage.sim import JobSpec, Simulation
from mirage.sim.scenario import job, toy_profile
from mirage.slurm.types import JobState


def sim_with(*jobs: JobSpec, nodes: int = 4, **sched: Any) -> tuple[Simulation, list[str]]:
    sim = Simulation(toy_profile(nodes, **sched))
    ids = sim.add_jobs(jobs)
    return sim, ids


def test_empty_cluster_starts_at_submit() -> None:
    sim, [a] = sim_with(job(100, 500, nodes=2))
    sim.run()
    v = sim.view(a)
    assert (v.start, v.end, v.state) == (100, 600, JobState.COMPLETED)


def test_job_killed_at_its_limit() -> None:
    sim, [a] = sim_with(job(0, 900, limit=300))
    sim.run()
    v = sim.view(a)
    assert (v.start, v.end, v.state) == (0, 300, JobState.TIMEOUT)


def test_fifo_when_full() -> None:
    sim, [_, b] = sim_with(job(0, 1000, nodes=4), job(10, 100, nodes=4))
    sim.run()
    assert sim.view(b).start == 1000


def test_priority_by_age() -> None:
    # C is added first (lower id) but submitted later: B is older, so B goes first.
    sim = Simulation(toy_profile(4, priority_max_age_s=100))
    sim.add_jobs([job(0, 50, nodes=4)])
    [c, b] = sim.add_jobs([job(20, 100, nodes=4), job(10, 100, nodes=4)])
    sim.run()
    assert sim.view(b).start == 50
    assert sim.view(c).start == 150


def test_age_cap_makes_ties_broken_by_id() -> None:
    # Both are older than the maximum age when A ends: equal priority, lower id first.
    sim = Simulation(toy_profile(4, priority_max_age_s=5))
    sim.add_jobs([job(0, 50, nodes=4)])
    [c, b] = sim.add_jobs([job(20, 100, nodes=4), job(10, 100, nodes=4)])
    sim.run()
    assert sim.view(c).start == 50
    assert sim.view(b).start == 150


def test_job_size_weight_favours_large_jobs() -> None:
    sim = Simulation(toy_profile(4, priority_weight_age=0, priority_weight_job_size=1000))
    sim.add_jobs([job(0, 50, nodes=4)])
    [small, big] = sim.add_jobs([job(10, 100, nodes=1), job(20, 100, nodes=4)])
    sim.run()
    assert sim.view(big).start == 50
    assert sim.view(small).start == 150


def test_afterok_waits_for_success() -> None:
    sim = Simulation(toy_profile(4))
    [p] = sim.add_jobs([job(0, 300)])
    [c] = sim.add_jobs([job(10, 100, dependency=f"afterok:{p}")])
    sim.run_until(100)
    assert sim.view(c).reason == "Dependency"
    sim.run()
    assert sim.view(c).start == 300


def test_afterok_on_failed_parent_never_starts() -> None:
    sim = Simulation(toy_profile(4))
    [p] = sim.add_jobs([job(0, 300, fails=True)])
    [c] = sim.add_jobs([job(10, 100, dependency=f"afterok:{p}")])
    sim.run()
    v = sim.view(c)
    assert sim.view(p).state is JobState.FAILED
    assert (v.state, v.start, v.reason) == (JobState.PENDING, None, "DependencyNeverSatisfied")


def test_afterok_on_timed_out_parent_never_starts() -> None:
    sim = Simulation(toy_profile(4))
    [p] = sim.add_jobs([job(0, 900, limit=300)])
    [c] = sim.add_jobs([job(10, 100, dependency=f"afterok:{p}")])
    sim.run()
    assert sim.view(c).start is None


def test_afterany_starts_after_failed_parent() -> None:
    sim = Simulation(toy_profile(4))
    [p] = sim.add_jobs([job(0, 300, fails=True)])
    [c] = sim.add_jobs([job(10, 100, dependency=f"afterany:{p}")])
    sim.run()
    assert sim.view(c).start == 300


def test_dependency_on_finished_parent_is_satisfied_at_submit() -> None:
    sim = Simulation(toy_profile(4))
    [p] = sim.add_jobs([job(0, 100)])
    sim.run_until(500)
    [c] = sim.add_jobs([job(500, 100, dependency=f"afterok:{p}")])
    sim.run()
    assert sim.view(c).start == 500


def test_held_job_never_starts_until_released() -> None:
    sim, [a] = sim_with(job(0, 100, hold=True))
    sim.run_until(1000)
    v = sim.view(a)
    assert (v.start, v.reason) == (None, "JobHeldUser")
    sim.set_hold(a, False)
    sim.run()
    assert sim.view(a).start == 1000


def test_a_held_job_is_eligible_from_its_release() -> None:
    """As Slurm: hold and release clear begin_time, so sacct's Eligible (and the age
    factor's start) is the release, not the submit (seen on the test cluster: ls6-held)."""
    sim = Simulation(toy_profile(4, priority_max_age_s=10_000))
    # the cluster is busy until 1000; a (held at submit, 10) is released at 600, after b
    # became eligible (300): b is older and starts first
    [_, a, b] = sim.add_jobs(
        [job(0, 1000, nodes=4), job(10, 100, nodes=4, hold=True), job(300, 100, nodes=4)]
    )
    sim.run_until(600)
    assert sim.view(a).eligible is None
    sim.set_hold(a, False)
    assert sim.view(a).eligible == 600
    assert sim.priority_order()[0] == b
    sim.set_hold(b, True)  # held again: not eligible until its next release
    assert sim.view(b).eligible is None
    sim.run_until(700)
    sim.set_hold(b, False)
    assert sim.view(b).eligible == 700
    sim.run()
    assert (sim.view(a).start, sim.view(b).start) == (1000, 1100)


def test_held_job_is_skipped_by_lower_priority_jobs() -> None:
    sim, [a, b] = sim_with(job(0, 100, nodes=4, hold=True), job(10, 100, nodes=4))
    sim.run()
    assert sim.view(b).start == 10
    assert sim.view(a).start is None


def test_begin_time() -> None:
    sim, [a] = sim_with(job(0, 100, begin=500))
    sim.run_until(499)
    assert sim.view(a).reason == "BeginTime"
    sim.run()
    assert sim.view(a).start == 500


def test_cancel_pending_and_running() -> None:
    sim, [a, b] = sim_with(job(0, 1000, nodes=4), job(10, 100, nodes=4))
    sim.run_until(200)
    sim.cancel(a)
    sim.run()
    assert sim.view(a).state is JobState.CANCELLED
    assert sim.view(a).end == 200
    assert sim.view(b).start == 200


def test_run_until_started_and_snapshots() -> None:
    sim, [a, b] = sim_with(job(0, 1000, nodes=4), job(10, 100, nodes=2))
    sim.run_until(400)
    [p] = sim.pending_jobs()
    [r] = sim.running_jobs()
    assert (p.job_id, p.age, p.reason) == (b, 390, "Resources")
    assert (r.job_id, r.end) == (a, 1000)
    assert sim.run_until_started(b) == 1000
    assert sim.now == 1000


def test_jobs_run_only_on_their_partition() -> None:
    import dataclasses

    base = toy_profile(2)
    other = dataclasses.replace(base.partitions[0], name="cpu", nodes=4, default=False)
    sim = Simulation(dataclasses.replace(base, partitions=(base.partitions[0], other)))
    ids = sim.add_jobs(
        [job(0, 100, nodes=2), job(0, 100, nodes=2), job(0, 100, 2, partition="cpu")]
    )
    sim.run()
    assert [sim.view(i).start for i in ids] == [0, 100, 0]


def test_node_override() -> None:
    sim = Simulation(toy_profile(2), nodes=8)
    [a] = sim.add_jobs([job(0, 100, nodes=8)])
    sim.run()
    assert sim.view(a).start == 0
