"""A cluster's wait calibration: how far a shape's start sits between the plan's two
readings of the queue, by the shape's width.

The one-pass plan (:mod:`.queue`) reserves every queued job for its *predicted* run
(its user's history). Slurm reserves for *time limits*. Narrow shapes start about when
the predicted runs say: the holes that jobs ending early leave are wide enough for them.
Wide shapes do not: on CERIT-SC (80-CPU nodes, age-only priority), single-segment shapes
of half a node to two nodes were predicted to wait 29 to 44 h in March 2013 (running
jobs on their own nodes) and waited 49 to 83 h, while the same pass with every job at
its limit said 80 to 98 h: small jobs take the room early ends free. Narrow shapes (an
eighth of a node) waited under an hour, which the run-based pass said and the
limit-based one overstated.

So a calibrated plan reads the queue both ways and takes, for a shape of width class
``c`` (its size in nodes: 40 of 80 CPUs is 0.5), the start
``run-based + alpha[c] x (limit-based - run-based)``; its later segments wait as long
(:mod:`.predict`). The alphas are chosen on a cluster's tuning month: at every decision
point there, every grid shape's truth is run forward in the simulator with later
arrivals (:mod:`mirage.evaluate.plans`), and the alphas kept are those, from a coarse
grid and never smaller for a wider class, under which the planner's picks finish
soonest on average. That is the decision the plan is for; a least-squares fit of the
waits themselves, tried first, weighs the long waits of shapes no plan would pick and
chose worse (CERIT's March, before running jobs kept their nodes: 15% above the best
shape in hindsight, against 11%).
``mirage evaluate --plans --plan-fit FOLDER`` fits it and writes ``FOLDER/plan.toml``;
``mirage plan``, ``chain submit --plan`` and the daemon's re-plans read it from the
cluster's models folder, beside ``policy.toml``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mirage.plan.shapes import Shape
from mirage.policy.lookahead import plan_limit
from mirage.profile.schema import ClusterProfile
from mirage.slurm.types import SlurmJob

PLAN_FILE = "plan.toml"
#: Upper bounds of the width classes, in nodes (the last class is open-ended).
DEFAULT_EDGES = (0.125, 0.25, 0.5, 1.0, 2.0)
#: Fewer pairs than this in a class: it takes its narrower neighbour's alpha.
MIN_PAIRS = 20
#: The alphas a fit chooses from (coarse: a month of decision points fits a few choices).
LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
KEYS = ("node_edges", "alpha", "pairs")


class CalibrationError(ValueError):
    """A plan.toml that cannot be used (one line naming the file)."""


@dataclass(frozen=True)
class WaitCalibration:
    """``start = by runs + alpha[c] x (by limits - by runs)`` for width class ``c``."""

    edges: tuple[float, ...]  # upper bounds, in nodes; len(edges) + 1 classes
    alpha: tuple[float, ...]
    pairs: tuple[int, ...] = ()  # fitted on, per class (for the record)

    def __post_init__(self) -> None:
        if len(self.alpha) != len(self.edges) + 1:
            raise CalibrationError(
                f"{len(self.edges)} width edges need {len(self.edges) + 1} alphas"
            )
        if list(self.edges) != sorted(self.edges) or min(self.edges, default=1) <= 0:
            raise CalibrationError("the width edges must be positive and increasing")
        if not all(0 <= a <= 1 for a in self.alpha):
            raise CalibrationError("each alpha must be between 0 and 1")

    def alpha_of(self, shape: Shape, profile: ClusterProfile) -> float:
        return self.alpha[int(np.searchsorted(self.edges, width(shape, profile), side="left"))]

    def start(self, by_runs: int, by_limits: int, shape: Shape, profile: ClusterProfile) -> int:
        """The calibrated start of ``shape`` from its two predicted starts."""
        return round(by_runs + self.alpha_of(shape, profile) * (by_limits - by_runs))

    def tag(self) -> str:
        blob = json.dumps({**asdict(self), "pairs": []}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def to_toml(self, comment: str = "") -> str:
        head = "".join(f"# {line}\n" for line in comment.splitlines())
        return head + (
            "[waits]\n"
            f"node_edges = [{', '.join(f'{e:g}' for e in self.edges)}]\n"
            f"alpha = [{', '.join(f'{a:.3f}' for a in self.alpha)}]\n"
            f"pairs = [{', '.join(str(n) for n in self.pairs)}]\n"
        )


@dataclass(frozen=True)
class Limits:
    """Every queued and running job planned to its time limit, as Slurm plans."""

    def predict_job(self, job: SlurmJob, now: int) -> int:
        return plan_limit(job)


def width(shape: Shape, profile: ClusterProfile) -> float:
    """The shape's size in nodes: a CPU (GPU) shape's share of its nodes' CPUs (GPUs)."""
    part = profile.partition(shape.partition)
    if shape.cpus_per_node > 0 and part.cpus_per_node > 0:
        return shape.nodes * shape.cpus_per_node / part.cpus_per_node
    if shape.gpus_per_node > 0 and part.gpus_per_node > 0:
        return shape.nodes * shape.gpus_per_node / part.gpus_per_node
    return float(shape.nodes)


@dataclass(frozen=True)
class WaitPairs:
    """A fit's data, one row per grid shape and decision point: the decision point
    (``sample``), the shape's width (nodes), segments, run (all segments, s), first wait by
    predicted runs and by limits (s), and the true completion after the decision (s)."""

    sample: np.ndarray
    widths: np.ndarray
    segments: np.ndarray
    runs_s: np.ndarray
    by_runs_s: np.ndarray
    by_limits_s: np.ndarray
    true_done_s: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[WaitPairs]) -> WaitPairs:
        """One set of pairs; each part's samples kept apart."""
        out, base = [], 0
        for p in parts:
            out.append(dataclasses.replace(p, sample=p.sample + base))
            base += int(p.sample.max()) + 1 if len(p) else 0
        return cls(*(np.concatenate([getattr(p, f.name) for p in out])
                     for f in dataclasses.fields(cls)))  # fmt: skip

    def __len__(self) -> int:
        return len(self.widths)


def fit(
    pairs: WaitPairs,
    edges: Sequence[float] = DEFAULT_EDGES,
    min_pairs: int = MIN_PAIRS,
    levels: Sequence[float] = LEVELS,
) -> WaitCalibration:
    """The alphas, one per width class, from ``levels`` and never smaller for a wider
    class, under which the planner's picks at the pairs' decision points finish soonest
    on average (ties: the smaller alphas, nearer the run-based plan). A class of fewer
    than ``min_pairs`` pairs takes the alpha of the class narrower than it (the first: 0)."""
    cls = np.searchsorted(np.asarray(edges, float), pairs.widths, side="left")
    n_cls = len(edges) + 1
    counts = np.bincount(cls, minlength=n_cls)
    free = [c for c in range(n_cls) if counts[c] >= min_pairs]
    pick = _Picks(pairs, cls)
    best: tuple[float, tuple[float, ...]] | None = None
    for combo in itertools.combinations_with_replacement(sorted(levels), len(free)):
        alpha = _spread(combo, free, n_cls)
        score = pick.mean_done(np.asarray(alpha))
        if best is None or score < best[0] - 1e-9:
            best = (score, alpha)
    alpha = best[1] if best is not None else (0.0,) * n_cls
    return WaitCalibration(tuple(edges), alpha, tuple(int(x) for x in counts))


def picked_mean_s(cal: WaitCalibration, pairs: WaitPairs) -> float:
    """The mean true completion (after the decision, s) of the shapes a planner with
    ``cal`` picks at the pairs' decision points."""
    cls = np.searchsorted(np.asarray(cal.edges, float), pairs.widths, side="left")
    return _Picks(pairs, cls).mean_done(np.asarray(cal.alpha))


def _spread(combo: Sequence[float], free: Sequence[int], n_cls: int) -> tuple[float, ...]:
    """Alphas per class: the free classes' from ``combo``, each other class its narrower
    neighbour's."""
    out, last, it = [], 0.0, iter(combo)
    for c in range(n_cls):
        last = next(it) if c in free else last
        out.append(last)
    return tuple(out)


class _Picks:
    """The pairs as a (decision point x shape) table, for scoring many alphas."""

    def __init__(self, pairs: WaitPairs, cls: np.ndarray) -> None:
        ids, row = np.unique(pairs.sample, return_inverse=True)
        col = np.zeros(len(pairs), int)
        seen: dict[int, int] = {}
        for k, r in enumerate(row):
            col[k] = seen.get(int(r), 0)
            seen[int(r)] = col[k] + 1
        shape = (len(ids), max(seen.values(), default=0))

        def table(x: np.ndarray, fill: float) -> np.ndarray:
            out = np.full(shape, fill, float)
            out[row, col] = x
            return out

        self.cls = table(cls, 0).astype(int)
        self.runs = table(pairs.runs_s, np.inf)
        self.segments = table(pairs.segments, 1)
        self.by_runs = table(pairs.by_runs_s, 0)
        self.spread = table(pairs.by_limits_s - pairs.by_runs_s, 0)
        self.done = table(pairs.true_done_s, np.inf)

    def mean_done(self, alpha: np.ndarray) -> float:
        predicted = self.runs + self.segments * (self.by_runs + alpha[self.cls] * self.spread)
        k = np.argmin(predicted, axis=1)
        return float(self.done[np.arange(len(k)), k].mean())


def read_calibration(folder: Path) -> WaitCalibration | None:
    """``folder/plan.toml`` (a cluster's models folder), or None when there is none."""
    from mirage.typedtoml import SchemaError, read_one_table

    path = folder / PLAN_FILE
    if not path.is_file():
        return None
    try:
        table = read_one_table(path, "plan calibration", "waits", KEYS)
    except SchemaError as exc:
        raise CalibrationError(str(exc)) from exc
    if not {"node_edges", "alpha"} <= set(table):
        raise CalibrationError(f"{path} [waits]: needs node_edges and alpha")
    try:
        return WaitCalibration(
            tuple(_number(x) for x in table["node_edges"]),
            tuple(_number(x) for x in table["alpha"]),
            tuple(int(x) for x in table.get("pairs", [])),
        )
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{path} [waits]: {exc}") from exc


def _number(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise CalibrationError(f"expected numbers, got {x!r}")
    return float(x)
