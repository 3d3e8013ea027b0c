"""mirage.fmt: the one human form of a span (status lines, tables, logs), and the unit
of a table of hours."""

from __future__ import annotations

import math

from mirage.fmt import duration, hours_unit


def test_seconds_under_an_hour_minutes_above() -> None:
    spans = (0, 42, 185, 3599, 3600, 3720, 8640, 90061, 4 * 86400 + 1800)
    assert [duration(s) for s in spans] == [
        "0s", "42s", "3m05s", "59m59s", "1h00m", "1h02m", "2h24m", "1d01h01m", "4d00h30m",
    ]  # fmt: skip


def test_rounded_to_what_is_shown() -> None:
    assert duration(71.6) == "1m12s"
    assert duration(3599.6) == "1h00m"  # not "59m60s"
    assert duration(3779) == "1h03m"  # 1h02m59s


def test_unknown_and_negative() -> None:
    assert duration(None) == "-"
    assert duration(math.nan) == "-"
    assert duration(-185) == "-3m05s"
    assert duration(-8640) == "-2h24m"


def test_to_the_minute_as_the_demo_table() -> None:
    """The README's demo table: "0m", "1h34m", "+2h24m"."""
    assert [duration(s, minutes=True) for s in (0, 29, 31, 5640, 8640)] == [
        "0m", "0m", "1m", "1h34m", "2h24m",
    ]  # fmt: skip
    assert duration(8640, minutes=True, signed=True) == "+2h24m"
    assert duration(-600, minutes=True, signed=True) == "-10m"
    assert duration(0, minutes=True, signed=True) == "0m"
    assert duration(30 * 3600, minutes=True) == "1d06h00m"


def test_a_table_of_minutes_reads_in_minutes() -> None:
    """Issue 28: a minutes-long log's J (0.075 h) printed "0.08" or "0.00" in hours."""
    assert hours_unit([0.075, 0.0, 0.02]).name == "min"
    assert hours_unit([0.075, 0.0]).fmt(0.075) == "4.50"
    assert hours_unit([2.5, 0.01]).name == "h"
    assert hours_unit([1e-3, math.nan]).name == "s"  # 3.6 s
    assert hours_unit([1e-3]).fmt(1e-3) == "3.60"
    assert hours_unit([0.0, math.nan]).name == "h"
    assert hours_unit([]).name == "h"
