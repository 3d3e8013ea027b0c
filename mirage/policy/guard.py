"""The estimate guard: no pre-submission that Slurm itself expects to start early.

Every pre-submission risks overlap: the successor starts while its predecessor still
holds its GPUs. On a quiet queue that is all it buys (the successor would have started at
once anyway), and a policy tuned on busy months pre-submits into quiet ones: on ls6's
February at load 1.05, every tuned policy made the quiet samples worse than reactive
submission (`mirage evaluate` shows it per level).

The guard wraps a policy. Before a successor is pre-submitted it asks Slurm's own start
estimate for it (``sbatch --test-only``); when the estimate puts the start earlier than
``margin_s`` after the predecessor's planned end, the submission waits. Slurm 22.05's
estimate is where the running jobs, run to their limits, leave room for it, plus the
"area" of every pending job ahead as if each filled whole nodes for its whole limit
(:mod:`mirage.sim.testonly`): it runs late, never early, except for jobs of higher
priority that arrive later. An estimate already before the end (or less than the margin
after it) therefore means the successor would almost surely start early, and waiting
costs nothing. A pre-submitted successor still pending is revoked (cancelled, to be
submitted again later) under the same condition: the queue has drained since it went in.
Slurm gives a date however deep the queue; without one (the daemon's
``test_only_per_cycle`` spent, or ``sbatch --test-only`` failed) the wrapped policy
decides alone.

:data:`SHIPPED` is the configuration the daemon runs by default; `mirage evaluate`
measures it as the method ``shipped`` (see docs/evaluation.md for how it was chosen: on
ls6's tuning month only, the grid's best mean J among the settings with no harm at any
level). A cluster's models folder may ship its own choice, made by the same rule on that
cluster's tuning month (``policy.toml``, :func:`cluster_policy`): the daemon configured
for that cluster, and `mirage evaluate --cluster` on it, take it in place of
:data:`SHIPPED` for the ``[policy]`` keys the configuration leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.baselines import successor_request

HOUR = 3600
_Shape = tuple[str, int, int, int]  # partition, nodes, GPUs, time limit


@dataclass(frozen=True)
class Shipped:
    """The default policy: ``policy`` with its constant, behind the estimate guard."""

    policy: str = "qbets"
    qbets_quantile: float = 0.9
    average_factor: float = 1.5
    guard_margin_s: int = 24 * HOUR
    guard: str = "estimate"


SHIPPED = Shipped()
#: ``[policy] guard``: the estimate guard, or none.
GUARDS = ("estimate", "none")
#: A cluster's own choice, in its models folder (written by mirage train, mirage.learn.ship).
POLICY_FILE = "policy.toml"
#: The ``[policy]`` keys it may set, and the :class:`Shipped` field of each.
FILE_KEYS = {
    "default": "policy",
    "qbets_quantile": "qbets_quantile",
    "average_factor": "average_factor",
    "guard_margin_s": "guard_margin_s",
    "guard": "guard",
}


class PolicyFileError(ValueError):
    """A cluster's ``policy.toml`` that cannot be used (one line naming the file)."""


def cluster_policy(folder: Path) -> dict[str, Any]:
    """The ``[policy]`` values of ``folder/policy.toml`` (a cluster's models folder);
    empty when there is none."""
    from mirage.typedtoml import SchemaError, read_one_table

    path = folder / POLICY_FILE
    if not path.is_file():
        return {}
    try:
        return read_one_table(path, "cluster policy", "policy", list(FILE_KEYS))
    except SchemaError as exc:
        raise PolicyFileError(str(exc)) from exc


def shipped_for(folder: Path) -> Shipped:
    """What the daemon runs by default on the cluster of the models ``folder`` (each
    value of its ``policy.toml`` of the type the configuration takes)."""
    from mirage.typedtoml import SchemaError, build

    named = {FILE_KEYS[k]: v for k, v in cluster_policy(folder).items()}
    try:
        return build(Shipped, {**asdict(SHIPPED), **named}, str(folder / POLICY_FILE))
    except SchemaError as exc:
        raise PolicyFileError(str(exc)) from exc


class EstimateGuard(Policy):
    """``inner``'s decisions, less the pre-submissions Slurm expects to start before
    ``planned_end + margin_s``; pending ones it revokes under the same condition."""

    def __init__(self, inner: Policy, margin_s: int = SHIPPED.guard_margin_s) -> None:
        self.inner = inner
        self.margin_s = margin_s
        self.name = inner.name
        self.warmup_s = inner.warmup_s
        self.needs_queue = inner.needs_queue

    def observe(self, ctx: DecisionContext) -> None:
        self.inner.observe(ctx)

    @property
    def revocable(self) -> bool:
        return True

    def early(
        self, ctx: DecisionContext, p: PendingTransition, seen: dict[_Shape, int | None]
    ) -> tuple[bool, int | None]:
        """Whether Slurm's estimate (if any) has the successor start too early, and it.
        ``seen``: the estimates already asked this step (one per request shape: each is an
        ``sbatch --test-only`` from the daemon's per-cycle budget)."""
        if ctx.estimate_start is None:
            return False, None
        shape = (p.partition, p.succ_nodes, p.succ_gpus, p.succ_time_limit)
        if shape not in seen:
            seen[shape] = ctx.estimate_start(successor_request(p)).start
        start = seen[shape]
        if start is None:
            return False, None
        return start < p.planned_end + self.margin_s, start

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        out = []
        seen: dict[_Shape, int | None] = {}
        for p, d in zip(pending, self.inner.decide(ctx, pending), strict=True):
            if not d.submit:
                out.append(d)
                continue
            early, start = self.early(ctx, p, seen)
            if not early or start is None:
                out.append(d)
                continue
            ahead = (p.planned_end - start) / HOUR
            why = f"guard: Slurm estimates a start {ahead:+.2f} h before the end; waits"
            out.append(replace(d, submit=False, reason=f"{d.reason}; {why}"))
        return out

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        seen: dict[_Shape, int | None] = {}
        mine = [self.early(ctx, p, seen)[0] for p in pending]
        theirs = self.inner.revoke(ctx, pending) if self.inner.revocable else [False] * len(pending)
        return [a or b for a, b in zip(mine, theirs, strict=True)]
