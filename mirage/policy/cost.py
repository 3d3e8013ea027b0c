"""The one cost every part of Mirage uses (simulator, evaluation, training, daemon, demo).

For a transition k -> k+1 (all times epoch seconds):

- planned_end(k) = start(k) + time_limit(k)
- interruption  = max(0, start(k+1) - end(k))          training idle
- overlap       = max(0, planned_end(k) - start(k+1))  how early the successor started (g)
- gap           = start(k+1) - planned_end(k)          signed, as Mirage (SC'23) reports it

What an early start costs depends on the job. Mirage's chain-ready job hands off
(docs/users/chain-ready-job.md): when segment k+1 starts g early, segment k checkpoints
and exits at once, and k+1 resumes from that checkpoint. Nothing is held twice beyond the
handoff window h, and the training never stops; what the chain loses is a segment
shortened by g. A chain of work W in segments of useful length L - R (L the limit, R the
restart overhead: loading the checkpoint, warming up) needs about g / (L - R) more
segments for it, and each extra segment costs a restart R and one more transition's idle
time I (``extra_idle_s``). So, per transition:

    J = interruption + [g > 0] * (h + g * (R + I) / (L - R))        (a job that hands off)
    J = interruption + held_twice_weight * g                        (one that cannot)

The second is SC'23's setting (an early successor sits idle until its predecessor ends;
weight 0.5), kept for jobs without the handoff helper. For a 48 h limit, R = 10 min and
I = 1 h the early-start weight is 0.024 per hour early, where SC'23's is 0.5: an early
start is about twenty times cheaper than the old J charged, a late one costs its idle
hours under both.

J (in seconds, the idle-equivalent delay of the chain's completion) is the learning
reward (negated), the tuning target of every threshold, the oracle's criterion and the
headline figure. ``CostModel`` holds R, h, I and the mode; :data:`DEFAULT_COST` is what
evaluation, training and the demo use unless told otherwise (R: the 10-minute restart of
a large model that ``mirage evaluate --plans`` assumes too; h: the handoff windows
measured on the test cluster, 1 to 3 s, bounded at 10 s by its test; I: one hour).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: SC'23's weight of an early start whose successor holds its allocation idle.
HELD_TWICE_WEIGHT = 0.5


@dataclass(frozen=True)
class CostModel:
    """The per-transition cost's parameters (seconds); see the module's docstring."""

    restart_s: float = 600.0  # R: a segment's restart overhead
    handoff_s: float = 10.0  # h: both allocations held while the predecessor checkpoints
    extra_idle_s: float = 3600.0  # I: idle of the extra transition a shortened segment adds
    hands_off: bool = True  # False: the job cannot hand off (charged as held twice)
    held_twice_weight: float = HELD_TWICE_WEIGHT

    def __post_init__(self) -> None:
        for name in ("restart_s", "handoff_s", "extra_idle_s", "held_twice_weight"):
            value = getattr(self, name)
            if not 0 <= value < float("inf"):
                raise ValueError(f"cost: {name} must be a non-negative number, got {value}")

    def early_weight(self, limit_s: float) -> float:
        """Cost per second early, for a predecessor of limit ``limit_s``."""
        return float(self._early_weights(limit_s))

    def _early_weights(self, limit_s: float | np.ndarray) -> np.ndarray:
        """:meth:`early_weight` of many limits at once."""
        if not self.hands_off:
            return np.asarray(self.held_twice_weight)
        useful = np.maximum(np.asarray(limit_s, dtype=np.float64) - self.restart_s, 60.0)
        out: np.ndarray = (self.restart_s + self.extra_idle_s) / useful
        return out

    def early_step(self) -> float:
        """What any early start costs at once (the handoff window), whatever g."""
        return self.handoff_s if self.hands_off else 0.0

    def of(self, interruption: float, overlap: float, limit_s: float) -> float:
        """J of one transition."""
        if overlap <= 0:
            return float(interruption)
        return float(interruption) + self.early_step() + self.early_weight(limit_s) * overlap

    def of_arrays(
        self, interruption: np.ndarray, overlap: np.ndarray, limit_s: float | np.ndarray
    ) -> np.ndarray:
        """J of many transitions (seconds; ``limit_s`` one for all or one each)."""
        ov = np.asarray(overlap, dtype=np.float64)
        weight = self._early_weights(limit_s)
        out: np.ndarray = np.asarray(interruption, dtype=np.float64) + np.where(
            ov > 0, self.early_step() + weight * ov, 0.0
        )
        return out

    def beyond_training_arrays(
        self, overlap: np.ndarray, limit_s: float | np.ndarray
    ) -> np.ndarray:
        """Allocation time per transition beyond the training itself (s; times the chain's
        GPUs for GPU-hours): the successor's restart R, and for an early start the handoff
        window and the extra segment's share of a restart; a job that cannot hand off holds
        the whole overlap idle instead."""
        ov = np.asarray(overlap, dtype=np.float64)
        if not self.hands_off:
            out: np.ndarray = self.restart_s + ov
            return out
        limits = np.broadcast_to(np.asarray(limit_s, dtype=np.float64), ov.shape)
        useful = np.maximum(limits - self.restart_s, 60.0)
        extra: np.ndarray = np.where(ov > 0, self.handoff_s + ov * self.restart_s / useful, 0.0)
        return extra + self.restart_s

    def describe(self) -> str:
        """One line for tables and logs."""
        if not self.hands_off:
            return f"J = interruption + {self.held_twice_weight:g} x overlap (no handoff)"
        return (
            f"J = interruption, and for an early start h + overlap x (R + I) / (limit - R) "
            f"(h {self.handoff_s:g} s, R {self.restart_s:g} s, I {self.extra_idle_s:g} s)"
        )

    def to_dict(self) -> dict[str, float | bool]:
        return {
            "restart_s": self.restart_s,
            "handoff_s": self.handoff_s,
            "extra_idle_s": self.extra_idle_s,
            "hands_off": self.hands_off,
            "held_twice_weight": self.held_twice_weight,
        }


DEFAULT_COST = CostModel()
#: SC'23's J (interruption + 0.5 x overlap), reported beside the cost of record for continuity.
HELD_TWICE = CostModel(hands_off=False)


@dataclass(frozen=True)
class Transition:
    """The observed times of one k -> k+1 transition."""

    pred_start: int
    pred_time_limit: int
    pred_end: int
    succ_start: int

    @property
    def planned_end(self) -> int:
        return self.pred_start + self.pred_time_limit

    @property
    def interruption(self) -> int:
        return max(0, self.succ_start - self.pred_end)

    @property
    def overlap(self) -> int:
        return max(0, self.planned_end - self.succ_start)

    @property
    def gap(self) -> int:
        return self.succ_start - self.planned_end

    def cost(self, model: CostModel = DEFAULT_COST) -> float:
        return model.of(self.interruption, self.overlap, self.pred_time_limit)
