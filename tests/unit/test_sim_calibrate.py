"""Dependency holds, the calibration cut-off, and recovering a known node count."""

from __future__ import annotations

import random
import tomllib
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mirage.profile.schema import profile_from_dict
from mirage.sim import JobSpec, Simulation
from mirage.sim.calibrate import calibrate, calibrated_toml
from mirage.sim.prepare import compare, ks_distance, prepare_trace, replay, restrict
from mirage.sim.scenario import toy_profile
from mirage.slurm.syntax import parse_when
from mirage.trace.chains import find_chains
from mirage.trace.schema import conform

H = 3600


def chain_table() -> pd.DataFrame:
    """dimer.1..3 submitted together, each starting as the previous one ends; a lone job;
    run.1 -> run.2 resubmitted after run.1 ended (a chain, but not a hold)."""
    rows = [
        ("10", "u1", "dimer.1", 1000, 1000, 1000 + 2 * H),
        ("11", "u1", "dimer.2", 1000, 1000 + 2 * H + 5, 1000 + 4 * H),
        ("12", "u1", "dimer.3", 1000, 1000 + 4 * H + 30, 1000 + 5 * H),
        ("13", "u2", "lone", 2000, 2100, 2100 + H),
        ("14", "u3", "run.1", 1500, 1500, 1500 + H),
        ("15", "u3", "run.2", 1500 + H + 100, 1500 + H + 200, 1500 + 2 * H),
    ]
    return conform(
        pd.DataFrame(
            {
                "job_id": [r[0] for r in rows],
                "user": [r[1] for r in rows],
                "name": [r[2] for r in rows],
                "submit": [r[3] for r in rows],
                "start": [r[4] for r in rows],
                "end": [r[5] for r in rows],
                "time_limit": [5 * H] * len(rows),
                "nodes": [1] * len(rows),
                "exit_code": [0] * len(rows),
            }
        )
    )


def by_trace_id(jobs: list[JobSpec]) -> dict[str, tuple[int, JobSpec]]:
    return {j.trace_id: (k + 1, j) for k, j in enumerate(jobs)}


def test_chain_submitted_together_becomes_afterany_dependencies() -> None:
    prep = prepare_trace(chain_table(), toy_profile(4), warmup_s=0)
    h = prep.holds
    assert (h.source, h.held, h.dependencies, h.begin_fallback) == ("chains", 2, 2, 0)
    jobs = by_trace_id(prep.jobs)
    assert jobs["11"][1].dependency == f"afterany:{jobs['10'][0]}"
    assert jobs["12"][1].dependency == f"afterany:{jobs['11'][0]}"
    for tid in ("10", "13", "14", "15"):  # run.2 came after run.1 ended: no hold
        assert jobs[tid][1].dependency == ""
    waits = dict(zip([j.trace_id for j in prep.jobs], prep.real_waits, strict=True))
    assert waits["11"] == 5  # from dimer.1's end, not 2 h from submit
    assert waits["12"] == 30
    assert h.real_mean_wait_submit_s > h.real_mean_wait_eligible_s
    # in the simulator, each segment starts when the previous one ends
    rep = replay(prep, toy_profile(4), 4)
    views = {v.spec.trace_id: v for v in rep.sim.all_jobs()}
    assert views["11"].start == views["10"].end
    assert views["12"].start == views["11"].end
    assert compare(prep, rep.sim).sim_mean_s == 0  # every wait from eligible is zero


def test_no_holds_keeps_the_raw_waits() -> None:
    prep = prepare_trace(chain_table(), toy_profile(4), holds=False, warmup_s=0)
    assert prep.holds.source == "off" and prep.holds.held == 0
    assert all(j.dependency == "" for j in prep.jobs)
    waits = dict(zip([j.trace_id for j in prep.jobs], prep.real_waits, strict=True))
    assert waits["11"] == 2 * H + 5


def test_dropped_predecessor_falls_back_to_a_begin_time() -> None:
    df = chain_table()
    df.loc[df["job_id"] == "10", "nodes"] = 9  # larger than the cluster: dropped
    prep = prepare_trace(df, toy_profile(4), max_nodes=4, warmup_s=0)
    assert (prep.holds.dependencies, prep.holds.begin_fallback) == (1, 1)
    dimer2 = by_trace_id(prep.jobs)["11"][1]
    assert dimer2.dependency == "" and dimer2.begin == 1000 + 2 * H


def test_successor_submitted_first_is_numbered_after_its_predecessor() -> None:
    df = chain_table()
    df.loc[df["job_id"] == "11", "submit"] = 900  # dimer.2 submitted before dimer.1
    prep = prepare_trace(df, toy_profile(4), warmup_s=0)
    jobs = by_trace_id(prep.jobs)
    assert jobs["10"][0] < jobs["11"][0] < jobs["12"][0]
    assert prep.holds.reordered == 1
    Simulation(toy_profile(4)).add_jobs(prep.jobs)  # every parent exists when referenced


def test_trace_eligible_times_are_used_instead_of_chains() -> None:
    df = chain_table()
    df["eligible"] = df["submit"].astype("Int64")
    df.loc[df["job_id"] == "11", "eligible"] = 1000 + 2 * H
    df.loc[df["job_id"] == "12", "eligible"] = pd.NA  # not recorded: chains stand in
    df = conform(df)
    prep = prepare_trace(df, toy_profile(4), warmup_s=0)
    assert prep.holds.source == "eligible+chains" and prep.holds.trace_eligible == 1
    jobs = by_trace_id(prep.jobs)
    assert jobs["11"][1].dependency == "" and jobs["11"][1].begin == 1000 + 2 * H
    assert jobs["12"][1].dependency == f"afterany:{jobs['11'][0]}"  # no eligible: chains


def test_an_eligible_time_equal_to_the_submit_is_no_hold() -> None:
    """Issue 28: a trace recording every eligible time, equal to the submit for jobs that
    waited on nothing, gets no hold from chain detection (it used to invent them)."""
    df = chain_table()
    df["eligible"] = df["submit"].astype("Int64")
    df = conform(df)
    prep = prepare_trace(df, toy_profile(4), warmup_s=0)
    assert (prep.holds.source, prep.holds.held, prep.holds.dependencies) == ("eligible", 0, 0)
    assert prep.holds.chains > 0  # the chains are there; they are not read as holds
    assert all(j.dependency == "" for j in prep.jobs)


def test_real_accounting_dump_gets_holds_only_from_its_eligible_times() -> None:
    """The test cluster's own slurmdbd job table (afterok chains among its jobs): holds
    come from its time_eligible, none from chain detection."""
    from pathlib import Path

    from mirage.trace.csvmap import parse_columns
    from mirage.trace.readers import load_trace

    dump = Path(__file__).parents[1] / "data" / "trace" / "slurmdbd-job-table-testbed.csv"
    cmap = parse_columns(
        "job_id=id_job,user=id_user,name=job_name,partition=partition,state=state,"
        "submit=time_submit,eligible=time_eligible,start=time_start,end=time_end,"
        "time_limit=timelimit,nodes=nodes_alloc,gpu_tres_id=1001,tres_alloc=tres_alloc"
    )
    df = load_trace(dump, columns=cmap).jobs
    prep = prepare_trace(df, toy_profile(4), warmup_s=0)
    assert prep.holds.chains > 0 and prep.holds.trace_eligible > 0
    assert prep.holds.held == 0 and prep.holds.dependencies == 0


def test_jobs_before_the_first_start_wait_for_it() -> None:
    df = chain_table()
    df.loc[df["job_id"] == "13", "submit"] = 0  # long before anything ran
    prep = prepare_trace(df, toy_profile(4), warmup_s=0)
    assert prep.holds.before_open == 1
    lone = by_trace_id(prep.jobs)["13"][1]
    assert lone.begin == 1000  # the first start
    assert prep.opened == 1000


def test_warmup_excludes_early_jobs_from_the_comparison() -> None:
    prep = prepare_trace(chain_table(), toy_profile(4), warmup_s=400)
    measured = {j.trace_id for j, m in zip(prep.jobs, prep.measured, strict=True) if m}
    assert measured == {"13", "14", "15"}


def test_ks_distance() -> None:
    a = np.array([0.0, 1.0, 2.0, 3.0])
    assert ks_distance(a, a) == 0
    assert ks_distance(a, a + 10) == 1
    assert ks_distance(a, np.array([0.0, 1.0, np.inf, np.inf])) == 0.5


# ---- the cut-off ---------------------------------------------------------------------

CUTOFF = parse_when("2023-03-01", "America/Chicago")


def two_months() -> pd.DataFrame:
    """One job an hour through February and March 2023 (a few in chains)."""
    rng = random.Random(3)
    t0 = parse_when("2023-02-01", "America/Chicago")
    rows = []
    for k in range(24 * 58):
        submit = t0 + k * H
        rows.append((str(k), f"u{k % 7}", f"job.{k}", submit, submit + rng.randint(0, 600),
                     rng.randint(600, 4 * H)))  # fmt: skip
    df = pd.DataFrame(rows, columns=["job_id", "user", "name", "submit", "start", "run"])
    df["end"] = df["start"] + df["run"]
    df["time_limit"] = 4 * H
    df["nodes"] = 1
    return conform(df)


def test_cutoff_is_read_in_the_profile_zone() -> None:
    assert int(pd.Timestamp("2023-03-01 06:00", tz="UTC").timestamp()) == CUTOFF


def test_restrict_keeps_only_rows_before_the_cutoff() -> None:
    df = two_months()
    kept = restrict(df, CUTOFF)
    assert len(kept) == 28 * 24
    assert int(kept["submit"].max()) < CUTOFF


def test_march_never_reaches_chain_detection_or_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fit never sees March: every replay and chain detection of the search has only
    February. Only the held-out check, once the size is chosen, replays March (the last
    replay and the last chain detection)."""
    seen: list[int] = []  # per replay: the latest submit it was given
    chained: list[int] = []

    class Recording(Simulation):
        def add_jobs(self, specs: Any) -> list[str]:
            specs = list(specs)
            seen.append(max(max(s.real_submit or 0, s.submit) for s in specs))
            return super().add_jobs(specs)

    def recording_find(df: pd.DataFrame, *a: Any, **k: Any) -> Any:
        chained.append(int(df["submit"].max()))
        return find_chains(df, *a, **k)

    monkeypatch.setattr("mirage.sim.prepare.Simulation", Recording)
    monkeypatch.setattr("mirage.sim.prepare.find_chains", recording_find)
    monkeypatch.setattr("mirage.sim.calibrate.find_chains", recording_find)  # the search's
    df = two_months()
    result = calibrate(df, toy_profile(4), CUTOFF, nodes_min=1, nodes_max=3, coarse_step=2)
    assert len(seen) > 1 and max(seen[:-1]) < CUTOFF <= seen[-1]
    assert len(chained) > 1 and max(chained[:-1]) < CUTOFF <= chained[-1]
    assert result.jobs == 28 * 24
    assert result.held_out is not None and result.held_out.jobs > 0


# ---- recovering a known node count ---------------------------------------------------


def synthetic_trace(nodes: int, n: int = 400, seed: int = 7) -> pd.DataFrame:
    """Jobs replayed on ``nodes`` nodes; their simulated starts become the 'real' ones."""
    rng = random.Random(seed)
    t, specs = 0, []
    for _ in range(n):
        t += int(rng.expovariate(1 / 700))
        limit = rng.choice([1800, 3600, 4 * H, 8 * H])
        run = max(60, min(limit, int(rng.expovariate(3 / limit))))
        size = rng.choice([1, 1, 1, 1, 2, 2, 4])
        specs.append(JobSpec(submit=t, run=run, time_limit=limit, nodes=size, partition="gpu"))
    sim = Simulation(toy_profile(nodes))
    sim.add_jobs(specs)
    sim.run()
    views = sim.all_jobs()
    return conform(
        pd.DataFrame(
            {
                "job_id": [v.job_id for v in views],
                "submit": [v.spec.submit for v in views],
                "start": [v.start for v in views],
                "end": [v.end for v in views],
                "time_limit": [v.spec.time_limit for v in views],
                "nodes": [v.spec.nodes for v in views],
            }
        )
    )


def test_calibration_recovers_the_node_count() -> None:
    df = synthetic_trace(nodes=10)
    waits = (df["start"] - df["submit"]).astype(float)
    assert (waits > 0).mean() > 0.3  # loaded enough for the node count to matter
    result = calibrate(df, toy_profile(4), before=10**12, nodes_min=4, nodes_max=24,
                       coarse_step=4, warmup_s=0)  # fmt: skip
    assert abs(result.best.nodes - 10) <= 1
    assert result.best.ks < 0.05
    assert result.profile.partition().nodes == result.best.nodes
    text = calibrated_toml(result, "synthetic")
    assert profile_from_dict(tomllib.loads(text)).partition().nodes == result.best.nodes


def test_calibration_cost_grows_with_the_log_of_the_coarse_step() -> None:
    """Issue 28: a coarse step of 16 (as for a big cluster) costs the coarse pass plus two
    replays per halving (8, 4, 2, 1), not every second count around the best (the fine
    pass once took about ``coarse_step`` replays), and still finds the size."""
    df = synthetic_trace(nodes=10)
    result = calibrate(df, toy_profile(4), before=10**12, nodes_min=2, nodes_max=66,
                       coarse_step=16, warmup_s=0, stop_ratio=1e9)  # fmt: skip
    coarse = 5  # 66, 50, 34, 18, 2
    assert len(result.candidates) <= coarse + 2 * 4
    assert abs(result.best.nodes - 10) <= 1


def test_the_fit_is_checked_after_the_cut_off() -> None:
    """Issue 28: the chosen size replayed on the jobs after the cut-off. A cluster that
    halved (the later half's real starts come from a 5-node run) is called out; one that
    did not is not."""
    first = synthetic_trace(nodes=10, n=300, seed=1)
    span = int(first["submit"].max()) + 6 * H
    same = synthetic_trace(nodes=10, n=300, seed=2)
    halved = synthetic_trace(nodes=5, n=300, seed=2)

    def joined(later: pd.DataFrame) -> pd.DataFrame:
        later = later.copy()
        for col in ("submit", "start", "end"):
            later[col] = later[col] + span
        later["job_id"] = "b" + later["job_id"].astype(str)
        return conform(pd.concat([first, later], ignore_index=True))

    kw: dict[str, Any] = {"nodes_min": 6, "nodes_max": 14, "coarse_step": 4, "warmup_s": 0}
    steady = calibrate(joined(same), toy_profile(4), span, **kw)
    assert steady.held_out is not None and steady.held_out.jobs > 250
    assert not [n for n in steady.notes if n.startswith("warning")]
    shrunk = calibrate(joined(halved), toy_profile(4), span, **kw)
    assert shrunk.best.nodes == steady.best.nodes  # the same data before the cut-off
    assert shrunk.held_out is not None
    assert shrunk.held_out.real_mean_s > 2 * shrunk.held_out.sim_mean_s
    [warning] = [n for n in shrunk.notes if n.startswith("warning")]
    assert "after the cut-off the fitted size does not hold" in warning
    assert "# After the cut-off (held out" in calibrated_toml(shrunk)
    assert calibrate(first, toy_profile(4), span, **kw).held_out is None  # nothing after


def test_settings_grid_is_tried_at_the_best_node_count() -> None:
    df = synthetic_trace(nodes=8, n=150)
    grid = ({"backfill": "easy"},)
    result = calibrate(df, toy_profile(4), before=10**12, nodes_min=6, nodes_max=10,
                       coarse_step=2, settings_grid=grid, warmup_s=0)  # fmt: skip
    tried = [c for c in result.candidates if c.settings]
    assert len(tried) == 1 and tried[0].settings == {"backfill": "easy"}


def test_bad_node_range() -> None:
    with pytest.raises(ValueError, match="node range"):
        calibrate(chain_table(), toy_profile(4), before=10**12, nodes_min=5, nodes_max=4)


def test_a_replay_over_budget_stops_and_counts_unstarted_jobs_as_infinite() -> None:
    df = synthetic_trace(nodes=4, n=200)
    prep = prepare_trace(df, toy_profile(4), max_nodes=2, warmup_s=0)
    rep = replay(prep, toy_profile(4), 2, budget_s=1e-9)
    assert not rep.complete
    waits = compare(prep, rep.sim)
    assert waits.unstarted > 0 and waits.ks > 0.1
    result = calibrate(df, toy_profile(4), before=10**12, nodes_min=2, nodes_max=6,
                       coarse_step=2, warmup_s=0, budget_s=1e-9)  # fmt: skip
    assert "budget" in result.notes[0]
    assert not any(c.complete for c in result.candidates)


def test_comparison_never_uses_a_real_start_after_the_cutoff() -> None:
    df = two_months()
    late = df.index[df["submit"] < CUTOFF - 3 * 86400][-1]  # submitted in February ...
    df.loc[late, "start"] = CUTOFF + 3600  # ... but started in March
    df.loc[late, "end"] = CUTOFF + 7200
    prep = prepare_trace(df, toy_profile(4), before=CUTOFF)
    starts = prep.real_start[prep.measured]
    assert starts.max() < CUTOFF
    submits = np.array([j.real_submit for j in prep.jobs])[prep.measured]
    assert submits.max() < CUTOFF - 2 * 86400  # the cool-down
    assert str(df.loc[late, "job_id"]) in {j.trace_id for j in prep.jobs}  # still replayed
