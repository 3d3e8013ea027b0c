"""mirage.fmt.duration: the one human form of a span, in status lines, tables and logs."""

from __future__ import annotations

import math

from mirage.fmt import duration


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
