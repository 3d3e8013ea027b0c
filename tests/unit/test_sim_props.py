"""Properties over random small workloads: capacity, causality, end = min(run, limit)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.sim import JobSpec, Simulation
from mirage.sim.scenario import job, toy_profile

NODES = 4


def job_lists(size: tuple[int, int], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists of ``size`` (min, max) jobs (``scenario.job``) drawn from ``fields``."""
    return st.lists(st.builds(job, **fields), min_size=size[0], max_size=size[1])


jobs_st = job_lists(
    (1, 25),
    submit=st.integers(0, 3000),
    run=st.integers(1, 2000),
    nodes=st.integers(1, NODES),
    limit=st.integers(1, 2000),
    begin=st.one_of(st.none(), st.integers(0, 4000)),
)


def check(specs: list[JobSpec], backfill: str, resolution: int) -> None:
    sim = Simulation(toy_profile(NODES, backfill=backfill, bf_resolution_s=resolution))
    sim.add_jobs(sorted(specs, key=lambda s: s.submit))
    sim.run()
    deltas: list[tuple[int, int]] = []
    for v in sim.all_jobs():
        s = v.spec
        assert v.start is not None and v.end is not None  # no deps or holds: all run
        assert v.start >= s.submit
        assert v.start >= (s.begin or 0)
        assert s.time_limit is not None
        assert v.end == v.start + min(s.run, s.time_limit)
        deltas += [(v.start, s.nodes), (v.end, -s.nodes)]
    used = 0
    for _, d in sorted(deltas, key=lambda x: (x[0], x[1])):  # ends before starts at a tie
        used += d
        assert used <= NODES


@settings(max_examples=80, deadline=None)
@given(jobs_st, st.sampled_from(["slurm", "easy"]), st.sampled_from([1, 60]))
def test_random_workloads_respect_capacity_and_times(
    specs: list[JobSpec], backfill: str, resolution: int
) -> None:
    check(specs, backfill, resolution)


@settings(max_examples=40, deadline=None)
@given(jobs_st, st.booleans())
def test_estimates_never_lie_when_nothing_else_arrives(specs: list[JobSpec], batches: bool) -> None:
    # All jobs run exactly to their limits (at resolution 1), all known up front: after the
    # last submit, no job starts after its planned start (a reservation is never delayed).
    # Planned at the exact earliest fit, every job starts then. With Slurm's
    # _will_run_test batches (bf_will_run_batches) a plan can be later than the fit, and
    # the main pass starts the job when it fits, earlier than the estimate (as
    # squeue --start shows on a real cluster).
    exact = [job(s.submit, s.run, nodes=s.nodes) for s in specs]
    profile = toy_profile(
        NODES,
        bf_resolution_s=1,
        bf_interval_s=1,
        bf_max_job_test=1000,
        bf_will_run_batches=batches,
    )
    sim = Simulation(profile)
    ids = sim.add_jobs(sorted(exact, key=lambda s: s.submit))
    sim.run_until(max(s.submit for s in exact) + 1)
    planned = {i: sim.start_estimate(i) for i in ids}
    sim.run()
    for i, t in planned.items():
        if t is not None:
            start = sim.view(i).start
            assert start is not None and start <= t
            assert batches or start == t


def schedule(specs: list[JobSpec], backfill: str, lazy: bool) -> list[tuple[int | None, ...]]:
    profile = toy_profile(NODES, backfill=backfill, bf_resolution_s=60, bf_max_job_test=1000)
    sim = Simulation(profile, track_estimates=not lazy)
    sim.add_jobs(sorted(specs, key=lambda s: s.submit))
    sim.run()
    return [(v.start, v.end) for v in sim.all_jobs()]


# Long, mixed limits over a small cluster: deep queues where many jobs cannot start now
# (the work lazy backfill skips) and reservations pile up.
deep_st = job_lists(
    (5, 40),
    submit=st.integers(0, 600),
    run=st.integers(60, 6000),
    nodes=st.integers(1, NODES),
    limit=st.integers(60, 9000),
)


@settings(max_examples=120, deadline=None)
@given(deep_st, st.sampled_from(["slurm", "easy"]))
def test_lazy_backfill_starts_the_same_jobs_at_the_same_times(
    specs: list[JobSpec], backfill: str
) -> None:
    # track_estimates=False may skip backfill work, never change the schedule.
    assert schedule(specs, backfill, lazy=True) == schedule(specs, backfill, lazy=False)
