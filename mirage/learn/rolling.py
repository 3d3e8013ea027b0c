"""Rolling recalibration: every constant re-tuned on the recent past, block by block.

A deployed Mirage re-tunes its constants on its own cluster's recent history (`mirage train
--recalibrate`, weekly from a systemd timer); a cluster that got busier is then tuned on
its busier weeks. This evaluates that: the test split is cut into blocks (a week by
default); before each block every tunable constant is chosen again on the samples of the
``window_s`` before the block whose outcomes are known by its start (a sample's window
ends by then). The baselines' constants (the tuned fixed lead, the running-average
factor, QBETS' quantile) and the forecasters' decision constants (quantile, bands,
interval pad) and the agents' margins are re-tuned alike; the learned models themselves are
not retrained. No sample's outcome is seen before its
block starts: the samples of earlier test blocks count as history once they are over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mirage.evaluate.harness import (
    SELECTED,
    BatchedPolicy,
    Outcomes,
    Walker,
    evaluate,
    select,
    tune,
)
from mirage.evaluate.protocol import Block
from mirage.policy.cost import CostModel

if TYPE_CHECKING:
    from mirage.learn.dataset import Dataset


@dataclass
class Rolling:
    """What :func:`run_rolling` measured."""

    results: dict[str, Outcomes]  # per method, the test samples in block order
    blocks: list[dict[str, Any]]  # per block: its span, sample counts and tuned constants
    coverage: dict[str, float]  # forecaster -> share of true waits in its stated interval


def past_samples(times: Sequence[int], block: Block, span_s: int) -> list[int]:
    """Indices of the samples (at ``times``) a block may tune on: in its tuning window and
    over (the sample's ``span_s`` window ended) by the time the block starts."""
    return [i for i, t in enumerate(times) if block.tune_from <= t and t + span_s <= block.start]


def recalibrated(policy: BatchedPolicy, history: Dataset) -> BatchedPolicy:
    """A learned policy with its decision constants tuned on ``history`` (a forecaster's
    quantiles, bands and pads, an agent's margin); any other policy unchanged."""
    from mirage.learn.artifacts import agent_class
    from mirage.learn.forecast import ForecastPolicy
    from mirage.learn.train import tune_agent, tune_forecaster

    out: BatchedPolicy
    agent = agent_class()
    if isinstance(policy, ForecastPolicy):
        out, _params, _metrics = tune_forecaster(policy.name, policy.forecaster, history)
    elif agent is not None and isinstance(policy, agent):
        out, _params, _metrics = tune_agent(policy.name, policy.model, history)
    else:
        out = policy
    return out


def run_rolling(  # noqa: PLR0917 - one call site, all needed
    history: Walker,
    test: Walker,
    methods: Sequence[str],
    cost_model: CostModel,
    learned: Mapping[str, BatchedPolicy],
    plan: Sequence[Block],
) -> Rolling:
    """Each method's outcomes on ``test``, block by block. ``history``: every sample that
    may serve for tuning (the tuning split and the test split itself; each block takes
    those over before it starts)."""
    span = test.protocol.window_s
    parts: dict[str, list[Outcomes]] = {m: [] for m in methods}
    report: list[dict[str, Any]] = []
    covered: dict[str, list[float]] = {}  # forecaster -> [rows inside, rows]
    for b in plan:
        here = [i for i, s in enumerate(test.samples) if b.start <= s.t < b.end]
        if not here:
            continue
        past = past_samples([s.t for s in history.samples], b, span)
        if not past:
            raise ValueError(
                f"no samples to tune on before the block starting at {b.start}: "
                "lengthen the tuning window"
            )
        hist = history.subset(past)
        plain = [m for m in methods if m != SELECTED]
        tuned = tune(hist, plain, cost_model)
        models = _recalibrate_all(learned, hist, cost_model)
        block = test.subset(here)
        res = evaluate(block, plain, tuned.params, cost_model, learned=models)
        chosen = None
        if SELECTED in methods:  # the method of least J on this block's history
            chosen, _scores = select(hist, plain, tuned.params, cost_model, models)
            res[SELECTED] = res[chosen]
        for m in methods:
            parts[m].append(res[m])
        rows = sum(len(x) for x in block.matrices) if block.queue is not None else 0
        for m, p in models.items():
            share = block.interval_coverage(p)
            if share is not None:
                acc = covered.setdefault(m, [0.0, 0.0])
                acc[0], acc[1] = acc[0] + share * rows, acc[1] + rows
        report.append(
            {
                "start": b.start,
                "end": b.end,
                "tune_from": b.tune_from,
                "samples": len(here),
                "tune_samples": len(past),
                "tuned": tuned.params,
                "learned": {m: _constants(p) for m, p in models.items()},
                **({"selected": chosen} if chosen else {}),
            }
        )
    return Rolling(
        results={m: Outcomes.concat(v) for m, v in parts.items() if v},
        blocks=report,
        # the stated intervals, each block's with its recalibrated pad
        coverage={m: inside / rows for m, (inside, rows) in covered.items() if rows},
    )


def _recalibrate_all(
    learned: Mapping[str, BatchedPolicy], hist: Walker, cost_model: CostModel
) -> dict[str, BatchedPolicy]:
    """Every learned policy recalibrated on one block's history (its rows built once)."""
    if not learned:
        return {}
    from mirage.learn.dataset import Dataset

    rows = Dataset.from_matrices(hist.samples, hist.matrices, cost_model)
    return {m: recalibrated(p, rows) for m, p in learned.items()}


def _constants(policy: object) -> dict[str, float | None]:
    """A learned policy's decision constants, for the report (a revocation margin of
    None: never revokes)."""
    names = ("act", "band_s", "quiet_act", "quiet_band_s", "interval_pad", "margin",
             "revoke_margin_h", "revoke_margin")  # fmt: skip
    values = {n: getattr(policy, n) for n in names if hasattr(policy, n)}
    return {n: None if v is None else float(v) for n, v in values.items()}
