"""Fair-share in the simulator's multifactor priority (Slurm's classic algorithm)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from mirage.profile.capture import scheduler_from_config
from mirage.profile.schema import ClusterProfile
from mirage.sim import Simulation
from mirage.sim.scenario import job, toy_profile
from mirage.sim.views import DEP_OK

DAY = 86400


def fs_profile(nodes: int, **scheduler: Any) -> ClusterProfile:
    return toy_profile(nodes, fairshare="classic", **scheduler)


def contest(weight: int) -> tuple[int, int]:
    """A heavy user's job and a light user's, same size and age, heavy's submitted first.

    The heavy user has just run a long job on the one node; returns (heavy start, light
    start) of the two that waited for it.
    """
    sim = Simulation(fs_profile(1, priority_weight_fairshare=weight))
    sim.add_jobs([job(0, 10_000, user="heavy")])
    heavy, light = sim.add_jobs([job(100, 500, user="heavy"), job(100, 500, user="light")])
    sim.run()
    h, lt = sim.view(heavy).start, sim.view(light).start
    assert h is not None and lt is not None
    return h, lt


def test_heavy_user_waits_behind_light_user_with_fairshare() -> None:
    h, lt = contest(10_000)
    assert lt == 10_000 and h == 10_500


def test_submit_order_without_fairshare() -> None:
    h, lt = contest(0)
    assert h == 10_000 and lt == 10_500


def test_factor_is_two_to_minus_usage_over_shares() -> None:
    sim = Simulation(fs_profile(2, priority_weight_fairshare=1000))
    sim.add_jobs([job(0, 1000, user="a"), job(0, 3000, user="b"), job(0, 1, user="c")])
    sim.run_until(5000)
    usage = {u: sim.fairshare_usage(u) for u in "abc"}
    total = sum(usage.values())
    for u in "abc":  # three users, equal shares: S = 1/3
        assert sim.fairshare_factor(u) == pytest.approx(2 ** (-(usage[u] / total) * 3))
    assert sim.fairshare_factor("nobody") == 1.0


def test_decay_halves_usage_after_one_half_life() -> None:
    half = 3600
    sim = Simulation(fs_profile(2, priority_weight_fairshare=1, priority_decay_half_life_s=half))
    sim.add_jobs([job(0, 1000, user="u")])  # whole node: 32 CPUs
    sim.run_until(1000)
    u0 = sim.fairshare_usage("u")
    assert u0 == pytest.approx(32 * half / math.log(2) * (1 - 2 ** (-1000 / half)))
    sim.run_until(1000 + half)
    assert sim.fairshare_usage("u") == pytest.approx(u0 / 2, rel=1e-9)
    sim.run_until(1000 + 3 * half)
    assert sim.fairshare_usage("u") == pytest.approx(u0 / 8, rel=1e-9)


def test_no_decay_with_zero_half_life_and_gpu_billing() -> None:
    prof = fs_profile(
        2, priority_weight_fairshare=1, priority_decay_half_life_s=0, fairshare_usage="gpus"
    )
    sim = Simulation(prof)
    sim.add_jobs([job(0, 1000, user="u", gpus=2, cpus=4), job(0, 500, user="v")])
    sim.run_until(300)  # running jobs count before they end
    assert sim.fairshare_usage("u") == pytest.approx(2 * 300)
    assert sim.fairshare_usage("v") == pytest.approx(4 * 300)  # a whole node: its 4 GPUs
    sim.run_until(50 * DAY)
    assert sim.fairshare_usage("u") == pytest.approx(2 * 1000)
    assert sim.fairshare_usage("v") == pytest.approx(4 * 500)


def test_configured_shares() -> None:
    prof = fs_profile(2, priority_weight_fairshare=1000)
    sim = Simulation(prof, fairshare_shares={"big": 3})
    sim.add_jobs([job(0, 1000, user="big"), job(0, 1000, user="small")])
    sim.run_until(2000)  # equal usage: U = 1/2 each; S = 3/4 and 1/4
    assert sim.fairshare_factor("big") == pytest.approx(2 ** (-0.5 / 0.75))
    assert sim.fairshare_factor("small") == pytest.approx(2 ** (-0.5 / 0.25))


def test_fork_copies_usage_and_stays_independent() -> None:
    sim = Simulation(fs_profile(2, priority_weight_fairshare=1000))
    sim.add_jobs([job(0, 1000, user="a"), job(0, 2000, user="b")])
    sim.run_until(500)
    child = sim.fork()
    assert child.fairshare_usage("a") == sim.fairshare_usage("a") > 0
    child.add_jobs([job(600, 5000, user="a", nodes=1)])
    child.run_until(4000)
    sim.run_until(4000)
    assert child.fairshare_usage("a") > sim.fairshare_usage("a")
    assert child.fairshare_usage("b") == pytest.approx(sim.fairshare_usage("b"))
    twin = sim.fork()  # the same future gives the same usage
    twin.run_until(9000)
    sim.run_until(9000)
    assert twin.fairshare_usage("a") == sim.fairshare_usage("a")


@pytest.mark.parametrize(
    "settings",
    [{}, {"fairshare": "classic"}, {"priority_weight_fairshare": 10000}],
)
def test_off_without_both_classic_and_a_weight(settings: dict[str, Any]) -> None:
    sim = Simulation(toy_profile(2, priority_max_age_s=1000, **settings))
    _, b = sim.add_jobs([job(0, 1000, user="a"), job(10, 1000, user="b", nodes=2)])
    sim.run_until(500)
    assert sim.fairshare_usage("a") == 0.0 and sim._fs is None  # nothing accounted
    assert sim.view(b).priority == 490  # age only


def test_usage_as_of_the_last_calculation() -> None:
    prof = fs_profile(2, priority_weight_fairshare=1000, priority_weight_age=0)
    sim = Simulation(prof, priority_calc_period_s=300)
    sim.add_jobs([job(0, 10_000, user="a", nodes=1), job(0, 1, user="b")])
    sim.run_until(100)
    f100 = sim.fairshare_factor("a")
    sim.run_until(299)
    assert sim.fairshare_factor("a") == f100  # frozen until the next calculation
    sim.run_until(300)
    assert sim.fairshare_factor("a") < f100  # a's share of usage grew


def reference(sim: Simulation) -> list[str]:
    cands = [i for i in sim.pending if not sim.held[i] and sim.dep_state[i] == DEP_OK]
    return [str(i + sim.first_id) for i in sim._by_priority(cands)]


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_order_equals_reference_with_fairshare(seed: int) -> None:
    rng = random.Random(seed)
    prof = fs_profile(
        4,
        priority_weight_fairshare=rng.choice([1, 1000, 100_000]),
        priority_weight_age=rng.choice([0, 1000]),
        priority_max_age_s=3600,
        priority_decay_half_life_s=rng.choice([0, 600, 7 * DAY]),
    )
    sim = Simulation(prof, priority_calc_period_s=rng.choice([0, 60, 300]))
    specs, t = [], 0
    for _ in range(rng.randint(20, 80)):
        t += rng.randint(0, 200)
        run = rng.randint(100, 3000)
        specs.append(job(t, run, nodes=rng.randint(1, 4), user=rng.choice("abcde")))
    sim.add_jobs(specs)
    for _ in range(8):
        sim.run_until(sim.now + rng.randint(1, 2000))
        assert sim.priority_order() == reference(sim)


def test_capture_reads_fairshare_settings() -> None:
    config = {
        "PriorityWeightFairShare": "10000",
        "PriorityDecayHalfLife": "14-00:00:00",
        "AccountingStorageEnforce": "associations,limits",
    }
    sched = scheduler_from_config(config)
    assert sched.priority_weight_fairshare == 10000
    assert sched.priority_decay_half_life_s == 14 * DAY
    assert sched.fairshare == "classic"
    # no enforced associations (the test cluster): jobs carry no fair-share term
    loose = scheduler_from_config({**config, "AccountingStorageEnforce": "none"})
    assert loose.fairshare == "none" and loose.priority_weight_fairshare == 10000
    no_decay = scheduler_from_config({"PriorityDecayHalfLife": "00:00:00"})
    assert no_decay.priority_decay_half_life_s == 0
    assert scheduler_from_config({}).priority_decay_half_life_s == 7 * DAY
    assert scheduler_from_config({}).fairshare == "none"
