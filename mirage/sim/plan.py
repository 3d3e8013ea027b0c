"""The availability profiles backfill plans on: free resources over time.

``Availability`` counts free whole nodes of one partition (the fast path, for clusters
where every job takes whole nodes and partitions do not overlap). It is a step function
kept as two parallel lists: ``times[i]`` is where segment ``i`` begins and ``free[i]`` the
nodes free from then until ``times[i + 1]`` (the last segment lasts for ever).
``times[0]`` is the planning instant. Plain lists, not numpy: a partition has at most a few
hundred breakpoints (one per running job end and per reservation edge), and at that size
list scans beat numpy's per-call overhead.

``NodePlan`` keeps free GPUs and CPUs per node over time (shared nodes, overlapping
partitions): the same step function, with a row of per-node values per segment, in numpy.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence

import numpy as np


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

    def dry(self) -> float:
        """The first instant with no node free (inf: never)."""
        for t, f in zip(self.times, self.free, strict=True):
            if f <= 0:
                return t
        return math.inf


#: One running job's hold on one node: (node index, GPUs, CPUs).
Hold = tuple[int, int, int]


class NodePlan:
    """Free GPUs and CPUs of every node over time, for jobs that share nodes.

    ``gpus[k, n]`` / ``cpus[k, n]``: what node ``n`` has free from ``times[k]`` until
    ``times[k + 1]``. A job of ``count`` nodes x (``g`` GPUs, ``c`` CPUs) fits at a
    breakpoint when ``count`` nodes of its partition each keep at least that much free over
    the whole run (an exclusive job needs nodes with nothing else on them); candidate
    starts are only breakpoints (a later start inside a segment never fits better).

    The rows live in buffers with spare capacity: every reservation adds up to two
    breakpoints, and reallocating both arrays at each (``numpy.insert``) was a quarter of
    the backfill time on days-deep queues of shared nodes. A new row shifts the rows after
    it in place; the buffers double when full.
    """

    __slots__ = ("_c", "_g", "_t", "best_fit", "ccap", "gcap", "times")

    def __init__(
        self,
        now: int,
        *,
        gpus_free: Sequence[int],
        cpus_free: Sequence[int],
        gpus_cap: Sequence[int],
        cpus_cap: Sequence[int],
        releases: Iterable[tuple[int, tuple[Hold, ...]]],
        best_fit: bool = False,
    ) -> None:
        """``best_fit``: ``earliest`` chooses, among the nodes a shared job fits on, those
        with the fewest free CPUs at its start (then the lowest-numbered), as cons_tres;
        else the lowest-numbered."""
        rel = [(max(t, now), holds) for t, holds in releases]
        times = sorted({t for t, _ in rel} | {now})
        row = {t: k for k, t in enumerate(times)}
        n, m = len(gpus_free), len(times)
        cap = 2 * m + 16  # room for the reservations of one backfill pass, usually
        dg = np.zeros((cap, n), dtype=np.int64)
        dc = np.zeros((cap, n), dtype=np.int64)
        dg[0] = gpus_free
        dc[0] = cpus_free
        for t, holds in rel:
            k = row[t]
            for node, g, c in holds:
                dg[k, node] += g
                dc[k, node] += c
        np.cumsum(dg[:m], axis=0, out=dg[:m])
        np.cumsum(dc[:m], axis=0, out=dc[:m])
        self.times = times
        self._g, self._c = dg, dc
        self._t = np.zeros(cap, dtype=np.int64)
        self._t[:m] = times
        self.gcap = np.asarray(gpus_cap, dtype=np.int64)
        self.ccap = np.asarray(cpus_cap, dtype=np.int64)
        self.best_fit = best_fit

    @property
    def gpus(self) -> np.ndarray:
        """Free GPUs per segment and node (a view: rows ``0 .. len(times) - 1``)."""
        return self._g[: len(self.times)]

    @property
    def cpus(self) -> np.ndarray:
        """Free CPUs per segment and node (a view)."""
        return self._c[: len(self.times)]

    def earliest(
        self,
        nodes: np.ndarray,
        count: int,
        *,
        gpus: int,
        cpus: int,
        exclusive: bool,
        duration: int,
        not_before: int,
    ) -> tuple[int, tuple[int, ...]] | None:
        """Earliest (start, chosen nodes) >= ``not_before`` (node choice: ``best_fit``)."""
        i0 = self._split(not_before)
        m = len(self.times)
        # only the segments from not_before on: those are the candidate starts and all
        # a run from them can overlap
        starts = self._t[i0:m]
        g, c = self._g[i0:m][:, nodes], self._c[i0:m][:, nodes]
        if exclusive:
            ok = (g == self.gcap[nodes]) & (c == self.ccap[nodes])
        else:
            ok = (g >= gpus) & (c >= cpus)
        # ufunc and array methods, not numpy's module functions: this runs once per
        # pending job per backfill pass, on small arrays, where those wrappers' cost shows
        bad = np.zeros((m - i0 + 1, len(nodes)), dtype=np.int64)
        (~ok).cumsum(axis=0, out=bad[1:])
        # segments r .. ends-1 (from i0) are those a run from starts[r] overlaps
        ends = starts.searchsorted(starts + duration, side="left")
        fits = bad[ends] == bad[:-1]
        enough = np.add.reduce(fits, axis=1) >= count
        r = int(enough.argmax())
        if not enough[r]:
            return None
        idx = fits[r].nonzero()[0]
        if self.best_fit and not exclusive:
            free = self._c[i0 + r, nodes[idx]]
            idx = np.sort(idx[np.lexsort((nodes[idx], free))[:count]])
        chosen = nodes[idx[:count]]
        return int(starts[r]), tuple(chosen.tolist())

    def reserve(self, start: int, end: int, holds: Iterable[Hold]) -> None:
        """Take each hold's GPUs and CPUs away from its node over [start, end)."""
        a = self._split(start)
        b = self._split(end)
        gb, cb = self._g, self._c
        for node, g, c in holds:
            gb[a:b, node] -= g
            cb[a:b, node] -= c

    def busy_now(self, nodes: np.ndarray) -> bool:
        """No node of ``nodes`` has a free CPU at the planning instant (nothing can start)."""
        return not bool((self._c[0, nodes] > 0).any())

    def _split(self, t: int) -> int:
        """Make ``t`` a breakpoint and return its segment index."""
        times = self.times
        i = bisect_right(times, t) - 1
        if i < 0:
            raise ValueError(f"{t} is before the planning instant {times[0]}")
        if times[i] == t:
            return i
        self._insert_row(i + 1, t)
        return i + 1

    def _insert_row(self, k: int, t: int) -> None:
        """Breakpoint ``t`` as row ``k``, with what row ``k - 1`` has free."""
        m = len(self.times)
        if m == len(self._t):
            self._grow()
        self.times.insert(k, t)
        for buf in (self._g, self._c):
            buf[k + 1 : m + 1] = buf[k:m]  # numpy copies overlapping slices safely
            buf[k] = buf[k - 1]
        tb = self._t
        tb[k + 1 : m + 1] = tb[k:m]
        tb[k] = t

    def _grow(self) -> None:
        m = len(self._t)
        self._g = np.concatenate([self._g, np.zeros_like(self._g)])
        self._c = np.concatenate([self._c, np.zeros_like(self._c)])
        self._t = np.concatenate([self._t, np.zeros(m, dtype=np.int64)])
