"""Every model committed under models/ loads with this code and decides.

A model whose metadata no longer matches the code (feature set, library versions) would
otherwise only fail when an admin starts the daemon with it, or in `make demo`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirage.learn.artifacts import METADATA, load_policy
from mirage.policy.base import DecisionContext, PendingTransition
from mirage.profile.schema import load_profile
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation

MODELS = Path(__file__).resolve().parents[2] / "models"
H = 3600
FOLDERS = sorted(p.parent for p in MODELS.glob(f"*/*/{METADATA}"))


def test_the_repository_ships_models() -> None:
    clusters = {f.parent.name for f in FOLDERS}
    assert {"ls6", "theta"} <= clusters
    for cluster in clusters:
        assert (MODELS / cluster / "profile.toml").is_file(), cluster


@pytest.mark.parametrize("folder", FOLDERS, ids=[f"{f.parent.name}-{f.name}" for f in FOLDERS])
def test_committed_model_loads_and_decides(folder: Path) -> None:
    policy, meta = load_policy(folder)
    assert (meta.cluster, meta.policy) == (folder.parent.name, folder.name)
    assert all((folder / name).is_file() for name in meta.files)
    profile = load_profile(folder.parent / "profile.toml")
    assert profile.name == meta.cluster
    part = profile.partition()
    gpus = part.gpus_per_node
    # an empty queue, three chains 47, 24 and 1 hours from their predecessor's end
    snap = SimSlurmClient(Simulation(profile, start_time=0)).queue()
    now = 48 * H
    pending = [
        PendingTransition(f"c{left}", str(left), now - (48 - left) * H, 48 * H, 1, gpus, 48 * H,
                          part.name)
        for left in (47, 24, 1)
    ]  # fmt: skip
    out = policy.decide(DecisionContext(now=now, snapshot=snap, profile=profile), pending)
    assert len(out) == len(pending)
    # with nothing queued or running a successor starts at once: no model should submit
    # 47 h ahead of its predecessor's end
    assert not out[0].submit
    if meta.policy in ("rf", "xgb"):  # forecasters show a predicted start and its interval
        for d in out:
            assert d.predicted_start is not None and d.interval is not None
            assert now <= d.interval[0] <= d.predicted_start <= d.interval[1]
