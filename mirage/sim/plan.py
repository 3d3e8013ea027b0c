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
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import accumulate

import numpy as np

from mirage.sim.select import eval_nodes


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

    @classmethod
    def from_ends(
        cls, now: int, free_now: int, soon: int, times: list[int], nodes: list[int]
    ) -> Availability:
        """The same as ``Availability(now, free_now, releases)`` with releases at
        max(t, ``soon``) (``soon`` >= ``now``), given as ``times`` (distinct, ascending) and
        the ``nodes`` freed at each: no per-job work."""
        k = bisect_right(times, soon)  # the ends at or before soon are moved to soon
        early = sum(nodes[:k])
        self = cls.__new__(cls)
        if soon <= now:
            self.times = [now, *times[k:]]
            self.free = list(accumulate(nodes[k:], initial=free_now + early))
        elif k:
            self.times = [now, soon, *times[k:]]
            self.free = list(accumulate(nodes[k:], initial=free_now + early))
            self.free.insert(0, free_now)
        else:
            self.times = [now, *times]
            self.free = list(accumulate(nodes, initial=free_now))
        return self

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

    __slots__ = ("_c", "_g", "_gpus", "_t", "ccap", "cons_tres", "gcap", "times")

    def __init__(
        self,
        now: int,
        *,
        gpus_free: Sequence[int],
        cpus_free: Sequence[int],
        gpus_cap: Sequence[int],
        cpus_cap: Sequence[int],
        releases: Iterable[tuple[int, tuple[Hold, ...]]],
        cons_tres: bool = False,
    ) -> None:
        """``cons_tres``: ``earliest`` chooses, among the nodes a shared job fits on over
        its run, those select/cons_tres picks with what is free at its start
        (``mirage.sim.select.eval_nodes``); else the lowest-numbered."""
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
        self.cons_tres = cons_tres
        self._gpus = bool(self.gcap.any())  # some node has GPUs (else only CPUs compared)

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
        """Earliest (start, chosen nodes) >= ``not_before`` (node choice: ``cons_tres``);
        ``nodes``: sorted node indices, none twice."""
        i0 = self._split(not_before)
        m = len(self.times)
        # only the segments from not_before on: those are the candidate starts and all
        # a run from them can overlap
        starts = self._t[i0:m]
        ok = self._ok(i0, m, nodes, gpus, cpus, exclusive)
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
        fit = nodes[fits[r].nonzero()[0]]
        if self.cons_tres and not exclusive:
            picked = eval_nodes(
                fit.tolist(), self._g[i0 + r], self._c[i0 + r], count, gpus=gpus, cpus=cpus
            )
            assert picked is not None  # enough nodes fit
            return int(starts[r]), picked
        return int(starts[r]), tuple(fit[:count].tolist())

    def _ok(  # noqa: PLR0917 - private, one call site
        self, i0: int, m: int, nodes: np.ndarray, gpus: int, cpus: int, exclusive: bool
    ) -> np.ndarray:
        """Segments ``i0 .. m - 1`` x ``nodes``: is the job's share of the node free?

        On every node of the plan (a partition of all of them, the usual case) the
        arrays are sliced, not copied by fancy indexing, and without GPUs anywhere only
        CPUs are compared: this runs once per pending job per backfill pass, and those
        two were about a quarter of a search's time on deep queues of shared nodes."""
        every = nodes.size == self._c.shape[1]  # sorted and distinct: all of them, in order
        g = self._g[i0:m] if every else self._g[i0:m][:, nodes]
        c = self._c[i0:m] if every else self._c[i0:m][:, nodes]
        if exclusive:
            gcap, ccap = (self.gcap, self.ccap) if every else (self.gcap[nodes], self.ccap[nodes])
            ok: np.ndarray = (g == gcap) & (c == ccap)
        elif gpus > 0 or self._gpus:
            ok = (g >= gpus) & (c >= cpus)
        else:
            ok = c >= cpus  # no node has a GPU: none is free, none is taken
        return ok

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


#: The first end-time window of ``_will_run_test`` (cons_common/job_test.c: ``time_window
#: = 30``), in seconds.
WILL_RUN_WINDOW_S = 30


def will_run_batches(
    ends: Sequence[int], touch: Sequence[bool] | None = None, scale: int = 0
) -> list[int]:
    """When ``_will_run_test`` tries a pending job after each running job's batch.

    ``ends``: every running job's end time, ascending (Slurm sorts all running jobs,
    ``_cr_job_list_sort``); ``touch[k]``: job k holds a node the pending job may use (all
    when None). Returns, for each touching job, the time the pending job gets as its start
    if it fits once that job's batch is released: the end time of the batch's last touching
    job (``last_job_ptr->end_time``); 0 for the others.

    Mirrors the ``time_window`` loop of ``_will_run_test`` (Slurm 22.05,
    src/plugins/select/cons_common/job_test.c), step by step: jobs on no usable node are
    skipped (``overlap == 0``); the first touching job sets ``end_time`` = its end rounded
    up to the next multiple of ``time_window`` (30 s; a multiple goes to the next one); a
    batch always takes the job it starts with, then goes on while the next job in the list
    (touching or not: ``list_peek_next``) ends by ``end_time + time_window``; after each
    batch ``time_window`` grows (``+= bf_window_linear`` with ``scale``, else doubles) at
    least once and until it covers that next job. (Slurm also skips the test inside a
    batch of over 200 jobs, which does not change the result, and gives up after 2 s of
    wall time, which is not modelled.)
    """
    n = len(ends)
    out = [0] * n
    tw = WILL_RUN_WINDOW_S
    base: int | None = None
    k = 0
    while k < n:
        first = k
        last = -1
        nxt: int | None = None
        while k < n:
            if touch is not None and not touch[k]:
                k += 1
                continue
            if base is None:
                base = ends[k] + tw - ends[k] % tw
            last = k
            k += 1
            if k < n and ends[k] > base + tw:
                nxt = ends[k]
                break
        if last < 0:
            break
        assert base is not None
        tw = tw + scale if scale > 0 else tw * 2
        while nxt is not None and nxt > base + tw:
            tw = tw + scale if scale > 0 else tw * 2
        t = ends[last]
        for j in range(first, last + 1):
            if touch is None or touch[j]:
                out[j] = t
    return out


class EndBatches:
    """Running jobs' end times during one backfill pass, with ``_will_run_test``'s batches.

    Each running job comes with the partitions whose nodes it holds: it touches a pending
    job of those partitions (an approximation of Slurm's test, which is against the nodes
    left to the job after its planned reservations). ``start(part, t)``: for ``t`` the end
    of a running job touching ``part`` (where a pending job first fits), the start
    ``_will_run_test`` reports, the end of that job's batch (``will_run_batches``, over
    every running job of the cluster, as Slurm's list); None when ``t`` is no such end.
    """

    __slots__ = ("_by_part", "_source", "enabled", "ends", "parts", "scale")

    def __init__(
        self,
        running: Callable[[], Iterable[tuple[int, Collection[str]]]],
        scale: int = 0,
        enabled: bool = True,
    ) -> None:
        """``running``: called once, when first needed (most passes never need it).
        ``enabled=False``: no batches (``start`` is always None, ``add`` does nothing)."""
        self._source: Callable[[], Iterable[tuple[int, Collection[str]]]] | None = running
        self.ends: list[int] = []
        self.parts: list[Collection[str]] = []
        self.scale = scale
        self.enabled = enabled
        self._by_part: dict[str, dict[int, int]] = {}

    def _load(self) -> None:
        if self._source is not None:
            pairs = sorted(self._source(), key=lambda x: x[0])
            self._source = None
            self.ends = [t for t, _ in pairs]
            self.parts = [p for _, p in pairs]

    def add(self, end: int, parts: Collection[str]) -> None:
        """A job started during the pass: it runs until ``end``. (Not loaded yet: the
        source, called later, lists it among the running jobs.)"""
        if not self.enabled or self._source is not None:
            return
        k = bisect_right(self.ends, end)
        self.ends.insert(k, end)
        self.parts.insert(k, parts)
        self._by_part.clear()

    def start(self, part: str, t: int) -> int | None:
        if not self.enabled:
            return None
        got = self._by_part.get(part)
        if got is None:
            self._load()
            touch = [part in p for p in self.parts]
            out = will_run_batches(self.ends, touch, self.scale)
            got = {e: b for e, b, x in zip(self.ends, out, touch, strict=True) if x}
            self._by_part[part] = got
        return got.get(t)


class WillRunPlan:
    """sched/backfill's plan on shared nodes, as Slurm 22.05 keeps it.

    Two parts, as in Slurm: what runs (free GPUs and CPUs per node now, and every running
    job's end and holds: the select plugin's state, which ``_will_run_test`` releases in
    batches), and backfill's reservations for later starts as node bitmaps over time
    (``node_space`` in src/plugins/sched/backfill/backfill.c: ``times[k]`` .. ``times[k +
    1]`` has the nodes ``resv[k]`` reserved; the last segment lasts for ever). A reservation
    holds its nodes whole, whatever the job asks of them.
    """

    __slots__ = (
        "_mats",
        "c",
        "ccap",
        "cons_tres",
        "ends",
        "g",
        "gcap",
        "holds",
        "kill_wait",
        "now",
        "res",
        "resv",
        "scale",
        "times",
    )

    def __init__(
        self,
        now: int,
        *,
        gpus_free: Sequence[int],
        cpus_free: Sequence[int],
        gpus_cap: Sequence[int],
        cpus_cap: Sequence[int],
        releases: Iterable[tuple[int, tuple[Hold, ...]]],
        res: int = 1,
        cons_tres: bool = False,
        scale: int = 0,
        kill_wait: int | None = None,
    ) -> None:
        """``releases``: (end, holds) of each running job. ``kill_wait`` (KillWait): a
        start ``_will_run_test`` finds at the end of a job already past it is that end +
        KillWait (``_guess_job_end``, OverTimeLimit=0), which may still be in the past;
        None: ends are never past (the caller plans overdue jobs to end later)."""
        self.now = now
        self.kill_wait = kill_wait
        self.g = np.array(gpus_free, dtype=np.int64)
        self.c = np.array(cpus_free, dtype=np.int64)
        self.gcap = np.asarray(gpus_cap, dtype=np.int64)
        self.ccap = np.asarray(cpus_cap, dtype=np.int64)
        pairs = sorted(releases, key=lambda x: x[0])
        self.ends = [t for t, _ in pairs]
        self.holds = [h for _, h in pairs]
        self._mats: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.res = max(1, res)
        # _attempt_backfill: node_space[0].begin_time = now rounded down to bf_resolution
        self.times = [now // self.res * self.res]
        self.resv = [np.zeros(len(self.g), dtype=bool)]
        self.cons_tres = cons_tres
        self.scale = scale

    # ---- the running jobs (the select plugin's view) -----------------------------------

    def _matrices(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per running job (in end order): nodes held (bool), GPUs and CPUs per node."""
        if self._mats is None:
            n = len(self.g)
            inc = np.zeros((len(self.ends), n), dtype=bool)
            dg = np.zeros((len(self.ends), n), dtype=np.int64)
            dc = np.zeros((len(self.ends), n), dtype=np.int64)
            for k, holds in enumerate(self.holds):
                for node, g, c in holds:
                    inc[k, node] = True
                    dg[k, node] += g
                    dc[k, node] += c
            self._mats = (inc, dg, dc)
        return self._mats

    def _ok(
        self, g: np.ndarray, c: np.ndarray, gpus: int, cpus: int, exclusive: bool
    ) -> np.ndarray:
        if exclusive:
            return np.asarray((g == self.gcap) & (c == self.ccap))
        return np.asarray((g >= gpus) & (c >= cpus))

    def _choose(
        self,
        ok: np.ndarray,
        gfree: np.ndarray,
        cfree: np.ndarray,
        count: int,
        ask: tuple[int, int, bool],
    ) -> tuple[int, ...]:
        """The nodes of ``ok`` the job takes: those select/cons_tres picks with what is
        free then (``cons_tres``), else the lowest-numbered. ``ask``: GPUs, CPUs per node,
        exclusive."""
        idx = ok.nonzero()[0].tolist()
        gpus, cpus, exclusive = ask
        if self.cons_tres and not exclusive:
            picked = eval_nodes(idx, gfree, cfree, count, gpus=gpus, cpus=cpus)
            assert picked is not None  # enough nodes fit
            return picked
        return tuple(idx[:count])

    def will_run(
        self, avail: np.ndarray, count: int, gpus: int, cpus: int, exclusive: bool
    ) -> tuple[int, tuple[int, ...], bool] | None:
        """Slurm's ``_will_run_test`` (cons_common/job_test.c) on the nodes ``avail``:
        (start, nodes, whether it fits now).

        The job on what is free now, else after each batch of running jobs' ends
        (``will_run_batches``, only jobs on ``avail`` touching), released cumulatively;
        the start is the end of the batch's last job, or for a job already past its end
        that end + KillWait (``_guess_job_end``; see ``kill_wait``).
        """
        ok = self._ok(self.g, self.c, gpus, cpus, exclusive) & avail
        if np.add.reduce(ok) >= count:
            return self.now, self._choose(ok, self.g, self.c, count, (gpus, cpus, exclusive)), True
        if not self.ends:
            return None
        inc, dg, dc = self._matrices()
        touch: np.ndarray = np.asarray(inc[:, avail].any(axis=1))
        if not touch.any():
            return None
        out = will_run_batches(self.ends, [bool(x) for x in touch], self.scale)
        rows = np.flatnonzero(touch)
        tests = [out[r] for r in rows]
        # the last touching job of each batch: where its test happens
        last = [k for k in range(len(rows)) if k + 1 == len(rows) or tests[k + 1] != tests[k]]
        gs = (self.g + dg[rows].cumsum(axis=0))[last]
        cs = (self.c + dc[rows].cumsum(axis=0))[last]
        oks = self._ok(gs, cs, gpus, cpus, exclusive) & avail
        enough = np.add.reduce(oks, axis=1) >= count
        b = int(enough.argmax())
        if not enough[b]:
            return None
        t = tests[last[b]]
        if self.kill_wait is not None and t <= self.now:
            t += self.kill_wait  # _guess_job_end
        return t, self._choose(oks[b], gs[b], cs[b], count, (gpus, cpus, exclusive)), False

    def start(self, end: int, holds: Sequence[Hold], whole: bool = False) -> None:
        """A job started now (until ``end``): its holds are taken, it is a running job.

        A ``whole``-node job also gets its nodes reserved in node_space from the map's
        start to its end, rounded down (``_bf_reserve_running``, which backfill.c applies
        to each job it starts; a job sharing its nodes gets none).
        """
        for node, g, c in holds:
            self.g[node] -= g
            self.c[node] -= c
        k = bisect_right(self.ends, end)
        self.ends.insert(k, end)
        self.holds.insert(k, tuple(holds))
        self._mats = None
        if whole:
            b = self._split(max(end // self.res * self.res, self.times[0] + self.res))
            idx = [node for node, _, _ in holds]
            for r in range(b):
                self.resv[r][idx] = True

    # ---- the reservations (node_space) -------------------------------------------------

    def place(
        self,
        nodes: np.ndarray,
        count: int,
        *,
        gpus: int,
        cpus: int,
        exclusive: bool,
        duration: int,
        not_before: int,
    ) -> tuple[int, tuple[int, ...], bool] | None:
        """The job's start and nodes as ``_attempt_backfill`` finds them (not reserved),
        and whether it starts now.

        Per try from ``start_res`` (``not_before`` first): the partition's nodes that no
        reservation holds over [start_res, start_res + duration] (node_space records with
        ``end_time > start_res`` and ``begin_time <= end_time``), and ``later_start``, the
        end of the first record after which a node not usable so far becomes free of
        reservations; ``_try_sched`` -> ``will_run`` on those nodes, its start no earlier
        than ``start_res``. Too few nodes or no fit: again from ``later_start`` (TRY_LATER),
        if any, else None. A start after ``later_start``: again from ``later_start``. A
        start whose chosen nodes meet a reservation over [start, start + duration)
        (``_test_resv_overlap``): again from that start. Else that start, those nodes.
        A start guessed in the past (``kill_wait``) becomes ``start_res`` (now), where
        the job does not start (``_start_job`` fails: its nodes are busy): it is reserved
        from then ("planned start ... failed": no further tries).
        """
        now = self.now
        part = np.zeros(len(self.g), dtype=bool)
        part[nodes] = True
        start_res = not_before
        for _ in range(4 * len(self.times) + 8):  # each try starts later; a bound for safety
            avail, later = self._usable(part, start_res, max(start_res, now) + duration)
            found = None
            if np.add.reduce(avail) >= count:
                found = self.will_run(avail, count, gpus, cpus, exclusive)
            if found is None:
                if later:
                    start_res = later
                    continue
                return None
            t, chosen, fits = found
            t = max(t, start_res)
            if t <= now:
                return (now, chosen, True) if fits else (t, chosen, False)
            if later and t > later:
                start_res = later
                continue
            st, er = self.span(t, duration)
            if self._overlaps(chosen, st, er):
                start_res = t
                continue
            return t, chosen, False
        return None

    def _usable(self, part: np.ndarray, start_res: int, end_time: int) -> tuple[np.ndarray, int]:
        """The nodes of ``part`` no reservation holds over [start_res, end_time], and
        ``later_start`` (0: none), as _attempt_backfill's walk over node_space sets them."""
        times, resv = self.times, self.resv
        avail = part.copy()
        later = 0
        last = len(times) - 1
        k = max(0, bisect_right(times, start_res) - 1)
        while True:
            seg_end = times[k + 1] if k < last else None
            # a node usable in the next record that is not usable so far
            if (
                later == 0
                and seg_end is not None
                and (part & ~resv[k + 1] & ~(avail & ~resv[k])).any()
            ):
                later = seg_end
            if times[k] > end_time:
                break
            avail &= ~resv[k]
            if seg_end is None:
                break
            k += 1
        return avail, later

    def span(self, start: int, duration: int) -> tuple[int, int]:
        """A reservation's [begin, end) in node_space: both rounded down to bf_resolution,
        at least one step long (``_attempt_backfill``, ``_add_reservation``)."""
        res = self.res
        st = max(start // res * res, self.times[0])
        return st, max((start + duration) // res * res, st + res)

    def _overlaps(self, chosen: Sequence[int], st: int, er: int) -> bool:
        """``_test_resv_overlap``: a chosen node is reserved in a record within [st, er)."""
        times, resv = self.times, self.resv
        idx = list(chosen)
        last = len(times) - 1
        for k in range(max(0, bisect_right(times, st) - 1), last + 1):
            if times[k] >= er:
                break
            if resv[k][idx].any():
                return True
        return False

    def reserve(self, start: int, duration: int, chosen: Sequence[int]) -> None:
        """``_add_reservation``: the chosen nodes, whole, over the rounded span."""
        st, er = self.span(start, duration)
        a = self._split(st)
        b = self._split(er)
        idx = list(chosen)
        for k in range(a, b):
            self.resv[k][idx] = True

    def busy_now(self, nodes: np.ndarray) -> bool:
        """No node of ``nodes`` has a free CPU now (nothing can start on them)."""
        return not bool((self.c[nodes] > 0).any())

    def _split(self, t: int) -> int:
        times = self.times
        i = bisect_right(times, t) - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self.resv.insert(i + 1, self.resv[i].copy())
        return i + 1
