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
    read_calibration,
    width,
)
from mirage.policy.lookahead import RunTimes
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.scenario import job, toy_profile

H = 3600
NOW = 1_000_000


def pairs(rng: np.random.Generator, w: float, alpha: float, n: int) -> WaitPairs:
    """``n`` pairs of width ``w`` whose truth sits ``alpha`` of the way to the limits."""
    seg = rng.integers(1, 4, n)
    runs = rng.uniform(0, 10 * H, n)
    limits = runs + rng.uniform(0, 40 * H, n)
    true = seg * (runs + alpha * (limits - runs)) + rng.normal(0, 0.5 * H, n)
    return WaitPairs(np.full(n, w), seg, runs, limits, true)


def test_fit_finds_each_width_class_s_share_of_the_way_to_the_limits() -> None:
    rng = np.random.default_rng(3)
    few = MIN_PAIRS - 1
    data = WaitPairs.concat([pairs(rng, 0.1, 0.0, 200), pairs(rng, 0.4, 0.3, 200),
                             pairs(rng, 1.0, 0.9, 200), pairs(rng, 3.0, 1.0, few)])  # fmt: skip
    cal = fit(data)
    assert cal.pairs == (200, 0, 200, 200, 0, few)
    assert cal.alpha[0] == pytest.approx(0.0, abs=0.02)
    assert cal.alpha[2] == pytest.approx(0.3, abs=0.02)
    assert cal.alpha[3] == pytest.approx(0.9, abs=0.02)
    assert cal.alpha[1] == cal.alpha[5] == 0.0  # too few pairs: the run-based plan
    # a truth beyond the limits is held to them, one below the runs to the runs
    over = fit(pairs(rng, 0.1, 1.6, 100))
    under = fit(pairs(rng, 0.1, -0.5, 100))
    assert over.alpha[0] == 1.0 and under.alpha[0] == 0.0


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
