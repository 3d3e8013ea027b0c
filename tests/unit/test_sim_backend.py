"""SimSlurmClient: the SlurmClient interface on the simulator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mirage.profile.capture import capture_profile
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import job, toy_profile
from mirage.slurm.types import JobState, SubmitError, SubmitRequest


def toy_client() -> SimSlurmClient:
    sim = Simulation(toy_profile(4))
    return SimSlurmClient(sim, user="alice")


def test_round_trip_submit_queue_advance_accounting() -> None:
    c = toy_client()
    c.advance_to(100)
    a = c.submit(SubmitRequest(job_name="seg0", time_limit=600, nodes=4, comment="chain"))
    b = c.submit(
        SubmitRequest(job_name="seg1", time_limit=600, gres="gpu:4", dependency=f"afterok:{a}")
    )
    snap = c.queue()
    assert snap.taken_at == 100
    jobs = snap.by_id()
    assert jobs[a].state is JobState.RUNNING
    assert (jobs[a].start, jobs[a].end, jobs[a].comment) == (100, 700, "chain")
    assert len(jobs[a].node_list) == 4 and jobs[b].node_list == ()  # squeue's NodeList
    assert (jobs[b].state, jobs[b].reason, jobs[b].nodes, jobs[b].gpus) == (
        JobState.PENDING,
        "Dependency",
        1,
        4,
    )
    c.advance_to(1000)
    assert [j.state for j in c.queue().jobs] == [JobState.RUNNING]
    c.advance_to(1400)
    assert c.queue().jobs == ()
    done = {j.job_id: j for j in c.accounting(0)}
    assert (done[a].state, done[a].start, done[a].end, done[a].exit_code) == (
        JobState.COMPLETED,
        100,
        700,
        0,
    )
    assert (done[b].start, done[b].end, done[b].user) == (700, 1300, "alice")
    assert c.accounting(800, 900) == [j for j in c.accounting(0) if j.job_id == b]


def test_reasons_estimates_and_test_only() -> None:
    c = toy_client()
    a = c.submit(SubmitRequest(time_limit=1200, nodes=4))
    c.advance_to(60)
    b = c.submit(SubmitRequest(time_limit=600, nodes=2))
    d = c.submit(SubmitRequest(time_limit=600, nodes=2))
    c.advance_to(90)
    jobs = c.queue().by_id()
    assert (jobs[b].reason, jobs[d].reason) == ("Resources", "Priority")
    assert (jobs[b].start, jobs[d].start) == (1200, 1200)
    est = c.start_estimates()
    assert (est[b].start, est[d].start) == (1200, 1200)
    probe = c.test_only(SubmitRequest(time_limit=600, nodes=4))
    assert probe.start == 1800
    assert set(c.queue().by_id()) == {a, b, d}  # the probe left no trace
    c.advance_to(1200)
    assert c.queue().by_id()[b].state is JobState.RUNNING


def test_hold_release_cancel_and_limit() -> None:
    c = toy_client()
    a = c.submit(SubmitRequest(time_limit=600, nodes=4, hold=True))
    assert c.queue().by_id()[a].reason == "JobHeldUser"
    c.update_time_limit(a, 300)
    c.advance_to(50)
    c.release([a])
    j = c.queue().by_id()[a]
    assert (j.state, j.start, j.end, j.time_limit) == (JobState.RUNNING, 50, 350, 300)
    c.cancel([a, "999"])
    assert c.queue().jobs == ()
    assert c.accounting(0)[0].state is JobState.CANCELLED


def test_submit_errors() -> None:
    c = toy_client()
    with pytest.raises(SubmitError):
        c.submit(SubmitRequest(nodes=5))
    with pytest.raises(SubmitError):
        c.submit(SubmitRequest(dependency="afterok:42"))
    with pytest.raises(SubmitError):
        c.submit(SubmitRequest(partition="nope"))


def test_injected_clock_drives_time() -> None:
    now = [0]
    sim = Simulation(toy_profile(4))
    sim.add_jobs([job(10, 100, nodes=4)])
    c = SimSlurmClient(sim, clock=lambda: now[0])
    assert c.queue().jobs == ()
    now[0] = 50
    [j] = c.queue().jobs
    assert (j.start, j.state) == (10, JobState.RUNNING)


def test_show_round_trips_through_capture() -> None:
    c = toy_client()
    prof = capture_profile(c, "toy")
    original = c.sim.profile
    # the capture names the simulated nodes (gpu-0000 ...); the rest is the original shape
    assert [p.node_list for p in prof.partitions] == ["gpu-[0000-0003]"]
    assert tuple(replace(p, node_list="") for p in prof.partitions) == original.partitions
    assert Simulation(prof).node_names == c.sim.node_names
    s, o = prof.scheduler, original.scheduler
    assert (s.bf_window_s, s.bf_interval_s, s.priority_max_age_s) == (
        o.bf_window_s,
        o.bf_interval_s,
        o.priority_max_age_s,
    )


def test_named_nodes_stay_the_same_nodes_at_their_own_count() -> None:
    """Issue 28: a captured profile's partitions share named nodes. Replayed at the default
    partition's own count (what `mirage simulate` passes), they are the same nodes, not as
    many fresh ones beside the named ones; at another count the default partition gets
    nodes of its own (the others keep theirs)."""
    from mirage.profile.schema import ClusterProfile, Partition

    def part(name: str, node_list: str, nodes: int, default: bool = False) -> Partition:
        return Partition(name=name, cpus_per_node=16, memory_mb_per_node=64000, nodes=nodes,
                         gpus_per_node=4, default=default, node_list=node_list)  # fmt: skip

    prof = ClusterProfile(name="captured", partitions=(
        part("gpu", "gpu[1-4]", 4, default=True), part("debug", "gpu[1-4]", 4),
        part("cpu", "cpu[1-2]", 2),
    ))  # fmt: skip
    same = Simulation(prof, nodes=4)
    assert same.total_nodes == 6 and same.node_names == Simulation(prof).node_names
    assert same.node_names[:4] == ["gpu1", "gpu2", "gpu3", "gpu4"]
    other = Simulation(prof, nodes=8)
    assert other.total_nodes == 8 + 4 + 2
