"""The availability profile backfill plans on: free nodes of one partition over time.

A step function kept as two parallel lists: ``times[i]`` is where segment ``i`` begins and
``free[i]`` the nodes free from then until ``times[i + 1]`` (the last segment lasts for
ever). ``times[0]`` is the planning instant. Plain lists, not numpy: a partition has at
most a few hundred breakpoints (one per running job end and per reservation edge), and at
that size list scans beat numpy's per-call overhead.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable


class Availability:
    """Free nodes over time for one partition, with earliest-fit search and reservations."""

    __slots__ = ("free", "times")

    def __init__(self, now: int, free_now: int, releases: Iterable[tuple[int, int]]) -> None:
        """``releases``: (time, nodes) pairs, when running jobs are expected to free nodes."""
        by_time: dict[int, int] = {}
        for t, n in releases:
            key = max(t, now)
            by_time[key] = by_time.get(key, 0) + n
        free_now += by_time.pop(now, 0)
        self.times = [now]
        self.free = [free_now]
        for t in sorted(by_time):
            free_now += by_time[t]
            self.times.append(t)
            self.free.append(free_now)

    def earliest(self, nodes: int, duration: int, not_before: int) -> int | None:
        """The earliest start >= ``not_before`` with ``nodes`` free for ``duration`` seconds."""
        times, free = self.times, self.free
        last = len(times) - 1
        i = max(0, bisect_right(times, not_before) - 1)
        while i <= last:
            if free[i] < nodes:
                i += 1
                continue
            start = max(times[i], not_before)
            end = start + duration
            j = i + 1
            # Walk the segments the job would overlap; restart after the first too-small one.
            while j <= last and times[j] < end and free[j] >= nodes:
                j += 1
            if j > last or times[j] >= end:
                return start
            i = j + 1
        return None

    def reserve(self, start: int, end: int, nodes: int) -> None:
        """Take ``nodes`` away over [start, end)."""
        a = self._split(start)
        b = self._split(end)
        free = self.free
        for k in range(a, b):
            free[k] -= nodes

    def _split(self, t: int) -> int:
        """Make ``t`` a breakpoint and return its segment index."""
        times = self.times
        i = bisect_right(times, t) - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self.free.insert(i + 1, self.free[i])
        return i + 1

    def free_at(self, t: int) -> int:
        return self.free[max(0, bisect_right(self.times, t) - 1)]
