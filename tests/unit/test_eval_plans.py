"""The plan evaluation (issue 30, item 3): chain decision points from a trace, the
counterfactual per shape, the planner's path, and the figures and targets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.evaluate.chainwork import ChainPoint, chain_points, thin
from mirage.evaluate.plans import (
    PlanProtocol,
    PlanRecord,
    grid,
    record_point,
    run_fixed,
    run_planned,
    work_of,
)
from mirage.evaluate.planstats import render, summarize
from mirage.evaluate.protocol import Protocol
from mirage.plan import Shape
from mirage.profile.schema import ClusterProfile
from mirage.sim import Simulation
from mirage.sim.scenario import job, toy_profile

H = 3600
NOW = 1_000_000
REPO = Path(__file__).resolve().parents[2]
#: sizes of 4 and 8 GPUs (one and two whole nodes of the toy cluster), 10 minutes lost
#: at every segment's start
PP = PlanProtocol(sizes=(1, 2), unit="node", limits_s=(6 * H, 12 * H), horizon_s=3 * 86400)


def profile() -> ClusterProfile:
    """Two nodes of 4 GPUs, a 48-hour maximum limit."""
    base = toy_profile(2)
    part = dataclasses.replace(base.partitions[0], max_time_s=48 * H)
    return dataclasses.replace(base, partitions=(part,))


def sim_at(*jobs: object) -> Simulation:
    sim = Simulation(profile(), start_time=NOW)
    sim.add_jobs_skipping_invalid(list(jobs))  # type: ignore[arg-type]
    sim.run_until(NOW)
    return sim


POINT = ChainPoint(t=NOW, nodes=1, gpus=4, work_s=10 * H, full_work_s=10 * H)


# ---- decision points from the trace's chains ----------------------------------------------


def chain_table() -> pd.DataFrame:
    """One chain of three numbered segments (runs 6 h, 8 h, 4 h), resubmitted at each end,
    and a lone job."""
    rows, t = [], NOW
    for k, run in enumerate((6 * H, 8 * H, 4 * H), start=1):
        rows.append(dict(user="u", name=f"train.{k}", submit=t, start=t, end=t + run, nodes=2))
        t += run
    rows.append(dict(user="v", name="lone", submit=NOW, start=NOW, end=NOW + H, nodes=1))
    df = pd.DataFrame(rows)
    for col in ("submit", "start", "end", "nodes"):
        df[col] = df[col].astype("Int64")
    df["eligible"] = df["submit"]
    df["time_limit"] = pd.array([10 * H] * len(df), dtype="Int64")
    df["gpus"] = df["cpus"] = pd.array([pd.NA] * len(df), dtype="Int64")
    df["partition"] = ""
    return df


def test_decision_points_are_segment_ends_with_the_later_runs_as_work() -> None:
    pts = chain_points(chain_table(), profile(), None, 0, NOW + 100 * H,
                       min_work_s=H, max_work_s=100 * H)  # fmt: skip
    # after segment 1: 8 h + 4 h left; after segment 2: 4 h; whole nodes: 2 x 4 GPUs
    assert [(p.t - NOW, p.work_s, p.nodes, p.gpus) for p in pts] == [
        (6 * H, 12 * H, 2, 8),
        (14 * H, 4 * H, 2, 8),
    ]
    fewer = chain_points(chain_table(), profile(), None, 0, NOW + 100 * H,
                         min_work_s=5 * H, max_work_s=10 * H)  # fmt: skip
    assert [(p.work_s, p.full_work_s) for p in fewer] == [(10 * H, 12 * H)]  # capped


def test_thin_takes_the_first_point_at_or_after_each_grid_time_once() -> None:
    pts = [ChainPoint(t, 1, 4, H, H) for t in (0, 10, 11, 50)]
    assert [p.t for p in thin(pts, 20, 0)] == [0, 50]  # grid 0 -> 0; 20, 40 -> 50 once
    with pytest.raises(ValueError, match="positive"):
        thin(pts, 0, 0)


# ---- the counterfactual per shape ---------------------------------------------------------


def test_grid_is_the_fixed_limits_and_sizes_plus_the_habit() -> None:
    shapes, habit = grid(profile(), None, POINT, PP)
    assert shapes[habit] == Shape("gpu", 1, 4, 48 * H)  # its request at the maximum limit
    assert {(s.gpus, s.time_limit) for s in shapes} == {
        (g, lim) for g in (4, 8) for lim in (6 * H, 12 * H, 48 * H)
    }


def test_an_empty_cluster_runs_the_work_plus_one_overhead_per_segment() -> None:
    sim = sim_at()
    work = work_of(POINT)
    # 6-hour segments on 4 GPUs: 5h50m of work each, so two of them
    assert run_fixed(sim, Shape("gpu", 1, 4, 6 * H), work, PP) == NOW + 10 * H + 2 * 600
    # 8 GPUs halve the work (linear scaling): one segment
    assert run_fixed(sim, Shape("gpu", 2, 4, 12 * H), work, PP) == NOW + 5 * H + 600
    assert sim.now == NOW and not sim.running  # the replay itself is not changed


def test_the_truth_sees_later_arrivals_the_planner_does_not() -> None:
    # a job for both nodes arrives in an hour: it waits for the first segment, then runs
    # 20 h before the second segment can start
    sim = sim_at(job(NOW + H, 20 * H, nodes=2))
    rec = record_point(sim, Protocol(), POINT, PP)
    shapes = [Shape("gpu", *map(int, row)) for row in rec.shapes]
    done = dict(zip(shapes, (rec.done - NOW).tolist(), strict=True))
    assert done[Shape("gpu", 1, 4, 6 * H)] == 26 * H + (4 * H + 10 * 60 + 600)
    assert done[Shape("gpu", 1, 4, 48 * H)] == 10 * H + 600  # the habit: one segment
    # two nodes are free now: 5 h of work at 8 GPUs, done before the big job arrives
    assert rec.done.min() - NOW == 5 * H + 600
    assert rec.planned_done == rec.done.min() and not rec.planned_censored
    assert not rec.censored.any()


def test_a_chain_not_done_by_the_horizon_is_censored_at_it() -> None:
    sim = sim_at(job(NOW, 100 * H, nodes=2))  # both nodes busy past the horizon
    pp = dataclasses.replace(PP, horizon_s=50 * H)
    rec = record_point(sim, Protocol(), POINT, pp)
    assert rec.censored.all() and rec.planned_censored
    assert (rec.done == NOW + 50 * H).all() and rec.planned_done == NOW + 50 * H


def test_the_planner_is_asked_before_every_segment_unless_replanning_is_off() -> None:
    shapes = [Shape("gpu", 1, 4, 6 * H)]  # one choice: two segments
    work = work_of(POINT)
    for replan in (True, False):
        out = run_planned(sim_at(), shapes, work, dataclasses.replace(PP, replan=replan))
        assert out.shapes == shapes * 2
        assert out.done == run_fixed(sim_at(), shapes[0], work, PP)


def cpu_profile() -> ClusterProfile:
    """Two nodes of 32 CPUs and no GPU, a 48-hour maximum limit (CERIT's kind)."""
    base = toy_profile(2, gpus_per_node=0)
    part = dataclasses.replace(base.partitions[0], max_time_s=48 * H)
    return dataclasses.replace(base, partitions=(part,))


CPU_PP = dataclasses.replace(PP, unit="cpu", cpu_scales=(0.25, 0.5, 1.0, 2.0, 4.0))
CPU_POINT = ChainPoint(t=NOW, nodes=1, gpus=0, work_s=10 * H, full_work_s=10 * H, cpus=6)


def test_cpu_grid_scales_the_chains_own_cpus() -> None:
    shapes, habit = grid(cpu_profile(), None, CPU_POINT, CPU_PP)
    assert shapes[habit] == Shape("gpu", 1, 0, 48 * H, 6)  # its request at the maximum
    # 6 x (1/4, 1/2, 1, 2, 4): 1.5 is no CPU count; 24 fits one node
    assert {s.cpus for s in shapes} == {3, 6, 12, 24}
    assert all(s.gpus == 0 for s in shapes)


def test_cpu_shapes_share_nodes_with_the_jobs_on_them() -> None:
    """Each node has a 20-CPU job for 30 h: 12 free CPUs per node now. 3 and 6 CPUs
    start now; 12 too (one node's free CPUs); 24 waits 30 h for a node."""
    sim = Simulation(cpu_profile(), start_time=NOW)
    sim.add_jobs_skipping_invalid([dataclasses.replace(job(NOW, 30 * H), cpus=20)
                                   for _ in range(2)])  # fmt: skip
    sim.run_until(NOW)
    rec = record_point(sim, Protocol(), CPU_POINT, CPU_PP)
    assert rec.size == 6 and rec.shapes.shape[1] == 4
    done = {(int(r[0]) * int(r[3]), int(r[2])): int(d - NOW)
            for r, d in zip(rec.shapes, rec.done, strict=True)}  # fmt: skip
    # 10 h at 6 CPUs is 5 h at 12 (linear), one 12-hour segment with its overhead
    assert done[(12, 12 * H)] == 5 * H + 600
    assert done[(24, 12 * H)] == 30 * H + round(2.5 * H) + 600  # after the 20-CPU jobs
    assert done[(6, 48 * H)] == 10 * H + 600  # the habit
    assert rec.done.min() - NOW == 5 * H + 600
    assert rec.planned_done - NOW == 5 * H + 600  # the planner sees the free CPUs


def test_cpu_plans_are_asked_for_on_a_partition_without_gpus(tmp_path: Path) -> None:
    """The auto unit is a CPU on CERIT's kind of partition; a GPU grid there is one line."""
    from mirage.evaluate.inputs import InputError
    from mirage.evaluate.planrun import _unit

    df = chain_table()
    assert _unit(PlanProtocol(), df, gpus_per_node=0).unit == "cpu"
    assert _unit(PlanProtocol(), df, gpus_per_node=4).unit == "node"
    with pytest.raises(InputError, match="no GPUs"):
        _unit(PlanProtocol(unit="gpu"), df, gpus_per_node=0)


def test_cpu_scales_count_only_in_a_cpu_protocols_cache_tag() -> None:
    assert PP.tag() == dataclasses.replace(PP, cpu_scales=(1.0,)).tag()
    assert CPU_PP.tag() != dataclasses.replace(CPU_PP, cpu_scales=(1.0,)).tag()


# ---- figures and targets ------------------------------------------------------------------


def fake(t: int, habitual_h: float, planned_h: float, best_h: float) -> PlanRecord:
    done = np.array([t + round(habitual_h * H), t + round(best_h * H)], np.int64)
    return PlanRecord(
        t=t, size=4, work_s=H, shapes=np.array([[1, 4, 48 * H], [2, 4, 6 * H]]), habitual=0,
        done=done, censored=np.zeros(2, bool), planned_done=t + round(planned_h * H),
        planned_censored=False, planned_shapes=np.array([1]), plan_s=0.0, wall_s=0.0,
    )  # fmt: skip


def test_targets_need_the_gain_a_paired_interval_below_zero_and_the_best_near() -> None:
    rng = np.random.default_rng(1)
    hab = 20 + rng.uniform(0, 10, 40)
    s = summarize([fake(k, h, 0.52 * h, 0.5 * h) for k, h in enumerate(hab)], boot=300)
    assert s["best_gain"]["value"] == pytest.approx(0.5, abs=1e-4)
    assert s["planned_gain"]["value"] == pytest.approx(0.48, abs=1e-4)
    assert s["planned_minus_habitual"]["hi"] < 0
    assert s["targets"] == {"gain": True, "near_best": True}
    assert s["planned_share_of_best_gain"]["value"] == pytest.approx(0.96, abs=1e-3)
    habit = summarize([fake(k, h, h, 0.5 * h) for k, h in enumerate(hab)], boot=300)
    assert habit["targets"] == {"gain": False, "near_best": False}
    small = summarize([fake(k, h, h, 0.9 * h) for k, h in enumerate(hab)], boot=300)
    assert small["targets"]["gain"] is None  # the best gains 10%: no gain target here
    table = render({"1": {"nodes": 2, **s}, "1.1": {"nodes": 2, **small}}, "title")
    assert "gain yes, within 10% of best yes" in table
    assert "gain n/a, within 10% of best NO" in table


# ---- the command ---------------------------------------------------------------------------


#: A short plan evaluation on the bundled slice: two decision points, a day's horizon.
SLICE_ARGS = [
    "evaluate", "--cluster", "ls6", "--plans",
    "--trace", str(REPO / "traces" / "ls6-a100-slice.log.gz"),
    "--profile", str(REPO / "models" / "ls6" / "profile.toml"),
    "--load", "2", "--test-split", "2023-03-08:2023-03-11", "--every-h", "12",
    "--max-samples", "2", "--plan-horizon-h", "24", "--plan-work-h", "1:8", "--boot", "100",
]  # fmt: skip


def test_evaluate_plans_on_the_bundled_slice(tmp_path: Path) -> None:
    args = [*SLICE_ARGS, "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "out" / "plans-ls6-load2.json").read_text())
    load = report["loads"]["2"]
    assert load["n"] == report["samples"] > 0
    assert load["best"]["value"] <= min(load["habitual"]["value"], load["planned"]["value"])
    assert report["plan_protocol"]["unit"] == "node"  # whole-node requests: sizes in nodes
    again = CliRunner().invoke(main, [*args, "--json"])  # from the cache
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["loads"]["2"]["planned"] == load["planned"]


def test_plan_fit_writes_the_calibration_the_next_run_plans_with(tmp_path: Path) -> None:
    """--plan-fit: pairs from the tuning split (every grid shape's truth beside both of
    the planner's readings), the calibration written, the test split planned with it and
    the uncalibrated figures beside; a later run reads the file from --models."""
    from mirage.plan.calibrate import read_calibration

    models = tmp_path / "models"
    base = [*SLICE_ARGS, "--cache", str(tmp_path / "cache"), "--models", str(models)]
    fitted = [*base, "--tune-split", "2022-11-06:2022-11-12", "--plan-fit", str(models),
              "--out", str(tmp_path / "a")]  # fmt: skip
    res = CliRunner().invoke(main, fitted)
    assert res.exit_code == 0, res.output
    cal = read_calibration(models)
    assert cal is not None and sum(cal.pairs) > 0
    report = json.loads((tmp_path / "a" / "plans-ls6-load2.json").read_text())
    assert report["calibration_fit"]["samples"] == 2
    assert report["calibration"]["alpha"] == list(cal.alpha)
    load = report["loads"]["2"]
    assert set(load["uncalibrated"]) >= {"planned", "planned_over_best"}
    assert "without it: planned" in res.output
    again = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "b"), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["calibration"]["alpha"] == list(cal.alpha)
    off = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "c"), "--json",
                                    "--plan-no-calibration"])  # fmt: skip
    assert off.exit_code == 0, off.output
    assert "calibration" not in json.loads(off.output)
    (models / "plan.toml").write_text("[waits]\nnode_edges = [1]\n")
    bad = CliRunner().invoke(main, [*base, "--out", str(tmp_path / "d")])
    assert bad.exit_code == 2 and "plan.toml" in bad.output
