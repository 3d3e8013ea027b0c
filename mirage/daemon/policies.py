"""The daemon's policies by configured name: the baselines, or trained models from disk.

A trained policy (``rf``, ``xgb``, ``dqn``, ``pg``) is read from
``<models_dir>/<cluster>/<name>/`` through :func:`mirage.learn.artifacts.load_policy`,
which refuses a model of another feature set or library version with a clear error: the
daemon then does not start (a silently wrong policy would submit at the wrong times). Its
features are normalised by the cluster profile, so a trained policy needs one with node
counts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mirage.daemon.config import PolicySection
from mirage.policy.base import Policy
from mirage.policy.guard import LOOKAHEAD_GUARDS, guard_policy
from mirage.policy.simple import PROFILE_POLICIES, make_policy
from mirage.profile.schema import ClusterProfile, Partition

if TYPE_CHECKING:
    from mirage.learn.artifacts import ModelMeta
    from mirage.plan.calibrate import WaitCalibration

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    kind: str  # "baseline", "learned" or "model" (``lookahead``: needs the profile too)
    created: str = ""  # a trained model's creation time (UTC ISO), "" for baselines
    created_at: float = 0.0  # the same, epoch seconds (0 for baselines)
    meta: ModelMeta | None = None  # a trained model's metadata

    @property
    def wait_scale_h(self) -> float | None:
        """The mean wait of a reactive successor on the tuning split the model's constants
        were tuned on (reactive's J there is its wait): the wait scale it knows."""
        if self.meta is None:
            return None
        value = self.meta.training.get("wait_scale_h")  # recorded since #23; else:
        if value is None:
            tune = self.meta.metrics.get("tune") or {}
            value = tune.get("reactive_mean_J_h") if isinstance(tune, dict) else None
        return float(value) if isinstance(value, int | float) else None


def build_policy(name: str, cfg: PolicySection) -> LoadedPolicy:
    """The policy configured as ``name``; raises ``ModelError`` for an unusable model."""
    from mirage.learn.artifacts import POLICIES, load_policy

    if name not in POLICIES:
        policy = make_policy(name, lead_s=cfg.lead_s, margin_s=cfg.lookahead_margin_s,
                             runtime_stat=cfg.lookahead_runtime, draws=cfg.lookahead_draws,
                             qbets_quantile=cfg.qbets_quantile,
                             average_factor=cfg.average_factor)  # fmt: skip
        # the look-ahead (a policy's or the guard's) simulates on the cluster profile
        profiled = name in PROFILE_POLICIES or uses_lookahead_guard(name, cfg)
        return LoadedPolicy(guarded(policy, name, cfg), "model" if profiled else "baseline")
    policy, meta = load_policy(Path(cfg.models_dir) / cfg.cluster / name)
    return LoadedPolicy(
        guarded(policy, name, cfg), "learned", meta.created, meta.created_epoch() or 0.0, meta
    )


def guarded(policy: Policy, name: str, cfg: PolicySection) -> Policy:
    """``policy`` behind the guard ``[policy] guard``; reactive needs none."""
    if name == "reactive":
        return policy
    return guard_policy(
        policy,
        cfg.guard,
        cfg.guard_margin_s,
        cfg.guard_lookahead_margin_s,
        margin_fraction=cfg.guard_margin_fraction,
    )


def uses_lookahead_guard(name: str, cfg: PolicySection) -> bool:
    """Whether the policy ``name`` runs behind the guard's look-ahead veto."""
    return name != "reactive" and cfg.guard in LOOKAHEAD_GUARDS


def model_key(name: str) -> str:
    """The store key holding when the trained model named ``name`` was created."""
    return f"model_created:{name}"


def build_policies(cfg: PolicySection) -> dict[str, LoadedPolicy]:
    names = {cfg.default, cfg.fallback, *cfg.partitions.values()}
    return {n: build_policy(n, cfg) for n in sorted(names)}


def learned_profile(cfg: PolicySection) -> ClusterProfile:
    """The cluster profile trained policies normalise features by: the one beside the
    models (``<models_dir>/<cluster>/profile.toml``, as `mirage calibrate` writes it)."""
    from mirage.learn.artifacts import ModelError
    from mirage.profile.schema import ProfileError, load_profile

    path = Path(cfg.models_dir) / cfg.cluster / "profile.toml"
    try:
        return load_profile(str(path))
    except (ProfileError, OSError) as exc:
        raise ModelError(
            f"trained policies and the look-ahead (a policy's or the guard's) need the cluster "
            f"profile (node counts) at {path}: {exc}"
        ) from exc


def plan_calibration(cfg: PolicySection) -> WaitCalibration | None:
    """The cluster's wait calibration for plans (``<models_dir>/<cluster>/plan.toml``), or
    None: no cluster, no file, or a file that cannot be used (logged: plans go on
    uncalibrated, as before one was fitted)."""
    from mirage.plan.calibrate import CalibrationError, read_calibration

    if not cfg.cluster:
        return None
    try:
        cal = read_calibration(Path(cfg.models_dir) / cfg.cluster)
    except CalibrationError as exc:
        log.error("plans run without the wait calibration: %s", exc)
        return None
    if cal is not None:
        log.info("plans use %s's wait calibration (alpha by width %s)", cfg.cluster,
                 ", ".join(f"{a:g}" for a in cal.alpha))  # fmt: skip
    return cal


def profile_path(cfg: PolicySection) -> Path:
    return Path(cfg.models_dir) / cfg.cluster / "profile.toml"


def tuned_elsewhere(lp: LoadedPolicy, path: Path) -> str:
    """Why the profile at ``path`` (the one beside the model, whose node counts normalise
    its features) is not the one the model's constants were tuned on; "" when it is, or
    when the model does not record it (older metadata)."""
    import hashlib

    if lp.meta is None:
        return ""
    want = str(lp.meta.training.get("profile_sha256") or "")
    if not want:
        return ""
    try:
        have = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if have == want:
        return ""
    return (
        f"tuned for cluster {lp.meta.cluster!r} on another profile than {path} "
        "(recalibrate it for this cluster: mirage train --recalibrate)"
    )


#: A live partition matches the model's when its GPUs per node are the same and its node
#: count within this factor: features are normalised by node and GPU counts, and the
#: tuned constants hold for a queue of about that size (the demo's 70 of ls6's 79 nodes).
NODE_FACTOR = 1.5


def shape_mismatch(model: Partition, live: Partition) -> str:
    """Why the live partition is not the shape the model knows; "" when it is."""
    nodes, live_nodes = model.nodes or 0, live.nodes or 0
    same_gpus = model.gpus_per_node == live.gpus_per_node
    near = nodes > 0 and live_nodes > 0 and 1 / NODE_FACTOR <= live_nodes / nodes <= NODE_FACTOR
    if same_gpus and near:
        return ""
    return (
        f"tuned for {model.name}: {nodes} nodes x {model.gpus_per_node} GPUs; "
        f"{live.name} here: {live_nodes} x {live.gpus_per_node}"
    )
