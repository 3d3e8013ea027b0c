"""Backfill: a job may jump ahead only if it delays no reservation; EASY vs Slurm."""

from __future__ import annotations

from mirage.sim import JobSpec, Simulation
from mirage.sim.scenario import job, toy_profile


def start_times(backfill: str, *jobs: JobSpec, nodes: int = 4) -> list[int | None]:
    sim = Simulation(toy_profile(nodes, backfill=backfill))
    ids = sim.add_jobs(jobs)
    sim.run()
    return [sim.view(i).start for i in ids]


def test_small_job_backfills_without_delaying_reservation() -> None:
    # A holds 2 of 4 nodes until 600; B (4 nodes) is reserved at 600; C fits before it.
    starts = start_times("slurm", job(0, 600, nodes=2), job(60, 600, nodes=4), job(60, 300, 2))
    assert starts == [0, 600, 60]


def test_job_that_would_delay_reservation_waits() -> None:
    starts = start_times("slurm", job(0, 600, nodes=2), job(60, 600, nodes=4), job(60, 900, 2))
    assert starts == [0, 600, 1200]


def test_main_pass_stops_at_first_blocked_job() -> None:
    # C would fit at once, but the main pass stops at B: C waits for the next backfill
    # cycle, bf_interval (30 s) after the one at 0 (A's submit): at 30.
    sim = Simulation(toy_profile(4, bf_interval_s=30))
    ids = sim.add_jobs([job(0, 600, nodes=2), job(20, 600, nodes=4), job(20, 300, 2)])
    sim.run_until(29)
    assert sim.view(ids[2]).start is None
    sim.run_until(30)
    assert sim.view(ids[2]).start == 30


def test_backfill_runs_at_once_after_a_quiet_interval() -> None:
    # backfill_agent checks every second once bf_interval has passed since its last cycle
    # (at 0): the submits at 61 get a cycle at 61, not at the next multiple of 30 (90).
    # (The engine used to run backfill only at multiples of bf_interval: at 90 here.)
    sim = Simulation(toy_profile(4, bf_interval_s=30))
    ids = sim.add_jobs([job(0, 600, nodes=2), job(61, 600, nodes=4), job(61, 300, 2)])
    sim.run_until(61)
    assert sim.view(ids[2]).start == 61


# A holds 2 nodes until 1200. B (3 nodes) reserves [1200, 2400), C (4 nodes) [2400, 3600).
# D (1 node, 3000 s) fits around B's reservation, not around C's: EASY (B only) starts D
# at once and so delays C; Slurm's backfill, which also reserved C, keeps D waiting.
MULTI = (
    job(0, 1200, nodes=2),
    job(60, 1200, nodes=3),
    job(60, 1200, nodes=4),
    job(60, 3000, nodes=1),
)


def test_slurm_backfill_protects_every_reservation() -> None:
    assert start_times("slurm", *MULTI) == [0, 1200, 2400, 3600]


def test_easy_backfill_protects_only_the_top_job() -> None:
    assert start_times("easy", *MULTI) == [0, 1200, 3060, 60]


def test_start_estimates_equal_actual_starts() -> None:
    sim = Simulation(toy_profile(4))
    ids = sim.add_jobs(MULTI)
    sim.run_until(60)
    estimates = [sim.start_estimate(i) for i in ids]
    assert estimates == [None, 1200, 2400, 3600]
    reasons = [v.reason for v in sim.pending_jobs()]
    assert reasons == ["Resources", "Priority", "Priority"]
    sim.run()
    assert [sim.view(i).start for i in ids[1:]] == estimates[1:]


def test_no_estimate_beyond_the_window() -> None:
    sim = Simulation(toy_profile(4, bf_window_s=600))
    ids = sim.add_jobs([job(0, 1200, nodes=4), job(60, 100, nodes=4)])
    sim.run_until(60)
    assert sim.start_estimate(ids[1]) is None


def test_bf_max_job_test_limits_planning() -> None:
    sim = Simulation(toy_profile(4, bf_max_job_test=1))
    ids = sim.add_jobs(MULTI)
    sim.run_until(60)
    assert [sim.start_estimate(i) for i in ids[1:]] == [1200, None, None]


def test_resolution_rounds_expected_ends_up() -> None:
    # A's limit 1001 s ends, at 60 s resolution, at 1020 in the plan.
    sim = Simulation(toy_profile(4, bf_resolution_s=60))
    ids = sim.add_jobs([job(0, 1001, nodes=4), job(60, 100, nodes=4)])
    sim.run_until(60)
    assert sim.start_estimate(ids[1]) == 1020
