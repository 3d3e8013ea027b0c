"""Progress of long work (probing samples, replays, fits): one helper for every command.

On a terminal, a rich progress bar per task on stderr; otherwise (a pipe, a log file, a
systemd unit, CI) plain log lines: one when a task starts, at most one every
``every_s`` seconds while it runs, and one when it is done, e.g.

    2026-11-28 13:30:02,114 INFO mirage.progress: probes test: 40/186 (22%) after 1m12s,
    1.8 s each, about 4m23s left

(the time per item and what is left count only the items done since the task started:
cached ones, done at once, would make a slow task look fast).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mirage.fmt import duration

log = logging.getLogger(__name__)

#: Plain lines: at most one per task this often (seconds).
EVERY_S = 30.0


class Bars:
    """Tasks by label: ``update(label, done, total)`` creates the task at its first call."""

    def __init__(self, bar: Any | None, every_s: float, clock: Callable[[], float]) -> None:
        self._bar = bar  # a rich Progress, or None for plain lines
        self._every_s = every_s
        self._clock = clock
        self._tasks: dict[str, Any] = {}
        self._last: dict[str, float] = {}
        self._start: dict[str, float] = {}
        self._first: dict[str, float] = {}  # done at the first update (e.g. cached)

    def update(self, label: str, done: float, total: float) -> None:
        if self._bar is not None:
            if label not in self._tasks:
                self._tasks[label] = self._bar.add_task(label, total=total)
            self._bar.update(self._tasks[label], completed=done, total=total)
            return
        now = self._clock()
        first = label not in self._start
        if first:
            self._start[label], self._first[label] = now, done
        finished = total > 0 and done >= total
        if first or finished or now - self._last.get(label, now) >= self._every_s:
            if finished and self._last.get(label) == -1.0:
                return  # its last line was written already
            self._last[label] = -1.0 if finished else now
            spent = now - self._start[label]
            pace = _pace(done - self._first[label], total - done, spent) if total != 1.0 else ""
            log.info("%s: %s after %s%s", label, _amount(done, total), duration(spent), pace)

    def counter(self, label: str) -> Callable[[float, float], None]:
        """An updater of one task by items done of a total."""
        return functools.partial(self.update, label)

    def fraction(self, label: str) -> Callable[[float], None]:
        """An updater of one task by the fraction done (0 to 1)."""
        return lambda frac: self.update(label, frac, 1.0)


def _pace(done: float, left: float, spent: float) -> str:
    """ ", 1.8 s each, about 4m23s left" from the items done in ``spent`` seconds ("" until
    one is done; no estimate once none is left)."""
    if done <= 0 or spent <= 0:
        return ""
    each = spent / done
    rest = f", about {duration(each * left)} left" if left > 0 else ""
    return f", {each:.1f} s each{rest}"


def _amount(done: float, total: float) -> str:
    share = f"{100 * done / total:.0f}%" if total > 0 else "?"
    if total == 1.0:
        return share
    return f"{done:.0f}/{total:.0f} ({share})"


@contextmanager
def progress_bars(
    *,
    terminal: bool | None = None,
    every_s: float = EVERY_S,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Bars]:
    """Bars on a terminal (``terminal``: whether stderr is one; default: ask it), plain
    log lines otherwise."""
    if terminal is None:
        terminal = sys.stderr.isatty()
    if not terminal:
        yield Bars(None, every_s, clock)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        yield Bars(bar, every_s, clock)


@contextmanager
def fraction_done(label: str, *, enabled: bool = True) -> Iterator[Callable[[float], None] | None]:
    """One task, updated by the fraction done (a replay): as :func:`progress_bars` shows
    it; None when not ``enabled`` (e.g. under --json, whose output must stay clean)."""
    if not enabled:
        yield None
        return
    with progress_bars() as bars:
        yield bars.fraction(label)
