"""The rest of the cluster (mirage.demo.cluster): a trace's own chains taken out of the
recorded jobs and run by the real daemon as their owners', on the bundled ls6 slice."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from mirage.daemon.config import Config, PolicySection
from mirage.daemon.store import new_chain_id, new_token, seeded_ids
from mirage.demo.cluster import (
    ClusterSpec,
    PolicyRun,
    TraceChain,
    Workload,
    made_of,
    renumber,
    run_cluster,
    run_policy,
    split_chains,
)
from mirage.demo.wholechain import _trained
from mirage.profile.schema import load_profile
from mirage.sim import Simulation
from mirage.sim.calibrate import with_settings
from mirage.sim.prepare import prepare_trace
from mirage.sim.views import JobView
from mirage.sim.workload import JobSpec
from mirage.slurm.types import JobState
from mirage.trace.readers import load_trace

REPO = Path(__file__).resolve().parents[2]
TRACE = str(REPO / "traces" / "ls6-a100-slice.log.gz")
PROFILE = str(REPO / "models" / "ls6" / "profile.toml")
HOUR = 3600


@functools.cache
def slice_workload(nodes: int) -> tuple[Workload, int]:
    """The slice's chains first submitted in its middle fifth, and the jobs' count."""
    profile = with_settings(load_profile(PROFILE), nodes)
    table = load_trace(TRACE, None).jobs
    jobs = prepare_trace(table, profile, max_nodes=nodes).jobs
    window = (int(table["submit"].quantile(0.4)), int(table["submit"].quantile(0.6)))
    return split_chains(table, jobs, window), len(jobs)


def five_hour_chains(nodes: int) -> ClusterSpec:
    """Three of user 00054's chains (5 h limits, registered within 4 minutes)."""
    wl, _ = slice_workload(nodes)
    mine = tuple(c for c in wl.chains if c.user == "00054" and c.time_limit_s == 5 * HOUR)[:3]
    assert len(mine) == 3
    return on(nodes, mine)


def on(nodes: int, mine: tuple[TraceChain, ...]) -> ClusterSpec:
    wl, _ = slice_workload(nodes)
    window = (mine[0].registered, mine[-1].registered + 86400)  # others counted over a day
    profile = with_settings(load_profile(PROFILE), nodes)
    workload = dataclasses.replace(wl, chains=mine, window=window)
    return ClusterSpec(profile=profile, workload=workload, max_sim_s=2 * 86400,
                       models_dir=str(REPO / "models"), model_cluster="ls6")  # fmt: skip


def warm(spec: ClusterSpec) -> Simulation:
    sim = Simulation(spec.profile, start_time=min(j.submit for j in spec.workload.jobs))
    sim.add_jobs(spec.workload.jobs)
    sim.run_until(spec.workload.window[0])
    return sim


def test_the_chains_leave_the_recorded_jobs_and_the_rest_keep_their_dependencies() -> None:
    wl, total = slice_workload(70)
    assert len(wl.chains) == 64 and wl.unmodelled == 1  # one chain's limit is 60 s, below R
    members = sum(c.segments for c in wl.chains)
    assert len(wl.jobs) == total - members
    t0, t1 = wl.window
    assert all(t0 <= c.registered < t1 and c.user for c in wl.chains)
    assert all(c.time_limit_s > 600 and len(c.chunks) == c.segments
               and all(0 <= x <= c.time_limit_s for x in c.chunks) for c in wl.chains)  # fmt: skip
    # every dependency left names an earlier job of the renumbered list
    for k, spec in enumerate(wl.jobs):
        for clause in filter(None, spec.dependency.split(",")):
            assert all(0 < int(i) <= k for i in clause.split(":")[1:])


def test_renumbering_keeps_what_a_dependency_points_at() -> None:
    def job(dep: str = "") -> JobSpec:
        return JobSpec(submit=0, run=60, time_limit=60, nodes=1, partition="gpu", dependency=dep)

    jobs = [job(), job(), job("afterany:1"), job("afterany:2:3"), job("afterok:2")]
    kept, lost = renumber(jobs, {1})  # drop the second job (id 2)
    assert [j.dependency for j in kept] == ["", "afterany:1", "afterany:2", ""]
    assert lost == 2  # the fourth job's and the fifth's dependency were on it


def test_reactive_chains_train_what_they_recorded_as_their_owner(tmp_path: Path) -> None:
    spec = five_hour_chains(70)
    run = run_policy(spec, warm(spec), "reactive", workdir=tmp_path)
    assert len(run.chains) == 3
    for tc, views, end in run.chains:
        assert end is not None and len(views) == tc.segments  # the recorded jobs, again
        assert {v.spec.user for v in views} == {"00054"}
        assert {v.spec.nodes for v in views} == {tc.shape.nodes}
        assert all(v.time_limit == tc.time_limit_s for v in views)
        done, _ = _trained(views, end, spec.cost.restart_s)
        assert done == pytest.approx(tc.work_s, abs=1)
        assert all(not run.submitted[v.job_id][1] for v in views)  # nothing pre-submitted
    parts = made_of(run, spec.workload.window)
    assert parts["handoffs"] == 0 and parts["pending_ahead_node_h"] == 0
    assert run.others["jobs"] >= 0 and 0 <= run.others["utilisation"] <= 1


def test_an_early_successor_queues_ahead_and_its_handoff_frees_nodes() -> None:
    """A 30-minute lead with no guard on an idle cluster: the successor of the slice's one
    short chain with a whole segment's work (1.5 h limit, 4,740 s trained in its second
    segment) is pre-submitted, starts at once, and its predecessor hands over 10 s later:
    node-hours freed before its limit, one more segment for what it cut short. That is with
    ``presubmit_only_limit_bound`` off: with it on (the default), the first segment's early
    end holds the successor back, and the chain runs as reactive's."""
    wl, _ = slice_workload(400)
    spec = on(400, tuple(c for c in wl.chains if c.name == "trace-545783"))
    ruled = Config(policy=PolicySection(guard="none", lead_s=1800))
    held = run_cluster(spec, ("fixed-lead",), base=ruled)["policies"]["fixed-lead"]
    assert held["made_of"]["handoffs"] == 0 and held["made_of"]["segments"] == 2
    base = Config(policy=PolicySection(guard="none", lead_s=1800,
                                       presubmit_only_limit_bound=False))  # fmt: skip
    out = run_cluster(spec, ("fixed-lead", "reactive"), base=base)
    early, react = out["policies"]["fixed-lead"], out["policies"]["reactive"]
    assert early["made_of"]["handoffs"] > 0 and early["made_of"]["freed_node_h"] > 0
    # its first segment trained 1,140 s and exited before any lead: both wait a poll there
    assert early["chains"]["idle_s"] == react["chains"]["idle_s"] == 60
    assert early["chains"]["finished"] == react["chains"]["finished"] == 1
    assert early["made_of"]["segments"] == 3 and react["made_of"]["segments"] == 2
    assert out["chains"] == 1 and set(early["others"]) == {
        "jobs",
        "mean_wait_s",
        "p90_wait_s",
        "utilisation",
    }


def test_what_the_difference_is_made_of_is_counted_inside_the_window() -> None:
    """Two-node segments of 10 h: the successor went in at 6 h, started at 8 h (2 h
    pending ahead of its predecessor's end), the predecessor handed over at 8 h (2 h
    before its limit); the window [0, 9 h) clips what ran to 8 h and 1 h."""
    spec = JobSpec(submit=0, run=10 * HOUR, time_limit=10 * HOUR, nodes=2, partition="gpu")

    def view(job_id: str, start: int, end: int) -> JobView:
        return JobView(job_id, spec, JobState.COMPLETED, "None", 0, start, end, 10 * HOUR,
                       0, None, 0, False)  # fmt: skip

    a, b = view("1", 0, 8 * HOUR + 10), view("2", 8 * HOUR, 18 * HOUR)
    chain = TraceChain("c", "u", 0, (1.0,), spec, 10 * HOUR, 2)
    run = PolicyRun([(chain, [a, b], 18 * HOUR)], {"1": (0, False), "2": (6 * HOUR, True)},
                    {}, 0)  # fmt: skip
    got = made_of(run, (0, 9 * HOUR))
    assert got["segments"] == 2 and got["handoffs"] == 1
    assert got["pending_ahead_node_h"] == pytest.approx(2 * 2)
    assert got["freed_node_h"] == pytest.approx(2 * (HOUR - 10) / HOUR)  # to 9 h only
    assert got["ran_node_h"] == pytest.approx(2 * (8 * HOUR + 10 + HOUR) / HOUR)


def test_a_replay_is_reproducible_to_the_job() -> None:
    """The daemon's chain ids and tokens order each cycle's submissions (and so the
    simulator's job ids and its ties): a simulated run draws them from a seeded generator,
    so two runs of the same replay give the same figures, chain by chain; outside a
    simulated run ids stay random."""
    spec = five_hour_chains(70)
    base = Config(policy=PolicySection(guard="none", lead_s=3 * HOUR))
    one, two = (run_cluster(spec, ("fixed-lead",), base=base) for _ in range(2))
    assert one["policies"]["fixed-lead"]["made_of"]["segments"] > 0
    for run in (one, two):
        assert run["policies"]["fixed-lead"].pop("wall_s") >= 0  # the one figure of the machine
    assert one == two
    with seeded_ids(0):
        first = [new_chain_id(), new_token()]
    with seeded_ids(0):
        assert [new_chain_id(), new_token()] == first
    assert new_chain_id() != first[0] and new_token() != first[1]
