"""The vectorised priority order equals the straightforward per-job sort."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.sim import Simulation
from mirage.sim.scenario import job, toy_profile
from mirage.sim.views import DEP_OK


def reference(sim: Simulation) -> list[str]:
    cands = [i for i in sim.pending if not sim.held[i] and sim.dep_state[i] == DEP_OK]
    return [str(i + sim.first_id) for i in sim._by_priority(cands)]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    max_age=st.sampled_from([0, 1, 500, 3600, 7 * 86400]),
    w_age=st.sampled_from([0, 1, 1000, 123457]),
    w_size=st.sampled_from([0, 100, 10000]),
    favor_small=st.booleans(),
    calc=st.sampled_from([0, 60, 300]),
    size_cpus=st.booleans(),
    phase=st.integers(0, 299),
)
def test_vectorised_order_equals_reference(
    seed: int,
    max_age: int,
    w_age: int,
    w_size: int,
    favor_small: bool,
    calc: int,
    size_cpus: bool,
    phase: int,
) -> None:
    rng = random.Random(seed)
    prof = toy_profile(
        8,
        priority_max_age_s=max_age,
        priority_weight_age=w_age,
        priority_weight_job_size=w_size,
        priority_favor_small=favor_small,
        priority_weight_partition=rng.choice([0, 7]),
        priority_size_cpus=size_cpus,
    )
    sim = Simulation(prof, priority_calc_period_s=calc, priority_calc_phase_s=phase)
    specs, t = [], 0
    for _ in range(rng.randint(5, 80)):
        t += rng.randint(0, 200)
        run = rng.randint(100, 5000)
        specs.append(
            job(
                t,
                run,
                nodes=rng.randint(1, 8),
                cpus=rng.choice([0, 1, 8, 32]),
                exclusive=rng.choice([None, True]),
                hold=rng.random() < 0.1,
                begin=t + rng.randint(0, 3000) if rng.random() < 0.2 else None,
            )
        )
    ids = sim.add_jobs(specs)
    for _ in range(6):
        sim.run_until(sim.now + rng.randint(1, 3000))
        if rng.random() < 0.3 and ids:
            sim.set_hold(rng.choice(ids), rng.random() < 0.5)
        assert sim.priority_order() == reference(sim)


def test_order_survives_pool_compaction_and_fork() -> None:
    sim = Simulation(toy_profile(2, priority_max_age_s=1000))
    sim.add_jobs([job(k, 50, nodes=1 + k % 2) for k in range(2000)])
    sim.run_until(20_000)  # many jobs have started: the pool has been compacted
    child = sim.fork()
    assert sim.priority_order() == reference(sim)
    child.run_until(40_000)
    assert child.priority_order() == reference(child)
    assert sim.priority_order() == reference(sim)


def test_calc_period_freezes_age_between_recalculations() -> None:
    sim = Simulation(toy_profile(4, priority_max_age_s=1000), priority_calc_period_s=300)
    sim.add_jobs([job(0, 1000, nodes=4)])
    [c, b] = sim.add_jobs([job(20, 100, nodes=4), job(10, 100, nodes=4)])
    sim.run_until(299)
    assert sim.view(b).priority == sim.view(c).priority == 0  # both newer than the last calc
    assert sim.priority_order() == [c, b]  # ties: lower id first
    sim.run_until(300)
    assert (sim.view(b).priority, sim.view(c).priority) == (290, 280)
    assert sim.priority_order() == [b, c]
