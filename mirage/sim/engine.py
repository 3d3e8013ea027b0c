"""A discrete-event Slurm simulator: an event heap, Slurm's main pass and backfill.

Time only moves from one event to the next (job submit, job end, begin time reached,
backfill tick); there is no fixed step. Per-job state is kept in parallel lists indexed
by the job's position (its id minus ``first_id``), so that ``fork`` is a handful of C-level
list/dict/set copies, and the immutable ``JobSpec`` objects are shared, not copied.

Scheduling follows Slurm:

- Main pass (after every batch of events at one instant): pending, eligible jobs in
  priority order; each starts if its partition has the nodes; the first job that does not
  fit blocks the rest of its partition (Slurm's schedule() stops at the first blocked job
  per partition).
- Backfill (at multiples of ``bf_interval_s``, when something changed since the last
  pass): walks up to ``bf_max_job_test`` jobs in priority order over an availability
  profile built from running jobs' expected ends (start + time limit, at
  ``bf_resolution_s``); a job that fits now starts, any other gets a reservation at its
  earliest start within ``bf_window_s`` (every tested job with "slurm", only the first
  blocked job per partition with "easy"). A job starting now must fit around every
  reservation already made, so it delays none of them. The reservation time is the job's
  start estimate (what ``squeue --start`` shows).

Modelling choices: whole-node allocation;
partitions are disjoint node sets; priority = age (capped) + job size + partition weight,
recomputed at every pass, no fair-share yet.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from mirage.profile.schema import ClusterProfile
from mirage.sim.plan import Availability
from mirage.sim.workload import INFINITE, JobSpec
from mirage.slurm.types import JobState

# Event kinds; within one instant, ends are handled first (their nodes are free for the
# jobs submitted at that instant), the backfill tick last. SCHED only wakes the loop up
# after an action taken between steps (release, cancel, ...), so the main pass runs then.
END, SUBMIT, BEGIN, SCHED, TICK = 0, 1, 2, 3, 4

# Dependency status of a pending job.
DEP_OK, DEP_WAIT, DEP_NEVER = 0, 1, 2

PENDING, RUNNING = JobState.PENDING, JobState.RUNNING


class SimError(ValueError):
    """A request the simulated controller refuses (unknown job, bad dependency, ...)."""


@dataclass(frozen=True, slots=True)
class JobView:
    """A read-only snapshot of one simulated job (times in epoch seconds)."""

    job_id: str
    spec: JobSpec
    state: JobState | None  # None: not submitted yet (its submit time is in the future)
    reason: str
    eligible: int | None
    start: int | None
    end: int | None  # actual end, or expected end (start + limit) while running
    time_limit: int | None
    priority: int
    estimate: int | None  # backfill's planned start for a pending job
    age: int  # seconds since submit (pending) or waited before start
    held: bool


def _ceil(t: int, res: int) -> int:
    return -(-t // res) * res


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
    """One simulated cluster: its jobs, its clock, its event heap."""

    # Every per-run container; ``fork`` copies exactly these (all have ``.copy()``).
    _MUTABLE = (
        "specs",
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
    )

    def __init__(
        self,
        profile: ClusterProfile,
        nodes: int | Mapping[str, int] | None = None,
        start_time: int = 0,
        track_estimates: bool = True,
        first_id: int = 1,
    ) -> None:
        """``nodes`` overrides the profile's node count (an int: the default partition).

        ``track_estimates=False`` skips backfill passes that cannot start any job; the
        schedule is identical, only start estimates go stale (for fast replays).
        """
        self.profile = profile
        self.sched = profile.scheduler
        self.capacity = self._capacities(profile, nodes)
        self.max_time = {p.name: p.max_time_s for p in profile.partitions}
        self.total_nodes = sum(self.capacity.values())
        self.track_estimates = track_estimates
        self.first_id = first_id
        self.now = start_time
        self.specs: list[JobSpec] = []
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
        self.free: dict[str, int] = dict(self.capacity)
        self.heap: list[tuple[int, int, int]] = []
        self._dirty_main = False
        self._dirty_bf = False
        self._next_tick: int | None = None
        self._in_step = False
        self.events = 0
        self.main_passes = 0
        self.backfill_passes = 0

    @staticmethod
    def _capacities(
        profile: ClusterProfile, nodes: int | Mapping[str, int] | None
    ) -> dict[str, int]:
        over: dict[str, int] = {}
        if isinstance(nodes, int):
            over[profile.partition().name] = nodes
        elif nodes is not None:
            over.update(nodes)
        caps: dict[str, int] = {}
        for p in profile.partitions:
            n = over.get(p.name, p.nodes)
            if n is None:
                raise SimError(f"partition {p.name!r} has no node count: pass nodes=")
            caps[p.name] = n
        return caps

    # ---- building the workload -------------------------------------------------------

    def add_jobs(self, specs: Iterable[JobSpec]) -> list[str]:
        """Queue jobs for submission at their ``submit`` times (>= now); returns their ids."""
        ids = [self._add(spec) for spec in specs]
        heapq.heapify(self.heap)
        return ids

    def add_job(self, spec: JobSpec) -> str:
        job_id = self._add(spec)
        heapq.heapify(self.heap)
        return job_id

    def _add(self, spec: JobSpec) -> str:
        if spec.submit < self.now:
            raise SimError(f"cannot submit at {spec.submit}, before now ({self.now})")
        if spec.partition not in self.capacity:
            raise SimError(f"no partition {spec.partition!r}")
        i = len(self.specs)
        deps = tuple(
            (kind, self._index(parent)) for kind, parent in parse_dependency(spec.dependency)
        )
        self.specs.append(spec)
        self.state.append(None)
        self.start.append(None)
        self.end.append(None)
        limit = spec.time_limit if spec.time_limit is not None else self.max_time[spec.partition]
        self.limit.append(INFINITE if limit is None else limit)
        self.eligible_at.append(None)
        self.held.append(spec.hold)
        self.deps.append(deps)
        self.dep_state.append(DEP_WAIT if deps else DEP_OK)
        self.estimate.append(None)
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
            self._next_tick = _ceil(self.now, self.sched.bf_interval_s)
            heapq.heappush(self.heap, (self._next_tick, TICK, -1))

    # ---- event handlers ------------------------------------------------------------

    def _on_submit(self, i: int) -> None:
        if self.state[i] is not None:  # cancelled before its submit time
            return
        self.state[i] = PENDING
        self.pending.add(i)
        if self.deps[i]:
            self.dep_state[i] = self._dep_status(i)
        begin = self.specs[i].begin
        if begin is not None and begin > self.now:
            heapq.heappush(self.heap, (begin, BEGIN, i))
        self._refresh_eligible(i)
        self._changed()

    def _on_begin(self, i: int) -> None:
        if self.state[i] is PENDING:
            self._refresh_eligible(i)
            self._changed()

    def _on_end(self, i: int) -> None:
        if self.state[i] is not RUNNING or self.end[i] != self.now:
            return  # cancelled earlier: a stale event
        spec = self.specs[i]
        start = self.start[i]
        assert start is not None
        if spec.run > self.limit[i]:
            final = JobState.TIMEOUT
        else:
            final = JobState.FAILED if spec.fails else JobState.COMPLETED
        self._finish(i, final)

    def _finish(self, i: int, final: JobState) -> None:
        if self.state[i] is RUNNING:
            self.running.discard(i)
            self.free[self.specs[i].partition] += self.specs[i].nodes
        self.pending.discard(i)
        self.state[i] = final
        self.end[i] = self.now
        self.estimate[i] = None
        for child in self.children.get(i, ()):
            if self.state[child] is PENDING and self.dep_state[child] == DEP_WAIT:
                self.dep_state[child] = self._dep_status(child)
                self._refresh_eligible(child)
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
        """Set the eligible time (which the age factor counts from) once deps and begin allow."""
        if self.eligible_at[i] is not None or self.dep_state[i] != DEP_OK:
            return
        begin = self.specs[i].begin
        if begin is None or begin <= self.now:
            self.eligible_at[i] = self.now

    def _start(self, i: int) -> None:
        spec = self.specs[i]
        now = self.now
        self.pending.discard(i)
        self.running.add(i)
        self.free[spec.partition] -= spec.nodes
        self.state[i] = RUNNING
        self.start[i] = now
        end = now + min(spec.run, self.limit[i])
        self.end[i] = end
        self.estimate[i] = None
        heapq.heappush(self.heap, (end, END, i))

    # ---- scheduling ----------------------------------------------------------------

    def priority(self, i: int) -> int:
        """Slurm's multifactor priority (integer, as Slurm truncates it)."""
        s = self.sched
        if self.held[i]:
            return 0
        eligible = self.eligible_at[i]
        age = 0 if eligible is None else min(self.now - eligible, s.priority_max_age_s)
        f_age = age / s.priority_max_age_s if s.priority_max_age_s > 0 else 1.0
        f_size = self.specs[i].nodes / self.total_nodes
        if s.priority_favor_small:
            f_size = 1.0 - f_size
        return int(
            s.priority_weight_age * f_age
            + s.priority_weight_job_size * f_size
            + s.priority_weight_partition
        )

    def _by_priority(self, jobs: list[int]) -> list[int]:
        """Highest priority first; ties by job id (submission order)."""
        prio = self.priority
        return sorted(jobs, key=lambda i: (-prio(i), i))

    def _main_pass(self) -> None:
        self._dirty_main = False
        free = self.free
        elig, held, specs = self.eligible_at, self.held, self.specs
        cands = [
            i
            for i in self.pending
            if elig[i] is not None and not held[i] and free[specs[i].partition] > 0
        ]
        if not cands:
            return
        self.main_passes += 1
        blocked: set[str] = set()
        started = False
        for i in self._by_priority(cands):
            part = specs[i].partition
            if part in blocked:
                continue
            if specs[i].nodes <= free[part]:
                self._start(i)
                started = True
            else:
                blocked.add(part)
        if started:  # the backfill plan must account for the new allocations
            self._dirty_bf = True
            self._want_tick()

    def _backfill_candidates(self) -> list[int]:
        held, dep = self.held, self.dep_state
        return [i for i in self.pending if not held[i] and dep[i] == DEP_OK]

    def _can_start_any(self, cands: list[int]) -> bool:
        free, specs, elig = self.free, self.specs, self.eligible_at
        return any(
            elig[i] is not None and specs[i].nodes <= free[specs[i].partition] for i in cands
        )

    def _backfill(self, force: bool) -> None:
        """One backfill pass at ``now`` (see the module docstring)."""
        self._dirty_bf = False
        cands = self._backfill_candidates()
        if not cands or not (force or self.track_estimates or self._can_start_any(cands)):
            return
        self.backfill_passes += 1
        s = self.sched
        now, res = self.now, max(1, s.bf_resolution_s)
        horizon = now + s.bf_window_s
        avail = self._availability(res)
        easy_done: set[str] = set()
        # Free nodes only ever decrease during a pass, so a job cannot start before the
        # earliest start found for an earlier job of the same shape: start the scan there
        # (queues are dominated by a few shapes, so this keeps long queues cheap).
        floor: dict[tuple[str, int, int], int] = {}
        specs, limit, elig = self.specs, self.limit, self.eligible_at
        for i in self._by_priority(cands)[: s.bf_max_job_test]:
            spec = specs[i]
            plan = avail[spec.partition]
            not_before = now if elig[i] is not None else max(now, spec.begin or now)
            dur = _ceil(limit[i], res)
            shape = (spec.partition, spec.nodes, dur)
            t = plan.earliest(spec.nodes, dur, max(not_before, floor.get(shape, now)))
            if t is not None:
                floor[shape] = t
            if t is None or t > horizon:
                self.estimate[i] = None
                continue
            end = t + dur
            if t == now and elig[i] is not None:
                self._start(i)
                plan.reserve(t, end, spec.nodes)
                continue
            self.estimate[i] = t
            if s.backfill == "easy":
                if spec.partition in easy_done:
                    continue  # EASY: only the first blocked job holds a reservation
                easy_done.add(spec.partition)
            plan.reserve(t, end, spec.nodes)

    def _availability(self, res: int) -> dict[str, Availability]:
        releases: dict[str, list[tuple[int, int]]] = {p: [] for p in self.capacity}
        specs, start, limit = self.specs, self.start, self.limit
        for i in self.running:
            st = start[i]
            assert st is not None
            releases[specs[i].partition].append((st + _ceil(limit[i], res), specs[i].nodes))
        return {p: Availability(self.now, self.free[p], releases[p]) for p in self.capacity}

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
        elif st.is_active:
            self._finish(i, JobState.CANCELLED)

    def set_hold(self, job_id: str, held: bool) -> None:
        i = self._index(job_id)
        if self.state[i] in (None, PENDING) and self.held[i] != held:
            self.held[i] = held
            self._changed()

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        i = self._index(job_id)
        if self.state[i] not in (None, PENDING):
            raise SimError(f"job {job_id} is not pending: its time limit cannot change")
        self.limit[i] = seconds
        self._changed()

    # ---- observation ---------------------------------------------------------------

    def job_ids(self) -> list[str]:
        return [str(i + self.first_id) for i in range(len(self.specs))]

    def view(self, job_id: str) -> JobView:
        i = self._index(job_id)
        return self._view(i, self._top_jobs())

    def pending_jobs(self) -> list[JobView]:
        top = self._top_jobs()
        return [self._view(i, top) for i in sorted(self.pending)]

    def running_jobs(self) -> list[JobView]:
        top: set[int] = set()
        return [self._view(i, top) for i in sorted(self.running)]

    def all_jobs(self) -> list[JobView]:
        top = self._top_jobs()
        return [self._view(i, top) for i in range(len(self.specs))]

    def start_estimate(self, job_id: str) -> int | None:
        """The planned start from the last backfill pass (None if not planned or not pending)."""
        i = self._index(job_id)
        return self.estimate[i] if self.state[i] is PENDING else None

    def _top_jobs(self) -> set[int]:
        """Each partition's highest-priority startable pending job (reason "Resources")."""
        best: dict[str, tuple[int, int]] = {}
        for i in self.pending:
            if self.eligible_at[i] is None or self.held[i]:
                continue
            key = (-self.priority(i), i)
            part = self.specs[i].partition
            if part not in best or key < best[part]:
                best[part] = key
        return {key[1] for key in best.values()}

    def _reason(self, i: int, top: set[int]) -> str:
        if self.held[i]:
            return "JobHeldUser"
        if self.dep_state[i] == DEP_NEVER:
            return "DependencyNeverSatisfied"
        if self.dep_state[i] == DEP_WAIT:
            return "Dependency"
        if self.eligible_at[i] is None:
            return "BeginTime"
        return "Resources" if i in top else "Priority"

    def _view(self, i: int, top: set[int]) -> JobView:
        spec, st = self.specs[i], self.state[i]
        start, end = self.start[i], self.end[i]
        reason = self._reason(i, top) if st is PENDING else "None"
        age = (start if start is not None else self.now) - spec.submit
        limit = self.limit[i]
        return JobView(
            job_id=str(i + self.first_id),
            spec=spec,
            state=st,
            reason=reason,
            eligible=self.eligible_at[i],
            start=start,
            end=self._expected_end(i) if st is RUNNING else end,
            time_limit=None if limit >= INFINITE else limit,
            priority=self.priority(i) if st is PENDING else 0,
            estimate=self.estimate[i] if st is PENDING else None,
            age=max(0, age) if st is not None else 0,
            held=self.held[i],
        )

    def _expected_end(self, i: int) -> int | None:
        """What squeue shows for a running job: start + limit (the true end is unknown)."""
        start, limit = self.start[i], self.limit[i]
        return None if start is None or limit >= INFINITE else start + limit

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
        return clone
