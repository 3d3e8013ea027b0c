"""Spans of time as people read them, one form for every command: "42s", "3m05s", "2h24m",
"2d03h04m" (Slurm's own ``D-HH:MM:SS`` is :func:`mirage.slurm.syntax.format_duration`);
and the unit a table of hours is printed in (:func:`hours_unit`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


def duration(seconds: float | None, *, minutes: bool = False, signed: bool = False) -> str:
    """``seconds`` to the second under an hour ("42s", "3m05s") and to the minute above
    ("2h24m", "2d03h04m"); with ``minutes``, to the minute throughout ("0m", "34m"), as
    the demo's gaps are. "-" for None or NaN; a negative span has "-", and with
    ``signed`` a positive one "+"."""
    if seconds is None or math.isnan(seconds):
        return "-"
    sign = "-" if seconds < 0 else "+" if signed and seconds > 0 else ""
    s = round(abs(seconds))
    if s < 3600 and not minutes:
        m, s = divmod(s, 60)
        return f"{sign}{m}m{s:02d}s" if m else f"{sign}{s}s"
    d, m = divmod(round(abs(seconds) / 60), 1440)
    h, m = divmod(m, 60)
    if d:
        return f"{sign}{d}d{h:02d}h{m:02d}m"
    return f"{sign}{h}h{m:02d}m" if h else f"{sign}{m}m"


@dataclass(frozen=True)
class HourUnit:
    """A unit to print figures held in hours in: its name and how many of it make an hour."""

    name: str
    per_hour: float

    def fmt(self, hours: float) -> str:
        """``hours`` in this unit, to two decimals."""
        return f"{hours * self.per_hour:.2f}"


HOURS = HourUnit("h", 1.0)
_UNITS = (HOURS, HourUnit("min", 60.0), HourUnit("s", 3600.0))


def hours_unit(hours: Iterable[float]) -> HourUnit:
    """The unit for a table of figures held in hours: the largest (h, min, s) in which its
    largest finite figure is at least 1, so that a log of minutes reads "4.50 min", not
    "0.08 h" (hours when every figure is 0 or none is finite)."""
    top = max((abs(h) for h in hours if math.isfinite(h)), default=0.0)
    if top == 0:
        return HOURS
    return next((u for u in _UNITS if top * u.per_hour >= 1), _UNITS[-1])
