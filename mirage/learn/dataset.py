"""Training data for learned policies: decision-step features beside the outcome curves.

The harness's counterfactual probes (:mod:`mirage.evaluate.probes`) give, for every
sample and decision step ``k``, when the successor would start if submitted at step ``k``.
A learned policy also needs what it would have *seen* at step ``k``: the queue features of
:mod:`mirage.policy.features`, computed from the simulator's ``squeue``-shaped snapshot
(``SimSlurmClient.queue()``) by the very function the daemon calls on a real cluster.

Queue features are recorded by a separate, cheap pass (one replay per task, no forks: the
base world before the successor exists is the same one the probes forked from) and cached
beside the probes as ``<t>.<FEATURE_SET>.npz``, so outcome curves that took long to
probe are reused and a feature change only re-runs this pass.

:class:`Dataset` flattens samples into rows (one per sample and decision step before the
planned end): the full feature vector, the wait if submitted then (hours), the time left
to the planned end (hours) and the sample's cost curve, which the RL environment and the
band tuning read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mirage.evaluate.harness import curve_cost, pending_of
from mirage.evaluate.probes import (
    Progress,
    Recorder,
    SampleResult,
    StepRecord,
    base_world,
    record_all,
)
from mirage.evaluate.protocol import Protocol, Setting
from mirage.learn.decision import DECISION_NAMES, estimate_columns
from mirage.policy.base import PendingTransition
from mirage.policy.cost import DEFAULT_ALPHA
from mirage.policy.features import FEATURE_NAMES, FEATURE_SET, QUEUE_FEATURE_NAMES, features
from mirage.profile.schema import ClusterProfile
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.slurm.types import QueueSnapshot

HOUR = 3600.0


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

    Row k is what :func:`mirage.learn.decision.decision_features` gives at step k for the
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


@dataclass
class Dataset:
    """Rows of (sample, step k < K) with their features and outcomes.

    ``wait_h``: the successor's wait if submitted at step k; ``left_h``: time to the
    planned end at step k; ``cost_h`` per sample: J at every step (K+1 values, the last one
    the reactive submission at the planned end). ``censored`` marks waits cut at the
    window's end (lower bounds).
    """

    x: np.ndarray
    wait_h: np.ndarray
    left_h: np.ndarray
    censored: np.ndarray
    sample: np.ndarray  # int64: index into ``samples``
    step: np.ndarray  # int64: k
    samples: list[SampleResult]
    matrices: list[np.ndarray]  # per sample (K, F)
    alpha: float = DEFAULT_ALPHA

    def __len__(self) -> int:
        return len(self.x)

    def cost_curve(self, i: int) -> np.ndarray:
        out: np.ndarray = curve_cost(self.samples[i], self.alpha) / HOUR
        return out

    @classmethod
    def build(
        cls,
        samples: Sequence[SampleResult],
        curves: Sequence[FeatureCurve],
        protocol: Protocol,
        profile: ClusterProfile,
        alpha: float = DEFAULT_ALPHA,
    ) -> Dataset:
        part = profile.partition(protocol.partition).name
        usable = [(s, c) for s, c in zip(samples, curves, strict=True) if s.ok]
        for s, c in usable:
            check_curve(s, c)
        mats = [
            sample_matrix(s, c.queue, pending_of(s, protocol, profile, part), profile)
            for s, c in usable
        ]
        return cls.from_matrices([s for s, _ in usable], mats, alpha)

    @classmethod
    def from_matrices(
        cls,
        samples: Sequence[SampleResult],
        mats: Sequence[np.ndarray],
        alpha: float = DEFAULT_ALPHA,
    ) -> Dataset:
        """Rows from usable samples and their decision matrices (:func:`sample_matrix`)."""
        kept = list(samples)
        rows = [len(m) for m in mats]
        idx = np.repeat(np.arange(len(kept)), rows)
        step = np.concatenate([np.arange(n) for n in rows]) if rows else np.zeros(0, np.int64)
        wait = [(s.succ_start[:-1] - s.steps[:-1]) / HOUR for s in kept]
        left = [(s.planned_end - s.steps[:-1]) / HOUR for s in kept]
        cens = [s.censored[:-1] for s in kept]
        width = len(DECISION_NAMES)
        return cls(
            x=np.concatenate(mats) if mats else np.zeros((0, width)),
            wait_h=np.concatenate(wait).astype(np.float64) if wait else np.zeros(0),
            left_h=np.concatenate(left).astype(np.float64) if left else np.zeros(0),
            censored=np.concatenate(cens) if cens else np.zeros(0, bool),
            sample=idx.astype(np.int64),
            step=step.astype(np.int64),
            samples=kept,
            matrices=list(mats),
            alpha=alpha,
        )

    @classmethod
    def concat(cls, parts: Sequence[Dataset]) -> Dataset:
        offsets = np.cumsum([0] + [len(p.samples) for p in parts])[:-1]
        return cls(
            x=np.concatenate([p.x for p in parts]),
            wait_h=np.concatenate([p.wait_h for p in parts]),
            left_h=np.concatenate([p.left_h for p in parts]),
            censored=np.concatenate([p.censored for p in parts]),
            sample=np.concatenate([p.sample + o for p, o in zip(parts, offsets, strict=True)]),
            step=np.concatenate([p.step for p in parts]),
            samples=[s for p in parts for s in p.samples],
            matrices=[m for p in parts for m in p.matrices],
            alpha=parts[0].alpha if parts else DEFAULT_ALPHA,
        )
