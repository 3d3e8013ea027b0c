"""The daemon with a trained policy: loaded from models/, version-checked, its age shown."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mirage.cli import main
from mirage.daemon.config import Config, ConfigError, PolicySection, config_from_dict
from mirage.daemon.core import Daemon
from mirage.daemon.policies import build_policies
from mirage.daemon.status import status
from mirage.learn.artifacts import ModelCompatibilityError, ModelMeta
from mirage.learn.forecast import ForecastPolicy, ForestForecaster, quantile_levels
from mirage.policy.decision import DECISION_NAMES
from mirage.policy.guard import EstimateGuard, Guard
from mirage.profile.schema import profile_to_toml
from mirage.sim.scenario import toy_profile
from tests.unit.daemon_support import make_chain, make_config, make_sim, make_store, run_cycles

REPO = Path(__file__).resolve().parents[2]


def write_model(root: Path, *, band_s: float = 600.0) -> Path:
    """A small forest trained on made-up rows (wait = 2 h when the queue is long)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 2, size=(400, len(DECISION_NAMES)))
    wait = np.where(x[:, 0] > 1, 2.0, 0.0)
    f = ForestForecaster(quantile_levels(0.5), n_estimators=10, min_samples_leaf=5)
    f.fit(x, wait)
    folder = root / "toy" / "rf"
    folder.mkdir(parents=True)
    files = f.save(folder)
    params = {"band_s": band_s, "act": 3, "levels": list(f.levels), "alpha": 0.5}
    ModelMeta("rf", "toy", files, params, {"trace": "made-up"}).write(folder)
    (root / "toy" / "profile.toml").write_text(profile_to_toml(toy_profile(4)), encoding="utf-8")
    return root


def learned_config(models: Path) -> Config:
    base = make_config("reactive")
    policy = PolicySection(default="rf", models_dir=str(models), cluster="toy")
    return Config(daemon=base.daemon, policy=policy)


def test_trained_policy_runs_a_chain_and_reports_its_age(tmp_path: Path) -> None:
    models = write_model(tmp_path / "models")
    store, sim = make_store(tmp_path), make_sim()
    chain = make_chain(store, segments=2, limit=3600)
    d = Daemon(store, sim, config=learned_config(models))
    guarded = d.policies["rf"]  # the default [policy] guard wraps the trained model
    assert isinstance(guarded, EstimateGuard) and isinstance(guarded.inner, ForecastPolicy)
    assert d.profile is not None and d.profile.name == toy_profile(4).name  # read beside the models
    run_cycles([d], sim, 0, 3 * 3600)
    report = status(store, 3 * 3600, None)
    row = next(r for r in report["chains"] if r["id"] == chain.id)
    assert row["policy"] == "rf" and row["state"] == "COMPLETED"
    assert row["model_age_s"] is not None and row["model_age_s"] >= 0
    info = d.metrics.model._value  # the Info metric's labels
    assert info["kind"] == "learned" and info["policy"] == "rf"


def test_a_mismatched_model_stops_the_daemon_with_its_reason(tmp_path: Path) -> None:
    models = write_model(tmp_path / "models")
    meta_path = models / "toy" / "rf" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["libraries"]["scikit-learn"] = "0.20.0"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelCompatibilityError, match=r"scikit-learn 0\.20\.0"):
        Daemon(make_store(tmp_path), make_sim(), config=learned_config(models))
    cfg = tmp_path / "mirage.toml"
    cfg.write_text(
        # its own state_dir: the default (/var/lib/mirage) is the machine's, not the test's
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[policy]\ndefault = "rf"\nmodels_dir = "{models}"\ncluster = "toy"\n',
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["daemon", "--config", str(cfg), "--cycles", "1"])
    assert res.exit_code != 0 and "retrain" in res.output


def test_config_needs_models_dir_for_a_trained_policy() -> None:
    with pytest.raises(ConfigError, match="needs models_dir"):
        config_from_dict({"policy": {"default": "xgb"}})
    with pytest.raises(ConfigError, match=r"fallback must be one of reactive, fixed-lead$"):
        config_from_dict({"policy": {"fallback": "rf", "models_dir": "/m", "cluster": "c"}})
    with pytest.raises(ConfigError, match="fallback must be one of"):
        config_from_dict({"policy": {"fallback": "lookahead", "models_dir": "/m", "cluster": "c"}})
    with pytest.raises(ConfigError, match="'lookahead' needs models_dir and cluster"):
        config_from_dict({"policy": {"default": "lookahead"}})
    valid = (
        "valid: reactive, fixed-lead, qbets, running-average, slurm-estimate, lookahead, rf, xgb"
    )
    with pytest.raises(ConfigError, match=valid):
        config_from_dict({"policy": {"default": "magic"}})
    with pytest.raises(ConfigError, match=r"lookahead_runtime: .*'average'.* median, mean or q"):
        config_from_dict({"policy": {"lookahead_runtime": "average"}})
    with pytest.raises(ConfigError, match="lookahead_draws must be 1 to 64"):
        config_from_dict({"policy": {"lookahead_draws": 0}})


def test_missing_profile_beside_models_is_a_clear_error(tmp_path: Path) -> None:
    models = write_model(tmp_path / "models")
    (models / "toy" / "profile.toml").unlink()
    from mirage.learn.artifacts import ModelError

    with pytest.raises(ModelError, match="profile"):
        Daemon(make_store(tmp_path), make_sim(), config=learned_config(models))
    shutil.rmtree(models)


def test_lookahead_policy_in_the_daemon_learns_run_times_from_sacct(tmp_path: Path) -> None:
    """``default = "lookahead"``: built by name, reads the profile beside the models, sees
    every cycle's accounting (another user's jobs included) and decides the chain."""
    from mirage.policy.lookahead import LookaheadPolicy
    from mirage.sim.workload import JobSpec

    models = tmp_path / "models"
    (models / "toy").mkdir(parents=True)
    (models / "toy" / "profile.toml").write_text(profile_to_toml(toy_profile(4)), "utf-8")
    store, sim = make_store(tmp_path), make_sim()
    # ann's jobs ask for 2 h and run 20 min
    sim.sim.add_jobs(
        JobSpec(submit=k * 1800, run=1200, time_limit=7200, nodes=1, partition="gpu", user="ann")
        for k in range(8)
    )
    chain = make_chain(store, segments=2, limit=3600)
    policy = PolicySection(  # the look-ahead's own mechanics: without the estimate guard
        guard="none",
        default="lookahead",
        models_dir=str(models),
        cluster="toy",
        lookahead_runtime="mean",
        lookahead_draws=3,
    )
    d = Daemon(store, sim, config=Config(daemon=make_config().daemon, policy=policy))
    la = d.policies["lookahead"]
    assert isinstance(la, LookaheadPolicy) and d.profile is not None
    assert la.runtimes.stat == "mean" and la.draws == 3
    run_cycles([d], sim, 0, 4 * 3600)
    assert la.runtimes.predict("ann", 7200) == 1200
    row = next(r for r in status(store, 4 * 3600, None)["chains"] if r["id"] == chain.id)
    assert row["policy"] == "lookahead" and row["state"] == "COMPLETED"
    # a restarted daemon reads the history once (warmup_s) and knows ann's runs at once
    again = Daemon(store, sim, config=Config(daemon=make_config().daemon, policy=policy))
    sim.advance_to(5 * 3600)
    report = again.cycle(5 * 3600)
    assert report.acted and report.slurm_reads == 2  # the cycle's squeue and sacct
    restarted = again.policies["lookahead"]
    assert isinstance(restarted, LookaheadPolicy)
    assert restarted.runtimes.predict("ann", 7200) == 1200


def test_daemon_runs_slurm_s_estimate_by_name(tmp_path: Path) -> None:
    """``[policy] default = "slurm-estimate"``: on the simulator's free cluster the
    successor's estimate is "now", so it is submitted at the first cycle within the
    policy's 600 s of the predecessor's planned end, not before."""
    assert config_from_dict({"policy": {"default": "slurm-estimate"}}, "t").policy.default == (
        "slurm-estimate"
    )
    client = make_sim(4)
    daemon = Daemon(make_store(tmp_path), client, config=make_config("slurm-estimate"),
                    profile=toy_profile(4))  # fmt: skip
    make_chain(daemon.store, limit=3600, segments=2)
    run_cycles([daemon], client, 0, 3600 - 15 * 60)
    assert len(client.sim.specs) == 1
    first = client.sim.start[0]
    assert first is not None
    run_cycles([daemon], client, 3600 - 14 * 60, 3600 - 60)
    assert len(client.sim.specs) == 2
    assert first + 3600 - 600 <= client.sim.specs[1].submit < first + 3600 - 600 + 60


def test_a_cluster_s_own_policy_file_sets_the_defaults_its_config_leaves_out(
    tmp_path: Path,
) -> None:
    """models/<cluster>/policy.toml (scripts/select_shipped.py --write): the [policy] keys
    the configuration leaves out come from it; the configuration's own win; a bad file is
    one line naming it."""
    from mirage.policy.guard import SHIPPED, PolicyFileError, shipped_for

    folder = tmp_path / "lab"
    folder.mkdir()
    (folder / "policy.toml").write_text(
        '[policy]\ndefault = "slurm-estimate"\nguard = "estimate"\nguard_margin_s = 3600\n'
    )
    base = {"models_dir": str(tmp_path), "cluster": "lab"}
    p = config_from_dict({"policy": base}, "t").policy
    assert (p.default, p.guard_margin_s) == ("slurm-estimate", 3600)
    assert p.qbets_quantile == SHIPPED.qbets_quantile  # not in the file: the default
    own = config_from_dict({"policy": {**base, "guard_margin_s": 60}}, "t").policy
    assert (own.default, own.guard_margin_s) == ("slurm-estimate", 60)
    assert config_from_dict({"policy": {}}, "t").policy.default == SHIPPED.policy
    assert shipped_for(folder) == dataclasses.replace(
        SHIPPED, policy="slurm-estimate", guard_margin_s=3600
    )
    assert shipped_for(tmp_path / "none") == SHIPPED
    (folder / "policy.toml").write_text("[policy]\nguard_margin_s = '1h'\n")
    with pytest.raises(PolicyFileError, match="guard_margin_s"):
        shipped_for(folder)  # the evaluation's reading checks types as the daemon's does
    (folder / "policy.toml").write_text("[policy]\ndefault = 'qbets'\nlead_s = 5\n")
    with pytest.raises(ConfigError, match=r"policy.toml \[policy\]: unknown key\(s\) lead_s"):
        config_from_dict({"policy": base}, "t")


def test_the_shipped_cerit_policy_is_what_evaluate_measures_there() -> None:
    """The committed models/cerit/policy.toml: QBETS 0.9 behind the look-ahead veto
    (-2 h), chosen on CERIT's tuning month with its quiet samples judged."""
    from mirage.evaluate.harness import shipped_policy
    from mirage.policy.baselines import Qbets
    from mirage.policy.guard import SHIPPED, shipped_for
    from mirage.policy.simple import ReactivePolicy

    shipped = shipped_for(Path("models/cerit"))
    assert (shipped.policy, shipped.qbets_quantile, shipped.guard) == ("qbets", 0.9, "lookahead")
    assert shipped.guard_lookahead_margin_s == -7200
    policy = shipped_policy(shipped)
    assert isinstance(policy, Guard) and isinstance(policy.inner, Qbets)
    assert (policy.margin_s, policy.lookahead_margin_s) == (None, -7200)
    cfg = config_from_dict({"policy": {"models_dir": "models", "cluster": "cerit"}}, "t")
    daemon = build_policies(cfg.policy)["qbets"]
    assert daemon.kind == "model" and isinstance(daemon.policy, Guard)  # the profile loaded
    assert daemon.policy.lookahead_margin_s == -7200
    assert shipped_for(Path("models/ls6")) == SHIPPED  # no file: the defaults
    # Theta's: no estimate-guard candidate was safe on its tuning month; QBETS 0.9 behind
    # the look-ahead veto (2 h) is, and the daemon configured for Theta runs it
    theta = shipped_for(Path("models/theta"))
    assert (theta.policy, theta.qbets_quantile, theta.guard) == ("qbets", 0.9, "lookahead")
    measured = shipped_policy(theta)
    assert isinstance(measured, Guard) and not isinstance(measured.inner, ReactivePolicy)
    assert (measured.margin_s, measured.lookahead_margin_s) == (None, 7200)
    cfg = config_from_dict({"policy": {"models_dir": "models", "cluster": "theta"}}, "t")
    daemon = build_policies(cfg.policy)["qbets"]
    assert daemon.kind == "model" and isinstance(daemon.policy, Guard)
    assert daemon.policy.lookahead_margin_s == 7200


def test_daemon_s_lookahead_guard_waits_on_a_free_cluster_and_lets_go_on_a_full_one(
    tmp_path: Path,
) -> None:
    """``guard = "lookahead"`` behind a fixed lead of 50 min (1 h segments), on the
    simulator: on a free cluster the look-ahead starts the successor at once, so it is
    not pre-submitted and goes in at the predecessor's end, as reactive submission's;
    with every other node held for 5 h it could start only on the predecessor's node, at
    its end, and is pre-submitted at the lead. The daemon loads the cluster profile for it
    and reads 14 days of accounting at start."""
    from mirage.policy.guard import Guard
    from mirage.sim.workload import JobSpec

    models = tmp_path / "models"
    (models / "toy").mkdir(parents=True)
    (models / "toy" / "profile.toml").write_text(profile_to_toml(toy_profile(4)), "utf-8")
    policy = PolicySection(default="fixed-lead", lead_s=3000, guard="lookahead",
                           models_dir=str(models), cluster="toy")  # fmt: skip
    submits = []
    for busy in (False, True):
        sim = make_sim(4)
        if busy:
            sim.sim.add_jobs(JobSpec(submit=0, run=5 * 3600, time_limit=5 * 3600, nodes=1,
                                     partition="gpu", user="bob") for _ in range(3))  # fmt: skip
        store = make_store(tmp_path, f"busy-{busy}.sqlite")
        d = Daemon(store, sim, config=Config(daemon=make_config().daemon, policy=policy))
        guard = d.policies["fixed-lead"]
        assert isinstance(guard, Guard) and guard.lookahead_margin_s == 0
        assert guard.warmup_s == 14 * 24 * 3600 and d.profile is not None
        make_chain(store, limit=3600, segments=2)
        run_cycles([d], sim, 0, 2 * 3600)
        mine = [i for i, s in enumerate(sim.sim.specs) if s.user != "bob"]
        assert len(mine) == 2
        first = sim.sim.start[mine[0]]
        assert first is not None
        submits.append(sim.sim.specs[mine[1]].submit - first)
    free, full = submits
    assert 3600 <= free <= 3600 + 120  # at the end (the next cycle after it)
    assert 600 <= full <= 600 + 60  # at the lead: 50 min before the end
