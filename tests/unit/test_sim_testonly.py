"""``Simulation.test_only``: Slurm 22.05's will-run answer (mirage.sim.testonly), on the
test cluster's model; the same queues, live: tests/slurm/test_test_only.py."""

from __future__ import annotations

import dataclasses

from mirage.sim.engine import Simulation
from mirage.sim.fidelity import default_model
from mirage.sim.workload import JobSpec

MIN, H, DAY = 60, 3600, 86400


def gpu(t: int, nodes: int, limit: int, user: str = "u1") -> JobSpec:
    return JobSpec(submit=t, run=limit, time_limit=limit, nodes=nodes, partition="gpu",
                   gpus=4 * nodes, cpus=16 * nodes, exclusive=True, user=user)  # fmt: skip


def cpu(t: int, cpus: int, limit: int, user: str = "u1") -> JobSpec:
    return JobSpec(submit=t, run=limit, time_limit=limit, nodes=1, partition="cpu", cpus=cpus,
                   user=user)  # fmt: skip


def full(limit: int) -> Simulation:
    """The 4 gpu nodes busy from 0 with 1-node jobs of ``limit``."""
    sim = Simulation(default_model().profile, start_time=0)
    for _ in range(4):
        sim.add_job(gpu(0, 1, limit))
    sim.run_until(0)
    return sim


def test_running_ends_plus_the_area_of_the_pending_jobs_ahead() -> None:
    sim = full(10 * MIN)
    assert sim.test_only(gpu(0, 1, H)) == 10 * MIN  # nothing pending: the first end
    sim.add_job(gpu(6, 4, 30 * MIN))
    sim.run_until(12)
    assert sim.test_only(gpu(12, 1, H)) == 40 * MIN  # + 4 nodes x 30 min over 4 nodes
    for _ in range(4):
        sim.add_job(gpu(12, 1, 10 * MIN))
    sim.run_until(20)
    assert sim.test_only(gpu(20, 1, H)) == 50 * MIN  # + 4 x 1 node x 10 min over 4
    assert len(sim.pending_jobs()) == 5  # the queue is untouched


def test_a_date_beyond_the_backfill_window() -> None:
    sim = full(2 * DAY)
    a, b = sim.add_job(gpu(2, 4, 2 * DAY)), sim.add_job(gpu(2, 4, 2 * DAY))
    sim.run_until(8)
    assert sim.start_estimate(a) == 2 * DAY and sim.start_estimate(b) is None  # bf_window
    assert sim.test_only(gpu(8, 1, 2 * DAY)) == 6 * DAY


def test_only_jobs_of_at_least_its_priority_count() -> None:
    sim = full(H)
    held = sim.add_job(dataclasses.replace(gpu(0, 4, 10 * H), hold=True))
    sim.run_until(1)
    assert sim.test_only(gpu(1, 1, H)) == H  # a held job has priority 0
    sim.set_hold(held, False)
    sim.run_until(2)
    assert sim.test_only(gpu(2, 1, H)) == 11 * H


def test_a_pending_job_below_the_new_one_does_not_count() -> None:
    sim = full(H)
    sim.add_job(gpu(0, 1, 10 * H))
    sim.run_until(60)
    # a 1-node job ranks with it (same size, younger): + 1 node x 10 h over 4 nodes
    assert sim.test_only(gpu(60, 1, H)) == H + 150 * MIN
    # a 4-node job's size factor puts it above the minute-old 1-node job: not counted
    assert sim.test_only(gpu(60, 4, H)) == H


def test_a_one_cpu_job_counts_as_a_whole_node_of_cpus() -> None:
    sim = Simulation(default_model().profile, start_time=0)
    sim.add_job(cpu(0, 16, 2 * H))
    sim.add_job(cpu(0, 16, 2 * H))
    sim.run_until(0)
    sim.add_job(cpu(1, 1, 4 * H))  # waits for a CPU: both 16-CPU nodes are full
    sim.run_until(1)
    # free at 2 h, + 1 node's 16 CPUs x 4 h over the partition's 32 CPUs = 2 h
    assert sim.test_only(cpu(1, 1, H)) == 4 * H


def test_a_job_that_can_never_fit_has_no_date() -> None:
    sim = full(H)
    assert sim.test_only(gpu(0, 5, H)) is None
