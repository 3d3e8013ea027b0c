"""Site-local naive timestamps to UTC epoch seconds, counting DST ambiguities.

Rules (PEP 495 / zoneinfo semantics, applied explicitly and counted):

- A local time that occurs twice (the fall-back hour) is *ambiguous*: it is resolved as the
  FIRST occurrence, i.e. still on daylight-saving time (``fold=0``).
- A local time that never occurs (the spring-forward gap) is *missing*: it is read with
  the offset in force before the transition (``fold=0``), which is the same as shifting it
  forward by the length of the gap (02:30 on a US spring-forward day becomes 03:30 DST).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

_EPOCH = pd.Timestamp(0, tz="UTC")
_SECOND = pd.Timedelta(1, "s")


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError (with the name) if it does not exist."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


@dataclass
class LocalTimes:
    """Result of converting one column of local times."""

    epoch: pd.Series  # Int64, <NA> where the input was empty or unparseable
    unparseable: np.ndarray  # bool: a non-empty input that is not a valid time
    ambiguous: int
    missing: int


def local_to_epoch(values: pd.Series, fmt: str, tz_name: str) -> LocalTimes:
    """Parse strings with ``fmt`` as local time in ``tz_name``; return UTC epoch seconds.

    Empty strings and <NA> give <NA> (not unparseable); anything else that does not parse
    with ``fmt`` (or is not a real date) is flagged in ``unparseable``.
    """
    tz = zone(tz_name)
    text = values.astype("string").fillna("")
    present = (text != "").to_numpy(dtype=bool)
    parsed = pd.to_datetime(text.where(text != "", None), format=fmt, errors="coerce")
    unparseable = present & parsed.isna().to_numpy(dtype=bool)
    local = parsed.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")
    seconds = (local - _EPOCH) // _SECOND
    epoch = seconds.astype("Int64")
    unresolved = np.flatnonzero(local.isna().to_numpy(dtype=bool) & parsed.notna().to_numpy())
    ambiguous = missing = 0
    for pos in unresolved:
        naive = parsed.iloc[pos].to_pydatetime()
        first = naive.replace(tzinfo=tz, fold=0)
        back = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
        if back == naive:
            ambiguous += 1
        else:
            missing += 1
        epoch.iloc[int(pos)] = int(first.timestamp())
    return LocalTimes(epoch=epoch, unparseable=unparseable, ambiguous=ambiguous, missing=missing)


def iso_utc(epoch: int) -> str:
    """Epoch seconds as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
