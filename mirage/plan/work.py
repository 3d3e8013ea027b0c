"""The work a chain still has to do, and how its run time scales with its size.

A work spec is the run time at one size: ``96h@4gpu`` (96 hours on 4 GPUs) or, on a
partition without GPUs, ``300h@32cpu`` (CPUs on shared nodes) or ``300h@2node`` (whole
nodes). The duration is Slurm's syntax
(:func:`mirage.slurm.syntax.parse_duration`) or a number with a unit: ``96h``, ``2d``,
``90m``, ``5400s``.

Other sizes follow a scaling rule (``linear``: twice the GPUs, half the time; ``sqrt``:
twice the GPUs, 1/sqrt(2) of the time; ``none``: more GPUs do not help) or measured
points (``--point 2gpu=170h``): between two known sizes the run time is interpolated in
log-log space (a power law through both points, what the rules are too); beyond the
outermost point the rule carries on from it.

Example::

    >>> w = parse_work("96h@4gpu", scaling="linear", points=["2gpu=170h"])
    >>> round(w.run_at(8) / 3600), round(w.run_at(2) / 3600)
    (48, 170)
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mirage.slurm.syntax import SlurmSyntaxError, parse_duration

Scaling = Literal["linear", "sqrt", "none"]
SCALINGS: tuple[Scaling, ...] = ("linear", "sqrt", "none")
UNITS = ("gpu", "cpu", "node")
#: Exponent e of run ∝ size^-e for each rule.
EXPONENT: dict[Scaling, float] = {"linear": 1.0, "sqrt": 0.5, "none": 0.0}
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"^\s*(\d+)\s*(gpus?|cpus?|nodes?)\s*$", re.IGNORECASE)


class PlanInputError(ValueError):
    """A work spec, point or candidate list that cannot be used (one line saying why)."""


def parse_amount(text: str) -> int:
    """Seconds of ``text``: "96h", "2d", "90m", "5400s", or Slurm's "4-00:00:00"."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if m:
        return round(float(m.group(1)) * _UNIT_S[m.group(2)])
    try:
        return parse_duration(text.strip())
    except SlurmSyntaxError:
        raise PlanInputError(
            f"cannot read the duration {text!r}: use e.g. 96h, 2d, 90m or 4-00:00:00"
        ) from None


def parse_size(text: str) -> tuple[int, str]:
    """(count, unit) of "4gpu", "32cpu", "2 nodes"."""
    m = _SIZE.match(text)
    if not m or int(m.group(1)) < 1:
        raise PlanInputError(f"cannot read the size {text!r}: use e.g. 4gpu, 32cpu or 2node")
    return int(m.group(1)), m.group(2).lower().rstrip("s")


@dataclass(frozen=True)
class Work:
    """Run time (s) still needed at each known size; ``scaling`` for the others."""

    points: tuple[tuple[int, int], ...]  # (size, run seconds), sizes ascending, distinct
    unit: str = "gpu"
    scaling: Scaling = "linear"

    @property
    def base(self) -> tuple[int, int]:
        """The first point given (the work spec's own size and time)."""
        return self.points[0]

    def run_at(self, size: int) -> int:
        """Seconds of run the work needs on ``size`` GPUs (CPUs, nodes)."""
        if size < 1:
            raise PlanInputError(f"a size must be at least 1, got {size}")
        pts = sorted(self.points)
        for (a, ta), (b, tb) in itertools.pairwise(pts):
            if a <= size <= b:
                return _power(size, a, ta, b, tb)
        near = pts[0] if size < pts[0][0] else pts[-1]
        return max(1, round(float(near[1] * (near[0] / size) ** EXPONENT[self.scaling])))

    def remaining(self, done_s: int, size: int) -> Work:
        """The work left after ``done_s`` useful seconds on ``size``: every point shrinks
        by the same share (the share done is the same whatever the size)."""
        share = max(0.0, 1.0 - done_s / self.run_at(size))
        pts = tuple((n, max(0, round(t * share))) for n, t in self.points)
        return Work(pts, self.unit, self.scaling)

    def to_dict(self) -> dict[str, object]:
        return {"points": [list(p) for p in self.points], "unit": self.unit,
                "scaling": self.scaling}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Work:
        raw = data.get("points")
        if not isinstance(raw, list):
            raise PlanInputError("a stored work needs its points")
        pts = tuple((int(n), int(t)) for n, t in raw)
        return cls(pts, str(data.get("unit", "gpu")), _scaling(str(data.get("scaling"))))


def _power(size: int, a: int, ta: int, b: int, tb: int) -> int:
    """Run time at ``size`` on the power law through (a, ta) and (b, tb)."""
    if a == b or ta <= 0 or tb <= 0:
        return ta
    e = math.log(tb / ta) / math.log(b / a)
    return max(1, round(float(ta * (size / a) ** e)))


def _scaling(text: str) -> Scaling:
    for s in SCALINGS:
        if s == text:
            return s
    raise PlanInputError(f"unknown scaling {text!r}: use {', '.join(SCALINGS)}")


def parse_work(spec: str, *, scaling: str = "linear", points: Sequence[str] = ()) -> Work:
    """The work of ``spec`` ("96h@4gpu") with measured ``points`` ("2gpu=170h")."""
    amount, at, size = spec.partition("@")
    if not at:
        raise PlanInputError(f"cannot read the work {spec!r}: use TIME@SIZE, e.g. 96h@4gpu")
    count, unit = parse_size(size)
    pts = {count: _positive(parse_amount(amount), spec)}
    for p in points:
        where, eq, amount = p.partition("=")
        if not eq:
            raise PlanInputError(f"cannot read the point {p!r}: use SIZE=TIME, e.g. 2gpu=170h")
        n, u = parse_size(where)
        if u != unit:
            raise PlanInputError(f"the point {p!r} is in {u}s, the work in {unit}s")
        if n in pts:
            raise PlanInputError(f"the point {p!r} repeats the size {n}{unit}")
        pts[n] = _positive(parse_amount(amount), p)
    first = (count, pts.pop(count))
    return Work((first, *sorted(pts.items())), unit, _scaling(scaling))


def _positive(seconds: int, text: str) -> int:
    if seconds <= 0:
        raise PlanInputError(f"{text!r}: the work must take some time")
    return seconds
