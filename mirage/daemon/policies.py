"""The daemon's policies by configured name: the baselines, or trained models from disk.

A trained policy (``rf``, ``xgb``, ``dqn``, ``pg``) is read from
``<models_dir>/<cluster>/<name>/`` through :func:`mirage.learn.artifacts.load_policy`,
which refuses a model of another feature set or library version with a clear error: the
daemon then does not start (a silently wrong policy would submit at the wrong times). Its
features are normalised by the cluster profile, so a trained policy needs one with node
counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mirage.daemon.config import PolicySection
from mirage.policy.base import Policy
from mirage.policy.simple import PROFILE_POLICIES, make_policy
from mirage.profile.schema import ClusterProfile


@dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    kind: str  # "baseline", "learned" or "model" (``lookahead``: needs the profile too)
    created: str = ""  # a trained model's creation time (UTC ISO), "" for baselines
    created_at: float = 0.0  # the same, epoch seconds (0 for baselines)


def build_policy(name: str, cfg: PolicySection) -> LoadedPolicy:
    """The policy configured as ``name``; raises ``ModelError`` for an unusable model."""
    from mirage.learn.artifacts import POLICIES, load_policy

    if name not in POLICIES:
        policy = make_policy(name, lead_s=cfg.lead_s, margin_s=cfg.lookahead_margin_s,
                             runtime_stat=cfg.lookahead_runtime,
                             draws=cfg.lookahead_draws)  # fmt: skip
        return LoadedPolicy(policy, "model" if name in PROFILE_POLICIES else "baseline")
    policy, meta = load_policy(Path(cfg.models_dir) / cfg.cluster / name)
    return LoadedPolicy(policy, "learned", meta.created, meta.created_epoch() or 0.0)


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
            f"trained policies need the cluster profile (node counts) at {path}: {exc}"
        ) from exc
