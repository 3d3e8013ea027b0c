"""The engine's backfill planner: one pass's walk over the pending jobs in priority order.

A pass (``walk``) plans on one of three profiles (mirage.sim.plan; the module docstring of
mirage.sim.engine gives the rules, Slurm's code each follows and where it differs):
whole-node counts per partition (``_counts``, and ``_counts_lazy`` when only starts
matter), per-node free GPUs and CPUs (``_nodes``), or sched/backfill's own plan on shared
nodes (``_will_run``). Each starts the jobs that fit now (``Simulation._start``) and sets
the others' start estimates (``Simulation.estimate``).

The planner's own state is ``ReleaseTable`` (the running jobs' planned ends, kept at every
start and end); the passes read the simulation's job table, nodes and pool as they are at
the pass's instant, and change nothing in it but starts and estimates.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

import numpy as np

from mirage.sim.limits import Limits
from mirage.sim.plan import Availability, EndBatches, NodePlan, WillRunPlan

if TYPE_CHECKING:
    from mirage.sim.engine import Simulation


class ReleaseTable:
    """Per partition, the running jobs' planned ends at ``bf_resolution_s`` (end time ->
    nodes freed then), kept at every start and end, and sorted when a pass reads them."""

    def __init__(self, res: int, partitions: Iterable[str]) -> None:
        self._res = res
        self._partitions = tuple(partitions)
        self._ends: dict[str, dict[int, int]] = {}
        self._sorted: dict[str, tuple[list[int], list[int]]] | None = None  # None: stale

    def copy(self) -> ReleaseTable:
        """An independent copy (a fork's)."""
        clone = object.__new__(ReleaseTable)
        clone.__dict__.update(self.__dict__)
        clone._ends = {p: e.copy() for p, e in self._ends.items()}
        return clone

    def change(self, part: str, start: int, limit: int, nodes: int) -> None:
        """A job of ``part`` started at ``start`` with time limit ``limit`` starts running
        (``nodes`` > 0) or stops (``nodes`` < 0, minus what it started with)."""
        ends = self._ends.setdefault(part, {})
        t = start + _ceil(limit, self._res)
        left = ends.get(t, 0) + nodes
        if left:
            ends[t] = left
        else:
            del ends[t]
        self._sorted = None

    def table(self) -> dict[str, tuple[list[int], list[int]]]:
        """Per partition: the distinct times running jobs end at, start + _ceil(limit,
        bf_resolution_s), ascending, and the nodes freed at each. Kept until a job starts
        or ends: backfill passes far outnumber starts and ends on a deep queue, and
        rebuilding this per pass from the running jobs was a quarter of a probe's time."""
        if self._sorted is None:
            self._sorted = {}
            for p in self._partitions:
                e = self._ends.get(p, {})
                times = sorted(e)
                self._sorted[p] = (times, [e[t] for t in times])
        return self._sorted


def _ceil(t: int, res: int) -> int:
    return -(-t // res) * res


def _batched(
    plan: Availability,
    batches: EndBatches,
    part: str,
    t: int | None,
    *,
    nodes: int,
    dur: int,
    now: int,
) -> int | None:
    """The start ``t`` (an exact earliest fit) as Slurm's _will_run_test reports it.

    _will_run_test (cons_common/job_test.c) gives the end of the batch of running jobs'
    ends after which the job fits, not that end: the reservation goes there if the job
    still fits then (else _attempt_backfill's _test_resv_overlap tries again from there,
    TRY_LATER); see plan.will_run_batches.
    """
    while t is not None and t > now:
        b = batches.start(part, t)
        if b is None or b <= t:
            break
        t = plan.earliest(nodes, dur, b)
    return t


def _batched_nodes(
    plan: NodePlan,
    batches: EndBatches,
    part: str,
    found: tuple[int, tuple[int, ...]] | None,
    *,
    now: int,
    nodes: np.ndarray,
    count: int,
    gpus: int,
    cpus: int,
    exclusive: bool,
    duration: int,
) -> tuple[int, tuple[int, ...]] | None:
    """``_batched`` on per-node free GPUs and CPUs (``NodePlan``)."""
    while found is not None and found[0] > now:
        b = batches.start(part, found[0])
        if b is None or b <= found[0]:
            break
        found = plan.earliest(
            nodes, count, gpus=gpus, cpus=cpus, exclusive=exclusive, duration=duration, not_before=b
        )
    return found


class _CappedWalk:
    """Lazy backfill's walk over jobs in priority order (_counts_lazy):
    yields (job, planned duration) for the jobs whose run fits before their partition's
    first instant with no node free (``dry``, per partition number; the caller lowers it
    and calls ``dry_moved``), and counts the jobs in between as _attempt_backfill's
    bf_max_job_test would (Limits.backfill_order): a job a pre-select rule holds when the
    walk passes it is not counted, one a post-select rule holds is. Until the pass starts a
    job (``started``), the jobs given are not held by a pre-select rule
    (Simulation._held_split); after a start they are checked again."""

    def __init__(
        self,
        jobs: np.ndarray,
        ends: np.ndarray,
        parts: np.ndarray,
        *,
        dry: np.ndarray,
        now: int,
        cap: int,
        lim: Limits | None,
    ) -> None:
        self.jobs, self.ends, self.parts, self.dry = jobs, ends, parts, dry
        self.now, self.cap, self.lim = now, cap, lim
        self._recheck = False
        self.dry_moved()

    def dry_moved(self) -> None:
        self.todo = (self.ends <= self.dry[self.parts]).nonzero()[0]

    def started(self) -> None:
        self._recheck = self.lim is not None

    def __iter__(self) -> Iterator[tuple[int, int]]:
        jobs, lim, cap = self.jobs, self.lim, self.cap
        tested = pos = 0
        while True:
            k = int(np.searchsorted(self.todo, pos))
            if k == len(self.todo):
                return
            q = int(self.todo[k])
            tested += q - pos  # the jobs passed over, counted as the walk reaches them
            if self._recheck and lim is not None:
                tested -= lim.pre_held(jobs[pos:q])
            if tested >= cap:
                return  # the cap-th counted job came before this one
            pos = q + 1
            i = int(jobs[q])
            held = 0 if lim is None else lim.status(i)
            if held != 1:  # pre-select: skipped uncounted; post-select: counted, no plan
                tested += 1
                if not held:
                    yield i, int(self.ends[q]) - self.now
                if tested == cap:
                    return


class _Trial:
    """One lazy backfill pass's attempt at a job (as ``_counts``'s loop body):
    the earliest fit, _will_run_test's batches, a start now or a reservation."""

    def __init__(self, sim: Simulation, avail: dict[str, Availability], res: int) -> None:
        self.sim, self.avail = sim, avail
        self.now = sim.now
        self.horizon = sim.now + sim.sched.bf_window_s
        self.floor: dict[tuple[str, int, int], int] = {}
        self.easy_done: set[str] = set()
        self.batches = _end_batches(sim, res)

    def attempt(self, i: int, dur: int) -> tuple[bool, str | None]:
        """(whether job ``i`` started, the partition whose plan changed or None)."""
        sim, now = self.sim, self.now
        spec = sim.specs[i]
        part = spec.partition
        plan = self.avail[part]
        eligible = sim.eligible_at[i] is not None
        not_before = now if eligible else max(now, spec.begin or now)
        shape = (part, spec.nodes, dur)
        t = plan.earliest(spec.nodes, dur, max(not_before, self.floor.get(shape, now)))
        t = _batched(plan, self.batches, part, t, nodes=spec.nodes, dur=dur, now=now)
        if t is None:
            return False, None
        self.floor[shape] = t
        if t > self.horizon:
            return False, None
        started = t == now and eligible
        if started:
            sim._start(i)
            self.batches.add(t + dur, (part,))
        elif _easy_skips(sim, part, self.easy_done):
            return False, None
        plan.reserve(t, t + dur, spec.nodes)
        return started, part


def walk(
    sim: Simulation,
    lazy: bool,
    slots: np.ndarray,
    pre_held: np.ndarray | None,
    post_held: np.ndarray | None,
) -> None:
    """The pass's walk over its candidates (``slots``; ``pre_held``: the pool slots a
    pre-select rule held at its start; ``post_held``: which of ``slots`` a post-select
    rule held; both None without limits)."""
    s = sim.sched
    res = max(1, s.bf_resolution_s)
    if lazy and not sim._packed:
        if post_held is None or not post_held.all():  # else nothing can start
            _counts_lazy(sim, slots, res)
        return
    if pre_held is not None:
        est = sim.estimate
        for i in sim._pool.idx[pre_held].tolist():  # the walk skips them: no estimate
            est[i] = None
    order = _limit_filtered(sim, post_held, sim._order(slots, s.bf_max_job_test))
    if order is None:
        return
    if sim._packed and s.bf_will_run_batches and s.bf_reserve_whole_nodes:
        _will_run(sim, order, res, lazy)
    elif sim._packed:
        _nodes(sim, order, res, lazy)
    else:
        _counts(sim, order, res, lazy)


def _limit_filtered(
    sim: Simulation, post_held: np.ndarray | None, order: Iterator[int]
) -> Iterator[int] | None:
    """Backfill's order less the jobs a limit holds (limits.py); None: nothing to plan.

    ``order``: the pending jobs but those a pre-select rule held at the pass's start;
    ``post_held``: which of them a post-select rule held then."""
    cap = sim.sched.bf_max_job_test
    if sim._lim is None or post_held is None:
        return islice(order, cap)
    # limit-held jobs: skipped, no reservation; pre-select ones before bf_max_job_test
    # counts them, post-select ones after (_attempt_backfill)
    order = sim._lim.backfill_order(order, cap, sim.estimate)
    if not post_held.all():
        return order
    # Every pending job is held by a limit: the pass can start and reserve nothing, so
    # only its side effect is kept (held jobs lose their estimates, as the walk would
    # do) and the plan is not built (a speed shortcut with the same outcome; deep
    # limit-held queues made probes 1.5x slower).
    for _ in order:
        pass
    return None


def _counts(sim: Simulation, order: Iterable[int], res: int, lazy: bool) -> None:
    """Backfill over whole-node counts, one profile per (disjoint) partition."""
    s = sim.sched
    now = sim.now
    horizon = now + s.bf_window_s
    avail = _availability(sim, res)
    easy_done: set[str] = set()
    specs, limit, elig = sim.specs, sim.limit, sim.eligible_at
    # Lazy mode (no estimates) only needs the jobs that start now. From the first
    # instant a partition's plan has no node free (``dry``), nothing matters to that:
    # a job that cannot end by then can neither start now nor reserve before then, and
    # later reservations cannot change what starts now, so it is skipped. (With no
    # node free now, every job is. Before EASY's one reservation free nodes never
    # decrease over time, so ``dry`` is now or never: the job that would hold that
    # reservation is never skipped.)
    dry = {p: a.dry() for p, a in avail.items()} if lazy else {}
    # Free nodes only ever decrease during a pass, so a job cannot start before the
    # earliest start found for an earlier job of the same shape: start the scan there
    # (queues are dominated by a few shapes, so this keeps long queues cheap).
    floor: dict[tuple[str, int, int], int] = {}
    batches = _end_batches(sim, res)
    for i in order:
        spec = specs[i]
        part = spec.partition
        plan = avail[part]
        dur = _ceil(limit[i], res)
        if lazy and now + dur > dry[part]:
            if dry[part] <= now and max(dry.values()) <= now:
                break  # no node free now in any partition: nothing else starts
            continue
        not_before = now if elig[i] is not None else max(now, spec.begin or now)
        shape = (part, spec.nodes, dur)
        t = plan.earliest(spec.nodes, dur, max(not_before, floor.get(shape, now)))
        t = _batched(plan, batches, part, t, nodes=spec.nodes, dur=dur, now=now)
        if t is not None:
            floor[shape] = t
        if t is None or t > horizon:
            sim.estimate[i] = None
            continue
        end = t + dur
        if t == now and elig[i] is not None:
            sim._start(i)
            plan.reserve(t, end, spec.nodes)
            batches.add(end, (part,))  # a running job in later _will_run_test calls
            if lazy:
                dry[part] = plan.dry()
            continue
        sim.estimate[i] = t
        if _easy_skips(sim, part, easy_done):
            continue
        plan.reserve(t, end, spec.nodes)
        if lazy and t < dry[part]:
            dry[part] = plan.dry()


def _counts_lazy(sim: Simulation, slots: np.ndarray, res: int) -> None:
    """``_counts`` when only the jobs it starts matter (no estimates).

    The same walk, visiting only the jobs that pass its ``dry`` test and counting the
    others against bf_max_job_test as it would (_CappedWalk). Estimates are left as
    they were (stale, as ``track_estimates=False`` promises). On a deep queue most
    passes visit a handful of the hundreds of pending jobs: probes in a 650-job queue
    took 1.5x longer per job with the full walk.
    """
    now, cap = sim.now, sim.sched.bf_max_job_test
    avail = _availability(sim, res)
    dry = np.array([avail[p].dry() for p in sim.cluster.part_no])
    if cap <= 0 or dry.max() <= now:
        return  # no node free now anywhere: nothing starts (a limit is >= 1 s)
    ordered = slots if len(slots) == 1 else slots[sim._keys(slots).argsort()]
    pool = sim._pool
    ends = now + (-(-pool.limit[ordered] // res) * res)  # now + _ceil(limit, res)
    walk = _CappedWalk(
        pool.idx[ordered],
        ends,
        pool.part[ordered],
        dry=dry,
        now=now,
        cap=cap,
        lim=sim._lim,
    )
    trial = _Trial(sim, avail, res)
    for i, dur in walk:
        started, part = trial.attempt(i, dur)
        if started:
            walk.started()
        if part is not None:
            d = avail[part].dry()
            k = sim.cluster.part_no[part]
            if d < dry[k]:
                dry[k] = d
                if dry.max() <= now:
                    return
                walk.dry_moved()


def _easy_skips(sim: Simulation, part: str, easy_done: set[str]) -> bool:
    """EASY: only the first blocked job of each partition holds a reservation."""
    if sim.sched.backfill != "easy":
        return False
    if part in easy_done:
        return True
    easy_done.add(part)
    return False


def _node_walk(
    sim: Simulation, order: Iterable[int], plan: NodePlan | WillRunPlan, lazy: bool
) -> Iterator[tuple[int, str, np.ndarray]]:
    """The node planners' walk: (job, its partition, the partition's nodes) in order.

    Lazily (no estimates wanted): nodes with no CPU free now take no job now, so the
    walk ends once every partition is busy (a pass only starts jobs: busy stays busy).
    A busy partition's jobs are skipped only if no other partition has any of its
    nodes: their reservations could then only move estimates. Where partitions share
    nodes, a reservation on busy nodes can push a later job's reservation onto free
    ones and so keep a third job from starting now, as in the full walk.
    """
    full: set[str] = set()
    specs, part_arr, alone = sim.specs, sim.cluster.part_arr, sim.cluster.alone_parts
    for i in order:
        part = specs[i].partition
        nodes = part_arr[part]
        if lazy:
            if part not in full and plan.busy_now(nodes):
                full.add(part)
                if len(full) == len(part_arr):
                    return
            if part in full and part in alone:
                continue
        yield i, part, nodes


def _nodes(sim: Simulation, order: Iterable[int], res: int, lazy: bool) -> None:
    """Backfill over per-node GPUs and CPUs (shared nodes, overlapping partitions)."""
    s = sim.sched
    now = sim.now
    horizon = now + s.bf_window_s
    plan = _node_plan(sim, res)
    batches = _end_batches(sim, res)
    easy_done: set[str] = set()
    floor: dict[tuple[str, int, int, int, bool, int], int] = {}
    specs, limit, elig, dem = sim.specs, sim.limit, sim.eligible_at, sim.dem
    gcap, ccap = sim.node_gpus, sim.node_cpus
    reserve_whole = s.bf_reserve_whole_nodes
    for i, part, nodes in _node_walk(sim, order, plan, lazy):
        spec = specs[i]
        count, g, c, whole = dem[i]
        not_before = now if elig[i] is not None else max(now, spec.begin or now)
        dur = _ceil(limit[i], res)
        shape = (part, count, g, c, whole, dur)
        found = plan.earliest(
            nodes,
            count,
            gpus=g,
            cpus=c,
            exclusive=whole,
            duration=dur,
            not_before=max(not_before, floor.get(shape, now)),
        )
        found = _batched_nodes(
            plan,
            batches,
            part,
            found,
            now=now,
            nodes=nodes,
            count=count,
            gpus=g,
            cpus=c,
            exclusive=whole,
            duration=dur,
        )
        if found is not None:
            floor[shape] = found[0]
        if found is None or found[0] > horizon:
            sim.estimate[i] = None
            continue
        t, chosen = found
        holds = [(n, gcap[n], ccap[n]) if whole else (n, g, c) for n in chosen]
        if t == now and elig[i] is not None:
            sim._next_nodes[i] = chosen
            sim._start(i)
            plan.reserve(t, t + dur, holds)
            batches.add(t + dur, {p for n in chosen for p in sim.node_parts[n]})
            continue
        sim.estimate[i] = t
        if _easy_skips(sim, part, easy_done):
            continue
        if reserve_whole:
            holds = [(n, gcap[n], ccap[n]) for n in chosen]
        plan.reserve(t, t + dur, holds)


def _will_run(sim: Simulation, order: Iterable[int], res: int, lazy: bool) -> None:
    """Backfill on shared nodes as sched/backfill's _attempt_backfill does it.

    Running jobs are released in ``_will_run_test``'s batches of end times and
    reservations are node bitmaps over time (``WillRunPlan``): each job's start and
    nodes come from ``WillRunPlan.place`` (the TRY_LATER loop over ``later_start``).
    """
    s = sim.sched
    now = sim.now
    horizon = now + s.bf_window_s
    alloc, limit = sim.alloc, sim.limit
    plan = running_plan(sim, res)
    easy_done: set[str] = set()
    specs, elig, dem = sim.specs, sim.eligible_at, sim.dem
    for i, part, nodes in _node_walk(sim, order, plan, lazy):
        spec = specs[i]
        count, g, c, whole = dem[i]
        not_before = now if elig[i] is not None else max(now, spec.begin or now)
        dur = _ceil(limit[i], res)
        found = plan.place(
            nodes, count, gpus=g, cpus=c, exclusive=whole, duration=dur, not_before=not_before
        )
        if found is None or found[0] > horizon:
            sim.estimate[i] = None
            continue
        t, chosen, fits = found
        if fits and elig[i] is not None:
            sim._next_nodes[i] = chosen
            sim._start(i)
            plan.start(now + dur, alloc[i], whole)
            continue
        sim.estimate[i] = t
        if _easy_skips(sim, part, easy_done):
            continue
        plan.reserve(t, dur, chosen)


def _planned_ends(sim: Simulation, res: int) -> Iterator[tuple[int, int]]:
    """(running job, expected end for backfill): start + limit, at ``res``.

    With limit checks, a job can still run past start + limit: it is planned to end
    at the next planning step (now + res), as Slurm plans a job past its end time;
    its nodes are not free now.
    """
    start, limit = sim.start, sim.limit
    soon = sim.now + res if sim.limit_check_s > 0 else sim.now
    for i in sim.running:
        st = start[i]
        assert st is not None
        yield i, max(st + _ceil(limit[i], res), soon)


def _end_batches(sim: Simulation, res: int) -> EndBatches:
    """The running jobs' ends for _will_run_test's batches, read when first needed
    (jobs the pass starts before then are among them)."""
    specs, scale = sim.specs, sim.sched.bf_window_linear
    if not sim.sched.bf_will_run_batches:
        return EndBatches(list, enabled=False)
    if not sim._packed:
        return EndBatches(
            lambda: [(t, (specs[i].partition,)) for i, t in _planned_ends(sim, res)], scale
        )
    alloc, node_parts = sim.alloc, sim.node_parts
    return EndBatches(
        lambda: [
            (t, {p for n, _, _ in alloc[i] for p in node_parts[n]})
            for i, t in _planned_ends(sim, res)
        ],
        scale,
    )


def _availability(sim: Simulation, res: int) -> dict[str, Availability]:
    """Each partition's free nodes over time, as _planned_ends has the jobs end."""
    now = sim.now
    soon = now + res if sim.limit_check_s > 0 else now
    free = sim.free
    return {
        p: Availability.from_ends(now, free[p], soon, times, nodes)
        for p, (times, nodes) in sim._releases.table().items()
    }


def _node_plan(sim: Simulation, res: int) -> NodePlan:
    alloc = sim.alloc
    releases = [(t, alloc[i]) for i, t in _planned_ends(sim, res)]
    return NodePlan(
        sim.now,
        gpus_free=sim.gfree,
        cpus_free=sim.cfree,
        gpus_cap=sim.node_gpus,
        cpus_cap=sim.node_cpus,
        releases=releases,
        cons_tres=sim._cons_tres,
    )


def running_plan(sim: Simulation, res: int = 1) -> WillRunPlan:
    """The running jobs as ``_will_run_test`` sees them (node usage now, and each job's
    end: Slurm's end_time, start + limit, exact, past or not: see ``kill_wait``), at
    ``bf_resolution`` ``res``; backfill's plan and ``--test-only``'s (mirage.sim.testonly)."""
    s, alloc, start, limit = sim.sched, sim.alloc, sim.start, sim.limit
    return WillRunPlan(
        sim.now,
        gpus_free=sim.gfree,
        cpus_free=sim.cfree,
        gpus_cap=sim.node_gpus,
        cpus_cap=sim.node_cpus,
        releases=[((start[i] or 0) + limit[i], alloc[i]) for i in sim.running],
        res=res,
        cons_tres=sim._cons_tres,
        scale=s.bf_window_linear,
        kill_wait=s.kill_wait_s,
    )
