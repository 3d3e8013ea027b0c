"""Bad input: a clear SimError or a counted skip, never a hang or a crash."""

from __future__ import annotations

import pandas as pd
import pytest

from mirage.sim import SimError, Simulation, from_table
from mirage.sim.scenario import job, toy_profile
from mirage.trace.schema import conform


def sim4() -> Simulation:
    return Simulation(toy_profile(4))


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (job(0, 100, nodes=5), "too many nodes"),
        (job(0, 100, nodes=0), "bad node count"),
        (job(0, 100, gpus=5), "too many GPUs or CPUs per node"),
        (job(0, 100, nodes=2, gpus=10), "too many GPUs or CPUs per node"),
        (job(0, 100, cpus=33), "too many GPUs or CPUs per node"),
        (job(0, -5, limit=100), "negative run time"),
        (job(0, 100, limit=0), "bad time limit"),
        (job(0, 100, limit=-60), "bad time limit"),
        (job(0, 100, partition="nope"), "unknown partition"),
        (job(0, 100, dependency="afterok:99"), "bad dependency"),
        (job(0, 100, dependency="after:1"), "bad dependency"),
    ],
)
def test_invalid_jobs_raise_or_are_counted(spec: object, reason: str) -> None:
    sim = sim4()
    with pytest.raises(SimError) as err:
        sim.add_jobs([job(0, 10), spec])  # type: ignore[list-item]
    assert err.value.reason == reason
    sim.run()  # the valid job before it is still there, the heap still sound
    assert sim.view("1").end == 10
    lenient = sim4()
    ids = lenient.add_jobs_skipping_invalid([job(0, 10), spec, job(0, 10)])  # type: ignore[list-item]
    assert ids == ["1", "", "2"]
    assert lenient.skipped == {reason: 1}
    lenient.run()
    assert [v.end for v in lenient.all_jobs()] == [10, 10]


def test_submit_in_the_past_is_refused() -> None:
    sim = sim4()
    sim.run_until(100)
    with pytest.raises(SimError, match="before now"):
        sim.add_job(job(50, 10))


def test_zero_run_time_ends_at_once() -> None:
    sim = sim4()
    [a, b] = sim.add_jobs([job(0, 0, limit=60), job(0, 10, nodes=4)])
    sim.run()
    assert (sim.view(a).start, sim.view(a).end) == (0, 0)
    assert sim.view(b).start == 0


def test_unsorted_submits_are_fine() -> None:
    sim = sim4()
    ids = sim.add_jobs([job(500, 100, nodes=4), job(0, 100, nodes=4), job(200, 50, nodes=4)])
    sim.run()
    assert [sim.view(i).start for i in ids] == [500, 0, 200]


def table() -> pd.DataFrame:
    return conform(
        pd.DataFrame(
            {
                "job_id": ["a", "a", "b", "c", "d", "e", "f", "g", "h"],
                "partition": ["gpu", "gpu", None, "gpu", "gpu", "gpu", "gpu", "gpu", "gpu"],
                "submit": [0, 5, 10, 20, None, 40, 50, 60, 70],
                "start": [0, 5, 10, 20, 30, 45, 50, 60, 70],
                "end": [100, 105, 110, 10, 130, 145, 150, 160, 170],
                "time_limit": [200, 200, None, 200, 200, 0, 200, 200, 200],
                "nodes": [1, 1, None, 1, 1, 1, 9, 1, 1],
                "gpus": [None, None, None, None, None, None, None, 8, 2],
                "cpus": [None, None, None, None, None, None, None, None, 40],
            }
        )
    )


def test_table_rows_that_cannot_replay_are_counted() -> None:
    wl = from_table(table(), toy_profile(4))
    assert [j.trace_id for j in wl.jobs] == ["a", "b"]
    assert wl.dropped == {
        "no start/end": 1,
        "end before start": 1,
        "time limit <= 0": 1,
        "duplicate job id": 1,
        "too many nodes": 1,
        "too many GPUs per node": 1,
        "too many CPUs per node": 1,
    }
    _, b = wl.jobs
    # NA nodes -> 1, NA partition -> default, NA limit -> the run time; no GPU/CPU counts
    # -> whole nodes
    assert (b.nodes, b.partition, b.time_limit, b.whole_nodes) == (1, "gpu", 100, True)
    sim = Simulation(toy_profile(4))
    sim.add_jobs(wl.jobs)
    sim.run()


def test_gpu_counts_from_the_table_share_nodes() -> None:
    df = conform(
        pd.DataFrame(
            {
                "job_id": ["x", "y"],
                "submit": [0, 0],
                "start": [0, 0],
                "end": [100, 100],
                "time_limit": [100, 100],
                "nodes": [1, 1],
                "gpus": [2, 2],
            }
        )
    )
    wl = from_table(df, toy_profile(1))
    assert [(j.gpus, j.whole_nodes, j.per_node()) for j in wl.jobs] == [(2, False, (2, 1))] * 2
    sim = Simulation(toy_profile(1))
    ids = sim.add_jobs(wl.jobs)
    sim.run()
    assert [sim.view(i).start for i in ids] == [0, 0]
