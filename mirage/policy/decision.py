"""What a learned policy sees: the queue features plus Slurm's own estimate.

:func:`mirage.policy.features.features` (a pure function of the ``squeue`` snapshot and
the profile) is extended by two columns from Slurm's start estimate for the successor if
it were submitted now (``sbatch --test-only`` on a real cluster, the simulator's model
of it, :mod:`mirage.sim.testonly`, in training):

=================  =========================================================
``est_wait_h``     estimated start - now, hours (>= 0); 0 when not known
``est_known``      1 if Slurm gave an estimate, else 0
=================  =========================================================

Slurm's estimate assumes every running job runs to its limit and every pending job ahead
fills whole nodes for its whole limit, so used raw it is biased late (the slurm-estimate
baseline submits early and pays for that in overlap); as a feature the models learn how
far to trust it from the queue around it. The daemon rate-limits ``--test-only`` calls, so an
estimate may be missing: one call serves every chain with the same request shape, and
training masks a share of the estimates so that models also decide without one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mirage.policy.base import DecisionContext, PendingTransition
from mirage.policy.baselines import successor_request
from mirage.policy.features import FEATURE_NAMES, FEATURE_SET, features

ESTIMATE_NAMES: tuple[str, ...] = ("est_wait_h", "est_known")
DECISION_NAMES: tuple[str, ...] = FEATURE_NAMES + ESTIMATE_NAMES
DECISION_SET = f"{FEATURE_SET}+estimate-v1"
HOUR = 3600.0
MASK_SHARE = 0.2  # share of training rows whose estimate is hidden (rate-limited calls)


def estimate_columns(now: np.ndarray, start: np.ndarray) -> np.ndarray:
    """(n, 2) columns from estimated starts (epoch s; negative = no estimate)."""
    known = start >= 0
    wait = np.where(known, np.maximum(0.0, start - now) / HOUR, 0.0)
    return np.stack([wait, known.astype(np.float64)], axis=1)


def decision_features(ctx: DecisionContext, pending: Sequence[PendingTransition]) -> np.ndarray:
    """One row of :data:`DECISION_NAMES` per pending transition (one estimate per shape)."""
    x = features(ctx.snapshot, ctx.profile, pending, ctx.now, queue_rows=ctx.queue_rows)
    starts = np.full(len(pending), -1.0)
    seen: dict[tuple[str, int, int, int], float] = {}
    for i, p in enumerate(pending):
        shape = (p.partition, p.succ_nodes, p.succ_gpus, p.succ_time_limit)
        if shape not in seen:
            est = ctx.estimate_start(successor_request(p)) if ctx.estimate_start else None
            seen[shape] = -1.0 if est is None or est.start is None else float(est.start)
        starts[i] = seen[shape]
    now = np.full(len(pending), float(ctx.now))
    return np.concatenate([x, estimate_columns(now, starts)], axis=1)


def mask_estimates(x: np.ndarray, seed: int, share: float = MASK_SHARE) -> np.ndarray:
    """A copy of decision rows with ``share`` of the estimates hidden (as if rate-limited)."""
    out = x.copy()
    hide = np.random.default_rng(seed).random(len(x)) < share
    out[hide, len(FEATURE_NAMES) :] = 0.0
    return out
