"""The estimate guard: no pre-submission that Slurm itself expects to start early.

Every pre-submission risks overlap: the successor starts while its predecessor still
holds its GPUs. On a quiet queue that is all it buys (the successor would have started at
once anyway), and a policy tuned on busy months pre-submits into quiet ones: on ls6's
February at load 1.05, every tuned policy made the quiet samples worse than reactive
submission (`mirage evaluate` shows it per level).

The guard wraps a policy. Before a successor is pre-submitted it asks Slurm's own start
estimate for it (``sbatch --test-only``); when the estimate puts the start earlier than
the margin after the predecessor's planned end, the submission waits. The margin is a
fraction of the successor's time limit (``guard_margin_fraction``), or a fixed number of
seconds where one is set (``guard_margin_s``, which then wins): what an early start costs
a job that hands off is the segment it shortens, a share of that limit
(:mod:`mirage.policy.cost`), so a guard tuned on 48 h segments holds the same share of a
2 h one, not 8 h of it (which would hold back every pre-submission). Slurm 22.05's
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

The look-ahead veto (``guard = "lookahead"``, or ``"estimate+lookahead"`` for either
veto): the look-ahead's simulated start of the successor (:mod:`mirage.policy.lookahead`:
the present queue run with run times predicted from each user's recent jobs) before the
planned end plus ``guard_lookahead_margin_s``. Slurm's date counts every job ahead at its
limit, so where jobs end far before their limits it lies a day late and lets through
pre-submissions that start hours early; the look-ahead sees such a queue drain. It needs
the cluster profile (``<models_dir>/<cluster>/profile.toml``) and reads 14 days of
accounting at start, as the ``lookahead`` policy does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mirage.fmt import duration
from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.baselines import successor_request

log = logging.getLogger(__name__)

HOUR = 3600
_Shape = tuple[str, int, int, int]  # partition, nodes, GPUs, time limit


@dataclass(frozen=True)
class Shipped:
    """The default policy: ``policy`` with its constant, behind the guard ``guard``."""

    policy: str = "qbets"
    qbets_quantile: float = 0.95
    average_factor: float = 1.5
    # the estimate veto's margin: this share of the successor's time limit, unless
    # guard_margin_s (seconds, signed) is set
    guard_margin_fraction: float = 1 / 6
    guard_margin_s: int | None = field(default=None, metadata={"signed": True})
    guard: str = "estimate"
    # negative: veto only a start that long before the end (the selection grid's -2 h);
    # the daemon's [policy] key is signed too
    guard_lookahead_margin_s: int = field(default=0, metadata={"signed": True})


SHIPPED = Shipped()
#: The default for jobs that cannot hand off (``[daemon] handoff = false``): an early
#: successor then waits beside its predecessor, SC'23's J (interruption + 0.5 x overlap).
#: The selection rule's choice under that cost on ls6's tuning month, with Slurm 22.05's
#: estimate (scripts/select_shipped.py; docs/evaluation.md): QBETS 0.9, a 24 h margin.
SHIPPED_HELD_TWICE = Shipped(qbets_quantile=0.9, guard_margin_s=24 * HOUR)
#: ``[policy] guard``: Slurm's estimate, the look-ahead, either of them, or none.
GUARDS = ("estimate", "lookahead", "estimate+lookahead", "none")
#: The guards with the estimate veto, and those with the look-ahead veto (which need the
#: cluster profile).
ESTIMATE_GUARDS = ("estimate", "estimate+lookahead")
LOOKAHEAD_GUARDS = ("lookahead", "estimate+lookahead")
#: The look-ahead start of a successor the simulation failed for (e.g. a partition the
#: profile lacks): its pre-submission waits for the predecessor's end.
UNJUDGED = -1
#: The look-ahead veto reads this much accounting at start (the ``lookahead`` policy's).
LOOKAHEAD_WARMUP_S = 14 * 24 * HOUR
#: A cluster's own choice, in its models folder (written by mirage train, mirage.learn.ship).
POLICY_FILE = "policy.toml"
#: The ``[policy]`` keys it may set, and the :class:`Shipped` field of each.
FILE_KEYS = {
    "default": "policy",
    "qbets_quantile": "qbets_quantile",
    "average_factor": "average_factor",
    "guard_margin_fraction": "guard_margin_fraction",
    "guard_margin_s": "guard_margin_s",
    "guard": "guard",
    "guard_lookahead_margin_s": "guard_lookahead_margin_s",
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
        # a default of None (guard_margin_s: unset) is what TOML cannot write: left out
        base = {k: v for k, v in asdict(SHIPPED).items() if v is not None}
        out = build(Shipped, {**base, **named}, str(folder / POLICY_FILE))
    except SchemaError as exc:
        raise PolicyFileError(str(exc)) from exc
    if out.guard not in GUARDS:
        raise PolicyFileError(
            f"{folder / POLICY_FILE}: guard must be one of {', '.join(GUARDS)}, got {out.guard!r}"
        )
    return out


def _veto(source: str, start: int, planned_end: int, margin_s: int | None) -> str:
    """Why a veto holds a successor back, with the figures: where ``source`` starts it
    against the predecessor's planned end, and what the guard needs."""
    lead = planned_end - start
    where = (
        f"{duration(lead)} before the planned end"
        if lead > 0
        else f"{duration(-lead)} after the planned end"
    )
    margin = margin_s or 0
    if margin > 0:
        need = f"at least {duration(margin)} after it"
    elif margin == 0:
        need = "at or after it"
    else:
        need = f"at most {duration(-margin)} before it"
    return f"guard: {source} starts it {where}; the guard pre-submits only when it is {need}"


def guard_policy(
    inner: Policy,
    kind: str,
    margin_s: int | None,
    lookahead_margin_s: int = 0,
    *,
    margin_fraction: float | None = None,
) -> Policy:
    """``inner`` behind the guard ``kind`` (:data:`GUARDS`; "none": ``inner`` itself). The
    estimate veto's margin: ``margin_s`` seconds where it is not None, else
    ``margin_fraction`` of each successor's time limit."""
    if kind == "none":
        return inner
    if kind not in GUARDS:
        raise ValueError(f"unknown guard {kind!r}; valid: {', '.join(GUARDS)}")
    if kind in ESTIMATE_GUARDS and margin_s is None and margin_fraction is None:
        raise ValueError(f"the {kind} guard needs a margin (seconds or a fraction of the limit)")
    if kind == "estimate":
        return EstimateGuard(inner, margin_s, fraction=margin_fraction)
    on = kind in ESTIMATE_GUARDS
    return Guard(
        inner,
        estimate_margin_s=margin_s if on else None,
        estimate_margin_fraction=margin_fraction if on else None,
        lookahead_margin_s=lookahead_margin_s if kind in LOOKAHEAD_GUARDS else None,
    )


def shipped_guard(inner: Policy, shipped: Shipped) -> Policy:
    """``inner`` behind the guard of ``shipped`` (the daemon's [policy] or a cluster's)."""
    return guard_policy(
        inner,
        shipped.guard,
        shipped.guard_margin_s,
        shipped.guard_lookahead_margin_s,
        margin_fraction=shipped.guard_margin_fraction,
    )


def guard_kind(estimate: bool, lookahead: bool) -> str:
    """The :data:`GUARDS` name of a guard with these vetoes."""
    return next(
        k for k in GUARDS if (k in ESTIMATE_GUARDS, k in LOOKAHEAD_GUARDS) == (estimate, lookahead)
    )


def vetoes_text(
    estimate_h: float | None, lookahead_h: float | None, *, estimate_fraction: float | None = None
) -> str:
    """A guard's vetoes as logs and reports show them: "estimate 24 h or look-ahead +2 h",
    "estimate 1/6 of the limit", "none" (None: that veto is off; a margin in hours wins
    over a fraction of the limit, as in the daemon)."""
    out = []
    if estimate_h is not None:
        out.append(f"estimate {_hours(estimate_h)}")
    elif estimate_fraction is not None:
        out.append(f"estimate {fraction_text(estimate_fraction)}")
    if lookahead_h is not None:
        out.append(f"look-ahead {_hours(lookahead_h, signed=True)}")
    return " or ".join(out) or "none"


def fraction_text(f: float) -> str:
    """A margin that is a share of the limit as people read it: "1/6 of the limit",
    "0 h" (the planned end itself), "1 limit", "0.3 of the limit"."""
    if f == 0:
        return "0 h"
    for den in (1, 2, 3, 4, 6, 8, 12, 16, 24, 48):
        num = f * den
        if abs(num - round(num)) < 1e-6:
            return f"{round(num)}/{den} of the limit" if den > 1 else f"{round(num)} limit"
    return f"{f:.3g} of the limit"


def _hours(h: float, *, signed: bool = False) -> str:
    """ "24 h", "+2 h", "0.5 h"; a margin that is no tenth of an hour as a duration ("1m00s",
    not "0.0166667 h")."""
    if abs(h * 10 - round(h * 10)) < 1e-9:
        return f"{h:+g} h" if signed else f"{h:g} h"
    return duration(h * HOUR, signed=signed)


class Guard(Policy):
    """``inner``'s decisions, less the pre-submissions a veto says start too early; pending
    ones it revokes under the same condition.

    The vetoes: Slurm's estimate before ``planned_end`` plus the estimate margin
    (``estimate_margin_s`` where it is not None, else ``estimate_margin_fraction`` of the
    successor's time limit; both None: that veto is off), and the look-ahead's simulated
    start before ``planned_end + lookahead_margin_s`` (None: that veto is off). Either one
    vetoes. The look-ahead start is the recorded one where the context carries it
    (``ctx.lookahead_start``: the evaluation harness), else simulated from the context's
    snapshot and profile with the run times :meth:`observe` learns.
    """

    def __init__(
        self,
        inner: Policy,
        *,
        estimate_margin_s: int | None = None,
        estimate_margin_fraction: float | None = SHIPPED.guard_margin_fraction,
        lookahead_margin_s: int | None = None,
    ) -> None:
        from mirage.policy.lookahead import RunTimes

        self.inner = inner
        self.estimate_margin_s = estimate_margin_s
        self.estimate_margin_fraction = (
            None if estimate_margin_s is not None else (estimate_margin_fraction)
        )
        self.lookahead_margin_s = lookahead_margin_s
        self.runtimes = RunTimes()
        self.name = inner.name
        self.needs_queue = inner.needs_queue
        self.warmup_s = inner.warmup_s
        if lookahead_margin_s is not None:
            # the simulation runs every user's jobs: a partial queue looks idle
            self.needs_queue = True
            self.warmup_s = max(self.warmup_s, LOOKAHEAD_WARMUP_S)
        self._unjudged: set[str] = set()  # partitions the look-ahead could not simulate

    @property
    def margin_s(self) -> int | None:
        """The estimate veto's margin in seconds where it is fixed (None: a fraction of the
        limit, or no estimate veto)."""
        return self.estimate_margin_s

    @property
    def estimates(self) -> bool:
        """Whether the estimate veto is on."""
        return self.estimate_margin_s is not None or self.estimate_margin_fraction is not None

    def margin_for(self, p: PendingTransition) -> int:
        """The estimate veto's margin for ``p`` (seconds)."""
        if self.estimate_margin_s is not None:
            return self.estimate_margin_s
        return round((self.estimate_margin_fraction or 0.0) * p.succ_time_limit)

    def observe(self, ctx: DecisionContext) -> None:
        self.inner.observe(ctx)
        if self.lookahead_margin_s is None:
            return
        if ctx.accounting is not None:
            self.runtimes.observe(ctx.accounting)
        self.runtimes.observe(ctx.snapshot.jobs)

    @property
    def revocable(self) -> bool:
        return True

    def early(
        self, ctx: DecisionContext, p: PendingTransition, seen: dict[_Shape, int | None]
    ) -> tuple[bool, int | None]:
        """Whether Slurm's estimate (if any) has the successor start too early, and it.
        ``seen``: the estimates already asked this step (one per request shape: each is an
        ``sbatch --test-only`` from the daemon's per-cycle budget)."""
        if ctx.estimate_start is None or not self.estimates:
            return False, None
        shape = (p.partition, p.succ_nodes, p.succ_gpus, p.succ_time_limit)
        if shape not in seen:
            seen[shape] = ctx.estimate_start(successor_request(p)).start
        start = seen[shape]
        if start is None:
            return False, None
        return start < p.planned_end + self.margin_for(p), start

    def lookahead(
        self, ctx: DecisionContext, pending: Sequence[PendingTransition]
    ) -> list[int | None]:
        """The look-ahead start of each successor (None: none recorded, and all None
        without the look-ahead veto; :data:`UNJUDGED`: the simulation failed for it)."""
        if self.lookahead_margin_s is None or not pending:
            return [None] * len(pending)
        if ctx.lookahead_start is not None:
            return [ctx.lookahead_start(p) for p in pending]
        try:
            return list(self._simulate(ctx, pending))
        except Exception:  # some chain's request: simulate them one at a time
            pass
        out: list[int | None] = []
        for p in pending:
            try:
                (start,) = self._simulate(ctx, [p])
            except Exception as exc:  # e.g. a partition the profile lacks
                if p.partition not in self._unjudged:
                    self._unjudged.add(p.partition)
                    why = "its chains are submitted at their predecessors' ends"
                    log.warning("guard: no look-ahead for partition %r (%s): %s",
                                p.partition, why, exc)  # fmt: skip
                start = UNJUDGED
            out.append(start)
        return out

    def _simulate(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[int]:
        from mirage.policy.lookahead import Request, lookahead_starts

        # a successor already pre-submitted is the request itself: out of the queue
        mine = {p.succ_job_id for p in pending if p.succ_job_id}
        snap = ctx.snapshot
        if mine:
            snap = replace(snap, jobs=tuple(j for j in snap.jobs if j.job_id not in mine))
        return lookahead_starts(snap, ctx.profile, ctx.now, self.runtimes,
                                [Request.of(p) for p in pending],
                                to_limit={p.pred_job_id for p in pending})  # fmt: skip

    def _why(
        self, ctx: DecisionContext, pending: Sequence[PendingTransition], *, unjudged: bool
    ) -> list[str]:
        """Per transition, why it starts too early ("" where no veto says so);
        ``unjudged``: also where the look-ahead could not be simulated."""
        seen: dict[_Shape, int | None] = {}
        ahead = self.lookahead(ctx, pending)
        out = []
        for p, la in zip(pending, ahead, strict=True):
            early, start = self.early(ctx, p, seen)
            if early and start is not None:
                out.append(_veto("Slurm's estimate", start, p.planned_end, self.margin_for(p)))
            elif la == UNJUDGED:
                out.append("guard: no look-ahead for this partition; waits" if unjudged else "")
            elif la is not None and la < p.planned_end + (self.lookahead_margin_s or 0):
                out.append(_veto("the look-ahead", la, p.planned_end, self.lookahead_margin_s))
            else:
                out.append("")
        return out

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        out = list(self.inner.decide(ctx, pending))
        asked = [i for i, d in enumerate(out) if d.submit]
        # a successor the look-ahead cannot judge waits for its predecessor's end: the
        # guard is there for safety, and reactive submission harms no quiet queue
        whys = self._why(ctx, [pending[i] for i in asked], unjudged=True)
        for i, why in zip(asked, whys, strict=True):
            if why:
                out[i] = replace(out[i], submit=False, reason=f"{out[i].reason}; {why}")
        return out

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        # one already pre-submitted and not judged is kept: a cancellation buys nothing
        mine = [bool(w) for w in self._why(ctx, pending, unjudged=False)]
        theirs = self.inner.revoke(ctx, pending) if self.inner.revocable else [False] * len(pending)
        return [a or b for a, b in zip(mine, theirs, strict=True)]


class EstimateGuard(Guard):
    """The estimate veto alone: ``margin_s`` seconds, or (None) ``fraction`` of each
    successor's time limit."""

    def __init__(
        self,
        inner: Policy,
        margin_s: int | None = None,
        *,
        fraction: float | None = SHIPPED.guard_margin_fraction,
    ) -> None:
        super().__init__(inner, estimate_margin_s=margin_s, estimate_margin_fraction=fraction)
