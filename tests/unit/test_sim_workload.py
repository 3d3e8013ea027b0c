"""Canonical trace table -> simulator jobs, and a replay summary."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from mirage.sim import JobSpec, Simulation, from_table
from mirage.sim.report import results, summarize
from mirage.sim.scenario import toy_profile
from mirage.sim.workload import TraceUseError
from mirage.trace.schema import conform


def table() -> pd.DataFrame:
    return conform(
        pd.DataFrame(
            {
                "job_id": ["a", "b", "c", "d"],
                "user": ["u1", "u2", "u1", "u3"],
                "partition": ["gpu", "other", "gpu", "gpu"],
                "state": ["COMPLETED", "FAILED", "COMPLETED", "CANCELLED"],
                "submit": [1000, 1100, 1300, 1400],
                "eligible": [1000, 1200, None, None],
                "start": [1000, 1500, 1400, None],
                "end": [1600, 1600, 2000, None],
                "time_limit": [3600, None, 300, 60],
                "nodes": [2, 1, 9, 1],
                "exit_code": [0, 1, 0, None],
            }
        )
    )


def test_rows_without_times_and_oversized_jobs_are_dropped_and_counted() -> None:
    wl = from_table(table(), toy_profile(4), max_nodes=4)
    assert [j.trace_id for j in wl.jobs] == ["a", "b"]
    assert wl.dropped == {"no start/end": 1, "too many nodes": 1}


def test_fields_and_defaults() -> None:
    a, b = from_table(table(), toy_profile(4), max_nodes=4).jobs
    assert (a.submit, a.run, a.time_limit, a.nodes, a.partition) == (1000, 600, 3600, 2, "gpu")
    # unknown partition -> default; unknown limit -> run time; eligible -> begin
    assert (b.partition, b.time_limit, b.begin, b.fails) == ("gpu", 100, 1200, True)
    assert (b.real_submit, b.real_start) == (1100, 1500)


def test_arrival_scale_compresses_inter_arrival_times() -> None:
    jobs = from_table(table(), toy_profile(16), arrival_scale=2.0).jobs
    assert [j.submit for j in jobs] == [1000, 1050, 1150]
    assert jobs[1].begin == 1150  # the eligible delay itself is kept


def test_replay_and_summary() -> None:
    wl = from_table(table(), toy_profile(4), max_nodes=4)
    sim = Simulation(toy_profile(4), start_time=wl.jobs[0].submit)
    sim.add_jobs(wl.jobs)
    sim.run()
    df = results(sim)
    assert list(df["start"]) == [1000, 1200]
    assert list(df["wait"]) == [0, 100]
    assert list(df["real_wait"]) == [0, 400]
    s = summarize(sim, wall_s=0.5, dropped=wl.dropped)
    assert (s.jobs, s.started, s.span_s) == (2, 2, 600)
    assert s.utilisation == (600 * 2 + 100) / (4 * 600)
    assert s.sim_wait["mean"] == 50.0


def test_utilisation_counts_what_shared_nodes_hold() -> None:
    """Issue 28: four 16-CPU jobs on two 32-CPU nodes fill them, utilisation 1 (counting a
    whole node per job gave 2). A 3-GPU job on a 4-GPU node holds 3/4 of it (its GPU
    share, larger than its CPU share); a whole-node job holds its nodes."""
    prof = toy_profile(2, gpus_per_node=4)  # 32 CPUs per node
    sim = Simulation(prof, start_time=0)
    sim.add_jobs([JobSpec(submit=0, run=600, time_limit=600, nodes=1, cpus=16, partition="gpu")
                  for _ in range(4)])  # fmt: skip
    sim.run()
    assert summarize(sim, wall_s=1.0).utilisation == pytest.approx(1.0)
    sim = Simulation(prof, start_time=0)
    sim.add_jobs([
        JobSpec(submit=0, run=600, time_limit=600, nodes=1, gpus=3, cpus=2, partition="gpu"),
        JobSpec(submit=0, run=600, time_limit=600, nodes=1, partition="gpu"),  # whole node
    ])  # fmt: skip
    sim.run()
    assert summarize(sim, wall_s=1.0).utilisation == pytest.approx((0.75 + 1.0) / 2)


def test_trace_use_counts_what_was_left_out_and_what_was_not_given() -> None:
    """Issue 28: how much of the table was replayed, why the rest was not, and which fields
    the kept jobs lacked (job b has no time limit and a partition the profile lacks; no
    job gives GPUs or CPUs)."""
    wl = from_table(table(), toy_profile(4), max_nodes=4)
    use = wl.use()
    assert (use.rows, use.used) == (4, 2) and use.unused_share == 0.5
    assert use.dropped == {"no start/end": 1, "too many nodes": 1}
    assert use.unknown == {
        "time limit (taken as the run time)": 1,
        "partition (taken as gpu)": 1,
        "GPUs and CPUs (whole nodes)": 2,
    }
    assert use.line().startswith("used 2 of 4 jobs (50.0%); left out: no start/end 1")
    said = use.check()
    assert said is not None and said.startswith("only 2 of the trace's 4 jobs (50.0%)")
    with pytest.raises(TraceUseError, match="--strict"):
        use.check(strict=True)
    assert from_table(table().iloc[:1], toy_profile(4)).use().check(strict=True) is None


@pytest.mark.parametrize(
    ("how", "limit_b", "kept"),
    [("runtime", 100, ["a", "b"]), ("partition-max", 7200, ["a", "b"]), ("drop", None, ["a"])],
)
def test_unknown_limit_is_a_visible_choice(how: str, limit_b: int | None, kept: list[str]) -> None:
    prof = toy_profile(4)
    part = dataclasses.replace(prof.partitions[0], max_time_s=7200)
    prof = dataclasses.replace(prof, partitions=(part,))
    wl = from_table(table(), prof, max_nodes=4, unknown_limit=how)
    assert [j.trace_id for j in wl.jobs] == kept
    if limit_b is not None:
        assert wl.jobs[1].time_limit == limit_b
    else:
        assert wl.dropped["unknown time limit"] == 1
    with pytest.raises(ValueError, match="unknown_limit"):
        from_table(table(), prof, unknown_limit="guess")
