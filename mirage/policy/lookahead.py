"""Look-ahead: simulate the present queue forward with predicted run times.

Slurm plans with time limits; most jobs end well before theirs, so its start estimate for
a new job is late on a busy cluster (the ``slurm-estimate`` baseline). The runtime oracle
of :mod:`mirage.evaluate.whatif` showed that knowing the true run times of the jobs already
queued or running would take a policy to the oracle at heavy load. This is the deployable
counterpart: run times are *predicted* from history, and the successor's start is read
from a simulation of the present queue alone (no later arrivals).

- :class:`RunTimes`: recent run/limit ratios of finished jobs, per user (the last
  :attr:`RunTimes.per_user`) and overall (the last :attr:`RunTimes.overall`), fed from
  accounting records (``sacct -a``, what the daemon polls; in the simulator the same
  records from :class:`~mirage.sim.backend.SimSlurmClient`). A job's predicted run is
  the median (or :attr:`RunTimes.stat`) of ``ratio x limit`` over its user's ratios (the
  overall ones while the user has fewer than :attr:`RunTimes.min_user`): all of them for
  a pending job, those that exceed its elapsed time for a running one; its limit when
  none does. ``draws`` > 1 in :func:`lookahead_starts` draws each job's run instead.
- :func:`lookahead_starts`: builds a :class:`~mirage.sim.engine.Simulation` of the cluster
  profile from one queue snapshot (``squeue``): every running job from now for its
  predicted remaining run (its remaining limit as the limit backfill plans with; the
  chains' own running segments run to their limits), then the
  competing pending jobs in the order of their priority, then the request, and runs it
  until the request starts. Pending jobs waiting on a dependency follow the request (they
  become eligible later), each after the jobs it waits for; held jobs and jobs waiting
  for a begin time are left out, as are jobs of partitions not in the profile.
  Requests of the same shape share one simulation.
- :class:`LookaheadPolicy` (``lookahead``): submit once the simulated start plus a margin
  (tuned on the tuning split, like the baselines' constants) reaches the planned end.

Everything comes from what the daemon sees, so the evaluation harness calls the same
functions on :class:`~mirage.sim.backend.SimSlurmClient` snapshots and records
(:mod:`mirage.evaluate.lookahead`).

Priority order: the snapshot's ``priority`` values where all competing jobs have one
(squeue's, the controller's own), else eligible time (age). The request goes last: a new
job has age 0, and its other factors are unknown until it is submitted.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import OrderedDict, deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.features import PENDING_STATES, RUNNING_STATES, is_competing, task_count
from mirage.profile.schema import ClusterProfile
from mirage.sim.engine import Simulation
from mirage.sim.limits import Limits
from mirage.sim.workload import JobSpec
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob

HOUR = 3600
#: A job with no time limit (INFINITE) is predicted and planned with this one.
UNLIMITED_PLAN_S = 48 * HOUR
#: The simulation stops here at the latest: a request not started by then starts "late".
HORIZON_S = 14 * 24 * HOUR
#: Finished states whose run time says how long jobs of the user run.
RUN_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY}
)


#: At most this many simulations per request shape and decision (``draws``).
MAX_DRAWS = 64
#: How a job's run is predicted from the runs its history allows (:meth:`RunTimes.predict`).
RUNTIME_STATS = ("median", "mean")


def check_stat(stat: str) -> str:
    """``stat`` if it names a run-time statistic ("median", "mean" or "q<percent>", e.g.
    "q25"), else a ValueError naming the valid ones."""
    if stat in RUNTIME_STATS or re.fullmatch(r"q([1-9]|[1-9][0-9])", stat):
        return stat
    raise ValueError(
        f"unknown run-time statistic {stat!r}: use one of {', '.join(RUNTIME_STATS)} "
        "or q1..q99 (a quantile)"
    )


class RunTimes:
    """Recent run/limit ratios of finished jobs, per user and overall.

    ``stat`` summarises the runs a job's history allows: the median (the default), the
    mean (what a deep queue's wait depends on: the sum of the run times ahead) or a
    quantile ("q25").
    """

    def __init__(
        self,
        per_user: int = 20,
        overall: int = 2000,
        min_user: int = 3,
        seen: int = 200_000,
        stat: str = "median",
    ) -> None:
        self.stat = check_stat(stat)
        self.per_user = per_user
        self.overall = overall
        self.min_user = min_user
        self._seen_max = seen
        self._user: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=overall)
        self._seen: OrderedDict[str, None] = OrderedDict()
        # memos, valid until the next add(): a snapshot asks for the same user's ratios
        # (and a pending job's prediction) once per job, hundreds of times a decision
        self._ratios: dict[str, np.ndarray] = {}
        self._pending: dict[tuple[str, int], int] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, user: str, run_s: int, limit_s: int) -> None:
        """One finished job's run time (capped at its limit)."""
        if limit_s <= 0:
            return
        r = min(1.0, max(0.0, run_s / limit_s))
        self._user.setdefault(user, deque(maxlen=self.per_user)).append(r)
        self._all.append(r)
        self._ratios.clear()
        self._pending.clear()

    def observe(self, jobs: Iterable[SlurmJob]) -> int:
        """Add the finished jobs of ``jobs`` not seen before (by job id), in end order;
        returns how many were added. Accounting windows overlap: each job counts once."""
        fresh = [
            j
            for j in jobs
            if j.state in RUN_STATES
            and j.start is not None
            and j.end is not None
            and j.time_limit is not None
            and j.job_id not in self._seen
        ]
        fresh.sort(key=lambda j: (j.end or 0, j.job_id))
        for j in fresh:
            self._seen[j.job_id] = None
            self.add(j.user, (j.end or 0) - (j.start or 0), j.time_limit or 0)
        while len(self._seen) > self._seen_max:
            self._seen.popitem(last=False)
        return len(fresh)

    def ratios(self, user: str) -> np.ndarray:
        """The user's run/limit ratios (everyone's while the user has too few; [1] with no
        history at all). Do not modify the array: it is shared until the next add()."""
        out = self._ratios.get(user)
        if out is None:
            u = self._user.get(user)
            if u is not None and len(u) >= self.min_user:
                out = np.fromiter(u, dtype=float)
            else:
                out = np.fromiter(self._all, dtype=float) if self._all else np.ones(1)
            self._ratios[user] = out
        return out

    def predict(self, user: str, limit_s: int, elapsed_s: int = 0) -> int:
        """Predicted whole run time (s) of a job of ``user`` with ``limit_s`` that has run
        ``elapsed_s`` so far: the statistic (``stat``) of the runs its history allows
        (:meth:`possible`); the limit when none does."""
        key = (user, int(limit_s))
        if elapsed_s <= 0 and key in self._pending:
            return self._pending[key]
        ok = self.possible(user, limit_s, elapsed_s)
        out = int(limit_s) if ok.size == 0 else max(1, math.ceil(self._summary(ok)))
        if elapsed_s <= 0:
            self._pending[key] = out
        return out

    def possible(self, user: str, limit_s: int, elapsed_s: int) -> np.ndarray:
        """The runs (s) the history allows a job that has run ``elapsed_s``: every one for a
        job not started (runs of 0 s included: one job in seven on ls6 ends at once, and
        leaving them out overestimated pending jobs' mean run by a fifth), those longer
        than ``elapsed_s`` for a running one."""
        runs = self.ratios(user) * limit_s
        return runs if elapsed_s <= 0 else runs[runs > elapsed_s]

    def _summary(self, runs: np.ndarray) -> float:
        if self.stat == "median":
            return float(np.median(runs))
        if self.stat == "mean":
            return float(np.mean(runs))
        return float(np.quantile(runs, int(self.stat[1:]) / 100))

    def predict_job(self, job: SlurmJob, now: int) -> int:
        """:meth:`predict` for a queued or running job of a snapshot taken at ``now``."""
        return self.predict(job.user, plan_limit(job), _elapsed(job, now))

    def draw(self, user: str, limit_s: int, elapsed_s: int, u: float) -> int:
        """The ``u``-quantile (0 < u < 1) of the runs :meth:`predict` summarises: one draw
        from the job's run-time distribution, given ``u`` uniform."""
        ok = self.possible(user, limit_s, elapsed_s)
        return int(limit_s) if ok.size == 0 else max(1, math.ceil(np.quantile(ok, u)))

    def drawn(self, k: int) -> Draw:
        """Draw number ``k``: every job's run drawn from its distribution (:meth:`draw`)."""
        return Draw(self, k)


class RunPredictor(Protocol):
    """What the snapshot simulation asks for: a job's predicted whole run (s)."""

    def predict_job(self, job: SlurmJob, now: int) -> int: ...


@dataclass(frozen=True)
class Draw:
    """One joint draw of every job's run time. A job's uniform comes from its job id and
    ``k`` (a hash, the same in every process): the same job gets the same draw at every
    decision step, so that successive decisions see one consistent future per draw rather
    than fresh noise."""

    runtimes: RunTimes
    k: int

    def uniform(self, job: SlurmJob) -> float:
        """The job's uniform in (0, 1) for this draw."""
        digest = hashlib.blake2b(f"{job.job_id}:{self.k}".encode(), digest_size=8).digest()
        return (int.from_bytes(digest, "big") + 0.5) / 2**64

    def predict_job(self, job: SlurmJob, now: int) -> int:
        return self.runtimes.draw(job.user, plan_limit(job), _elapsed(job, now), self.uniform(job))


def _elapsed(job: SlurmJob, now: int) -> int:
    """How long a running job has run (0 for one not running)."""
    if job.state not in RUNNING_STATES or job.start is None:
        return 0
    return max(0, now - job.start)


def plan_limit(job: SlurmJob) -> int:
    """The job's time limit, or :data:`UNLIMITED_PLAN_S` without one."""
    return job.time_limit if job.time_limit else UNLIMITED_PLAN_S


@dataclass(frozen=True)
class Request:
    """The successor's request: the shape a simulation is shared by.

    ``user``: the chain's owner, so that per-user QOS/association limits of the profile
    (mirage.sim.limits) hold the request as they would hold the real job; ignored (shared
    simulations) when the profile sets no limit. ``cpus`` > 0: a share of its nodes' CPUs
    and no GPU (mirage.plan's CPU shapes); else whole nodes, or the GPUs asked for.
    """

    partition: str
    nodes: int
    gpus: int
    time_limit: int
    user: str = ""
    cpus: int = 0

    @classmethod
    def of(cls, p: PendingTransition) -> Request:
        return cls(p.partition, p.succ_nodes, p.succ_gpus, p.succ_time_limit, p.user)


class _RankedSimulation(Simulation):
    """A simulation whose pending order is the look-ahead's: the first ``ranked`` jobs (the
    snapshot's, then the request) in the order they were added, above every later one
    (dependent jobs: eligible after the request), which rank by when they became eligible,
    as age would rank them."""

    ranked = 0
    _TOP = 2 * 10**9  # priorities stay below 2**31 (the engine's sort keys)

    def priority(self, i: int) -> int:
        if self.held[i]:
            return 0
        if i < self.ranked:
            return self._TOP - i
        eligible = self.eligible_at[i]
        return 0 if eligible is None else max(1, 10**9 - (eligible - self.now))


def _spec(job: SlurmJob, profile: ClusterProfile, now: int, run: int, limit: int) -> JobSpec:
    part = profile.partition(job.partition)
    # whole nodes when it holds every CPU of its nodes (or says nothing finer)
    whole = job.cpus <= 0 or job.cpus >= job.nodes * part.cpus_per_node
    return JobSpec(
        submit=now,
        run=max(1, run),
        time_limit=max(1, limit),
        nodes=max(1, job.nodes),
        partition=part.name,
        gpus=0 if whole else job.gpus,
        cpus=0 if whole else job.cpus,
        exclusive=whole,
        user=job.user,
        name=job.job_id,
    )


def _first_partition(job: SlurmJob, names: set[str]) -> str | None:
    for name in job.partition.split(","):
        if name in names:
            return name
    return None


@dataclass(frozen=True)
class QueuePlan:
    """A snapshot's jobs as the look-ahead simulates them, all submitted at ``now``.

    ``ahead``: the running jobs (by start), then the competing pending ones in priority
    order: all ahead of a new request. ``after``: pending jobs waiting on a dependency,
    in submission order, with the job ids they wait for (``parents``): they become
    eligible later than a request submitted now, so they rank below it. ``nodes``: the
    nodes each running job holds (by spec name), where the snapshot names them.
    """

    ahead: list[JobSpec]
    after: list[tuple[JobSpec, tuple[str, ...]]]
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def place(self, sim: Simulation) -> dict[str, str]:
        """Add ``ahead`` to ``sim`` with each running job pinned to its nodes, before the
        pass at ``now`` places them; spec name -> the sim's job id ("" where left out).
        Re-packed, the running jobs of nodes that jobs share free whole nodes the cluster
        does not have: on CERIT-SC (80-CPU nodes) a pass re-packing 1,088 busy CPUs saw
        two idle nodes where the busiest had 69 CPUs free, and planned a 2-node job to
        start at once that waited 82 h."""
        added = sim.add_jobs_skipping_invalid(self.ahead)
        ids = dict(zip((s.name for s in self.ahead), added, strict=True))
        for name, held in self.nodes.items():
            if ids.get(name):
                sim.pin(ids[name], held)
        return ids


def queue_specs(
    snapshot: QueueSnapshot,
    profile: ClusterProfile,
    now: int,
    runtimes: RunPredictor,
    to_limit: Collection[str] = (),
) -> QueuePlan:
    """The snapshot's jobs with predicted runs (spec names are their job ids); the jobs of
    ``to_limit`` (chain segments: they train until their limit) run to their limit."""
    names = {p.name for p in profile.partitions}
    running: list[tuple[int, JobSpec]] = []
    pending: list[tuple[SlurmJob, JobSpec]] = []
    waiting: list[tuple[SlurmJob, JobSpec]] = []
    nodes: dict[str, tuple[str, ...]] = {}
    for listed in snapshot.jobs:
        part = _first_partition(listed, names)
        if part is None:
            continue
        job = listed if part == listed.partition else replace(listed, partition=part)
        limit = plan_limit(job)
        if job.state in RUNNING_STATES and job.start is not None:
            elapsed = max(0, now - job.start)
            if job.state is JobState.COMPLETING:
                run = 1  # ending now
            else:
                whole = limit if job.job_id in to_limit else runtimes.predict_job(job, now)
                run = whole - elapsed
            running.append((job.start, _spec(job, profile, now, run, limit - elapsed)))
            if job.node_list:
                nodes[running[-1][1].name] = job.node_list
        elif job.state in PENDING_STATES and is_competing(job, now):
            spec = _spec(job, profile, now, runtimes.predict_job(job, now), limit)
            pending.extend((job, spec) for _ in range(task_count(job)))
        elif job.state in PENDING_STATES and job.reason == "Dependency" and job.dependency:
            waiting.append((job, _spec(job, profile, now, runtimes.predict_job(job, now), limit)))
    running.sort(key=lambda x: x[0])
    waiting.sort(key=lambda x: _id_order(x[0]))
    return QueuePlan(
        ahead=[s for _, s in running] + [s for _, s in _priority_order(pending)],
        after=[(s, parents(j.dependency)) for j, s in waiting],
        nodes=nodes,
    )


def parents(dependency: str) -> tuple[str, ...]:
    """The job ids a dependency names: "afterok:12:13,afterany:9(unfulfilled)" -> 12, 13, 9
    (squeue appends each one's status; array ids keep their job id: "7_*" -> 7)."""
    out: list[str] = []
    for part in re.split(r"[,?]", dependency):
        kind, _, ids = part.partition(":")
        if kind.startswith("after"):
            out.extend(m[0] for x in ids.split(":") if (m := re.match(r"\d+", x)))
    return tuple(out)


def _id_order(job: SlurmJob) -> tuple[int, str]:
    """Submission order: the job id's leading number ("123", "9_[3-5]")."""
    digits = re.match(r"\d+", job.job_id)
    return (int(digits[0]) if digits else 0, job.job_id)


def _priority_order(pending: list[tuple[SlurmJob, JobSpec]]) -> list[tuple[SlurmJob, JobSpec]]:
    """Highest priority first, ties by job id (as Slurm sorts its queue); by eligible time
    (age) when some job shows no priority."""
    if all(j.priority is not None for j, _ in pending):
        return sorted(pending, key=lambda x: (-(x[0].priority or 0), _id_order(x[0])))
    return sorted(pending, key=lambda x: (x[0].eligible or x[0].submit or 0, _id_order(x[0])))


def request_spec(req: Request, profile: ClusterProfile, now: int) -> JobSpec:
    part = profile.partition(req.partition)
    if req.cpus > 0 and req.gpus <= 0:
        return JobSpec(
            submit=now, run=req.time_limit, time_limit=req.time_limit, nodes=req.nodes,
            partition=part.name, cpus=req.cpus, user=req.user or "mirage-lookahead",
            name="request",
        )  # fmt: skip
    whole = req.gpus <= 0 or req.gpus >= req.nodes * part.gpus_per_node
    return JobSpec(
        submit=now,
        run=req.time_limit,
        time_limit=req.time_limit,
        nodes=req.nodes,
        partition=part.name,
        gpus=0 if whole else req.gpus,
        cpus=0,
        exclusive=whole,
        user=req.user or "mirage-lookahead",
        name="request",
    )


def lookahead_starts(
    snapshot: QueueSnapshot,
    profile: ClusterProfile,
    now: int,
    runtimes: RunPredictor,
    requests: Sequence[Request],
    *,
    to_limit: Collection[str] = (),
    horizon_s: int = HORIZON_S,
    draws: int = 1,
) -> list[int]:
    """Simulated start of each request if submitted alone at ``now`` with no later
    arrivals (``now + horizon_s`` when it would not start by then); ``to_limit``: the ids
    of running jobs known to run to their limit (the chains' running segments).

    ``draws`` > 1: the median start over that many simulations, each with every job's run
    drawn from its distribution (:meth:`RunTimes.drawn`) instead of one summary per job.
    A single summary misjudges what depends on the spread: the first of many running jobs
    to end comes well before the earliest of their medians. Draws need ``runtimes`` to be
    a :class:`RunTimes` (any other predictor gives one run per job: TypeError).
    """
    if draws <= 1:
        return _starts(snapshot, profile, now, runtimes, requests, to_limit, horizon_s)
    if not isinstance(runtimes, RunTimes):
        raise TypeError(f"draws need RunTimes' distributions, not {type(runtimes).__name__}")
    runs = [
        _starts(snapshot, profile, now, runtimes.drawn(k), requests, to_limit, horizon_s)
        for k in range(draws)
    ]
    # the lower median over draws: a start some draw actually gave
    return [int(np.sort(col)[(draws - 1) // 2]) for col in zip(*runs, strict=True)]


def _starts(  # noqa: PLR0917 - the arguments of lookahead_starts
    snapshot: QueueSnapshot,
    profile: ClusterProfile,
    now: int,
    runtimes: RunPredictor,
    requests: Sequence[Request],
    to_limit: Collection[str],
    horizon_s: int,
) -> list[int]:
    plan = queue_specs(snapshot, profile, now, runtimes, to_limit)
    if Limits.build(profile) is None:  # no per-user limit: requests share by shape only
        requests = [replace(r, user="") for r in requests]
    out: dict[Request, int] = {}
    for req in dict.fromkeys(requests):
        sim = _RankedSimulation(profile, start_time=now, track_estimates=False)
        ids = plan.place(sim)
        job = sim.add_job(request_spec(req, profile, now))
        sim.ranked = len(sim.specs)
        _add_dependents(sim, plan.after, ids)
        start = sim.run_until_started(job, until=now + horizon_s)
        out[req] = now + horizon_s if start is None else start
    return [out[r] for r in requests]


def _add_dependents(
    sim: Simulation, after: list[tuple[JobSpec, tuple[str, ...]]], ids: dict[str, str]
) -> None:
    """Each dependent job, to start after whichever of its parents the simulation has; one
    whose parents all left the queue is eligible now (a failed afterok shows as
    DependencyNeverSatisfied instead, and is not in ``after``)."""
    for spec, wanted in after:
        known = [ids[p] for p in wanted if ids.get(p)]
        dep = "afterany:" + ":".join(known) if known else ""
        (ids[spec.name],) = sim.add_jobs_skipping_invalid([replace(spec, dependency=dep)])


class LookaheadPolicy(Policy):
    """Submit once the look-ahead start plus ``margin_s`` reaches the planned end.

    ``runtimes`` learns from the accounting records of each decision step
    (``ctx.accounting``); :meth:`observe` feeds it.
    """

    name = "lookahead"
    #: The daemon reads this much accounting history once at start (one extra ``sacct``),
    #: so that a restarted daemon predicts run times from the first cycle on.
    warmup_s = 14 * 24 * HOUR

    def __init__(
        self,
        margin_s: int = 0,
        runtimes: RunTimes | None = None,
        stat: str = "median",
        draws: int = 1,
    ) -> None:
        self.margin_s = margin_s
        self.runtimes = runtimes if runtimes is not None else RunTimes(stat=stat)
        self.draws = draws

    def observe(self, ctx: DecisionContext) -> None:
        if ctx.accounting is not None:
            self.runtimes.observe(ctx.accounting)
        self.runtimes.observe(ctx.snapshot.jobs)

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        starts = lookahead_starts(
            ctx.snapshot,
            ctx.profile,
            ctx.now,
            self.runtimes,
            [Request.of(p) for p in pending],
            to_limit={p.pred_job_id for p in pending},
            draws=self.draws,
        )
        out = []
        for p, start in zip(pending, starts, strict=True):
            out.append(
                Decision(
                    submit=start + self.margin_s >= p.planned_end,
                    predicted_start=max(start, p.planned_end),
                    reason=(
                        f"lookahead: would start {start - ctx.now} s from now "
                        f"(margin {self.margin_s} s, {len(self.runtimes)} runs known)"
                    ),
                )
            )
        return out
