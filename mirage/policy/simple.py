"""The two smallest policies, enough for the daemon to run without a trained model.

- ``reactive``: never pre-submits; the daemon submits the successor when the
  predecessor has ended (the behaviour without Mirage, the baseline of every comparison).
- ``fixed-lead``: submits once ``now >= planned_end - lead_s``.
- ``qbets``, ``running-average``: the wait-statistic baselines of
  :mod:`mirage.policy.baselines`, learning recent waits from the daemon's polls.
- ``slurm-estimate``: submits when Slurm's own start estimate for the successor
  (``sbatch --test-only``, within the cycle's ``test_only_per_cycle``) reaches the
  predecessor's planned end; where Slurm's estimates are close to the real starts (CERIT's
  log: ``scripts/select_shipped.py`` chooses it there), the best of the baselines.

The full baseline set (Slurm's estimate, running average, QBETS, oracle) lives in
``mirage.policy.baselines``; ``lookahead`` (:mod:`mirage.policy.lookahead`) is made here too,
so that the daemon can run it by name.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.baselines import Qbets, RunningAverage, SlurmEstimate
from mirage.policy.guard import SHIPPED

POLICY_NAMES = ("reactive", "fixed-lead", "qbets", "running-average", "slurm-estimate", "lookahead")
#: What ``[policy] fallback`` may name: policies that need neither the whole queue nor the
#: profile, so that they can decide where the chosen policy cannot.
FALLBACK_NAMES = ("reactive", "fixed-lead")
#: Policies that read the queue against the cluster profile's node counts (the daemon loads
#: the profile beside the trained models), so they cannot be the fallback.
PROFILE_POLICIES = ("lookahead",)


class ReactivePolicy(Policy):
    name = "reactive"
    needs_queue = False

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        return [
            Decision(False, reason="reactive: submit at the predecessor's end") for _ in pending
        ]


class FixedLeadPolicy(Policy):
    name = "fixed-lead"
    needs_queue = False

    def __init__(self, lead_s: int) -> None:
        if lead_s < 0:
            raise ValueError(f"lead_s must not be negative, got {lead_s}")
        self.lead_s = lead_s

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        out = []
        for p in pending:
            due = p.planned_end - self.lead_s
            if ctx.now >= due:
                out.append(Decision(True, reason=f"lead {self.lead_s}s: due at {due}"))
            else:
                out.append(Decision(False, reason=f"lead {self.lead_s}s: wait {due - ctx.now}s"))
        return out


def make_policy(
    name: str,
    *,
    lead_s: int = 900,
    margin_s: int = 0,
    runtime_stat: str = "median",
    draws: int = 1,
    qbets_quantile: float = SHIPPED.qbets_quantile,
    average_factor: float = SHIPPED.average_factor,
) -> Policy:
    """A policy by its configured name (``margin_s``, ``runtime_stat``, ``draws``: the
    look-ahead's margin, run-time statistic and simulations per decision)."""
    if name == "reactive":
        return ReactivePolicy()
    if name == "fixed-lead":
        return FixedLeadPolicy(lead_s)
    if name == "qbets":
        return Qbets(qbets_quantile)
    if name == "running-average":
        return RunningAverage(average_factor)
    if name == "slurm-estimate":
        return SlurmEstimate()
    if name == "lookahead":
        from mirage.policy.lookahead import LookaheadPolicy

        return LookaheadPolicy(margin_s, stat=runtime_stat, draws=draws)
    raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)}")
