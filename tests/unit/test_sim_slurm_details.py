"""The engine's optional Slurm details (SchedulerSettings), each against the default."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from typing import Any

import numpy as np

from mirage.profile.schema import profile_from_dict, profile_to_toml
from mirage.sim import JobSpec, Simulation
from mirage.sim.plan import NodePlan
from mirage.sim.scenario import job, toy_profile


def sim_of(nodes: int = 4, **sched: Any) -> Simulation:
    # 4 nodes x 4 GPUs x 32 CPUs: 128 CPUs in all
    return Simulation(toy_profile(nodes, priority_weight_age=0, **sched))


def test_job_size_counts_cpus_as_multifactor() -> None:
    """(nodes / 4 + cpus / 128) / 2 x 1000, truncated; the default counts nodes only."""
    specs = [job(0, 100, gpus=1, cpus=8), job(0, 100, nodes=2, gpus=2, cpus=64)]
    sim = sim_of(priority_weight_job_size=1000, priority_size_cpus=True)
    sim.add_jobs(specs)
    assert [sim.priority(i) for i in range(2)] == [156, 500]  # 156.25, (0.5 + 0.5) / 2
    plain = sim_of(priority_weight_job_size=1000)
    plain.add_jobs(specs)
    assert [plain.priority(i) for i in range(2)] == [250, 500]
    small = sim_of(
        priority_weight_job_size=1000, priority_size_cpus=True, priority_favor_small=True
    )
    small.add_jobs(specs)
    assert [small.priority(i) for i in range(2)] == [843, 500]


def test_exclusive_job_counts_whole_node_cpus_from_its_first_recalculation() -> None:
    sched = {"priority_weight_job_size": 1000, "priority_size_cpus": True}
    sim = Simulation(toy_profile(1, priority_weight_age=0, **sched), priority_calc_period_s=300)
    sim.add_jobs([job(0, 1000, nodes=1), job(10, 100, cpus=8, exclusive=True)])
    sim.run_until(299)
    assert sim.view("2").priority == 625  # (1 + 8 / 32) / 2: the CPUs it asked for
    sim.run_until(300)
    assert sim.view("2").priority == 1000  # (1 + 32 / 32) / 2: its whole node
    # without a period, every pass is a recalculation
    every = Simulation(toy_profile(1, priority_weight_age=0, **sched))
    every.add_jobs([job(0, 1000, nodes=1), job(10, 100, cpus=8, exclusive=True)])
    every.run_until(10)
    assert every.view("2").priority == 1000


def test_calc_period_from_the_profile_with_a_phase() -> None:
    prof = toy_profile(1, priority_max_age_s=1000, priority_calc_period_s=300)
    sim = Simulation(prof, priority_calc_phase_s=100)  # recalculations at 100, 400, ...
    sim.add_jobs([job(0, 2000), job(0, 100)])
    sim.run_until(399)
    assert sim.view("2").priority == 100  # age as of 100
    sim.run_until(400)
    assert sim.view("2").priority == 400
    # the kwarg overrides the profile: 0 = every pass
    now = Simulation(prof, priority_calc_period_s=0)
    now.add_jobs([job(0, 2000), job(0, 100)])
    now.run_until(399)
    assert now.view("2").priority == 399
    # profiles without the key keep the engine's every-pass default
    assert Simulation(toy_profile(1)).priority_calc_period_s == 0


def test_limit_checks_end_jobs_at_the_next_check() -> None:
    prof = toy_profile(4, limit_check_interval_s=30)
    specs = [
        job(0, 500, limit=100),  # due at 100 -> check at 110
        job(0, 105, limit=100),  # finishes on its own at 105, before the check
        job(0, 50, limit=100),  # early: unaffected
        job(7, 500, limit=103),  # due at 110 -> 110 (a check instant)
    ]
    sim = Simulation(prof, limit_check_phase_s=20)
    ids = sim.add_jobs(specs)
    sim.run()
    assert [sim.view(i).end for i in ids] == [110, 105, 50, 110]
    states = [sim.view(i).state for i in ids]
    assert [st.value if st else "" for st in states] == [
        "TIMEOUT",
        "COMPLETED",
        "COMPLETED",
        "TIMEOUT",
    ]
    blind = Simulation(prof)  # phase unknown: half an interval late
    ids = blind.add_jobs(specs)
    blind.run()
    assert [blind.view(i).end for i in ids] == [115, 105, 50, 125]
    exact = Simulation(toy_profile(4))  # default: killed at the limit
    ids = exact.add_jobs(specs)
    exact.run()
    assert [exact.view(i).end for i in ids] == [100, 100, 50, 110]


def test_backfill_does_not_plan_on_nodes_of_a_job_past_its_limit() -> None:
    """Whole-node counts: the job past its limit (due 105) holds its node until 130."""
    prof = toy_profile(2, limit_check_interval_s=30, bf_interval_s=1, bf_resolution_s=1)
    sim = Simulation(prof, limit_check_phase_s=10)  # checks at 100, 130, ...
    ids = sim.add_jobs([job(0, 1000, limit=105), job(0, 1000), job(110, 10)])
    sim.run_until(110)
    assert sim.view(ids[2]).start is None
    assert sim.view(ids[2]).estimate == 111  # planned as ending at the next step
    sim.run()
    assert sim.view(ids[0]).end == 130
    assert sim.view(ids[2]).start == 130


def run_nodes(specs: list[JobSpec], until: int, **sched: Any) -> list[tuple[str, ...]]:
    sim = Simulation(toy_profile(3, bf_interval_s=1, bf_resolution_s=1, **sched))
    ids = sim.add_jobs(specs)
    sim.run_until(until)
    return [sim.view(i).nodes for i in ids]


def test_cons_tres_puts_a_job_on_the_fullest_node_that_fits() -> None:
    specs = [
        job(0, 300, gpus=1, cpus=4),  # gpu-0000
        job(1, 300, gpus=1, cpus=20, limit=300),  # 28 CPUs free on 0000 ... fits there
        job(2, 300, gpus=1, cpus=16),  # 8 left on 0000: next node
    ]
    best = run_nodes(specs, 5, node_choice="cons_tres")
    assert best == [("gpu-0000",), ("gpu-0000",), ("gpu-0001",)]
    # the default, lowest-numbered first, gives the same here; a job on 0001 tells them apart
    specs = [job(0, 300, gpus=1, cpus=4), job(0, 300, gpus=1, cpus=30), job(1, 300, gpus=1)]
    assert run_nodes(specs, 5)[2] == ("gpu-0000",)
    assert run_nodes(specs, 5, node_choice="cons_tres")[2] == ("gpu-0001",)


def test_node_plan_earliest_cons_tres() -> None:
    kw: dict[str, Any] = {
        "gpus_free": [4, 2, 3],
        "cpus_free": [32, 8, 16],
        "gpus_cap": [4, 4, 4],
        "cpus_cap": [32, 32, 32],
        "releases": [],
    }
    nodes = np.arange(3)
    ask: dict[str, Any] = {"gpus": 1, "cpus": 4, "exclusive": False, "duration": 10}
    assert NodePlan(0, **kw).earliest(nodes, 2, **ask, not_before=0) == (0, (0, 1))
    plan = NodePlan(0, cons_tres=True, **kw)
    # one node: the fewest free CPUs; two: one run of consecutive nodes, taken in order
    assert plan.earliest(nodes, 1, **ask, not_before=0) == (0, (1,))
    assert plan.earliest(nodes, 2, **ask, not_before=0) == (0, (0, 1))
    excl = {**ask, "exclusive": True}
    assert plan.earliest(nodes, 1, **excl, not_before=0) == (0, (0,))


def test_reservations_for_later_starts_take_whole_nodes() -> None:
    """A top job reserved on a node from 100 blocks a lower job planned beside it."""
    specs = [
        job(0, 100, gpus=3, cpus=8),  # gpu-0000 until 100
        job(1, 100, gpus=2),  # 1 GPU free: reserved at 100 (2 of the 4 GPUs)
        job(2, 300, gpus=1),  # the free GPU now, and one of the 2 left beside it at 100
    ]
    sched = {"bf_interval_s": 1, "bf_resolution_s": 1}
    sim = Simulation(toy_profile(1, **sched))
    ids = sim.add_jobs(specs)
    sim.run_until(5)
    assert sim.view(ids[2]).start == 2  # partial reservation: room beside it
    whole = Simulation(toy_profile(1, bf_reserve_whole_nodes=True, **sched))
    ids = whole.add_jobs(specs)
    whole.run_until(5)
    assert whole.view(ids[2]).start is None
    assert whole.view(ids[2]).estimate == 200


def test_new_settings_round_trip_through_toml() -> None:
    prof = toy_profile(2)
    sched = replace(
        prof.scheduler,
        priority_size_cpus=True,
        priority_calc_period_s=300,
        limit_check_interval_s=30,
        node_choice="cons_tres",
        bf_reserve_whole_nodes=True,
    )
    for p in (prof, replace(prof, scheduler=sched)):
        assert profile_from_dict(tomllib.loads(profile_to_toml(p))) == p
    # "best_fit", the earlier name, reads as "cons_tres"
    old = tomllib.loads(profile_to_toml(replace(prof, scheduler=sched)))
    old["scheduler"]["node_choice"] = "best_fit"
    assert profile_from_dict(old).scheduler.node_choice == "cons_tres"
    assert "priority_calc_period_s" not in profile_to_toml(prof)  # None: left out
