"""A discrete-event Slurm simulator: an event heap, Slurm's main pass and backfill.

Time only moves from one event to the next (job submit, job end, begin time reached,
backfill tick); there is no fixed step. Per-job state is kept in parallel lists indexed
by the job's position (its id minus ``first_id``), so that ``fork`` is a handful of C-level
list/dict/set copies, and the immutable ``JobSpec`` objects are shared, not copied.

This module holds the event loop, the job table and the main pass; beside it are the
pending pool and its priority order (mirage.sim.pool), the backfill planner
(mirage.sim.backfill, on mirage.sim.plan's profiles), fair share (mirage.sim.fairshare),
QOS and association limits (mirage.sim.limits), the nodes and partitions
(mirage.sim.nodes) and the job views (mirage.sim.views). Each piece that keeps state of
its own across events (pool, release table, fair share, limits) is one object the
``Simulation`` holds and ``fork`` copies.

Scheduling follows Slurm:

- Main pass (after every batch of events at one instant): pending, eligible jobs in
  priority order; each starts if its partition has the nodes; the first job that does not
  fit blocks the rest of its partition (Slurm's schedule() stops at the first blocked job
  per partition).
- Backfill (a cycle once ``bf_interval_s`` has passed since the last one, at the first
  instant after that when something changed): walks up to ``bf_max_job_test`` jobs in
  priority order over an availability profile built from running jobs' expected ends
  (start + time limit, at ``bf_resolution_s``); a job that fits now starts, any other gets
  a reservation at its start within ``bf_window_s`` (every tested job with "slurm", only
  the first blocked job per partition with "easy"). A job starting now must fit around
  every reservation already made, so it delays none of them. The reservation time is the
  job's start estimate (what ``squeue --start`` shows). With ``bf_will_run_batches`` (a
  Slurm detail, below; mirage.profile.capture.slurm_details switches it on) that start is
  where Slurm's ``_will_run_test`` puts it: at the end of a batch of running jobs' ends,
  not at the exact earliest fit (below).

Slurm 22.05's code, rule by rule (slurm-22-05-8-1; file:function), and where the engine
differs on purpose:

- src/slurmctld/controller.c:_slurmctld_background and job_scheduler.c:_schedule: Slurm
  runs schedule() at once after a job ends (proc_req.c:_slurm_rpc_epilog_complete), after
  a submit when ``batch_sched_delay`` (3 s) has passed since the last such pass (a batch
  job never starts inside its submit RPC: job_mgr.c:job_allocate tests only), and on the
  whole queue every ``sched_interval``. The engine runs its main pass at every instant
  with events, so a submit can start up to ~3 s sooner than in Slurm on a cluster with a
  long ``sched_interval`` (on the test cluster, ``sched_interval=1``: the same second);
  ``sched_interval_s`` is not used. Event-driven passes in Slurm stop after
  ``default_queue_depth`` (100) jobs; the engine's pass goes on until every partition is
  blocked (with one partition that is the first blocked job either way). The first job
  that cannot start blocks its partition and every node of it, also for other
  partitions (_schedule's ``fail_by_part``: ``failed_parts``, ``avail_node_bitmap`` less
  the partition's nodes): mirrored.
- sched/backfill/backfill.c:backfill_agent: a cycle once ``bf_interval`` has passed since
  the previous one ended, if anything changed since (_more_work), else checked every
  second; the engine's cycle takes no time, so it ends where it starts, and it sees the
  state as of that instant (Slurm yields its locks every ``bf_yield_interval``, 2 s, and
  with ``bf_continue`` goes on with the state as it then is: on the test cluster's queues
  a cycle is far shorter). Jobs a cycle starts start at the cycle's instant.
- cons_common/job_test.c:_will_run_test: running jobs are released in order of end time,
  in batches (``plan.will_run_batches``: the ``time_window`` loop, 30 s aligned on a
  multiple of 30, doubling), the pending job tried after each; its start is the end of the
  batch's last job (``last_job_ptr->end_time``); ``bf_window_linear`` makes the window
  grow linearly. With ``WillRunPlan`` (below) running ends are exact (start + limit) and a
  start at the end of a job already past it is that end + ``kill_wait_s``
  (``_guess_job_end``, OverTimeLimit=0); the other planners use ends at
  ``bf_resolution_s`` and plan such a job to end at the next step (now + resolution). The
  2 s wall-time cap of the loop is not modelled.
- backfill.c:_attempt_backfill, on shared nodes with ``bf_reserve_whole_nodes``
  (``WillRunPlan``, the test cluster's settings): reservations are node bitmaps over time
  (node_space, rounded down to ``bf_resolution``, at least one step long:
  _add_reservation); a job is tried on the nodes no reservation holds over [start_res,
  start_res + limit], then again from ``later_start`` (the end of the first node_space
  record after which more nodes are free of reservations: TRY_LATER) when it does not fit
  or fits only after that; a start whose nodes meet a reservation (_test_resv_overlap) is
  tried again from there; a whole-node job backfill starts is also reserved in node_space
  until its end (_bf_reserve_running).
- select/cons_tres/job_test.c:_eval_nodes, _can_job_run_on_node and
  cons_tres's choose_nodes, with ``node_choice = "cons_tres"`` (``mirage.sim.select``, used
  by the main pass and both node planners): the usable nodes in runs of consecutive node
  indices of equal scheduling weight, the run taken as _eval_nodes takes it, in it the
  node with the fewest free CPUs for a one-node job, the run's nodes in order for a
  larger one. near_gpu_cnt (``gres_select_filter_remove_unusable``) is capped at the
  job's ``--gres`` count, so it gives every usable node the same weight. Node weights,
  memory, and core/socket placement are not modelled (CPUs are counted per node).
- The other planners (deliberately simpler, for speed): whole-node counts
  (``Availability``, disjoint partitions: ls6) and per-node free GPUs/CPUs with partial
  reservations (``NodePlan``) plan running jobs and reservations on one profile and take
  the exact earliest fit; with ``bf_will_run_batches`` a fit at a running job's end moves
  to the end of its batch (``plan.EndBatches``: a running job touches the partitions of
  its nodes, where Slurm counts only those on the nodes left after reservations), and
  from there to the next fit if the job no longer fits then. Reservations are counts of
  interchangeable nodes there, and no later_start loop runs (the profile's exact search
  finds those starts directly).

Nodes and sharing (Slurm's select/cons_tres): every node has GPUs and CPUs; a job asks
for N nodes with G GPUs and C CPUs on each (``JobSpec.per_node``) and fits on a node with
that much free. A job with neither GPUs nor CPUs given (traces with node counts only)
takes whole nodes, alone (``JobSpec.whole_nodes``). Partitions may overlap: free GPUs and
CPUs are kept per node, and a node's idle state is seen by every partition it is in.
Node choice: the lowest-numbered nodes of the partition that fit (now, or over the whole
planned run for a backfill start); with ``node_choice = "cons_tres"``, for jobs that share
nodes, those select/cons_tres's ``_eval_nodes`` picks (``mirage.sim.select``: the fewest
free CPUs within the first run of consecutive nodes that fit; node weights are not
modelled).

Planning: when every job takes whole nodes and no partition overlaps another, nodes are
interchangeable and backfill plans on whole-node counts per partition (``Availability``,
fast); otherwise on per-node free GPUs and CPUs (``NodePlan``), with reservations on
named nodes as Slurm makes them.

Speed with deep queues: pending jobs are also kept in numpy columns (mirage.sim.pool), so
each pass computes every priority in one vectorised expression and sorts only the head of
the order it uses. The main pass is skipped when no eligible job fits the free
resources at all. Without ``track_estimates``, backfill stops planning a partition once
nothing in it is free now: later reservations could only move estimates, never starts.

Modelling choices: priority = age (capped) + job size + partition weight (+ fair-share,
below), at every pass or as of the last recalculation.

QOS and association limits (mirage.sim.limits, from the profile's [[qos]] and
[[associations]]; with none configured ``_lim`` is None and nothing of them runs): a job
over MaxJobsPerUser, MaxTRESPerUser, GrpTRES, GrpJobs, MaxWall... pends with Slurm's
reason; the main pass skips it (it blocks nothing), backfill gives it no reservation; a
submit over MaxSubmitJobs is refused. The hooks are the lines that name ``self._lim``.

Fair-share (``fairshare = "classic"`` and ``priority_weight_fairshare`` > 0; off by
default, and then nothing of it runs): Slurm's classic algorithm on a flat tree of users,
kept in closed form (mirage.sim.fairshare).

Optional Slurm details (``SchedulerSettings``; the defaults keep the simpler model, which
the ls6 calibration used; mirage.profile.capture.slurm_details switches them all on to
match Slurm 22.05 on the test cluster):

- ``priority_size_cpus``: the job size factor as priority/multifactor computes it,
  ``(nodes / N + cpus / C) / 2`` over the simulation's distinct nodes (N) and their CPUs
  (C), each term ``1 - x`` with PriorityFavorSmall; default: ``nodes / N``. An exclusive
  job's CPUs are those it asked for until the first recalculation after its submit, then
  its nodes' (its partition's ``cpus_per_node`` each), as sprio shows.
- ``priority_calc_period_s`` (PriorityCalcPeriod): priorities are set at submit and
  recalculated at phase + k x period (``Simulation(priority_calc_phase_s=...)``: Slurm
  counts from slurmctld's start); None or 0: recomputed at every pass (the default).
- ``limit_check_interval_s``: a job that outlives its time limit ends at the first limit
  check after it (checks at ``limit_check_phase_s`` + k x interval; an unknown phase:
  half an interval after the limit), TIMEOUT, unless it finishes before the check. Backfill
  plans a running job past its limit as ending at the next step (now + bf_resolution):
  its nodes are not free now. None: killed exactly at the limit (the default).
- ``bf_reserve_whole_nodes``: a backfill reservation for a later start holds its nodes
  whole (sched/backfill plans on node bitmaps), so no lower-priority job is planned beside
  it; a job started now holds only what it asked for.
- ``bf_will_run_batches``: backfill starts as ``_will_run_test`` finds them, in batches
  of end times (below); with ``bf_reserve_whole_nodes`` on shared nodes, the whole of
  sched/backfill's plan (``WillRunPlan``). Off, the exact earliest fit (as the ls6 models
  were trained and evaluated: on, the ls6 replay's mean wait is about 14 % shorter).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from mirage.profile.schema import ClusterProfile
from mirage.sim import backfill, testonly, views
from mirage.sim.backfill import ReleaseTable
from mirage.sim.errors import SimError
from mirage.sim.fairshare import FairShare
from mirage.sim.limits import Limits
from mirage.sim.nodes import Nodes
from mirage.sim.plan import Hold
from mirage.sim.pool import KEY_SHIFT, PendingPool, in_order
from mirage.sim.select import eval_nodes
from mirage.sim.views import DEP_NEVER, DEP_OK, DEP_WAIT, JobView
from mirage.sim.workload import INFINITE, JobSpec
from mirage.slurm.types import JobState

# Event kinds; within one instant, ends are handled first (their nodes are free for the
# jobs submitted at that instant), the backfill tick last. SCHED only wakes the loop up
# after an action taken between steps (release, cancel, ...), so the main pass runs then.
END, SUBMIT, BEGIN, SCHED, TICK = 0, 1, 2, 3, 4

PENDING, RUNNING = JobState.PENDING, JobState.RUNNING


#: Pending candidates beyond which a pass drops limit-held jobs up front (numpy, per rule
#: group) rather than checking them one by one as it reaches them: the same outcome, and
#: the cheaper way for a long queue; for a short one numpy's fixed cost is the larger.
_HELD_FILTER_MIN = 32


def parse_dependency(text: str) -> list[tuple[str, str]]:
    """ "afterok:1:2,afterany:3" -> [("afterok", "1"), ("afterok", "2"), ("afterany", "3")]."""
    deps: list[tuple[str, str]] = []
    for part in filter(None, text.replace("?", ",").split(",")):
        kind, _, ids = part.partition(":")
        if kind not in ("afterok", "afterany") or not ids:
            raise SimError(f"unsupported dependency {part!r} (afterok/afterany with job ids)")
        deps.extend((kind, job_id.split("+")[0]) for job_id in ids.split(":"))
    return deps


class Simulation:
    """One simulated cluster: its nodes, its jobs, its clock, its event heap."""

    #: node name -> index, built by the first ``pin`` (a fork shares it: nodes never change)
    _node_index: dict[str, int] | None = None

    # Every per-run container; ``fork`` copies exactly these (all have ``.copy()``), and
    # the limits and fair share where the simulation has them (else None).
    _MUTABLE = (
        "specs",
        "dem",
        "state",
        "start",
        "end",
        "limit",
        "eligible_at",
        "held",
        "deps",
        "dep_state",
        "estimate",
        "children",
        "pending",
        "running",
        "free",
        "heap",
        "gfree",
        "cfree",
        "nrun",
        "alloc",
        "skipped",
        "_next_nodes",
        "_pinned",
        "_pool",
        "_releases",
    )

    def __init__(
        self,
        profile: ClusterProfile,
        nodes: int | Mapping[str, int] | None = None,
        start_time: int = 0,
        track_estimates: bool = True,
        first_id: int = 1,
        *,
        partition_nodes: Mapping[str, Sequence[str]] | None = None,
        priority_calc_period_s: int | None = None,
        priority_calc_phase_s: int = 0,
        limit_check_phase_s: int | None = None,
        fairshare_shares: Mapping[str, float] | None = None,
    ) -> None:
        """``nodes`` overrides the profile's node count (an int: the default partition).

        ``partition_nodes`` names the nodes of some partitions ({"gpu": ["gpu1", ...],
        "debug": ["gpu1"]}); a name in several partitions is one node shared by them (its
        shape comes from the first of them in the profile). Other partitions get nodes of
        their own, "<partition>-0000" onwards.

        ``track_estimates=False`` skips backfill work that cannot start any job; the
        schedule is identical, only start estimates go stale (for fast replays).

        ``priority_calc_period_s`` overrides the profile's (``SchedulerSettings``): > 0,
        priorities are as of the last recalculation, at ``priority_calc_phase_s`` + k x
        period (Slurm counts PriorityCalcPeriod from slurmctld's start: the phase is that
        start in simulated time, modulo the period); 0 or None: recomputed at every pass.

        ``limit_check_phase_s``: with the profile's ``limit_check_interval_s`` set, time
        limits are checked at this phase + k x interval (slurmctld's cycle, also counted
        from its start); None: the phase is unknown, and a job past its limit ends half an
        interval after it (the mean delay).

        ``fairshare_shares``: fair-share shares per user (others get 1); only used with
        the profile's ``fairshare = "classic"`` and ``priority_weight_fairshare`` > 0.
        """
        self.profile = profile
        self.sched = profile.scheduler
        self.max_time = {p.name: p.max_time_s for p in profile.partitions}
        self.track_estimates = track_estimates
        self.first_id = first_id
        self._configure(priority_calc_period_s, priority_calc_phase_s, limit_check_phase_s)
        self.cluster = cluster = Nodes(profile, nodes, partition_nodes or {})
        # the node table under the names callers read (shared with forks: never changed)
        self.node_names, self.node_gpus, self.node_cpus = cluster.names, cluster.gpus, cluster.cpus
        self.part_nodes, self.node_parts = cluster.part_nodes, cluster.node_parts
        self.capacity, self.overlapping = cluster.capacity, cluster.overlapping
        self.total_nodes, self.total_cpus = cluster.total_nodes, cluster.total_cpus
        # Whole-node counting is exact only with disjoint partitions and exclusive jobs;
        # the first job that shares nodes switches planning to per-node accounting.
        self._packed = cluster.overlapping
        self.now = start_time
        self.specs: list[JobSpec] = []
        self.dem: list[tuple[int, int, int, bool]] = []  # nodes, GPUs/node, CPUs/node, whole
        self.state: list[JobState | None] = []
        self.start: list[int | None] = []
        self.end: list[int | None] = []
        self.limit: list[int] = []
        self.eligible_at: list[int | None] = []
        self.held: list[bool] = []
        self.deps: list[tuple[tuple[str, int], ...]] = []
        self.dep_state: list[int] = []
        self.estimate: list[int | None] = []
        self.children: dict[int, tuple[int, ...]] = {}
        self.pending: set[int] = set()
        self.running: set[int] = set()
        # the running jobs' planned ends, as backfill plans them (mirage.sim.backfill)
        self._releases = ReleaseTable(max(1, self.sched.bf_resolution_s), self.capacity)
        self.free: dict[str, int] = dict(self.capacity)  # idle whole nodes per partition
        self.gfree: list[int] = list(self.node_gpus)
        self.cfree: list[int] = list(self.node_cpus)
        self.nrun: list[int] = [0] * len(self.node_names)  # jobs on each node
        self.alloc: dict[int, tuple[Hold, ...]] = {}  # running job -> (node, GPUs, CPUs)
        self.heap: list[tuple[int, int, int]] = []
        self.skipped: dict[str, int] = {}  # reason -> jobs add_jobs_skipping_invalid left out
        self._next_nodes: dict[int, tuple[int, ...]] = {}
        # jobs to start on given nodes when those fit them (pin: a snapshot's running jobs)
        self._pinned: dict[int, tuple[int, ...]] = {}
        self._pool = PendingPool(self.sched)  # the pending jobs' columns (mirage.sim.pool)
        self._custom_priority = type(self).priority is not Simulation.priority
        self._dirty_main = False
        self._dirty_bf = False
        self._next_tick: int | None = None
        self._in_step = False
        # fair share (mirage.sim.fairshare); None when the profile does not weigh it
        self._fs: FairShare | None = None
        if self.sched.fairshare == "classic" and self.sched.priority_weight_fairshare > 0:
            periodic = self.priority_calc_period_s > 0
            self._fs = FairShare(self.sched, start_time, fairshare_shares, periodic)
        self.events = self.main_passes = self.backfill_passes = 0
        # QOS / association limits (mirage.sim.limits); None when the profile sets none
        self._lim: Limits | None = Limits.build(profile)

    def _configure(self, calc_period: int | None, calc_phase: int, check_phase: int | None) -> None:
        """The optional Slurm details (``SchedulerSettings``) and the controller's clocks."""
        period = self.sched.priority_calc_period_s if calc_period is None else calc_period
        self.priority_calc_period_s = period or 0
        self.priority_calc_phase_s = calc_phase
        self.limit_check_s = self.sched.limit_check_interval_s or 0
        self.limit_check_phase_s = check_phase
        self._cons_tres = self.sched.node_choice == "cons_tres"
        self._last_bf: int | None = None  # the last backfill cycle (last_backfill_time)

    # ---- building the workload -------------------------------------------------------

    def add_jobs(self, specs: Iterable[JobSpec]) -> list[str]:
        """Queue jobs for submission at their ``submit`` times (>= now); returns their ids.

        Submit times need not be sorted. An invalid job (larger than its partition, a
        negative run time, a time limit <= 0, an unknown partition or dependency, a submit
        in the past) raises ``SimError`` (the jobs before it stay added).
        """
        return self._add_all(specs, skip=False)

    def add_jobs_skipping_invalid(self, specs: Iterable[JobSpec]) -> list[str]:
        """``add_jobs``, but an invalid job is left out and counted by reason in ``skipped``.

        The returned list has one entry per spec: its id, or "" where it was left out.
        """
        return self._add_all(specs, skip=True)

    def _add_all(self, specs: Iterable[JobSpec], skip: bool) -> list[str]:
        ids: list[str] = []
        try:
            for spec in specs:
                try:
                    ids.append(self._add(spec))
                except SimError as exc:
                    if not skip:
                        raise
                    self.skipped[exc.reason] = self.skipped.get(exc.reason, 0) + 1
                    ids.append("")
        finally:
            heapq.heapify(self.heap)
        return ids

    def add_job(self, spec: JobSpec) -> str:
        job_id = self._add(spec)  # appends its submit event last, or raises before that
        heapq.heappush(self.heap, self.heap.pop())  # one push, not a heapify of every event
        return job_id

    def _check(self, spec: JobSpec) -> None:
        """Raise SimError if the job could never be accepted as it is."""
        if spec.submit < self.now:
            raise SimError(f"cannot submit at {spec.submit}, before now ({self.now})", "past")
        if spec.partition not in self.capacity:
            raise SimError(f"no partition {spec.partition!r}", "unknown partition")
        if spec.run < 0:
            raise SimError(f"negative run time {spec.run}", "negative run time")
        if spec.time_limit is not None and spec.time_limit <= 0:
            raise SimError(f"time limit {spec.time_limit} s is not positive", "bad time limit")
        if spec.nodes < 1:
            raise SimError(f"a job needs at least one node, got {spec.nodes}", "bad node count")
        members = self.part_nodes[spec.partition]
        if spec.nodes > len(members):
            raise SimError(
                f"job needs {spec.nodes} nodes; partition {spec.partition!r} has {len(members)}",
                "too many nodes",
            )
        if not spec.whole_nodes:
            g, c = spec.per_node()
            fit = sum(1 for n in members if self.node_gpus[n] >= g and self.node_cpus[n] >= c)
            if fit < spec.nodes:
                raise SimError(
                    f"job needs {spec.nodes} node(s) with {g} GPUs and {c} CPUs each; "
                    f"partition {spec.partition!r} has {fit}",
                    "too many GPUs or CPUs per node",
                )

    def _add(self, spec: JobSpec) -> str:
        self._check(spec)
        i = len(self.specs)
        try:
            deps = tuple(
                (kind, self._index(parent)) for kind, parent in parse_dependency(spec.dependency)
            )
        except SimError as exc:
            raise SimError(str(exc), "bad dependency") from None
        # limits: may refuse the job (MaxSubmitJobs...) or set its time limit (MaxWall)
        wall = None if self._lim is None else self._lim.add(spec, self.now)
        whole = spec.whole_nodes
        g, c = (0, 0) if whole else spec.per_node()
        if not whole:
            self._packed = True
        self.specs.append(spec)
        self.dem.append((spec.nodes, g, c, whole))
        self.state.append(None)
        self.start.append(None)
        self.end.append(None)
        limit = spec.time_limit if spec.time_limit is not None else self.max_time[spec.partition]
        if wall is not None:
            limit = wall
        self.limit.append(INFINITE if limit is None else limit)
        self.eligible_at.append(None)
        self.held.append(spec.hold)
        self.deps.append(deps)
        self.dep_state.append(DEP_WAIT if deps else DEP_OK)
        self.estimate.append(None)
        self._pool.slot.append(-1)
        if self._fs is not None:
            self._fs.add_job(spec.user)
        for _, parent in deps:
            self.children[parent] = (*self.children.get(parent, ()), i)
        self.heap.append((spec.submit, SUBMIT, i))  # callers heapify
        return str(i + self.first_id)

    def _index(self, job_id: str) -> int:
        try:
            i = int(job_id) - self.first_id
        except ValueError:
            raise SimError(f"invalid job id {job_id!r}") from None
        if not 0 <= i < len(self.specs):
            raise SimError(f"unknown job id {job_id!r}")
        return i

    # ---- the pending pool ------------------------------------------------------------

    def _size_term(self, i: int, recalculated: bool = False) -> float:
        """The job size term of the priority (see ``SchedulerSettings.priority_size_cpus``).

        ``recalculated``: as of a recalculation after the submit, where an exclusive job's
        CPUs are its whole nodes' (as sprio shows on Slurm 22.05; at submit they are the
        CPUs it asked for).
        """
        s = self.sched
        count = self.dem[i][0]
        f_size = count / self.total_nodes
        if not s.priority_size_cpus:
            if s.priority_favor_small:
                f_size = 1.0 - f_size
            return s.priority_weight_job_size * f_size
        spec = self.specs[i]
        cpus = max(spec.cpus, count)
        if recalculated and self.dem[i][3]:
            cpus = count * self.cluster.part_cpus[spec.partition]
        f_cpus = cpus / self.total_cpus if self.total_cpus else f_size
        if s.priority_favor_small:
            f_size, f_cpus = 1.0 - f_size, 1.0 - f_cpus
        return s.priority_weight_job_size * ((f_size + f_cpus) / 2)

    def _pool_add(self, i: int) -> None:
        spec = self.specs[i]
        fs = self._fs
        self._pool.add(
            i,
            size=(self._size_term(i), self._size_term(i, recalculated=True)),
            submit=spec.submit,
            part=self.cluster.part_no[spec.partition],
            nodes=self.dem[i][0],
            limit=self.limit[i],
            user=0 if fs is None else fs.user_of[i],
        )
        self._pool_sync(i)

    def _pool_sync(self, i: int) -> None:
        """Refresh pending job ``i``'s candidate flag and eligible time in the pool."""
        ok = not self.held[i] and self.dep_state[i] == DEP_OK
        self._pool.sync(i, ok, self.eligible_at[i])

    def _prio_time(self) -> int:
        """When priorities were last calculated (now, without a calculation period)."""
        p = self.priority_calc_period_s
        return self.now if p <= 0 else self.now - (self.now - self.priority_calc_phase_s) % p

    def _keys(self, slots: np.ndarray) -> np.ndarray:
        """Scheduling order keys of pool slots (PendingPool.keys); a subclass that
        overrides ``priority`` gets it called per job instead."""
        pool = self._pool
        if not self._custom_priority:
            calc = self._prio_time()
            fs = None if self._fs is None else self._fs.factors(self.now, calc)
            return pool.keys(slots, calc, fs)
        idx = pool.idx[slots]
        prio = np.fromiter((self.priority(i) for i in idx.tolist()), np.int64, len(idx))
        return np.asarray(-prio * KEY_SHIFT + idx)

    def _order(self, slots: np.ndarray, first: int) -> Iterator[int]:
        """The jobs of pool slots by scheduling order (_keys, in_order); one job needs no
        keys (a third of a replay's passes have one candidate)."""
        if len(slots) == 1:
            return iter((int(self._pool.idx[slots[0]]),))
        return in_order(self._keys(slots), first)

    def fairshare_usage(self, user: str) -> float:
        """The user's raw decayed usage now (billing-seconds; 0 for an unknown user)."""
        fs = self._fs
        u = None if fs is None else fs.users.get(user)
        return 0.0 if fs is None or u is None else float(fs.usage(self.now)[u])

    def fairshare_factor(self, user: str) -> float:
        """The user's fair-share factor as priorities use it (1 for an unknown user)."""
        fs = self._fs
        u = None if fs is None else fs.users.get(user)
        return 1.0 if fs is None or u is None else float(fs.factors(self.now, self._prio_time())[u])

    def priority_order(self) -> list[str]:
        """Ids of the pending jobs the scheduler considers, highest priority first."""
        slots = np.flatnonzero(self._pool.ok[: self._pool.n])
        return [str(i + self.first_id) for i in in_order(self._keys(slots), 0)]

    # ---- running -------------------------------------------------------------------
    # ---- running -------------------------------------------------------------------

    def run_until(self, t: int) -> None:
        """Process every event up to and including time ``t``; the clock then reads ``t``."""
        while self.heap and self.heap[0][0] <= t:
            self._step()
        self.now = max(self.now, t)

    def run(self) -> None:
        """Run until no event is left (every job that can ever run has finished)."""
        while self.heap:
            self._step()

    def run_until_event(self, done: Callable[[Simulation], bool], until: int | None = None) -> bool:
        """Step until ``done(self)`` (True) or the heap empties / passes ``until`` (False)."""
        while not done(self):
            if not self.heap or (until is not None and self.heap[0][0] > until):
                if until is not None:
                    self.now = max(self.now, until)
                return False
            self._step()
        return True

    def run_until_started(self, job_id: str, until: int | None = None) -> int | None:
        """Run until job ``job_id`` starts; its start time, or None if it did not start."""
        i = self._index(job_id)
        self.run_until_event(lambda s: s.start[i] is not None, until)
        return self.start[i]

    def _step(self) -> None:
        heap = self.heap
        t = heap[0][0]
        self.now = t
        tick = False
        self._in_step = True
        while heap and heap[0][0] == t:
            _, kind, i = heapq.heappop(heap)
            self.events += 1
            if kind == END:
                self._on_end(i)
            elif kind == SUBMIT:
                self._on_submit(i)
            elif kind == BEGIN:
                self._on_begin(i)
            elif kind == TICK:
                tick = True
                self._next_tick = None
        if self._dirty_main:
            self._main_pass()
        if tick and self._dirty_bf:
            self._last_bf = t
            self._backfill(force=False)
        self._in_step = False

    def _changed(self) -> None:
        """A scheduling input changed: run the main pass now and backfill at the next tick."""
        self._dirty_main = True
        self._dirty_bf = True
        self._want_tick()
        if not self._in_step:
            heapq.heappush(self.heap, (self.now, SCHED, -1))

    def _want_tick(self) -> None:
        if self._next_tick is None:
            # backfill_agent (sched/backfill/backfill.c) runs a cycle once bf_interval has
            # passed since the last one and something changed since (_more_work); until
            # then it checks every second: the first change after that runs one at once
            last = self._last_bf
            gap = self.sched.bf_interval_s
            self._next_tick = self.now if last is None else max(self.now, last + gap)
            heapq.heappush(self.heap, (self._next_tick, TICK, -1))

    # ---- event handlers ------------------------------------------------------------

    def _on_submit(self, i: int) -> None:
        if self.state[i] is not None:  # cancelled before its submit time
            return
        refused = "" if self._lim is None else self._lim.submit(i)
        if refused:  # over a submit limit: never created (mirage.sim.limits)
            self.skipped[refused] = self.skipped.get(refused, 0) + 1
            self._finish(i, JobState.CANCELLED)  # (its dependents learn it)
            return
        self.state[i] = PENDING
        self.pending.add(i)
        if self.deps[i]:
            self.dep_state[i] = self._dep_status(i)
        begin = self.specs[i].begin
        if begin is not None and begin > self.now:
            heapq.heappush(self.heap, (begin, BEGIN, i))
        self._refresh_eligible(i)
        self._pool_add(i)
        self._changed()

    def _on_begin(self, i: int) -> None:
        if self.state[i] is PENDING:
            self._refresh_eligible(i)
            self._pool_sync(i)
            self._changed()

    def _on_end(self, i: int) -> None:
        if self.state[i] is not RUNNING or self.end[i] != self.now:
            return  # cancelled earlier: a stale event
        spec = self.specs[i]
        start = self.start[i]
        assert start is not None
        if spec.run > self.now - start:  # killed at its limit (or the limit check after it)
            final = JobState.TIMEOUT
        else:
            final = JobState.FAILED if spec.fails else JobState.COMPLETED
        self._finish(i, final)

    def _finish(self, i: int, final: JobState) -> None:
        if self._lim is not None:
            self._lim.left(i)
        if self.state[i] is RUNNING:
            self.running.discard(i)
            spec, start = self.specs[i], self.start[i]
            assert start is not None
            self._releases.change(spec.partition, start, self.limit[i], -spec.nodes)
            if self._fs is not None:
                self._fs.ended(i, start, self.now, self._prio_time())
            self._release(i)
        self.pending.discard(i)
        self._pool.remove(i)
        self.state[i] = final
        self.end[i] = self.now
        self.estimate[i] = None
        for child in self.children.get(i, ()):
            if self.state[child] is PENDING and self.dep_state[child] == DEP_WAIT:
                self.dep_state[child] = self._dep_status(child)
                self._refresh_eligible(child)
                self._pool_sync(child)
        self._changed()

    def _dep_status(self, i: int) -> int:
        status = DEP_OK
        for kind, parent in self.deps[i]:
            st = self.state[parent]
            if st is None or st.is_active:
                status = DEP_WAIT
            elif kind == "afterok" and st is not JobState.COMPLETED:
                return DEP_NEVER  # Slurm leaves it pending for ever ("DependencyNeverSatisfied")
        return status

    def _refresh_eligible(self, i: int) -> None:
        """Set the eligible time (which the age factor counts from) once deps, begin and
        hold allow: a held job becomes eligible when released (job_mgr.c:_hold_job_rec and
        _release_job_rec clear begin_time, job_independent sets it to the release's
        instant; sacct's Eligible is then the release, and the age factor's accrue_time
        counts from it)."""
        if self.eligible_at[i] is not None or self.dep_state[i] != DEP_OK or self.held[i]:
            return
        begin = self.specs[i].begin
        if begin is None or begin <= self.now:
            self.eligible_at[i] = self.now

    def _pick(self, i: int, barred: set[int] | None = None) -> tuple[int, ...] | None:
        """The nodes of the job's partition that it fits on now (sorted), or None.

        The lowest-numbered, or with ``node_choice = "cons_tres"`` (a job that shares
        nodes) those select/cons_tres picks (``mirage.sim.select.eval_nodes``).
        ``barred``: nodes not to use (those of partitions already blocked in this pass).
        """
        count, g, c, whole = self.dem[i]
        nrun, gfree, cfree = self.nrun, self.gfree, self.cfree
        if self._pinned:
            pinned = self._pinned.get(i)
            if pinned is not None and all(
                not (barred and n in barred)
                and ((nrun[n] == 0) if whole else (gfree[n] >= g and cfree[n] >= c))
                for n in pinned
            ):
                return pinned
        if self._cons_tres and not whole:
            fit = [
                n
                for n in self.part_nodes[self.specs[i].partition]
                if not (barred and n in barred) and gfree[n] >= g and cfree[n] >= c
            ]
            return eval_nodes(fit, gfree, cfree, count, gpus=g, cpus=c)
        chosen: list[int] = []
        for n in self.part_nodes[self.specs[i].partition]:
            if barred and n in barred:
                continue
            if (nrun[n] == 0) if whole else (gfree[n] >= g and cfree[n] >= c):
                chosen.append(n)
                if len(chosen) == count:
                    return tuple(chosen)
        return None

    def _start(self, i: int) -> None:
        spec = self.specs[i]
        now = self.now
        nodes = self._next_nodes.pop(i, None) or self._pick(i)
        assert nodes is not None, "started a job that does not fit"
        _, g, c, whole = self.dem[i]
        holds = []
        for n in nodes:
            hg, hc = (self.gfree[n], self.cfree[n]) if whole else (g, c)
            self.gfree[n] -= hg
            self.cfree[n] -= hc
            if self.nrun[n] == 0:
                for p in self.node_parts[n]:
                    self.free[p] -= 1
            self.nrun[n] += 1
            holds.append((n, hg, hc))
        self.alloc[i] = tuple(holds)
        if self._pinned:
            self._pinned.pop(i, None)
        if self._lim is not None:
            self._lim.started(i)
        if self._fs is not None:
            self._fs.started(i, holds, now, self._prio_time())
        self.pending.discard(i)
        self._pool.remove(i)
        self.running.add(i)
        self.state[i] = RUNNING
        self.start[i] = now
        self._releases.change(spec.partition, now, self.limit[i], spec.nodes)
        end = now + min(spec.run, self._killed_after(self.limit[i], now))
        self.end[i] = end
        self.estimate[i] = None
        heapq.heappush(self.heap, (end, END, i))

    def _killed_after(self, limit: int, start: int) -> int:
        """Seconds after ``start`` at which a job that outlives ``limit`` is killed."""
        every = self.limit_check_s
        if every <= 0 or limit >= INFINITE:
            return limit
        phase = self.limit_check_phase_s
        if phase is None:
            return limit + every // 2
        return limit + (phase - (start + limit)) % every

    def _release(self, i: int) -> None:
        for n, hg, hc in self.alloc.pop(i, ()):
            self.gfree[n] += hg
            self.cfree[n] += hc
            self.nrun[n] -= 1
            if self.nrun[n] == 0:
                for p in self.node_parts[n]:
                    self.free[p] += 1

    def pin(self, job_id: str, nodes: Sequence[str]) -> bool:
        """Start ``job_id`` on ``nodes`` (names) when it starts and they fit it then, as
        a snapshot's running job is where Slurm put it; elsewhere (as any job) when they
        do not. False, and nothing pinned, when the names are not the job's partition's
        nodes or are not as many as it asks for."""
        i = self._index(job_id)
        if self._node_index is None:  # built once: a snapshot pins every running job
            self._node_index = {name: n for n, name in enumerate(self.node_names)}
        index, part = self._node_index, self.specs[i].partition
        picked = tuple(sorted({index[n] for n in nodes if n in index}))
        if len(picked) != len(set(nodes)) or len(picked) != self.dem[i][0]:
            return False
        if not all(part in self.node_parts[n] for n in picked):
            return False
        self._pinned[i] = picked
        return True

    def nodes_of(self, job_id: str) -> list[str]:
        """Names of the nodes a running job holds (empty when it is not running)."""
        return [self.node_names[n] for n, _, _ in self.alloc.get(self._index(job_id), ())]

    # ---- scheduling ----------------------------------------------------------------

    def priority(self, i: int) -> int:
        """Slurm's multifactor priority (integer, as Slurm truncates it).

        Age (capped at PriorityMaxAge, counted from the eligible time, as of the last
        priority calculation) + job size (nodes over the cluster's) + partition weight.
        """
        s = self.sched
        if self.held[i]:
            return 0
        eligible = self.eligible_at[i]
        m = s.priority_max_age_s
        calc = self._prio_time()
        age = 0 if eligible is None else max(0, min(calc - eligible, m))
        f_age = age / m if m > 0 else 1.0
        size = self._size_term(i, recalculated=calc >= self.specs[i].submit)
        value = s.priority_weight_age * f_age + size + s.priority_weight_partition
        if self._fs is not None:
            fs = self._fs.factors(self.now, calc)[self._fs.user_of[i]]
            value += s.priority_weight_fairshare * float(fs)
        return int(value)

    def _by_priority(self, jobs: list[int]) -> list[int]:
        """Highest priority first; ties by job id (submission order). The reference order."""
        prio = self.priority
        return sorted(jobs, key=lambda i: (-prio(i), i))

    def _fits_mask(self, slots: np.ndarray) -> np.ndarray:
        """Which of these pool slots' jobs could start now, ignoring reservations (a bound)."""
        pool = self._pool
        if not self._packed:
            if len(self.free) == 1:
                return np.asarray(pool.nodes[slots] <= next(iter(self.free.values())))
            free = np.array([self.free[p] for p in self.cluster.part_no], dtype=np.int64)
            return np.asarray(pool.nodes[slots] <= free[pool.part[slots]])
        # shared nodes: a partition with no free CPU anywhere can start nothing
        cfree = np.asarray(self.cfree)
        room = np.array([(cfree[a] > 0).any() for a in self.cluster.part_arr.values()], dtype=bool)
        return np.asarray(room[pool.part[slots]])

    def _idle(self, lazy: bool) -> bool:
        """Would a pass do nothing? No candidate; or (``lazy``: only starts matter) no
        node free (whole-node counts) or every candidate held by a limit
        (PendingPool.all_held)."""
        pool = self._pool
        if not pool.candidates:
            return True
        if not lazy:
            return False
        if not self._packed and not any(self.free.values()):
            return True
        return pool.held_memo is not None and pool.all_held(self._lim, self.now)

    def _main_candidates(self, n: int) -> np.ndarray | None:
        """The pool slots the main pass walks, or None when nothing can start."""
        if self._idle(lazy=True):
            return None
        pool = self._pool
        slots = (pool.ok[:n] & (pool.eligible[:n] <= self.now)).nonzero()[0]
        if not slots.size or not np.count_nonzero(self._fits_mask(slots)):
            return None  # nothing can start: the pass would only find the first job blocked
        lim = self._lim
        if lim is None:
            return slots
        # jobs held by a limit: skipped, they block nothing
        if slots.size <= _HELD_FILTER_MIN:  # few: the pass checks each (Limits.status)
            return slots
        pre, post = lim.held(pool.idx[slots])  # many: drop those held now (Limits.held)
        kept: np.ndarray = slots[~(pre | post)]
        if not kept.size:
            pool.note_all_held(lim, self.now)
            return None
        if not np.count_nonzero(self._fits_mask(kept)):
            return None
        return kept

    def _main_pass(self) -> None:
        self._dirty_main = False
        n = self._pool.n
        if not n:
            return
        slots = self._main_candidates(n)
        if slots is None:
            return
        parts = (
            1
            if len(self.cluster.part_no) == 1
            else int(np.count_nonzero(np.bincount(self._pool.part[slots])))
        )
        blocked: set[str] = set()
        # As Slurm's schedule(): a blocked job's partition nodes are off limits to every
        # lower-priority job, also in other partitions that share them.
        barred: set[int] = set()
        started = False
        specs, dem, free, packed = self.specs, self.dem, self.free, self._packed
        lim = self._lim  # ... and so are those the pass's own starts hold
        walked = False
        for i in self._order(slots, 16):
            if lim is not None and lim.status(i):
                continue
            walked = True
            part = specs[i].partition
            if part in blocked:
                continue
            nodes = None
            if packed:
                nodes = self._pick(i, barred)
                if nodes is not None:
                    self._next_nodes[i] = nodes
            if (nodes is not None) if packed else dem[i][0] <= free[part]:
                self._start(i)
                started = True
            else:
                blocked.add(part)
                barred.update(self.part_nodes[part])
                if len(blocked) == parts:
                    break
        if not walked:  # every candidate was held by a limit
            assert lim is not None
            self._pool.note_all_held(lim, self.now)
            return
        self.main_passes += 1
        if started:  # the backfill plan must account for the new allocations
            self._dirty_bf = True
            self._want_tick()

    def _backfill(self, force: bool) -> None:
        """One backfill pass at ``now`` (see the module docstring)."""
        self._dirty_bf = False
        pool = self._pool
        n = pool.n
        if not n:
            return
        lazy = not (force or self.track_estimates)
        if self._idle(lazy):
            return
        slots = pool.ok[:n].nonzero()[0]
        can = elig = None
        if lazy:
            elig = pool.eligible[slots] <= self.now
            can = elig & self._fits_mask(slots)
            if not np.count_nonzero(can):
                return  # nothing can start now
        pre_held = post_held = None
        if self._lim is not None:  # held by a limit at the pass's start (Limits.held)
            split = self._held_split(slots, can, elig)
            if split is None:
                return  # ... but jobs a limit holds
            pre_held, slots, post_held = split
        self.backfill_passes += 1
        backfill.walk(self, lazy, slots, pre_held, post_held)

    def _held_split(
        self, slots: np.ndarray, can: np.ndarray | None, elig: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Backfill's candidates as (held by a pre-select rule, the others, which of those
        a post-select rule holds), at the pass's start; None when (``can``: the ones that
        could start now, lazily) every one that could start is held."""
        assert self._lim is not None
        pre, post = self._lim.held(self._pool.idx[slots])
        if can is not None and not np.count_nonzero(can & ~pre & ~post):
            if elig is not None and not np.count_nonzero(elig & ~pre & ~post):
                self._pool.note_all_held(self._lim, self.now)  # every eligible one, even
            return None
        return slots[pre], slots[~pre], post[~pre]

    def schedule_now(self) -> None:
        """Run the main pass and a backfill pass at the current instant (sbatch --test-only)."""
        self._main_pass()
        self._backfill(force=True)

    # ---- actions -------------------------------------------------------------------

    def cancel(self, job_id: str) -> None:
        i = self._index(job_id)
        st = self.state[i]
        if st is None:
            self.state[i] = JobState.CANCELLED  # its SUBMIT event will be ignored
            self.end[i] = self.now
            if self._lim is not None:
                self._lim.left(i)
        elif st.is_active:
            self._finish(i, JobState.CANCELLED)

    def complete(self, job_id: str) -> None:
        """A running job exits 0 now, before its limit (a what-if the trace does not hold:
        a chain's segment that hands over or finishes its training)."""
        i = self._index(job_id)
        if self.state[i] is not RUNNING:
            raise SimError(f"job {job_id} is not running: it cannot complete now")
        self._finish(i, JobState.COMPLETED)

    def set_hold(self, job_id: str, held: bool) -> None:
        i = self._index(job_id)
        if self.state[i] in (None, PENDING) and self.held[i] != held:
            self.held[i] = held
            if held:
                self.eligible_at[i] = None  # no longer eligible: ages from its release
            elif self.state[i] is PENDING:
                self._refresh_eligible(i)
            self._pool_sync(i)
            self._changed()

    def drop_future_submits(self) -> int:
        """Forget every job whose submission is still to come (a what-if: "no job
        arrives after now"); returns how many. They stay in the job table, never
        submitted (state None), so job ids do not shift. Meant for forks."""
        now = self.now
        kept = [e for e in self.heap if e[1] != SUBMIT or e[0] <= now]
        dropped = len(self.heap) - len(kept)
        heapq.heapify(kept)
        self.heap = kept
        return dropped

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        i = self._index(job_id)
        if self.state[i] not in (None, PENDING):
            raise SimError(f"job {job_id} is not pending: its time limit cannot change")
        self.limit[i] = seconds
        self._pool.set_limit(i, seconds)
        self._changed()

    # ---- observation ---------------------------------------------------------------

    def job_ids(self) -> list[str]:
        return [str(i + self.first_id) for i in range(len(self.specs))]

    def view(self, job_id: str) -> JobView:
        i = self._index(job_id)
        return views.job_view(self, i, views.top_jobs(self))

    def pending_jobs(self) -> list[JobView]:
        top = views.top_jobs(self)
        return [views.job_view(self, i, top) for i in sorted(self.pending)]

    def running_jobs(self) -> list[JobView]:
        top: set[int] = set()
        return [views.job_view(self, i, top) for i in sorted(self.running)]

    def all_jobs(self) -> list[JobView]:
        return self.views_of(range(len(self.specs)))

    def views_of(self, indices: Iterable[int]) -> list[JobView]:
        """The jobs at these positions (job id minus ``first_id``), in their order."""
        top = views.top_jobs(self)
        return [views.job_view(self, i, top) for i in indices]

    def test_only(self, spec: JobSpec) -> int | None:
        """``sbatch --test-only`` for ``spec`` submitted now: Slurm's will-run start
        (:mod:`mirage.sim.testonly`), not the backfill plan; None when the job is refused
        or can never fit. On a fork: this simulation is unchanged."""
        probe = self.fork()
        try:
            i = probe._index(probe.add_job(dataclasses.replace(spec, submit=probe.now)))
        except SimError:  # a request no node of its partition can hold
            return None
        probe._on_submit(i)  # created and prioritised; Slurm runs no pass for a test
        if probe.state[i] is not PENDING:
            return None
        return testonly.test_only_start(probe, i)

    def start_estimate(self, job_id: str) -> int | None:
        """The planned start from the last backfill pass (None if not planned or not pending)."""
        i = self._index(job_id)
        return self.estimate[i] if self.state[i] is PENDING else None

    # ---- fork ----------------------------------------------------------------------

    def fork(self) -> Simulation:
        """An independent copy at the same instant: C-level copies of every container.

        Job specs are frozen and shared; every mutable container is copied, so nothing
        done to the fork (or the parent) is visible to the other.
        """
        clone = object.__new__(Simulation)
        clone.__dict__.update(self.__dict__)
        for name in self._MUTABLE:
            setattr(clone, name, getattr(self, name).copy())
        if self._lim is not None:
            clone._lim = self._lim.copy()
        if self._fs is not None:
            clone._fs = self._fs.copy()
        return clone
