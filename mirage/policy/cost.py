"""The one cost every part of Mirage uses (simulator, daemon, metrics, reports).

For a transition k -> k+1 (all times epoch seconds):

- planned_end(k) = start(k) + time_limit(k)
- interruption  = max(0, start(k+1) - end(k))          training idle
- overlap       = max(0, planned_end(k) - start(k+1))  allocation held twice, or given up
                                                       by a handoff
- gap           = start(k+1) - planned_end(k)          signed, as Mirage (SC'23) reports it
- J             = interruption + alpha * overlap       (alpha defaults to 0.5)

J is the learning reward (negated), the tuning target of every threshold, the oracle's
criterion and the headline figure.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ALPHA = 0.5


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

    def cost(self, alpha: float = DEFAULT_ALPHA) -> float:
        return self.interruption + alpha * self.overlap
