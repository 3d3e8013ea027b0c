"""Spans of time as people read them, one form for every command: "42s", "3m05s", "2h24m",
"2d03h04m" (Slurm's own ``D-HH:MM:SS`` is :func:`mirage.slurm.syntax.format_duration`)."""

from __future__ import annotations

import math


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
