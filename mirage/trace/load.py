"""What every trace reader returns: the canonical table plus an honest load report."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

log = logging.getLogger("mirage.trace")

#: Bumped whenever a reader's interpretation of a format changes (stored in Parquet metadata).
READER_VERSION = "1"

#: How many skipped rows are logged one by one (at WARNING) before only a summary is logged.
LOG_FIRST_SKIPPED = 5


class TraceFormatError(Exception):
    """The file is not a trace in the requested (or any recognised) format."""

    def __init__(self, path: str, message: str, tried: Sequence[str] = ()) -> None:
        self.path = path
        self.tried = tuple(tried)
        self.message = message
        text = f"{path}: {message}"
        if self.tried:
            text += f" (formats tried: {', '.join(self.tried)})"
        super().__init__(text)


@dataclass(frozen=True)
class SkippedRow:
    """One input row a reader could not turn into a job: where it was and why."""

    file: str
    line: int  # 1-based line number in the (decompressed) file
    reason: str


@dataclass
class TraceLoad:
    """The canonical job table and how it was obtained.

    ``ambiguous_times``: local times inside a fall-back hour (resolved as the first, DST,
    occurrence). ``missing_times``: local times inside a spring-forward gap (read with the
    pre-transition offset, i.e. shifted forward by the length of the gap).
    """

    jobs: pd.DataFrame
    source: str
    format: str
    tz: str = ""
    rows_read: int = 0
    skipped: list[SkippedRow] = field(default_factory=list)
    ambiguous_times: int = 0
    missing_times: int = 0
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def skips_reported() -> Iterator[None]:
    """Re-reading a trace whose skipped rows were already reported: log them no more.

    Probe tasks re-read the trace once per task and worker process; the command that
    started them read it first and reported its skips once.
    """
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def log_skipped(skipped: Sequence[SkippedRow]) -> None:
    """Log the first few skipped rows one by one, then one summary line."""
    for row in skipped[:LOG_FIRST_SKIPPED]:
        log.warning("%s:%d: skipped: %s", row.file, row.line, row.reason)
    if len(skipped) > LOG_FIRST_SKIPPED:
        log.warning(
            "%d more rows skipped (%d in all)", len(skipped) - LOG_FIRST_SKIPPED, len(skipped)
        )
