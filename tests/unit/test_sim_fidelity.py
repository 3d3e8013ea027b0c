"""The fidelity workload's properties and the start comparator (no cluster needed)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from mirage.sim import fidelity as fid
from mirage.slurm.types import SubmitRequest

JOBS = fid.scripted_workload()
MODEL = fid.default_model()


def test_workload_is_deterministic_and_seeded() -> None:
    assert fid.scripted_workload() == JOBS
    assert fid.scripted_workload(fid.DEFAULT_SEED + 1) != JOBS


def test_workload_shape() -> None:
    assert len(JOBS) >= 40
    assert len({j.key for j in JOBS}) == len(JOBS)
    assert {j.nodes for j in JOBS} == {1, 2}
    assert {j.gpus_per_node for j in JOBS} == {1, 2, 3, 4}
    assert len({j.cpus_per_node for j in JOBS}) >= 5
    assert all(j.cpus_per_node <= 16 and j.cpus_per_node >= 2 * j.gpus_per_node for j in JOBS)
    assert all(j.limit % 60 == 0 and 60 <= j.limit <= 300 for j in JOBS)
    assert {j.limit for j in JOBS} == {60, 120, 180, 240, 300}
    early = [j for j in JOBS if not j.hits_limit]
    hits = [j for j in JOBS if j.hits_limit]
    assert len(early) >= 30 and all(j.run < j.limit for j in early)
    assert len(hits) >= 4
    offsets = [j.offset for j in JOBS]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert offsets.count(0) >= 10  # a burst: the queue builds at once


def test_sim_run_is_short_and_every_job_runs() -> None:
    run = fid.run_sim(JOBS, MODEL)
    assert all(s is not None for s in run.starts.values())
    assert run.makespan <= 6 * 60
    timeouts = {k for k, st in run.states.items() if st == "TIMEOUT"}
    assert timeouts == {j.key for j in JOBS if j.hits_limit}
    for j in JOBS:
        start, end = run.starts[j.key], run.ends[j.key]
        assert start is not None and end is not None and start >= j.offset
        expected = j.limit + fid.LIMIT_CHECK_S // 2 if j.hits_limit else j.run
        assert end - start == expected


def test_backfill_and_priority_matter_for_at_least_five_jobs() -> None:
    base = fid.run_sim(JOBS, MODEL)
    easy = fid.run_sim(JOBS, MODEL, backfill="easy")
    fifo = fid.run_sim(JOBS, MODEL, fifo=True)
    assert fid.count_differences(base.starts, easy.starts) >= 5
    assert fid.count_differences(base.starts, fifo.starts) >= 5


def test_priority_is_slurms_job_size_factor() -> None:
    """(nodes / 6 + cpus / 96) / 2 * 100, truncated: what sprio shows on the test cluster
    (its 4 GPU nodes and 2 CPU nodes: the factor counts over the whole cluster)."""
    jobs = [
        fid.FidelityJob("a", 0, 1, 1, 4, 60, 10),
        fid.FidelityJob("b", 0, 1, 2, 8, 60, 10),
        fid.FidelityJob("c", 0, 1, 4, 16, 60, 10),
        fid.FidelityJob("d", 0, 2, 1, 4, 60, 10),
        fid.FidelityJob("e", 0, 2, 4, 16, 60, 10),
    ]
    sim = fid.testbed_simulation(MODEL)
    sim.add_jobs(fid.sim_specs(jobs, MODEL))
    assert [sim.priority(i) for i in range(5)] == [10, 12, 16, 20, 33]


def test_priority_age_moves_only_at_recalculation() -> None:
    jobs = [fid.FidelityJob("a", 0, 1, 1, 4, 60, 10)]
    sim = fid.testbed_simulation(MODEL)
    sim.add_jobs(fid.sim_specs(jobs, MODEL))
    sim.run_until(0)
    sim.eligible_at[0] = 0
    sim.now = 299
    assert sim.priority(0) == 10
    sim.now = 300  # 10.42 + 1000 * 300 / 86400 (3.47 points of age), truncated
    assert sim.priority(0) == 13


def test_compare_starts_by_hand() -> None:
    a = {"j0": 0, "j1": 10, "j2": 100, "j3": None, "j4": 50}
    b = {"j0": 0, "j1": 45, "j2": 136, "j3": None, "j4": None}
    c = fid.compare_starts(a, b)
    assert c.diffs == {"j0": 0, "j1": 35, "j2": 36}
    assert c.missing == ("j4",)
    assert c.n == 4  # j3 never started in either: not counted
    assert c.within == 2  # 0 and 35 (inclusive); 36 and the missing one are misses
    assert c.share == pytest.approx(0.5)
    assert c.median_abs == 35.0
    assert c.max_abs == 36
    assert fid.count_differences(a, b, min_diff=5) == 3


def test_compare_identical_runs() -> None:
    starts = fid.run_sim(JOBS, MODEL).starts
    c = fid.compare_starts(starts, dict(starts))
    assert (c.share, c.median_abs, c.max_abs, c.missing) == (1.0, 0.0, 0, ())
    assert fid.count_differences(starts, starts) == 0


def test_pass_mark() -> None:
    assert fid.passes(0.88, 0.98)
    assert not fid.passes(0.87, 0.98)
    assert fid.passes(1.0, 1.0)


def test_submit_request() -> None:
    job = fid.FidelityJob("j07", 12, 2, 3, 9, 180, 25)
    req = fid.submit_request(job, "mirage-fid-x-j07", "/tmp/w", exclusive=True)
    assert isinstance(req, SubmitRequest)
    assert (req.nodes, req.gres, req.time_limit, req.partition) == (2, "gpu:3", 180, "gpu")
    assert req.script == b"#!/bin/sh\nsleep 25\n"
    assert req.chdir == "/tmp/w"
    assert set(req.extra_args) == {
        "--output=/dev/null",
        "--ntasks-per-node=1",
        "--cpus-per-task=9",
        "--exclusive",
    }
    shared = fid.submit_request(job, "n", "/tmp/w", exclusive=False)
    assert "--exclusive" not in shared.extra_args
    assert not any(a.startswith("--begin") for a in shared.extra_args)


def test_submit_request_begin_is_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # sbatch reads an absolute --begin in the machine's local time zone
    monkeypatch.setenv("TZ", "Europe/Prague")
    time.tzset()
    try:
        job = fid.FidelityJob("j00", 0, 1, 2, 4, 60, 8)
        req = fid.submit_request(job, "n", "/tmp/w", begin=1_764_200_000)  # 23:33:20 UTC
        assert "--begin=2025-11-27T00:33:20" in req.extra_args
    finally:
        monkeypatch.undo()  # the zone as it was, then re-read it
        time.tzset()


LOG = """\
[2026-11-25T23:39:08.994] slurmctld version 22.05.8 started on cluster mirage
[2026-11-25T23:39:40.100] Time limit exhausted for JobId=9
[2026-11-25T23:40:15.383] slurmctld version 22.05.8 started on cluster mirage
[2026-11-25T23:40:16.001] error: something else
[2026-11-25T23:44:46.644] Time limit exhausted for JobId=77
[2026-11-25T23:45:16.693] Time limit exhausted for JobId=74
"""


def test_clock_from_log_uses_the_last_start_and_its_checks() -> None:
    clock = fid.clock_from_log(LOG.splitlines())
    assert clock is not None
    assert clock.ctld_start == 1795650015  # 2026-11-25T23:40:15Z
    assert clock.limit_check == 1795650316  # 23:45:16, the last check logged
    only_start = fid.clock_from_log(LOG.splitlines()[:3])
    assert only_start is not None and only_start.limit_check == 1795650016
    assert fid.clock_from_log(["no timestamps here"]) is None


def test_clock_phases() -> None:
    clock = fid.ClusterClock(ctld_start=1000, limit_check=1301)
    assert clock.phases(t0=1290, calc_period_s=300) == (11, 10)
    assert clock.phases(t0=1302, calc_period_s=0) == (29, 0)


def test_limit_hits_end_at_the_next_limit_check() -> None:
    jobs = [
        # submitted 1 s after the offset (SUBMIT_LATENCY_S); checks at 11 + 30k
        fid.FidelityJob("a", 0, 1, 1, 4, 60, 120),  # starts at 1, due at 61 -> 71
        fid.FidelityJob("b", 0, 1, 1, 4, 60, 30),  # early finish: unaffected
        fid.FidelityJob("c", 5, 1, 1, 4, 120, 300),  # due at 126 -> 131
    ]
    model = replace(MODEL, kill_phase_s=11)
    run = fid.run_sim(jobs, model)
    assert run.ends == {"a": 71, "b": 31, "c": 131}
    assert run.states == {"a": "TIMEOUT", "b": "COMPLETED", "c": "TIMEOUT"}
    blind = fid.run_sim(jobs, MODEL)  # phase unknown: 15 s late
    assert blind.ends == {"a": 76, "b": 31, "c": 141}


def test_backfill_does_not_use_nodes_of_a_job_past_its_limit() -> None:
    """Whole-cluster jobs run past their 60 s limit until 80; nothing starts before."""
    jobs = [
        fid.FidelityJob("big", 0, 2, 4, 16, 60, 600),
        fid.FidelityJob("big2", 0, 2, 4, 16, 60, 600),
        fid.FidelityJob("small", 61, 1, 1, 2, 60, 10),
    ]
    model = replace(MODEL, kill_phase_s=20)
    run = fid.run_sim(jobs, model)
    assert run.starts == {"big": 1, "big2": 1, "small": 80}
    assert run.ends["big"] == 80


def test_sim_like_uses_the_run_clock() -> None:
    real = fid.RunResult(starts={}, t0=1290.4, label="real abc", clock=fid.ClusterClock(1000, 1301))
    model = fid.model_at(MODEL, real)
    assert (model.kill_phase_s, model.calc_phase_s) == (11, 10)
    assert fid.model_at(MODEL, fid.RunResult(starts={})) == MODEL
    assert fid.sim_like(JOBS, MODEL, real).label == "sim@abc"


def test_exclusive_jobs_count_whole_nodes_after_a_recalculation() -> None:
    """As sprio shows on the test cluster: a 4-CPU --exclusive job goes 10 -> 16 (+ age)."""
    model = fid.default_model(exclusive=True)
    jobs = [fid.FidelityJob("a", 10, 1, 1, 4, 60, 10)]
    sim = fid.testbed_simulation(model)
    sim.add_jobs(fid.sim_specs(jobs, model))
    sim.run_until(0)
    sim.eligible_at[0] = 10
    sim.now = 299
    assert sim.priority(0) == 10
    sim.now = 300  # (1/6 + 16/96) / 2 * 100 + 1000 * 290 / 86400
    assert sim.priority(0) == 20


def _nodes(jobs: list[fid.FidelityJob], until: int) -> dict[str, list[str]]:
    sim = fid.testbed_simulation(MODEL)
    ids = sim.add_jobs(fid.sim_specs(jobs, MODEL))
    sim.run_until(until)
    return {j.key: sim.nodes_of(i) for j, i in zip(jobs, ids, strict=True)}


def test_cons_tres_places_a_small_job_beside_a_big_one() -> None:
    jobs = [
        fid.FidelityJob("a", 0, 1, 1, 2, 300, 200),  # lowest node: gpu-0000
        fid.FidelityJob("b", 1, 1, 3, 12, 300, 200),  # fewest free CPUs: beside a, on gpu-0000
        fid.FidelityJob("c", 2, 1, 2, 4, 300, 200),  # does not fit there: gpu-0001
    ]
    assert _nodes(jobs, 5) == {"a": ["gpu-0000"], "b": ["gpu-0000"], "c": ["gpu-0001"]}


def test_a_reservation_takes_its_nodes_whole() -> None:
    """Slurm plans backfill on node bitmaps: nothing lower goes beside a reservation."""
    jobs = [fid.FidelityJob(f"f{k}", 0, 1, 3, 6, 120, 100) for k in range(4)]
    jobs.append(fid.FidelityJob("top", 1, 2, 3, 12, 120, 30))  # reserved at 120: nodes 0, 1
    jobs.append(fid.FidelityJob("low", 2, 1, 1, 2, 300, 30))  # fits beside it on GPUs
    placed = _nodes(jobs, 5)
    assert placed["top"] == []
    assert placed["low"] == ["gpu-0002"]
