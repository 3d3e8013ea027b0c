"""fork(): independent copies that replay exactly like the unforked simulation."""

from __future__ import annotations

import random

from mirage.sim import JobSpec, Simulation
from mirage.sim.scenario import job, toy_profile


def workload(n: int = 300, seed: int = 7) -> list[JobSpec]:
    rng = random.Random(seed)
    t, out = 0, []
    for _ in range(n):
        t += rng.randint(0, 400)
        run = rng.randint(60, 4000)
        out.append(job(t, run, nodes=rng.choice([1, 1, 2, 4, 8]), limit=run + rng.randint(0, 900)))
    return out


def outcome(sim: Simulation) -> list[tuple[str, int | None, int | None]]:
    return [(v.job_id, v.start, v.end) for v in sim.all_jobs()]


def fresh() -> Simulation:
    sim = Simulation(toy_profile(8))
    sim.add_jobs(workload())
    return sim


def test_fork_without_injection_matches_unforked_run() -> None:
    reference = fresh()
    reference.run()
    parent = fresh()
    parent.run_until(40_000)
    child = parent.fork()
    child.run()
    parent.run()
    assert outcome(parent) == outcome(reference)
    assert outcome(child) == outcome(reference)


def test_mutating_the_fork_leaves_the_parent_alone() -> None:
    reference = fresh()
    reference.run()
    parent = fresh()
    parent.run_until(40_000)
    before = outcome(parent)
    child = parent.fork()
    pending = [v.job_id for v in child.pending_jobs()]
    running = [v.job_id for v in child.running_jobs()]
    child.add_job(job(40_000, 5000, nodes=8))
    child.cancel(running[0])
    if pending:
        child.set_hold(pending[0], True)
    child.run()
    assert outcome(parent) == before
    assert parent.now == 40_000
    parent.run()
    assert outcome(parent) == outcome(reference)
    assert outcome(child) != outcome(reference)


def test_parent_changes_do_not_leak_into_fork() -> None:
    parent = fresh()
    parent.run_until(40_000)
    child = parent.fork()
    parent.add_job(job(40_000, 5000, nodes=8))
    parent.run()
    child.run()
    reference = fresh()
    reference.run()
    assert outcome(child) == outcome(reference)


def test_dropping_future_submits_replays_only_the_jobs_already_there() -> None:
    """A what-if fork without arrivals schedules exactly the jobs submitted by then, as a
    fresh simulation given only those jobs would (same ids, same starts and ends)."""
    cut = 40_000
    parent = fresh()
    parent.run_until(cut)
    child = parent.fork()
    later = sum(1 for s in workload() if s.submit > cut)
    assert later > 0
    assert child.drop_future_submits() == later
    child.run()
    early = Simulation(toy_profile(8))
    early.add_jobs([s for s in workload() if s.submit <= cut])
    early.run()
    got = {j: (s, e) for j, s, e in outcome(child) if s is not None}
    assert got == {j: (s, e) for j, s, e in outcome(early)}
    assert all(v.state is None for v in child.all_jobs()[len(got) :])
    parent.run()  # the parent still gets every job
    assert all(v.start is not None for v in parent.all_jobs())
