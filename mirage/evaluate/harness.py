"""Walk policies along recorded samples; the oracle; tuning on the tuning split.

A policy's decision at step k sees only the step-k view of the base world (no successor
yet): the time, the chain's times, Slurm's estimate recorded at that step and the waits of
jobs started by then. Its first "submit" fixes the submission step; the successor's start
is read from the sample's outcome curve. The oracle picks the step minimising J.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mirage.evaluate.probes import SampleResult
from mirage.evaluate.protocol import Protocol
from mirage.policy.base import (
    DecisionContext,
    PendingTransition,
    Policy,
    WaitHistory,
    revocable_step,
)
from mirage.policy.baselines import FixedLead, Qbets, Reactive, RunningAverage, SlurmEstimate
from mirage.policy.cost import DEFAULT_COST, CostModel, Transition
from mirage.policy.guard import LOOKAHEAD_GUARDS, SHIPPED, Shipped, shipped_guard
from mirage.profile.schema import ClusterProfile
from mirage.slurm.types import QueueSnapshot, StartEstimate, SubmitRequest

HOUR = 3600
ORACLE = "oracle"
#: Knows the true run times of every job queued or running, not future arrivals
#: (:mod:`mirage.evaluate.whatif`); a reference like the oracle, never a baseline to beat.
RUNTIME_ORACLE = "runtime-oracle"
#: The look-ahead policy (:mod:`mirage.policy.lookahead`, curves by
#: :mod:`mirage.evaluate.lookahead`).
LOOKAHEAD = "lookahead"
#: Methods that see what no deployed policy can: left out of comparisons and selection.
REFERENCES = (ORACLE, RUNTIME_ORACLE)


@dataclass
class Outcomes:
    """Per-sample results of one method (arrays over the usable samples, seconds)."""

    step: np.ndarray
    interruption: np.ndarray
    overlap: np.ndarray
    gap: np.ndarray
    revoked: np.ndarray  # pre-submissions revoked (cancelled while pending) before the last
    limit: np.ndarray  # the predecessor's time limit (s): an early start's cost depends on it

    def cost(self, cost_model: CostModel = DEFAULT_COST) -> np.ndarray:
        """J per sample (s), :mod:`mirage.policy.cost`."""
        return cost_model.of_arrays(self.interruption, self.overlap, self.limit)

    def beyond_training(self, cost_model: CostModel = DEFAULT_COST) -> np.ndarray:
        """Allocation time per sample beyond the training (s, per GPU of the chain)."""
        return cost_model.beyond_training_arrays(self.overlap, self.limit)

    def take(self, keep: Sequence[int]) -> Outcomes:
        """These samples only (indices, in the order given)."""
        idx = np.asarray(keep, dtype=np.int64)
        return type(self)(*(getattr(self, f.name)[idx] for f in dataclasses.fields(self)))

    @classmethod
    def concat(cls, parts: Sequence[Outcomes]) -> Outcomes:
        """Parts' samples one after another (in the order given)."""
        return cls(
            *(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(cls))
        )


def transition(sample: SampleResult, k: int) -> Transition:
    return Transition(
        pred_start=sample.pred_start,
        pred_time_limit=sample.time_limit,
        pred_end=sample.planned_end,  # the predecessor runs to its limit
        succ_start=int(sample.succ_start[k]),
    )


def curve_cost(sample: SampleResult, cost_model: CostModel = DEFAULT_COST) -> np.ndarray:
    """J for every submission step of the sample (the outcome curve, in cost)."""
    end = sample.planned_end
    start = sample.succ_start.astype(np.float64)
    return cost_model.of_arrays(np.maximum(0.0, start - end), np.maximum(0.0, end - start),
                           float(sample.time_limit))  # fmt: skip


def oracle_step(sample: SampleResult, cost_model: CostModel = DEFAULT_COST) -> int:
    """The step with the least J (the latest such step on ties: least early commitment)."""
    cost = curve_cost(sample, cost_model)
    return int(len(cost) - 1 - np.argmin(cost[::-1]))


def pending_of(
    sample: SampleResult, protocol: Protocol, profile: ClusterProfile, partition: str
) -> PendingTransition:
    """The transition a sample asks about, as the daemon would describe it (the request of
    :func:`mirage.evaluate.probes.chain_spec`: whole nodes, with their GPUs, by default)."""
    part = profile.partition(partition)
    whole = protocol.gpus <= 0
    return PendingTransition(
        chain_id="eval",
        pred_job_id="pred",
        pred_start=sample.pred_start,
        pred_time_limit=sample.time_limit,
        succ_nodes=protocol.nodes,
        succ_gpus=protocol.nodes * part.gpus_per_node if whole else protocol.gpus,
        succ_time_limit=sample.time_limit,
        partition=part.name,
    )


def contexts(
    sample: SampleResult,
    profile: ClusterProfile,
    partition: str = "",
    queue: np.ndarray | None = None,
    lookahead: np.ndarray | None = None,
) -> list[DecisionContext]:
    """The step views of a sample (the last step, the planned end, is not asked).

    ``queue``: the queue features recorded at each step (:mod:`mirage.evaluate.features`),
    which learned policies read instead of a snapshot; ``lookahead``: the look-ahead start
    recorded at each step (:mod:`mirage.evaluate.lookahead`), which the guard's look-ahead
    veto reads instead of simulating a snapshot.
    """
    history = WaitHistory(sample.hist_start, sample.hist_wait)
    out = []
    for k in range(len(sample.steps) - 1):
        now = int(sample.steps[k])
        est = int(sample.estimate[k])
        ahead = None if lookahead is None else int(lookahead[k])

        def estimate(_req: SubmitRequest, est: int = est) -> StartEstimate:
            return StartEstimate(None, None if est < 0 else est)

        def look(_p: PendingTransition, ahead: int | None = ahead) -> int | None:
            return None if ahead is None or ahead < 0 else ahead

        out.append(
            DecisionContext(
                now=now,
                snapshot=QueueSnapshot(taken_at=now, jobs=(), slurm_version="sim-recorded"),
                profile=profile,
                estimate_start=estimate,
                history=history,
                queue_rows=None if queue is None else {partition: queue[k]},
                lookahead_start=None if lookahead is None else look,
            )
        )
    return out


def submission_step(policy: Policy, ctxs: Sequence[DecisionContext], p: PendingTransition) -> int:
    for k, ctx in enumerate(ctxs):
        policy.observe(ctx)
        if policy.decide(ctx, [p])[0].submit:
            return k
    return len(ctxs)  # submitted at the predecessor's end regardless


def revocable_submission(
    policy: Policy, ctxs: Sequence[DecisionContext], p: PendingTransition, sample: SampleResult
) -> tuple[int, int]:
    """A revocable policy's standing submission step and its revocations before it: its
    submit and revoke answers at every step, then the daemon's rule
    (:func:`mirage.policy.base.revocable_step`)."""
    submit = np.zeros(len(ctxs), bool)
    revoke = np.zeros(len(ctxs), bool)
    for k, ctx in enumerate(ctxs):
        policy.observe(ctx)
        submit[k] = policy.decide(ctx, [p])[0].submit
        revoke[k] = policy.revoke(ctx, [p])[0]
    return revocable_step(submit, revoke, sample.succ_start, sample.steps)


def outcomes_at(
    samples: Sequence[SampleResult], steps: Sequence[int], revoked: Sequence[int] | None = None
) -> Outcomes:
    trans = [transition(s, k) for s, k in zip(samples, steps, strict=True)]
    return Outcomes(
        step=np.asarray(steps, dtype=np.int64),
        interruption=np.array([t.interruption for t in trans], dtype=np.float64),
        overlap=np.array([t.overlap for t in trans], dtype=np.float64),
        gap=np.array([t.gap for t in trans], dtype=np.float64),
        revoked=np.asarray([0] * len(trans) if revoked is None else revoked, np.int64),
        limit=np.array([s.time_limit for s in samples], dtype=np.float64),
    )


PolicyFactory = Callable[[], Policy]


class BatchedPolicy(typing.Protocol):
    """A stateless policy that answers every step of a recorded sample at once: whether
    it would submit, and whether it would revoke a pending pre-submission."""

    def plan_for(self, matrix: np.ndarray, left_h: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class Walker:
    """Evaluates policies on a fixed list of usable samples (contexts built once);
    ``shipped``: what the method ``shipped`` runs (a cluster's own choice, else the
    defaults)."""

    shipped: Shipped

    def __init__(
        self,
        samples: Sequence[SampleResult],
        protocol: Protocol,
        profile: ClusterProfile,
        partition: str,
        queue: Sequence[np.ndarray] | None = None,
        *,
        no_arrivals: Sequence[np.ndarray] | None = None,
        lookahead: Sequence[np.ndarray] | None = None,
        shipped: Shipped = SHIPPED,
    ) -> None:
        """``queue``: per sample (of ``samples``, usable or not) its recorded queue features;
        ``no_arrivals``: per sample its no-arrival starts (:mod:`mirage.evaluate.whatif`),
        which only the runtime oracle reads; ``lookahead``: per sample its look-ahead starts
        (:mod:`mirage.evaluate.lookahead`), for the ``lookahead`` policy."""
        keep = [i for i, s in enumerate(samples) if s.ok]
        self.samples = [samples[i] for i in keep]
        self.protocol = protocol
        self.shipped = shipped
        self.queue = None if queue is None else [queue[i] for i in keep]
        self.curves: dict[str, list[np.ndarray]] = {
            m: [c[i] for i in keep]
            for m, c in ((RUNTIME_ORACLE, no_arrivals), (LOOKAHEAD, lookahead))
            if c is not None
        }
        ahead = self.curves.get(LOOKAHEAD)
        self.ctxs = [
            contexts(
                s,
                profile,
                partition,
                None if self.queue is None else self.queue[i],
                None if ahead is None else ahead[i],
            )
            for i, s in enumerate(self.samples)
        ]
        self.pending = [pending_of(s, protocol, profile, partition) for s in self.samples]
        self.profile = profile

    def subset(self, keep: Sequence[int]) -> Walker:
        """A walker over some of these samples (contexts and matrices shared, not rebuilt)."""
        out = object.__new__(Walker)
        out.samples = [self.samples[i] for i in keep]
        out.protocol, out.profile = self.protocol, self.profile
        out.shipped = self.shipped
        out.queue = None if self.queue is None else [self.queue[i] for i in keep]
        out.curves = {m: [c[i] for i in keep] for m, c in self.curves.items()}
        out.ctxs = [self.ctxs[i] for i in keep]
        out.pending = [self.pending[i] for i in keep]
        if self.queue is not None:
            out.__dict__["matrices"] = [self.matrices[i] for i in keep]  # the cached property
        return out

    def run(self, make: PolicyFactory) -> Outcomes:
        steps, revoked = [], []
        for s, ctxs, p in zip(self.samples, self.ctxs, self.pending, strict=True):
            policy = make()  # a fresh policy per chain
            if policy.revocable:
                k, n = revocable_submission(policy, ctxs, p, s)
            else:
                k, n = submission_step(policy, ctxs, p), 0
            steps.append(k)
            revoked.append(n)
        return outcomes_at(self.samples, steps, revoked)

    @functools.cached_property
    def matrices(self) -> list[np.ndarray]:
        """Each sample's decision rows, built once for every learned method."""
        from mirage.evaluate.features import sample_matrix

        if self.queue is None:
            raise ValueError("learned policies need the recorded queue features")
        return [
            sample_matrix(s, q, p, self.profile)
            for s, q, p in zip(self.samples, self.queue, self.pending, strict=True)
        ]

    def run_batched(self, policy: BatchedPolicy) -> Outcomes:
        """A learned policy, one batched prediction per sample (the daemon's rule: submit,
        and revoke while pending, :func:`mirage.policy.base.revocable_step`)."""
        steps, revoked = [], []
        for s, x in zip(self.samples, self.matrices, strict=True):
            submit, revoke = policy.plan_for(x, (s.planned_end - s.steps[:-1]) / HOUR)
            k, n = revocable_step(submit, revoke, s.succ_start, s.steps)
            steps.append(k)
            revoked.append(n)
        return outcomes_at(self.samples, steps, revoked)

    def interval_coverage(self, policy: object) -> float | None:
        """Share of (sample, step) whose true wait, if submitted then, lies in a
        forecaster's stated 90% interval (None for policies without intervals)."""
        forecaster = getattr(policy, "forecaster", None)
        interval_h = getattr(policy, "interval_h", None)
        if forecaster is None or interval_h is None or self.queue is None:
            return None
        inside, total = 0, 0
        for s, x in zip(self.samples, self.matrices, strict=True):
            pred = interval_h(forecaster.predict(x)) * HOUR
            wait = (s.succ_start[:-1] - s.steps[:-1]).astype(np.float64)
            inside += int(((wait >= pred[:, 0]) & (wait <= pred[:, -1])).sum())
            total += len(wait)
        return inside / total if total else None

    def oracle(self, cost_model: CostModel) -> Outcomes:
        return outcomes_at(self.samples, [oracle_step(s, cost_model) for s in self.samples])

    def runtime_oracle(self, margin_s: float) -> Outcomes:
        """The reference that knows every present job's run time (see :data:`RUNTIME_ORACLE`)."""
        return self.curve_rule(RUNTIME_ORACLE, margin_s)

    def curve_rule(self, method: str, margin_s: float) -> Outcomes:
        """A method that submits at the first step whose recorded start (its curve: the
        runtime oracle's no-arrival starts, or the look-ahead's) plus ``margin_s`` reaches
        the planned end."""
        from mirage.evaluate.whatif import runtime_oracle_step

        curves = self.curves.get(method)
        if curves is None:
            raise ValueError(f"{method} needs its recorded start curves")
        steps = []
        for s, start in zip(self.samples, curves, strict=True):
            if len(start) != len(s.steps):
                raise ValueError(f"sample {s.t}: {method} curve does not match the probe")
            steps.append(runtime_oracle_step(start, s.planned_end, margin_s))
        return outcomes_at(self.samples, steps)


# ---- the methods and their tuning ----------------------------------------------------

#: Tuning grids (tuned on the tuning split only). Chosen before looking at any result,
#: then widened where tuned constants sat at an edge (CERIT's deep queues, Theta's short
#: waits) until the rule saturates: a lead of 47 h submits at the predecessor's start; a
#: factor or quantile of 0.1 almost at its end (reactive); QBETS' 95% bound on the 0.999
#: quantile is the largest recent wait; running-average factors of 200 and more gave the
#: same tuning J on CERIT.
_AVERAGE_FACTORS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 12, 20, 50, 100, 200, 500)
GRIDS: dict[str, list[float]] = {
    "fixed-lead": [h * HOUR for h in (0, 1 / 6, 0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 36, 47)],
    "running-average": [float(f) for f in _AVERAGE_FACTORS],
    "qbets": [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999],
    # the runtime oracle's margin (s): submit when no-arrival start + margin >= the end
    RUNTIME_ORACLE: [h * HOUR for h in (-2, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6)],
    # the look-ahead's margin (s), likewise
    LOOKAHEAD: [h * HOUR for h in (-8, -4, -2, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6, 8)],
}
BASELINES = ("reactive", "fixed-lead", "slurm-estimate", "running-average", "qbets", ORACLE)
#: The daemon's default configuration (:data:`mirage.policy.guard.SHIPPED`: a baseline
#: behind the estimate guard), with its shipped constants: never tuned here, so that what
#: is measured is what an admin runs.
SHIPPED_METHOD = "shipped"
#: Opt-in (``--policies …,runtime-oracle``): its what-if probes cost about half as much
#: again as the outcome probes.
EXTRA_REFERENCES = (RUNTIME_ORACLE,)
LEARNED = ("rf", "xgb", "dqn", "pg")  # trained by `mirage train`, loaded from models/
#: Model-based, opt-in (``--policies …,lookahead``): its curves cost about 0.1 s a step.
MODEL_BASED = (LOOKAHEAD,)
#: Methods decided by a recorded start curve and a tuned margin (:meth:`Walker.curve_rule`).
CURVE_RULES = (RUNTIME_ORACLE, LOOKAHEAD)
#: Not a policy of its own: whichever of the other methods (the references excepted) had the
#: least mean J on the tuning split, judged on the test split. What an admin would deploy
#: after `mirage train`, chosen without seeing the test split; "the best learned policy"
#: of a table is picked on the test split, this is not.
SELECTED = "selected"
METHODS = (*BASELINES, SHIPPED_METHOD, *EXTRA_REFERENCES, *LEARNED, *MODEL_BASED, SELECTED)


def shipped_policy(shipped: Shipped = SHIPPED) -> Policy:
    """The daemon's default policy with its default constants (``[policy]`` defaults, or
    a cluster's own: :func:`mirage.policy.guard.shipped_for`), built by the daemon's own
    :func:`~mirage.policy.simple.make_policy`."""
    from mirage.policy.simple import make_policy

    inner = make_policy(shipped.policy, qbets_quantile=shipped.qbets_quantile,
                        average_factor=shipped.average_factor)  # fmt: skip
    if shipped.policy == "reactive":
        return inner
    return shipped_guard(inner, shipped)


def factory(method: str, param: float | None) -> PolicyFactory:
    if method == SHIPPED_METHOD:
        return shipped_policy
    if method == "reactive":
        return Reactive
    if method == "slurm-estimate":
        return SlurmEstimate
    if method == "fixed-lead":
        lead = int(param if param is not None else HOUR)
        return lambda: FixedLead(lead)
    if method == "running-average":
        factor = float(param if param is not None else 1.0)
        return lambda: RunningAverage(factor)
    if method == "qbets":
        q = float(param if param is not None else 0.5)
        return lambda: Qbets(q)
    raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


@dataclass
class Tuned:
    params: dict[str, float]
    scores: dict[str, dict[str, float]]  # method -> {param: mean J on the tuning split}


def tune(walker: Walker, methods: Sequence[str], cost_model: CostModel) -> Tuned:
    """Each tunable method's constant minimising mean J on the tuning split."""
    params: dict[str, float] = {}
    scores: dict[str, dict[str, float]] = {}
    for m in methods:
        grid = GRIDS.get(m)
        if not grid:
            continue
        by = {g: float(_run_plain(walker, m, g).cost(cost_model).mean()) for g in grid}
        params[m] = min(grid, key=lambda g: (by[g], grid.index(g)))
        scores[m] = {repr(g): v for g, v in by.items()}
    return Tuned(params=params, scores=scores)


def select(
    walker: Walker,
    methods: Sequence[str],
    params: Mapping[str, float],
    cost_model: CostModel,
    learned: Mapping[str, BatchedPolicy] | None = None,
) -> tuple[str, dict[str, float]]:
    """The method of least mean J on ``walker`` (a tuning split) among ``methods`` (the
    :data:`REFERENCES` and :data:`SELECTED` aside; ties to the earlier in ``methods``), and every
    candidate's mean J (hours)."""
    cands = [m for m in methods if m not in (*REFERENCES, SELECTED)]
    if not cands:
        raise ValueError("nothing to select from")
    res = evaluate(walker, cands, params, cost_model, learned)
    scores = {m: float(o.cost(cost_model).mean()) / HOUR for m, o in res.items()}
    return min(cands, key=lambda m: (scores[m], cands.index(m))), scores


def evaluate(
    walker: Walker,
    methods: Sequence[str],
    params: Mapping[str, float],
    cost_model: CostModel,
    learned: Mapping[str, BatchedPolicy] | None = None,
) -> dict[str, Outcomes]:
    out: dict[str, Outcomes] = {}
    for m in methods:
        if m == ORACLE:
            out[m] = walker.oracle(cost_model)
        elif m in LEARNED:
            if learned is None or m not in learned:
                raise ValueError(f"no trained {m} model given")
            out[m] = walker.run_batched(learned[m])
        elif m == SHIPPED_METHOD and walker.shipped.policy in LEARNED:
            out[m] = shipped_learned(walker, learned)
        else:
            out[m] = _run_plain(walker, m, params.get(m))
    return out


def guarded(
    walker: Walker,
    submits: Sequence[np.ndarray],
    margin_s: float | None,
    lookahead_margin_s: float | None = None,
    *,
    margin_fraction: float | None = None,
    revokes: Sequence[np.ndarray] | None = None,
) -> Outcomes:
    """The outcomes of ``submits`` behind the guard: a step is vetoed (and a pending
    pre-submission revoked) where Slurm's recorded estimate is before the planned end plus
    the margin (``margin_s``, or where that is None ``margin_fraction`` of the sample's
    time limit), or the recorded look-ahead start before it plus ``lookahead_margin_s``
    (None: that veto is off; :class:`mirage.policy.guard.Guard`). ``revokes``: per sample,
    the steps where the inner policy itself revokes (a trained policy's own revocation,
    :func:`learned_plans`)."""
    curves = walker.curves.get(LOOKAHEAD)
    if lookahead_margin_s is not None and curves is None:
        raise ValueError("the look-ahead veto needs the walker's look-ahead curves")
    steps, revoked = [], []
    for i, (s, submit) in enumerate(zip(walker.samples, submits, strict=True)):
        early = np.zeros(len(s.steps) - 1, bool)
        margin = margin_s
        if margin is None and margin_fraction is not None:
            margin = round(margin_fraction * s.time_limit)  # as Guard.margin_for
        if margin is not None:
            est = s.estimate[:-1]
            early |= (est >= 0) & (est < s.planned_end + margin)
        if lookahead_margin_s is not None and curves is not None:
            ahead = curves[i][:-1]
            early |= (ahead >= 0) & (ahead < s.planned_end + lookahead_margin_s)
        withdraw = early if revokes is None else early | revokes[i]
        k, n = revocable_step(submit & ~early, withdraw, s.succ_start, s.steps)
        steps.append(k)
        revoked.append(n)
    return outcomes_at(walker.samples, steps, revoked)


def learned_plans(
    walker: Walker, policy: BatchedPolicy
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per sample, a trained policy's "submit" and "revoke" at every decision step, from
    the walker's recorded queue features (as :meth:`Walker.run_batched` reads them)."""
    submits, revokes = [], []
    for s, x in zip(walker.samples, walker.matrices, strict=True):
        submit, revoke = policy.plan_for(x, (s.planned_end - s.steps[:-1]) / HOUR)
        submits.append(np.asarray(submit, bool))
        revokes.append(np.asarray(revoke, bool))
    return submits, revokes


def shipped_learned(walker: Walker, learned: Mapping[str, BatchedPolicy] | None) -> Outcomes:
    """The method ``shipped`` where the cluster's default is a trained model: its plan
    behind the configured guard, as the shipped choice weighs that candidate
    (:func:`learned_plans`, then :func:`guarded`)."""
    from mirage.policy.guard import ESTIMATE_GUARDS

    sh = walker.shipped
    if learned is None or sh.policy not in learned:
        raise ValueError(f"shipped: no trained {sh.policy} model given")
    if sh.guard in LOOKAHEAD_GUARDS and LOOKAHEAD not in walker.curves:
        raise ValueError(f"shipped: the {sh.guard} guard needs look-ahead curves")
    submits, revokes = learned_plans(walker, learned[sh.policy])
    estimate = sh.guard in ESTIMATE_GUARDS
    return guarded(
        walker, submits, sh.guard_margin_s if estimate else None,
        sh.guard_lookahead_margin_s if sh.guard in LOOKAHEAD_GUARDS else None,
        margin_fraction=sh.guard_margin_fraction if estimate else None, revokes=revokes,
    )  # fmt: skip


def _run_plain(walker: Walker, method: str, param: float | None) -> Outcomes:
    """A baseline (or a curve rule) with its constant."""
    if method in CURVE_RULES:
        return walker.curve_rule(method, param if param is not None else 0.0)
    if method == SHIPPED_METHOD:
        if walker.shipped.guard in LOOKAHEAD_GUARDS and LOOKAHEAD not in walker.curves:
            raise ValueError(f"shipped: the {walker.shipped.guard} guard needs look-ahead curves")
        return walker.run(functools.partial(shipped_policy, walker.shipped))
    return walker.run(factory(method, param))


def replace_protocol(protocol: Protocol, **changes: object) -> Protocol:
    return dataclasses.replace(protocol, **changes)  # type: ignore[arg-type]
