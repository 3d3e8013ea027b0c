"""The ranked table ``mirage plan`` prints, from the plan's JSON form
(:meth:`mirage.plan.predict.Plan.to_dict`): the daemon answers that form over its socket,
and the command prints it the same way either way."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from mirage.fmt import duration
from mirage.slurm.syntax import format_duration

Row = Mapping[str, Any]


def header(unit: str) -> str:
    return (
        f"{'#':>3}  {'partition':<12} {'size':<12} {'limit':>11} {'segs':>4} "
        f"{'first wait':>10}  {'done in':>10}  {'interval':<21} {unit + '-h':>7}"
    )


def size_text(c: Row, unit: str) -> str:
    """ "4 gpu (1x4)", "6 gpu (2x3)", "32 cpu (1x32)", "2 node"."""
    if unit == "node":
        return f"{c['nodes']} node"
    if unit == "cpu":
        per = c.get("cpus_per_node", 0)
        return f"{c['nodes'] * per} cpu ({c['nodes']}x{per})"
    return f"{c['nodes'] * c['gpus_per_node']} gpu ({c['nodes']}x{c['gpus_per_node']})"


def row(rank: str, c: Row, now: int, unit: str) -> str:
    lo, hi = c["interval"]
    interval = "-" if lo == hi else f"{duration(lo - now)} .. {duration(hi - now)}"
    return (
        f"{rank:>3}  {c['partition']:<12} {size_text(c, unit):<12} "
        f"{format_duration(c['time_limit_s']):>11} {c['segments']:>4} "
        f"{duration(c['first_wait_s']):>10}  {duration(c['completion'] - now):>10}  "
        f"{interval:<21} {c['resource_hours']:>7.0f}"
    )


def _stamp(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def shape_text(c: Row, unit: str) -> str:
    """ "gpu-a100, 4 gpu (2x2), --time=0-12:00:00"."""
    return f"{c['partition']}, {size_text(c, unit)}, --time={format_duration(c['time_limit_s'])}"


def plan_lines(plan: Mapping[str, Any], top: int = 0) -> list[str]:
    """The table (the ``top`` best; all with 0), the recommendation, the habitual shape's
    figures beside it, and the notes."""
    unit, now = plan["work"]["unit"], plan["now"]
    ranked = plan["candidates"]
    shown = ranked[:top] if top else ranked
    lines = [header(unit)] + [row(str(k + 1), c, now, unit) for k, c in enumerate(shown)]
    habit = plan.get("habitual")
    if habit is not None and habit not in shown:
        lines.append(row("hab", habit, now, unit))
    best = plan["recommended"]
    lines.append(
        f"recommended: {shape_text(best, unit)}: {best['segments']} segment(s), done by "
        f"{_stamp(best['completion'])} (in {duration(best['completion'] - now)})"
    )
    if habit is not None:
        lines.append(_versus(habit, best, now))
    lines += [f"note: {n}" for n in plan.get("notes", [])]
    return lines


def _versus(habit: Row, best: Row, now: int) -> str:
    """How much sooner the recommendation completes than the habitual shape."""
    h, b = habit["completion"] - now, best["completion"] - now
    head = f"habitual (its own size, the partition's longest limit): done in {duration(h)}; "
    if b < h:
        return head + f"recommended {duration(h - b)} earlier, {100 * (h - b) / h:.0f}% sooner"
    if habit == best:
        return head + "the recommendation is the habitual shape"
    if b == h:
        return head + "the recommendation finishes at the same time"
    return head + (
        f"{duration(b - h)} sooner than the recommendation: it is not among the candidates "
        "asked for (--plan-partition, --size, --limit); submit it as you would, or add its shape"
    )
