"""A cluster's wait calibration: how far a shape's start sits between the plan's two
readings of the queue, by the shape's width.

The one-pass plan (:mod:`.queue`) reserves every queued job for its *predicted* run
(its user's history). Slurm reserves for *time limits*. Narrow shapes start about when
the predicted runs say: the holes that jobs ending early leave are wide enough for them.
Wide shapes do not: on CERIT-SC (80-CPU nodes, age-only priority), single-segment shapes
of one to two nodes were predicted to wait 18 to 27 h in March 2013 and waited 49 to
83 h, while the same pass with every job at its limit said 70 to 84 h: small jobs take
the room early ends free, and a wide job starts about when the limits let Slurm's
reservation for it begin. Narrow shapes (an eighth of a node) waited under an hour,
which the run-based pass said and the limit-based one overstated.

So a calibrated plan reads the queue both ways and takes, for a shape of width class
``c`` (its size in nodes: 40 of 80 CPUs is 0.5), the start
``run-based + alpha[c] x (limit-based - run-based)``; its later segments wait as long
(:mod:`.predict`). Each ``alpha`` is fitted by least squares, in [0, 1], on the total
waits of every grid shape at every decision point of a cluster's tuning month, whose
truth is run forward in the simulator with later arrivals (:mod:`mirage.evaluate.plans`);
a class with fewer than :data:`MIN_PAIRS` pairs keeps the run-based plan (0).
``mirage evaluate --plans --plan-fit FOLDER`` fits it and writes ``FOLDER/plan.toml``;
``mirage plan``, ``chain submit --plan`` and the daemon's re-plans read it from the
cluster's models folder, beside ``policy.toml``.
"""

from __future__ import annotations

import hashlib
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
#: Fewer pairs than this in a class: it keeps the run-based plan.
MIN_PAIRS = 20
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
    """A fit's data, one row per grid shape and decision point: the shape's width (nodes),
    segments, first wait by runs and by limits (s), and the true total of its waits (s)."""

    widths: np.ndarray
    segments: np.ndarray
    by_runs_s: np.ndarray
    by_limits_s: np.ndarray
    true_total_s: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[WaitPairs]) -> WaitPairs:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _PAIR_FIELDS))

    def __len__(self) -> int:
        return len(self.widths)


_PAIR_FIELDS = ("widths", "segments", "by_runs_s", "by_limits_s", "true_total_s")


def fit(
    pairs: WaitPairs, edges: Sequence[float] = DEFAULT_EDGES, min_pairs: int = MIN_PAIRS
) -> WaitCalibration:
    """Per width class, the ``alpha`` in [0, 1] of least squares for the total wait
    ``segments x (first by runs + alpha x (by limits - by runs))`` against the truth
    (each later segment waits as the first: :mod:`.predict`'s persistence)."""
    w, n, r, lim, t = (np.asarray(getattr(pairs, f), float) for f in _PAIR_FIELDS)
    cls = np.searchsorted(np.asarray(edges, float), w, side="left")
    alphas, counts = [], []
    for c in range(len(edges) + 1):
        m = cls == c
        counts.append(int(m.sum()))
        x, y = n[m] * (lim[m] - r[m]), t[m] - n[m] * r[m]
        den = float(np.dot(x, x))
        ok = counts[-1] >= min_pairs and den > 0
        alphas.append(min(1.0, max(0.0, float(np.dot(x, y)) / den)) if ok else 0.0)
    return WaitCalibration(tuple(edges), tuple(round(a, 3) for a in alphas), tuple(counts))


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
