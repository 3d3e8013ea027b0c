"""The whole-chain check (mirage.demo.wholechain): chains of a fixed amount of training run
by the real daemon on the bundled ls6 slice, their jobs doing what a chain-ready job does."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from mirage.daemon.config import Config, PolicySection
from mirage.demo.run import DemoSpec, busiest_start, load_jobs
from mirage.demo.wholechain import (
    CheckSpec,
    _trained,
    run_check,
    run_pending,
    run_policy,
    transitions,
)
from mirage.profile.schema import load_profile
from mirage.sim import Simulation
from mirage.sim.calibrate import with_settings

REPO = Path(__file__).resolve().parents[2]
TRACE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
PROFILE = str(REPO / "models" / "ls6" / "profile.toml")
HOUR = 3600


@functools.cache
def busy_hour() -> int:
    """The demo's instant on the slice: an empty queue, a busy one to come."""
    profile = with_settings(load_profile(PROFILE), 70)
    jobs = load_jobs(TRACE, None, profile)
    return busiest_start(DemoSpec(profile=profile, jobs=jobs, segments=2, time_limit_s=2 * HOUR))


def spec_on(nodes: int, starts_h: tuple[float, ...], segments: int = 2) -> CheckSpec:
    profile = with_settings(load_profile(PROFILE), nodes)
    jobs = load_jobs(TRACE, None, profile)
    starts = tuple(busy_hour() + round(h * HOUR) for h in starts_h)
    return CheckSpec(profile=profile, jobs=jobs, starts=starts, segments=segments,
                     time_limit_s=2 * HOUR, poll_interval_s=60,
                     models_dir=str(REPO / "models"), model_cluster="ls6")  # fmt: skip


def warm(spec: CheckSpec) -> Simulation:
    sim = Simulation(spec.profile, start_time=min(j.submit for j in spec.jobs))
    sim.add_jobs(spec.jobs)
    sim.run_until(spec.starts[0])
    return sim


def test_early_successors_hand_over_and_the_training_is_done_in_more_segments(
    tmp_path: Path,
) -> None:
    """On a cluster large enough that every successor starts at once, a 15-minute lead with
    no guard starts each successor early: its predecessor exits the handoff window after
    (10 s). Chain 1 trains 1.25 segments (W = 1.25 x (2 h - R)), which the first segment
    cut short and a second one hold; chain 2 trains 1.75, and its two cut-short segments
    leave it short: a third. The training done is each chain's total, and the completion
    delay is the first wait and the restarts, nothing else."""
    spec = spec_on(400, (0.0, 1.0))
    base = Config(policy=PolicySection(guard="none"))
    runs, rest = run_policy(spec, warm(spec), "fixed-lead", workdir=tmp_path, base=base)
    assert rest["jobs"] > 0 and 0 < rest["utilisation"] <= 1
    assert [r.work_s for r in runs] == [spec.work_s(0), spec.work_s(1)]
    assert [len(r.views) for r in runs] == [2, 3]
    h, r = spec.cost.handoff_s, spec.cost.restart_s
    for run in runs:
        assert run.end is not None
        trans = transitions(run)
        assert trans and all(t.overlap > 0 and t.interruption == 0 for t in trans)
        for t in trans:
            assert t.pred_end == t.succ_start + h  # the handoff window, exactly
        done, _ = _trained(run.views, run.end, r)
        assert done == pytest.approx(run.work_s, abs=1)
        first_wait = (run.views[0].start or 0) - run.registered
        delay = run.end - run.registered - run.work_s
        assert delay == pytest.approx(first_wait + len(run.views) * r, abs=1)


def test_reactive_chains_cost_what_their_transitions_say() -> None:
    """Reactive submission starts nothing early: the forecast from its transitions (n0
    restarts and the idle times) is the chains' own completion delay, to the second, and
    the check runs both policies on the same registrations."""
    spec = spec_on(70, (0.0, 3.0))
    out = run_check(spec, ("reactive", "fixed-lead"))
    react = out["policies"]["reactive"]
    assert react["finished"] == 2 and react["handoffs"] == 0 and react["segments"] == 2
    assert react["forecast_s"] == pytest.approx(react["actual_s"], abs=1)
    lead = out["policies"]["fixed-lead"]
    assert lead["finished"] == 2 and lead["transitions"] >= 2
    gain = lead["against_reactive"]
    assert gain["gain_s"] == pytest.approx(react["actual_s"] - lead["actual_s"])


def test_a_running_job_completes_before_its_limit() -> None:
    """Simulation.complete: the job exits 0 now (its later end event is stale), and a job
    that is not running cannot."""
    from mirage.sim.errors import SimError
    from mirage.slurm.types import JobState

    spec = spec_on(400, (0.0,))
    sim = warm(spec)
    while not sim.running_jobs():
        sim.run_until(sim.now + HOUR)
    running = sim.running_jobs()[0]
    sim.complete(running.job_id)
    v = sim.view(running.job_id)
    assert v.state is JobState.COMPLETED and v.end == sim.now
    sim.run_until(sim.now + 3 * 86400)
    assert sim.view(running.job_id).end == v.end
    with pytest.raises(SimError, match="not running"):
        sim.complete(running.job_id)


def test_chains_that_keep_successors_pending_train_their_whole_work() -> None:
    """``pending-N``: no daemon, N successors kept pending once a chain runs. On 60 nodes
    of the slice's busy hours (successors wait hours), each chain trains its whole work
    and then leaves none of its segments running; with one pending successor nothing
    starts early (waits exceed the 2 h limit), with two the second one submitted starts
    while the first runs and takes over after the handoff window: more segments."""
    import dataclasses

    spec = dataclasses.replace(spec_on(60, (0.0, 1.0)), max_sim_s=4 * 86400)
    h, r = spec.cost.handoff_s, spec.cost.restart_s
    segments, handoffs = {}, {}
    for depth in (1, 2):
        runs, rest = run_pending(spec, warm(spec), depth)
        assert len(runs) == 2 and rest["jobs"] > 0
        for run in runs:
            assert run.end is not None
            done, _ = _trained(run.views, run.end, r)
            assert done == pytest.approx(run.work_s, abs=1)
            assert all(v.end is not None and v.end <= run.end for v in run.views)
            first = run.views[0].job_id
            assert all(pre == (job != first) for job, (_, pre) in run.submitted.items())
            for t in transitions(run):
                assert t.overlap == 0 or t.pred_end == t.succ_start + h
        segments[depth] = sum(len(run.views) for run in runs)
        handoffs[depth] = sum(t.overlap > 0 for run in runs for t in transitions(run))
    assert handoffs[1] == 0 and handoffs[2] > 0
    assert segments[2] > segments[1]
