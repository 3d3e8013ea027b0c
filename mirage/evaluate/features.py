"""Queue features recorded at each decision step of a sample, and its decision rows.

The harness's counterfactual probes (:mod:`mirage.evaluate.probes`) give, for every
sample and decision step ``k``, when the successor would start if submitted at step ``k``.
A learned policy also needs what it would have *seen* at step ``k``: the queue features of
:mod:`mirage.policy.features`, computed from the simulator's ``squeue``-shaped snapshot
(``SimSlurmClient.queue()``) by the very function the daemon calls on a real cluster.

Queue features are recorded by a separate, cheap pass (one replay per task, no forks: the
base world before the successor exists is the same one the probes forked from) and cached
beside the probes as ``<t>.<FEATURE_SET>.npz``, so outcome curves that took long to
probe are reused and a feature change only re-runs this pass. :func:`sample_matrix` turns
a sample's recorded features and estimates into the rows a learned policy decides on:
the harness judges trained policies on them (through the policy interface's
``plan_for``), and :mod:`mirage.learn.dataset` trains on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mirage.evaluate.probes import (
    Progress,
    Recorder,
    SampleResult,
    StepRecord,
    base_world,
    record_all,
)
from mirage.evaluate.protocol import Protocol, Setting
from mirage.policy.base import PendingTransition
from mirage.policy.decision import estimate_columns
from mirage.policy.features import FEATURE_NAMES, FEATURE_SET, QUEUE_FEATURE_NAMES, features
from mirage.profile.schema import ClusterProfile
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.slurm.types import QueueSnapshot


@dataclass
class FeatureCurve(StepRecord):
    """The queue features of one sample at each of its decision steps."""

    FIELD = "queue"
    queue: np.ndarray  # float64 (K+1, len(QUEUE_FEATURE_NAMES))


def feature_curve(sim: Simulation, protocol: Protocol) -> FeatureCurve:
    """Queue features at the decision steps of the sample at ``sim.now`` (``sim`` unchanged).

    Replays exactly the base world of :func:`mirage.evaluate.probes.probe_sample`: the same
    predecessor, started at the same time, the same steps.
    """
    from mirage.policy.features import queue_features

    world = base_world(sim, protocol)
    if world is None:
        return FeatureCurve(sim.now, -1, np.zeros((0, len(QUEUE_FEATURE_NAMES))))
    base = world.sim
    client = SimSlurmClient(base)
    rows = np.empty((len(world.steps), len(QUEUE_FEATURE_NAMES)))
    for k, tau in enumerate(world.steps):
        base.run_until(tau)
        rows[k] = queue_features(client.queue(), base.profile, world.spec.partition, tau)
    return FeatureCurve(sim.now, world.pred_start, rows)


def _record_features(sim: Simulation, protocol: Protocol) -> FeatureCurve:
    return feature_curve(sim, protocol)


FEATURES: Recorder[FeatureCurve] = Recorder(
    f".{FEATURE_SET}.npz", _record_features, FeatureCurve.load
)


def generate_features(
    setting: Setting,
    times: Sequence[int],
    *,
    cache: str | None = None,
    n_jobs: int = 1,
    dask_address: str | None = None,
    progress: Progress | None = None,
) -> list[FeatureCurve]:
    """The feature curves of every sample of ``times`` (in order), in parallel (joblib, or
    the Dask scheduler at ``dask_address``), cached beside the probes."""
    return record_all(
        setting,
        times,
        FEATURES,
        cache=cache,
        n_jobs=n_jobs,
        dask_address=dask_address,
        progress=progress,
    )


# ---- flattening into rows ------------------------------------------------------------


def check_curve(sample: SampleResult, curve: FeatureCurve) -> None:
    if curve.pred_start != sample.pred_start or len(curve.queue) != len(sample.steps):
        raise ValueError(
            f"sample {sample.t}: feature curve does not match the probe "
            f"(start {curve.pred_start} vs {sample.pred_start}); clear the cache"
        )


def sample_matrix(
    sample: SampleResult, queue: np.ndarray, p: PendingTransition, profile: ClusterProfile
) -> np.ndarray:
    """The decision rows of a sample's steps (K, len(DECISION_NAMES)).

    Row k is what :func:`mirage.policy.decision.decision_features` gives at step k for the
    sample's transition: the queue part recorded at that step and the estimate recorded
    there.
    """
    k_steps = len(sample.steps) - 1
    out = np.empty((k_steps, len(FEATURE_NAMES)))
    for k in range(k_steps):
        now = int(sample.steps[k])
        out[k] = features(_NO_SNAPSHOT, profile, [p], now, queue_rows={p.partition: queue[k]})[0]
    est = estimate_columns(sample.steps[:-1].astype(np.float64), sample.estimate[:-1])
    return np.concatenate([out, est], axis=1)


#: Stands in for the snapshot when its queue features were recorded (they are not recomputed).
_NO_SNAPSHOT = QueueSnapshot(taken_at=0, jobs=(), slurm_version="recorded")
