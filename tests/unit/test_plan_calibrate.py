"""A cluster's wait calibration for plans (mirage.plan.calibrate): the fit, its file, and
what it changes in a plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mirage.plan import Options, Shape, Snapshot, parse_work, plan_chain
from mirage.plan.calibrate import (
    MIN_PAIRS,
    CalibrationError,
    WaitCalibration,
    WaitPairs,
    fit,
    picked_mean_s,
    read_calibration,
    width,
)
from mirage.policy.lookahead import RunTimes
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import job, toy_profile

H = 3600
NOW = 1_000_000


def pairs(n: int, wide_truth: float) -> WaitPairs:
    """``n`` decision points of two shapes: a narrow one (0.1 node) that runs 20 h and
    starts now by both readings, and a wide one (one node) that runs 10 h, starts now by
    predicted runs and in 30 h by limits, and truly starts ``wide_truth`` of the way."""
    k = np.repeat(np.arange(n), 2)
    wide = np.tile([False, True], n)
    limits = np.where(wide, 30 * H, 0)
    runs = np.where(wide, 10 * H, 20 * H)
    return WaitPairs(sample=k, widths=np.where(wide, 1.0, 0.1), segments=np.ones(2 * n),
                     runs_s=runs, by_runs_s=np.zeros(2 * n), by_limits_s=limits,
                     true_done_s=runs + wide_truth * limits)  # fmt: skip


def test_fit_chooses_the_alphas_whose_picks_finish_soonest() -> None:
    # the wide shape truly waits its limits: it loses (40 h against 20); any alpha that
    # predicts it over 20 h (a third of the way and more) picks the narrow one: 0.5, the
    # smallest level that does
    late = fit(pairs(30, 1.0))
    assert late.alpha == (0.0, 0.0, 0.0, 0.5, 0.5, 0.5)  # the wider classes: as class 3
    assert late.pairs == (30, 0, 0, 30, 0, 0)
    assert picked_mean_s(late, pairs(30, 1.0)) == 20 * H
    # it truly starts at once: the run-based plan (alpha 0) is right, and kept
    early = fit(pairs(30, 0.0))
    assert early.alpha == (0.0,) * 6
    assert picked_mean_s(early, pairs(30, 0.0)) == 10 * H
    # too few pairs in a class: it takes the narrower class's alpha
    assert fit(pairs(MIN_PAIRS - 1, 1.0)).alpha == (0.0,) * 6


def test_width_is_a_share_of_the_node() -> None:
    cpu = dataclasses.replace(toy_profile(2, gpus_per_node=0), name="c")
    gpu = toy_profile(2)  # 4 GPUs a node
    part = cpu.partitions[0]
    assert width(Shape(part.name, 1, 0, H, part.cpus_per_node // 4), cpu) == 0.25
    assert width(Shape(part.name, 2, 0, H, part.cpus_per_node), cpu) == 2.0
    assert width(Shape(gpu.partitions[0].name, 1, 2, H), gpu) == 0.5


def test_the_file_reads_back_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    cal = WaitCalibration((0.5, 1.0), (0.0, 0.25, 1.0), (300, 80, 12))
    (tmp_path / "plan.toml").write_text(cal.to_toml("fitted on\nthe tuning month"))
    assert read_calibration(tmp_path) == cal
    assert read_calibration(tmp_path / "none") is None
    bad = {
        "[waits]\nnode_edges = [1]\nalpha = [0, 0]\nslope = 1\n": "unknown key.s. slope",
        "[waits]\nnode_edges = [1]\nalpha = [0, 2]\n": "between 0 and 1",
        "[waits]\nnode_edges = [1]\nalpha = [0]\n": "need 2 alphas",
        '[waits]\nnode_edges = [1]\nalpha = [0, "x"]\n': "expected numbers",
        "[other]\n": "one [waits] table",
        "[waits\n": "plan.toml",
    }
    for text, said in bad.items():
        (tmp_path / "plan.toml").write_text(text)
        with pytest.raises(CalibrationError, match=said.replace("[", r"\[")):
            read_calibration(tmp_path)


def test_a_calibrated_plan_waits_for_wide_shapes_as_slurm_s_limits_say() -> None:
    """Two 4-GPU nodes, each with a job predicted (by its user's history) to end in an
    hour but allowed 40: the run-based plan starts a two-node shape in an hour; with alpha
    1 for widths over one node it starts when the limits end, and the one-node shape wins."""
    prof = toy_profile(2)
    sim = Simulation(prof, start_time=NOW - 60)
    for _ in range(2):
        sim.add_jobs_skipping_invalid([job(NOW - 60, 30 * H, nodes=1, limit=40 * H)])
    sim.run_until(NOW)
    snap = SimSlurmClient(sim, user="u").queue()
    runtimes = RunTimes()
    for j in snap.jobs:  # its users' history: an hour of every 40 hours asked
        for _ in range(5):
            runtimes.add(j.user, H, 40 * H)
    q = Snapshot(snap, prof, NOW, runtimes)
    part = prof.partitions[0].name
    one, two = Shape(part, 1, 4, 48 * H), Shape(part, 2, 4, 48 * H)
    work = parse_work("20h@4gpu", scaling="linear")
    plain = plan_chain(q, work, [one, two])
    assert plain.recommended.shape == two  # 10 h of run after an hour's wait
    cal = WaitCalibration((1.0,), (0.0, 1.0))
    calibrated = plan_chain(q, work, [one, two], options=Options(calibration=cal))
    by = {c.shape: c for c in calibrated.candidates}
    before = {c.shape: c for c in plain.candidates}
    assert by[one].first_wait_s == before[one].first_wait_s  # alpha 0: unchanged
    assert by[two].first_wait_s > 30 * H  # the running jobs' limits
    assert calibrated.recommended.shape == one
    assert any("calibrated" in note for note in calibrated.notes)


def test_the_daemon_and_mirage_plan_read_the_cluster_s_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """<models_dir>/<cluster>/plan.toml is what plans use; none without a cluster; a bad
    file is logged and plans go on uncalibrated."""
    from mirage.daemon.config import PolicySection
    from mirage.daemon.policies import plan_calibration

    cal = WaitCalibration((1.0,), (0.0, 0.5))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "plan.toml").write_text(cal.to_toml())
    assert plan_calibration(PolicySection(cluster="c", models_dir=str(tmp_path))) == cal
    assert plan_calibration(PolicySection(cluster="", models_dir=str(tmp_path))) is None
    assert plan_calibration(PolicySection(cluster="x", models_dir=str(tmp_path))) is None
    (tmp_path / "c" / "plan.toml").write_text("[waits]\nalpha = [0]\n")
    assert plan_calibration(PolicySection(cluster="c", models_dir=str(tmp_path))) is None
    assert "without the wait calibration" in caplog.text
