"""Training data for learned policies: decision-step features beside the outcome curves.

The queue features a learned policy sees at each decision step are recorded beside the
probes (:mod:`mirage.evaluate.features`: the same rows the harness judges policies on).

:class:`Dataset` flattens samples into rows (one per sample and decision step before the
planned end): the full feature vector, the wait if submitted then (hours), the time left
to the planned end (hours) and the sample's cost curve, which the RL environment and the
band tuning read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mirage.evaluate.features import FeatureCurve, check_curve, sample_matrix
from mirage.evaluate.harness import curve_cost, pending_of
from mirage.evaluate.probes import SampleResult
from mirage.evaluate.protocol import Protocol
from mirage.policy.cost import DEFAULT_COST, CostModel
from mirage.policy.decision import DECISION_NAMES
from mirage.profile.schema import ClusterProfile

HOUR = 3600.0


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
    cost: CostModel = DEFAULT_COST

    def __len__(self) -> int:
        return len(self.x)

    def cost_curve(self, i: int) -> np.ndarray:
        out: np.ndarray = curve_cost(self.samples[i], self.cost) / HOUR
        return out

    @classmethod
    def build(
        cls,
        samples: Sequence[SampleResult],
        curves: Sequence[FeatureCurve],
        protocol: Protocol,
        profile: ClusterProfile,
        cost: CostModel = DEFAULT_COST,
    ) -> Dataset:
        part = profile.partition(protocol.partition).name
        usable = [(s, c) for s, c in zip(samples, curves, strict=True) if s.ok]
        for s, c in usable:
            check_curve(s, c)
        mats = [
            sample_matrix(s, c.queue, pending_of(s, protocol, profile, part), profile)
            for s, c in usable
        ]
        return cls.from_matrices([s for s, _ in usable], mats, cost)

    @classmethod
    def from_matrices(
        cls,
        samples: Sequence[SampleResult],
        mats: Sequence[np.ndarray],
        cost: CostModel = DEFAULT_COST,
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
            cost=cost,
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
            cost=parts[0].cost if parts else DEFAULT_COST,
        )
