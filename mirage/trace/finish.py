"""The common ending of every trace reader (the built-in ones and the CSV mapping)."""

from __future__ import annotations

import pandas as pd

from mirage.trace.checks import Acc, drop_non_jobs
from mirage.trace.load import TraceFormatError, TraceLoad, log_skipped
from mirage.trace.schema import conform


def finish(  # noqa: PLR0917
    acc: Acc, df: pd.DataFrame, fmt: str, tz: str, notes: list[str], amb: int = 0, miss: int = 0
) -> TraceLoad:
    """The table every reader ends with: non-jobs dropped (counted), an error when no row
    was a job, the skipped rows logged, the DST notes, the columns conformed."""
    if not df.empty:
        # Eagle's sample gives every task of a job array the array's id (452 rows of job
        # 532939, 41 of them identical to another to the second), so there a repeated id
        # is no sign of a job read twice.
        df = drop_non_jobs(acc, df, unique_ids=fmt != "eagle")
    if acc.rows_read and df.empty:
        first = acc.skipped[0] if acc.skipped else None
        detail = f"; first problem: line {first.line}: {first.reason}" if first else ""
        raise TraceFormatError(
            acc.path, f"none of {acc.rows_read} rows is a valid {fmt} row{detail}"
        )
    acc.skipped.sort(key=lambda s: (s.file, s.line))
    log_skipped(acc.skipped)
    if amb or miss:
        notes.append(
            f"{amb} ambiguous local times (fall-back hour) read as the first (DST) occurrence; "
            f"{miss} non-existent local times (spring-forward gap) shifted forward by the gap"
        )
    return TraceLoad(
        jobs=conform(df),
        source=acc.path,
        format=fmt,
        tz=tz,
        rows_read=acc.rows_read,
        skipped=acc.skipped,
        ambiguous_times=amb,
        missing_times=miss,
        notes=notes,
    )
