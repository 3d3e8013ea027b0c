"""mirage.plan: work specs, candidate shapes, the queue pass, completion and ranking."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mirage.plan import (
    Options,
    PlanInputError,
    Shape,
    Snapshot,
    candidates,
    habitual_shape,
    parse_work,
    plan_chain,
    read_snapshot,
    start_times,
)
from mirage.plan.draws import FastDraw
from mirage.plan.predict import segments_for
from mirage.plan.report import plan_lines
from mirage.plan.shapes import layout
from mirage.policy.lookahead import RunTimes
from mirage.profile.schema import load_profile
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import toy_profile
from mirage.sim.workload import JobSpec
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob, SubmitRequest

H = 3600
NOW = 1_000_000


def record(job_id: str, state: JobState, **kw: object) -> SlurmJob:
    base = dict(
        job_id=job_id, name="x", user="ann", account="a", partition="gpu", state=state,
        reason="None", submit=NOW - 3 * H, eligible=NOW - 3 * H, start=None, end=None,
        time_limit=10 * H, nodes=1, cpus=32, gpus=4, priority=100, dependency="", comment="",
    )  # fmt: skip
    base.update(kw)
    return SlurmJob(**base)  # type: ignore[arg-type]


def hole_queue() -> Snapshot:
    """4 nodes: three free in 1 h, the fourth in 10 h; a 4-node job waits for all four,
    so a request of one node fits the 9-hour hole before it only if it asks for <= 9 h."""
    jobs = [
        *(record(f"r{k}", JobState.RUNNING, start=NOW - 9 * H) for k in range(3)),
        record("r3", JobState.RUNNING, start=NOW),
        record(
            "p1", JobState.PENDING, reason="Resources", nodes=4, cpus=128, gpus=16, time_limit=5 * H
        ),
    ]
    snap = QueueSnapshot(taken_at=NOW, jobs=tuple(jobs))
    return Snapshot(snap, toy_profile(4), NOW, RunTimes())  # no history: runs to the limit


# ---- work specs ---------------------------------------------------------------------------


def test_work_scales_by_rule_and_between_measured_points() -> None:
    w = parse_work("96h@4gpu", scaling="linear")
    assert (w.run_at(8), w.run_at(2)) == (48 * H, 192 * H)
    assert parse_work("96h@4gpu", scaling="sqrt").run_at(16) == 48 * H
    assert parse_work("96h@4gpu", scaling="none").run_at(16) == 96 * H
    m = parse_work("4-00:00:00@4gpu", points=["2gpu=170h", "8 gpus=60h"])
    assert (m.run_at(2), m.run_at(4), m.run_at(8)) == (170 * H, 96 * H, 60 * H)
    assert 96 * H < m.run_at(3) < 170 * H  # between the points, on their power law
    assert m.run_at(16) == 30 * H  # beyond the last point, linear from it
    assert parse_work("300h@2node").unit == "node"


@pytest.mark.parametrize(
    ("spec", "points", "scaling", "says"),
    [
        ("96h", (), "linear", "TIME@SIZE"),
        ("96x@4gpu", (), "linear", "cannot read the duration"),
        ("96h@4tpu", (), "linear", "cannot read the size"),
        ("96h@0gpu", (), "linear", "cannot read the size"),
        ("0h@4gpu", (), "linear", "must take some time"),
        ("96h@4gpu", ("2gpu"), "linear", "SIZE=TIME"),
        ("96h@4gpu", ("2node=10h",), "linear", "in nodes"),
        ("96h@4gpu", ("4gpu=10h",), "linear", "repeats"),
        ("96h@4gpu", (), "cubic", "unknown scaling"),
    ],
)
def test_bad_work_specs_say_why_in_one_line(
    spec: str, points: tuple[str, ...], scaling: str, says: str
) -> None:
    with pytest.raises(PlanInputError, match=says) as info:
        parse_work(spec, scaling=scaling, points=points)
    assert "\n" not in str(info.value)


def test_remaining_work_shrinks_every_point_alike() -> None:
    w = parse_work("100h@4gpu", points=["2gpu=180h"]).remaining(25 * H, 4)
    assert (w.run_at(4), w.run_at(2)) == (75 * H, 135 * H)


# ---- shapes ----------------------------------------------------------------------------


def test_layout_spreads_gpus_evenly_over_whole_nodes() -> None:
    part = load_profile("models/ls6/profile.toml").partition()  # 3 GPUs per node
    assert layout(part, 2, "gpu") == (1, 2, 0)
    assert layout(part, 4, "gpu") == (2, 2, 0)
    assert layout(part, 6, "gpu") == (2, 3, 0)
    assert layout(part, 7, "gpu") is None


def test_cpu_work_is_shaped_in_cpus_on_a_partition_without_gpus() -> None:
    profile = load_profile("models/cerit/profile.toml")  # 18 nodes x 80 CPUs, no GPU
    part = profile.partition()
    assert layout(part, 32, "cpu") == (1, 0, 32)
    assert layout(part, 120, "cpu") == (2, 0, 60)
    assert layout(part, 81, "cpu") is None  # not even over 2 nodes
    assert layout(part, 19 * 80, "cpu") is None  # more than the partition
    work = parse_work("200h@32cpu")
    shapes = candidates(profile, work, overhead_s=600)
    assert {s.cpus for s in shapes} == {1, 2, 4, 8, 16, 32, 64}
    assert all(s.gpus == 0 and s.cpus_per_node > 0 for s in shapes)
    assert {s.time_limit for s in shapes} == {6 * H, 12 * H, 24 * H, 48 * H, 7 * 24 * H}
    habit = habitual_shape(profile, work)
    assert habit == Shape("default", 1, 0, 7 * 24 * H, 32) and habit.size("cpu") == 32
    with pytest.raises(PlanInputError, match="no candidate shape fits"):
        candidates(profile, parse_work("96h@4gpu"))  # GPU work: no partition has GPUs


def test_default_candidates_come_from_the_profile() -> None:
    profile = load_profile("models/ls6/profile.toml")
    shapes = candidates(profile, parse_work("96h@4gpu"), overhead_s=600)
    assert {s.time_limit for s in shapes} == {6 * H, 12 * H, 24 * H, 48 * H}  # max 48 h
    assert {s.gpus for s in shapes} == {1, 2, 3, 4, 6}
    assert habitual_shape(profile, parse_work("96h@4gpu")) == Shape("gpu-a100", 2, 2, 48 * H)


def test_no_candidate_left_is_one_clear_error() -> None:
    with pytest.raises(PlanInputError, match="no candidate shape fits"):
        candidates(toy_profile(4), parse_work("9h@4gpu"), limits_s=[600], overhead_s=600)


# ---- the queue pass ------------------------------------------------------------------------


def test_queue_pass_fits_a_cpu_shape_beside_the_jobs_that_share_its_node() -> None:
    """2 CPU-only nodes of 32 CPUs, each with a running 20-CPU job for 5 more hours: 12
    CPUs start now beside it, 16 wait for it to end, and 2 x 12 (a CPU shape over two
    nodes) also starts now; planned GPU-style (whole nodes), 12 CPUs would wait too."""
    profile = toy_profile(2, gpus_per_node=0)
    jobs = [record(f"r{k}", JobState.RUNNING, start=NOW - 5 * H, cpus=20, gpus=0)
            for k in range(2)]  # fmt: skip
    q = Snapshot(QueueSnapshot(taken_at=NOW, jobs=tuple(jobs)), profile, NOW, RunTimes())
    shapes = [Shape("gpu", 1, 0, 6 * H, 12), Shape("gpu", 1, 0, 6 * H, 16),
              Shape("gpu", 2, 0, 6 * H, 12), Shape("gpu", 1, 0, 6 * H)]  # fmt: skip
    assert start_times(q, shapes) == [NOW, NOW + 5 * H, NOW, NOW + 5 * H]
    assert start_times(q, shapes, method="simulate") == [NOW, NOW + 5 * H, NOW, NOW + 5 * H]


def test_queue_pass_keeps_running_jobs_on_the_nodes_they_hold() -> None:
    """2 nodes of 32 CPUs, a 12-CPU job running on each (squeue's node list): 40 CPUs are
    free but no node is, so a whole node waits for the first to end (3 h). Re-packed (no
    node list, or names the profile does not have) both would share one node and the
    other would start now."""
    profile = toy_profile(2, gpus_per_node=0)
    jobs = [record(f"r{k}", JobState.RUNNING, start=NOW - H, cpus=12, gpus=0,
                   time_limit=(4 + 2 * k) * H, node_list=(f"gpu-000{k}",))
            for k in range(2)]  # fmt: skip
    shapes = [Shape("gpu", 1, 0, 6 * H, 32), Shape("gpu", 1, 0, 6 * H, 20)]

    def starts(listed: list[SlurmJob], method: str = "plan") -> list[int]:
        q = Snapshot(QueueSnapshot(taken_at=NOW, jobs=tuple(listed)), profile, NOW, RunTimes())
        return start_times(q, shapes, method=method)

    assert starts(jobs) == [NOW + 3 * H, NOW]
    assert starts(jobs, "simulate") == [NOW + 3 * H, NOW]
    unplaced = [replace(j, node_list=()) for j in jobs]
    assert starts(unplaced) == [NOW, NOW]
    unknown = [replace(j, node_list=("elsewhere",)) for j in jobs]
    assert starts(unknown) == [NOW, NOW]


def test_simulation_pins_a_job_to_its_nodes_only_where_they_fit() -> None:
    sim = Simulation(toy_profile(2, gpus_per_node=0), start_time=NOW)
    a, b, c = (sim.add_job(JobSpec(submit=NOW, run=H, time_limit=H, nodes=1, partition="gpu",
                                   cpus=n, user="ann")) for n in (12, 12, 30))  # fmt: skip
    assert sim.pin(b, ["gpu-0001"])
    assert sim.pin(c, ["gpu-0001"])  # b takes it first: c goes where it fits
    assert not sim.pin(a, ["gpu-0007"]) and not sim.pin(a, ["gpu-0000", "gpu-0001"])
    sim.run_until(NOW)
    assert sim.nodes_of(a) == ["gpu-0000"] and sim.nodes_of(b) == ["gpu-0001"]
    assert sim.nodes_of(c) == []  # 20 CPUs left on each node: it waits


def test_queue_pass_finds_the_hole_a_short_limit_backfills_into() -> None:
    q = hole_queue()
    short, long = Shape("gpu", 1, 4, 6 * H), Shape("gpu", 1, 4, 12 * H)
    assert start_times(q, [short, long]) == [NOW + H, NOW + 15 * H]


def test_queue_pass_agrees_with_the_event_simulation_on_the_hole() -> None:
    q = hole_queue()
    shapes = [Shape("gpu", 1, 4, 6 * H), Shape("gpu", 1, 4, 12 * H), Shape("gpu", 2, 4, 8 * H)]
    planned = start_times(q, shapes)
    simulated = start_times(q, shapes, method="simulate")
    # the simulator backfills at its next 30-s pass; the plan steps 15 minutes
    assert all(abs(a - b) <= 900 for a, b in zip(planned, simulated, strict=True))


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        start_times(hole_queue(), [Shape("gpu", 1, 4, H)], method="guess")


# ---- completion and ranking ------------------------------------------------------------


def test_segments_count_the_restart_overhead() -> None:
    assert segments_for(30 * H, 6 * H, 0) == 5
    assert segments_for(30 * H, 6 * H, H) == 6  # 5 useful hours each
    with pytest.raises(PlanInputError, match="no time for work"):
        segments_for(30 * H, H, H)


def test_short_limit_that_backfills_beats_the_habitual_shape() -> None:
    q = hole_queue()
    work = parse_work("30h@4gpu")
    shapes = candidates(q.profile, work, sizes=[4], limits_s=[6 * H, 12 * H])
    habit = habitual_shape(q.profile, work)
    plan = plan_chain(q, work, shapes, habitual=habit)
    best = plan.recommended
    # 5 segments of 6 h, each waiting the hour the first waits: 1 + 30 + 4 x 1 h
    assert (best.shape.time_limit, best.segments, best.completion) == (6 * H, 5, NOW + 35 * H)
    assert plan.candidates[1].completion == NOW + (15 + 30 + 2 * 15) * H
    assert plan.habitual is not None
    assert plan.habitual.completion == NOW + 45 * H  # one 7-day segment after the big job
    assert best.resource_hours == 5 * 6 * 4
    data = plan.to_dict()
    assert data["recommended"]["time_limit_s"] == 6 * H
    assert len(data["candidates"]) == 2
    text = "\n".join(plan_lines(data))
    assert "recommended: gpu, 4 gpu (1x4), --time=0-06:00:00: 5 segment(s)" in text
    assert "22% sooner" in text  # 35 h against 45 h


def test_a_habitual_shape_sooner_than_every_candidate_asked_for_is_said_so() -> None:
    """The trial's "recommended -1m00s earlier": candidates restricted to a long limit
    that waits for the big job, the habitual 7-day shape no later; the line now says the
    habitual one is sooner and why it is not the recommendation."""
    q = hole_queue()
    work = parse_work("30h@4gpu")
    shapes = candidates(q.profile, work, sizes=[4], limits_s=[12 * H])
    plan = plan_chain(q, work, shapes, habitual=habitual_shape(q.profile, work))
    assert plan.habitual is not None
    assert plan.habitual.completion < plan.recommended.completion
    text = "\n".join(plan_lines(plan.to_dict()))
    assert "earlier" not in text, text
    assert "sooner than the recommendation: it is not among the candidates asked for" in text


def test_the_habitual_shape_recommended_is_said_plainly() -> None:
    q = hole_queue()
    work = parse_work("30h@4gpu")
    habit = habitual_shape(q.profile, work)
    plan = plan_chain(q, work, [habit], habitual=habit)
    text = "\n".join(plan_lines(plan.to_dict()))
    assert "the recommendation is the habitual shape" in text and "earlier" not in text


def test_in_a_tie_a_partition_without_a_per_user_cap_ranks_first() -> None:
    """The trial: partition "capped" (its QOS lets a user run 2 jobs) ranked first among
    shapes that finish together, by its name alone."""
    from mirage.profile.schema import Qos

    base = toy_profile(4)
    gpu = base.partitions[0]
    capped = replace(gpu, name="capped", default=False, qos="capped")
    free = replace(gpu, name="open", default=False, qos="plain")
    profile = replace(
        base,
        partitions=(gpu, capped, free),
        qos=(Qos("capped", max_jobs_per_user=2), Qos("plain")),
    )
    q = Snapshot(QueueSnapshot(taken_at=NOW, jobs=()), profile, NOW, RunTimes())
    work = parse_work("10h@4gpu")
    shapes = [Shape(p, 1, 4, 12 * H) for p in ("capped", "open")]
    ranked = plan_chain(q, work, shapes).candidates
    assert ranked[0].completion == ranked[1].completion
    assert [c.shape.partition for c in ranked] == ["open", "capped"]


def test_overhead_and_later_wait_share_enter_the_completion() -> None:
    q = hole_queue()
    work = parse_work("30h@4gpu")
    shape = [Shape("gpu", 1, 4, 6 * H)]
    o = Options(overhead_s=H, later_wait_share=0.5)
    c = plan_chain(q, work, shape, options=o).recommended
    # 6 segments of 5 useful hours; runs 30 h + 6 x 1 h; later waits half of the hour
    assert (c.segments, c.run_s, c.later_wait_s) == (6, 36 * H, H // 2)
    assert c.completion == NOW + H + 36 * H + 5 * (H // 2)


def test_draws_give_an_interval_around_the_point() -> None:
    q = hole_queue()
    rt = RunTimes()
    for r in (0.2, 0.5, 0.9, 1.0):
        rt.add("ann", int(r * 10 * H), 10 * H)
    q = Snapshot(q.snapshot, q.profile, NOW, rt)
    work = parse_work("30h@4gpu")
    c = plan_chain(q, work, [Shape("gpu", 1, 4, 6 * H)], options=Options(draws=8)).recommended
    lo, hi = c.interval
    assert lo <= c.completion <= hi
    assert lo < hi  # the drawn runs of the queue spread the first wait


def test_a_forecaster_gives_the_later_waits_and_the_interval() -> None:
    q = hole_queue()
    work = parse_work("30h@4gpu")

    def forecast(shapes: object) -> list[tuple[int, int, int] | None]:
        return [(0, 2 * H, 5 * H)]

    c = plan_chain(q, work, [Shape("gpu", 1, 4, 6 * H)], forecast=forecast).recommended
    assert (c.source, c.first_wait_s, c.later_wait_s) == ("forecast", H, 2 * H)
    assert c.completion == NOW + H + 30 * H + 4 * 2 * H
    assert c.interval == (NOW + 30 * H, NOW + 5 * H + 30 * H + 4 * 5 * H)


def test_read_snapshot_from_the_simulator_backend() -> None:
    sim = Simulation(toy_profile(4), start_time=NOW - 20 * H)
    client = SimSlurmClient(sim, user="ann")
    for _ in range(4):
        client.submit(SubmitRequest(time_limit=2 * H, nodes=1, gres="gpu:4"))
    client.advance_to(NOW - H)  # four jobs finished: run-time history
    for _ in range(6):
        client.submit(SubmitRequest(time_limit=8 * H, nodes=1, gres="gpu:4"))
    client.advance_to(NOW)
    q = read_snapshot(client, toy_profile(4), user="ann")
    assert q.now == NOW and len(q.snapshot.jobs) == 6
    assert isinstance(q.runtimes, RunTimes) and len(q.runtimes) == 4
    plan = plan_chain(q, parse_work("16h@4gpu"), [Shape("gpu", 1, 4, 8 * H)])
    # four of the six run until NOW + 7 h (the history says jobs run to their limits),
    # two wait for them and leave two nodes
    assert plan.recommended.first_wait_s == 7 * H


def test_fast_draws_are_the_look_ahead_s_draws() -> None:
    rt = RunTimes()
    for r in (0.05, 0.2, 0.5, 0.9, 1.0):
        rt.add("ann", int(r * 10 * H), 10 * H)
    jobs = [record(str(k), JobState.PENDING, time_limit=(k % 7 + 1) * H) for k in range(40)]
    jobs.append(record("r", JobState.RUNNING, start=NOW - 2 * H))
    for k in range(3):
        slow, fast = rt.drawn(k), FastDraw(rt, k)
        for j in jobs:
            assert abs(slow.predict_job(j, NOW) - fast.predict_job(j, NOW)) <= 1
