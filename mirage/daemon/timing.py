"""Each chain's own restart overhead and handoff window, measured (issue 50).

The cost of record (:mod:`mirage.policy.cost`) charges an early start with the handoff
window h and, per segment it shortens, the restart overhead R. Their defaults are stated
assumptions; a chain's own figures replace them once the daemon has measured them:

- h, the handoff window: both allocations held, from Slurm's own times (the
  predecessor's end minus the successor's start), recorded on the successor's segment
  when its transition is observed (:func:`mirage.daemon.reconcile.observe_transitions`);
- R, the restart overhead: from the job-side helper's timing report
  (:mod:`mirage.daemon.handoff`: ``<chain dir>/.mirage/timing-<chain>-<segment>.json``),
  the time from the helper's ``start`` returning (the predecessor's checkpoint is there)
  to the job's ``resumed`` (checkpoint loaded, first step done).

The report is the job's, so it is read with the owner's rights where the daemon submits
as owners (``find`` as the owner: a regular file only, never a link, at most
:data:`MAX_REPORT_BYTES`), once per running segment every :data:`RETRY_S` until one is
usable. A report that is absent is the normal case of a job without the helper; one
that cannot be used (garbled, another job's, times out of order) is that chain's note,
logged and counted (``mirage_timing_reports_total{outcome}``), never the daemon's error.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from mirage.daemon.handoff import REPORT_DIR, report_name
from mirage.daemon.store import Chain
from mirage.policy.cost import CostModel

log = logging.getLogger(__name__)

#: A timing report is a few fields; anything larger is not one.
MAX_REPORT_BYTES = 4096
#: Seconds between two reads of a running segment's report that was not usable yet (the
#: job writes ``resumed`` after its first step, minutes into a large model's segment)...
RETRY_S = 300
#: ...after a ramp from this, doubling at each read: a small model resumes seconds after
#: its start, and a segment of a few minutes would end before a second read RETRY_S on.
FIRST_RETRY_S = 15
#: A chain's own figure is the median of its last this many measurements.
RECENT = 5

#: (chain, file name in its .mirage folder) -> the file's text; None: absent or unreadable
ReportRead = Callable[[Chain, str], str | None]


class ReportError(ValueError):
    """A timing report that cannot be used (the reason, for the chain's note)."""


@dataclass(frozen=True)
class SegmentTiming:
    job_id: str
    began: float  # the helper's start was called
    took_over: float  # it returned: the predecessor's last checkpoint is there
    resumed: float | None  # training resumed; None: not reported (yet)

    @property
    def restart_s(self) -> float | None:
        """R: from the checkpoint being there to training resumed."""
        return None if self.resumed is None else self.resumed - self.took_over


def parse_report(text: str, job_id: str) -> SegmentTiming:
    """The timing of job ``job_id`` from its report (:class:`ReportError` when unusable)."""
    try:
        rec = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"timing report is not JSON: {exc}") from exc
    if not isinstance(rec, dict):
        raise ReportError("timing report is not a JSON object")
    if str(rec.get("job_id", "")) != job_id:
        raise ReportError(f"timing report is job {rec.get('job_id')!r}'s, not {job_id}'s")
    began, took_over = _time(rec, "began"), _time(rec, "took_over")
    if began is None or took_over is None:
        raise ReportError("timing report lacks began or took_over")
    resumed = _time(rec, "resumed")
    if not began <= took_over or (resumed is not None and resumed < took_over):
        raise ReportError("timing report's times are out of order")
    return SegmentTiming(job_id, began, took_over, resumed)


def _time(rec: dict[str, object], key: str) -> float | None:
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ReportError(f"timing report's {key} is not a time")
    return float(value)


def local_read(chain: Chain, name: str) -> str | None:
    """The report with the daemon's own rights (a per-user daemon): a regular file in a
    real ``.mirage`` folder of the chain's directory, no link followed, size-bounded."""
    folder = Path(chain.chdir) / REPORT_DIR
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return None
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REPORT_BYTES:
            return None
        return f.read(MAX_REPORT_BYTES).decode("utf-8", "replace")


def retry_after(reads: int) -> int:
    """Seconds before a report read ``reads`` times is read again."""
    return min(RETRY_S, FIRST_RETRY_S << max(0, reads - 1))


class TimingReader:
    """Reads running segments' reports, each at most every :data:`RETRY_S` seconds."""

    def __init__(self, read: ReportRead = local_read) -> None:
        self.read = read
        # segment row id -> (when it was last read, how many times it has been)
        self._asked: dict[int, tuple[int, int]] = {}

    def due(self, segment_id: int, now: int) -> bool:
        last, reads = self._asked.get(segment_id, (None, 0))
        if last is not None and now - last < retry_after(reads):
            return False
        self._asked[segment_id] = (now, reads + 1)
        return True

    def forget(self, keep: Iterable[int]) -> None:
        """Drop what it knows of segments no longer running (bounded memory)."""
        kept = set(keep)
        self._asked = {k: v for k, v in self._asked.items() if k in kept}

    def timing(self, chain: Chain, segment: int, job_id: str) -> SegmentTiming | None:
        """Segment ``segment`` (1-based, as the job is told)'s timing; None when there is
        no report (yet); :class:`ReportError` when there is one that cannot be used."""
        text = self.read(chain, report_name(chain.id, segment))
        return None if text is None else parse_report(text, job_id)


def chain_cost(
    base: CostModel, restarts: Iterable[float | None], windows: Iterable[int | None]
) -> CostModel:
    """``base`` with the chain's own R and h where it has measured them (the median of the
    last :data:`RECENT` of each; a chain that cannot hand off keeps ``base``)."""
    if not base.hands_off:
        return base
    r = [float(x) for x in restarts if x is not None][-RECENT:]
    h = [float(x) for x in windows if x is not None and x > 0][-RECENT:]
    return replace(
        base,
        restart_s=statistics.median(r) if r else base.restart_s,
        handoff_s=statistics.median(h) if h else base.handoff_s,
    )
