"""The ranked table ``mirage plan`` prints (``--json``: :meth:`Plan.to_dict`)."""

from __future__ import annotations

import time

from mirage.fmt import duration
from mirage.plan.predict import Candidate, Plan
from mirage.plan.shapes import Shape
from mirage.slurm.syntax import format_duration

HEADER = (
    f"{'#':>3}  {'partition':<12} {'size':<12} {'limit':>11} {'segs':>4} {'first wait':>10}  "
    f"{'completion (in)':>15}  {'interval':<21} {'hours':>7}"
)


def size_text(shape: Shape, unit: str) -> str:
    """ "4 gpu (1x4)", "6 gpu (2x3)", "2 node"."""
    if unit == "node":
        return f"{shape.nodes} node"
    return f"{shape.gpus} gpu ({shape.nodes}x{shape.gpus_per_node})"


def row(rank: str, c: Candidate, now: int, unit: str) -> str:
    lo, hi = c.interval
    interval = "-" if lo == hi else f"{duration(lo - now)} .. {duration(hi - now)}"
    return (
        f"{rank:>3}  {c.shape.partition:<12} {size_text(c.shape, unit):<12} "
        f"{format_duration(c.shape.time_limit):>11} {c.segments:>4} "
        f"{duration(c.first_wait_s):>10}  {duration(c.completion - now):>15}  "
        f"{interval:<21} {c.resource_hours:>7.0f}"
    )


def _stamp(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def plan_lines(plan: Plan, top: int = 0) -> list[str]:
    """The table (the ``top`` best, all with 0), the recommendation, the habitual shape's
    figures beside it, and the notes."""
    unit = plan.work.unit
    shown = plan.candidates[:top] if top else plan.candidates
    lines = [HEADER.replace("hours", f"{unit}-h")]
    lines += [row(str(k + 1), c, plan.now, unit) for k, c in enumerate(shown)]
    if plan.habitual is not None and plan.habitual not in shown:
        lines.append(row("hab", plan.habitual, plan.now, unit))
    best = plan.recommended
    lines.append(
        f"recommended: {best.shape.partition}, {size_text(best.shape, unit)}, --time="
        f"{format_duration(best.shape.time_limit)}: {best.segments} segment(s), done by "
        f"{_stamp(best.completion)} (in {duration(best.completion - plan.now)})"
    )
    if plan.habitual is not None:
        lines.append(_versus(plan.habitual, best, plan.now))
    lines += [f"note: {n}" for n in plan.notes]
    return lines


def _versus(habit: Candidate, best: Candidate, now: int) -> str:
    """How much sooner the recommendation completes than the habitual shape."""
    h, b = habit.completion - now, best.completion - now
    gain = f", {100 * (h - b) / h:.0f}% sooner" if h > 0 and b < h else ""
    return (
        f"habitual (its own size, the partition's longest limit): done in {duration(h)}; "
        f"recommended {duration(h - b)} earlier{gain}"
    )
