"""Decision features for learned policies: a pure function of what a live daemon sees.

``features(snapshot, profile, pending, now)`` turns one ``squeue --json`` snapshot (a
:class:`~mirage.slurm.types.QueueSnapshot`, from the real cluster or from the simulator's
``SimSlurmClient.queue()``), the cluster profile and the batch of pending transitions into
one float64 row per transition. The daemon and the training pipeline call this same
function, so a model sees at decision time exactly what it was trained on.

Only fields that ``squeue`` shows are read: state, pending reason, partition, submit,
eligible and start times, time limit, node and GPU counts and the array task string.
Priority values are not used: the simulator's and a real cluster's scales differ. Nothing from
a trace's future (run times, real starts of pending jobs) and no start estimates (their
quality depends on the scheduler's backfill, not on the queue) enter.

Demand is normalised by the capacity of the transition's partition (its node count and
its GPU count, from the profile), so that a model can transfer between clusters of
different sizes; durations are in hours. Jobs of other partitions and finished jobs
(22.05's ``squeue --json`` returns recently finished jobs too) are ignored. A job
submitted to several partitions ("gpu,debug") counts in each of them. The pending
remainder of a job array (one squeue record, ``job_id`` "9_[3-5]") counts once per task,
as the simulator, which has no arrays, shows one job per task.

Feature columns (``FEATURE_NAMES``; "the partition" is the transition's partition, N its
node count, G its GPU count; percentiles use numpy's linear interpolation and are 0 for
an empty set):

Queue (the same for every transition in the same partition):

=====================  =============================================================
``pend_jobs``          pending jobs (array tasks counted one by one) / N
``pend_nodes``         nodes requested by pending jobs / N
``pend_gpus``          GPUs requested by pending jobs / G
``ahead_jobs``         pending jobs that a new submission would queue behind / N: those
                       competing now (eligible time known and <= now, reason neither
                       held nor Dependency/BeginTime); a new job has age 0, so every one
                       of them has at least its age priority
``ahead_nodes``        their nodes / N
``ahead_gpus``         their GPUs / G
``run_jobs``           running jobs (RUNNING, COMPLETING, RESIZING) / N
``run_nodes``          their nodes / N
``run_gpus``           their GPUs / G
``pend_limit_p50_h``   median time limit of pending jobs, hours
``pend_limit_p90_h``   90th percentile of the same
``pend_age_p50_h``     median age of pending jobs, hours: now - eligible time for
                       competing jobs (the age priority counts from it), now - submit
                       for held and blocked ones; never negative
``pend_age_p90_h``     90th percentile of the same
``run_elapsed_p50_h``  median elapsed time of running jobs (now - start), hours
``run_elapsed_p90_h``  90th percentile of the same
``run_left_p50_h``     median remaining time of running jobs by their limit
                       (start + limit - now, never negative), hours
``run_left_p90_h``     90th percentile of the same
=====================  =============================================================

Transition:

=====================  =============================================================
``succ_nodes``         the successor's nodes / N
``succ_gpus``          the successor's GPUs / G
``succ_limit_h``       the successor's time limit, hours
``pred_elapsed_h``     the predecessor's elapsed time (now - start, >= 0), hours
``pred_progress``      elapsed / its time limit, clipped to [0, 1]
``pred_left_h``        the predecessor's remaining time by its limit, hours
``tod_sin``            sin(2 pi x local time of day / 24 h), in the profile's time zone
``tod_cos``            cos of the same
``dow_sin``            sin(2 pi x (local weekday + time of day / 24 h) / 7), Monday = 0
``dow_cos``            cos of the same
=====================  =============================================================

A time limit that is unknown or unlimited counts as the partition's ``max_time_s``, or
:data:`UNLIMITED_S` where the partition has none. A partition without GPUs normalises GPU
counts by 1 (they are 0 there anyway). A partition whose node count the profile does not
know raises :class:`UnknownCapacityError`: without it nothing can be normalised.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from mirage.policy.base import PendingTransition
from mirage.profile.schema import ClusterProfile, Partition, ProfileError
from mirage.sim.limits import is_limit_reason
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob

#: Name and version of this feature set; a trained model records both and refuses a
#: daemon whose features differ. Bump the version on any change of meaning or order.
FEATURE_SET = "queue-v1"
FEATURE_VERSION = 1

QUEUE_FEATURE_NAMES: tuple[str, ...] = (
    "pend_jobs",
    "pend_nodes",
    "pend_gpus",
    "ahead_jobs",
    "ahead_nodes",
    "ahead_gpus",
    "run_jobs",
    "run_nodes",
    "run_gpus",
    "pend_limit_p50_h",
    "pend_limit_p90_h",
    "pend_age_p50_h",
    "pend_age_p90_h",
    "run_elapsed_p50_h",
    "run_elapsed_p90_h",
    "run_left_p50_h",
    "run_left_p90_h",
)
TRANSITION_FEATURE_NAMES: tuple[str, ...] = (
    "succ_nodes",
    "succ_gpus",
    "succ_limit_h",
    "pred_elapsed_h",
    "pred_progress",
    "pred_left_h",
    "tod_sin",
    "tod_cos",
    "dow_sin",
    "dow_cos",
)
FEATURE_NAMES: tuple[str, ...] = QUEUE_FEATURE_NAMES + TRANSITION_FEATURE_NAMES

#: Stand-in for an unlimited time limit in a partition without a maximum (365 days).
UNLIMITED_S = 365 * 86400

HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY

#: States whose jobs wait for resources / hold resources. SUSPENDED, STOPPED and UNKNOWN
#: jobs are ignored, as are finished ones.
PENDING_STATES = frozenset({JobState.PENDING, JobState.REQUEUED})
RUNNING_STATES = frozenset({JobState.RUNNING, JobState.COMPLETING, JobState.RESIZING})


class FeatureError(ValueError):
    """Features cannot be computed from these inputs."""


class UnknownCapacityError(FeatureError):
    """The profile does not know the partition's node count: nothing can be normalised."""


class NonFiniteFeatureError(FeatureError):
    """A feature came out NaN or infinite (a bug or a record no daemon should see)."""


# ------------------------------------------------------------------------------- jobs


_TASK_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def task_count(job: SlurmJob) -> int:
    """How many jobs a squeue record stands for: the tasks of a pending array remainder
    (``array_task_id`` "3-5", "1,4,7-9", "0-99:2%4"), else 1. Unreadable -> 1."""
    tasks = job.array_task_id
    if not tasks or tasks.isdigit():
        return 1
    total = 0
    for item in tasks.split("%")[0].split(","):
        m = _TASK_RANGE.match(item.strip())
        if not m:
            return 1
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            return 1
        total += (hi - lo) // step + 1
    return max(1, total)


def in_partition(job: SlurmJob, partition: str) -> bool:
    """Is the job queued in (or running on) the partition? Pending jobs may name several."""
    if job.partition == partition:
        return True
    return "," in job.partition and partition in job.partition.split(",")


#: Pending reasons of jobs that cannot start whatever the resources (squeue's
#: ``state_reason``); a held job's reason starts with "JobHeld" (User or Admin).
BLOCKED_REASONS = frozenset({"Dependency", "DependencyNeverSatisfied", "BeginTime"})


def is_competing(job: SlurmJob, now: int) -> bool:
    """Does a pending job compete for resources now: eligible (its eligible time known and
    not in the future), not held, not waiting on a dependency?

    A new submission has age 0, so every competing job has at least its age priority.
    Held jobs are recognised by their reason, not by priority 0: the simulator (like a
    Slurm whose age weight is small) truncates a young job's priority to 0 too.
    """
    if job.eligible is None or job.eligible > now:
        return False
    return not (job.reason.startswith("JobHeld") or job.reason in BLOCKED_REASONS)


def is_limit_held(job: SlurmJob) -> bool:
    """Is a pending job held by a QOS or association limit (``QOSMaxJobsPerUserLimit``,
    ``AssocGrpGRES``, ...: Slurm's reasons, also the simulator's with limits in its
    profile) rather than waiting for resources or priority?

    Not a feature column: the shipped models' vectors are fixed, and their training
    simulations had no limits. Such jobs count as competing (``is_competing``), as they
    always did on a real cluster: they start as soon as their user's count drops, ahead of
    a new submission, and the look-ahead's simulation holds them by the same limits.
    """
    return job.state in PENDING_STATES and is_limit_reason(job.reason)


@dataclass(frozen=True)
class _Jobs:
    """The active jobs of one partition as parallel float arrays (one row per record)."""

    count: np.ndarray  # jobs the record stands for (array tasks)
    nodes: np.ndarray  # nodes per job
    gpus: np.ndarray  # GPUs per job
    limit: np.ndarray  # seconds (unlimited / unknown replaced)
    ref: np.ndarray  # pending: eligible or submit time (age reference); running: start
    ahead: np.ndarray  # bool: pending, eligible by now, not held


def _collect(snapshot: QueueSnapshot, part: Partition, now: int) -> tuple[_Jobs, _Jobs]:
    """(pending, running) jobs of the partition."""
    fallback = part.max_time_s if part.max_time_s is not None else UNLIMITED_S
    rows: dict[bool, list[tuple[float, float, float, float, float, bool]]] = {
        True: [],
        False: [],
    }
    for job in snapshot.jobs:
        pending = job.state in PENDING_STATES
        if not (pending or job.state in RUNNING_STATES) or not in_partition(job, part.name):
            continue
        limit = job.time_limit if job.time_limit is not None and job.time_limit > 0 else fallback
        nodes = max(1, job.nodes)
        gpus = max(0, job.gpus)
        if pending:
            ahead = is_competing(job, now)
            ref = job.eligible if ahead else job.submit
            count = task_count(job)
        else:
            ref = job.start
            ahead = False
            count = 1
        when = float(now if ref is None else ref)
        rows[pending].append((float(count), float(nodes), float(gpus), float(limit), when, ahead))
    return _as_jobs(rows[True]), _as_jobs(rows[False])


def _as_jobs(rows: list[tuple[float, float, float, float, float, bool]]) -> _Jobs:
    if not rows:
        empty = np.zeros(0)
        return _Jobs(empty, empty, empty, empty, empty, np.zeros(0, dtype=bool))
    cols = list(zip(*rows, strict=True))
    f = [np.asarray(c, dtype=np.float64) for c in cols[:5]]
    return _Jobs(f[0], f[1], f[2], f[3], f[4], np.asarray(cols[5], dtype=bool))


def _percentiles(values: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """(p50, p90) of ``values`` each repeated ``weights`` times; (0, 0) when empty.

    The same as ``np.percentile(np.repeat(values, weights), [50, 90])`` (linear
    interpolation) without materialising the repetition (an array remainder may stand
    for thousands of tasks).
    """
    if values.size == 0:
        return 0.0, 0.0
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = np.cumsum(weights[order].astype(np.int64))
    total = int(cum[-1])
    out = []
    for q in (0.5, 0.9):
        h = (total - 1) * q
        lo = math.floor(h)
        hi = min(lo + 1, total - 1)
        a = float(v[np.searchsorted(cum, lo, side="right")])
        b = float(v[np.searchsorted(cum, hi, side="right")])
        t = h - lo
        # numpy's lerp: exact at both ends
        out.append(a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t))
    return out[0], out[1]


# ------------------------------------------------------------------------- capacity


def _capacity(profile: ClusterProfile, name: str) -> tuple[Partition, float, float]:
    """(partition, node count, GPU count >= 1) of the named partition."""
    try:
        part = profile.partition(name)
    except ProfileError as exc:
        raise FeatureError(str(exc)) from exc
    if part.nodes is None or part.nodes <= 0:
        raise UnknownCapacityError(
            f"profile {profile.name!r}: partition {name!r} has no node count; features are "
            "normalised by it (set `nodes` in the profile, or calibrate it)"
        )
    gpus = part.total_gpus or 0
    return part, float(part.nodes), float(max(1, gpus))


def queue_features(
    snapshot: QueueSnapshot, profile: ClusterProfile, partition: str, now: int
) -> np.ndarray:
    """The queue columns (``QUEUE_FEATURE_NAMES``) of one partition, float64."""
    part, cap_nodes, cap_gpus = _capacity(profile, partition)
    pend, run = _collect(snapshot, part, now)
    n_pend = pend.count.sum()
    a = pend.ahead
    ages = np.maximum(0.0, now - pend.ref) / HOUR
    elapsed = np.maximum(0.0, now - run.ref) / HOUR
    left = np.maximum(0.0, run.ref + run.limit - now) / HOUR
    ones = np.ones_like(run.count)
    out = [
        n_pend / cap_nodes,
        (pend.count * pend.nodes).sum() / cap_nodes,
        (pend.count * pend.gpus).sum() / cap_gpus,
        pend.count[a].sum() / cap_nodes,
        (pend.count * pend.nodes)[a].sum() / cap_nodes,
        (pend.count * pend.gpus)[a].sum() / cap_gpus,
        run.count.sum() / cap_nodes,
        run.nodes.sum() / cap_nodes,
        run.gpus.sum() / cap_gpus,
        *_percentiles(pend.limit / HOUR, pend.count),
        *_percentiles(ages, pend.count),
        *_percentiles(elapsed, ones),
        *_percentiles(left, ones),
    ]
    return np.asarray(out, dtype=np.float64)


# ------------------------------------------------------------------------------ time


@lru_cache(maxsize=32)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise FeatureError(f"unknown IANA time zone {name!r}") from exc


def time_features(now: int, tz: str) -> tuple[float, float, float, float]:
    """(tod_sin, tod_cos, dow_sin, dow_cos) of epoch ``now`` in zone ``tz``."""
    local = datetime.fromtimestamp(now, _zone(tz))
    of_day = local.hour * 3600 + local.minute * 60 + local.second
    tod = 2.0 * math.pi * of_day / DAY
    dow = 2.0 * math.pi * (local.weekday() * DAY + of_day) / WEEK
    return math.sin(tod), math.cos(tod), math.sin(dow), math.cos(dow)


# ---------------------------------------------------------------------------- public


def features(
    snapshot: QueueSnapshot,
    profile: ClusterProfile,
    pending: Sequence[PendingTransition],
    now: int,
    *,
    tz: str | None = None,
    queue_rows: Mapping[str, np.ndarray] | None = None,
) -> np.ndarray:
    """One row of ``FEATURE_NAMES`` per pending transition: float64 (len(pending), n).

    The queue part is computed once per partition named by the transitions; the
    transition part is vectorised. ``tz`` overrides the profile's time zone.
    ``queue_rows`` gives the queue part per partition when it was already computed from
    this snapshot by :func:`queue_features` (the evaluation harness records it from the
    simulator at every decision step instead of keeping whole snapshots).
    Raises :class:`UnknownCapacityError` when a partition's node count is unknown,
    :class:`FeatureError` for an unknown partition or time zone, and
    :class:`NonFiniteFeatureError` if any value is NaN or infinite.
    """
    n = len(pending)
    out = np.empty((n, len(FEATURE_NAMES)), dtype=np.float64)
    if n == 0:
        return out
    nq = len(QUEUE_FEATURE_NAMES)
    parts = sorted({p.partition for p in pending})
    cap_nodes = np.empty(len(parts))
    cap_gpus = np.empty(len(parts))
    for k, name in enumerate(parts):
        _, cap_nodes[k], cap_gpus[k] = _capacity(profile, name)
    queue = np.stack(
        [
            queue_rows[name]
            if queue_rows is not None and name in queue_rows
            # computed here when not given
            else queue_features(snapshot, profile, name, now)
            for name in parts
        ]
    )
    idx = np.fromiter((parts.index(p.partition) for p in pending), dtype=np.int64, count=n)
    out[:, :nq] = queue[idx]

    def col(attr: str) -> np.ndarray:
        return np.fromiter((getattr(p, attr) for p in pending), dtype=np.float64, count=n)

    pred_start, pred_limit = col("pred_start"), col("pred_time_limit")
    elapsed = np.maximum(0.0, now - pred_start)
    left = np.maximum(0.0, pred_start + pred_limit - now)
    progress = np.clip(elapsed / np.maximum(1.0, pred_limit), 0.0, 1.0)
    out[:, nq + 0] = col("succ_nodes") / cap_nodes[idx]
    out[:, nq + 1] = col("succ_gpus") / cap_gpus[idx]
    out[:, nq + 2] = col("succ_time_limit") / HOUR
    out[:, nq + 3] = elapsed / HOUR
    out[:, nq + 4] = progress
    out[:, nq + 5] = left / HOUR
    out[:, nq + 6 :] = time_features(now, tz if tz is not None else profile.timezone)
    check_finite(out)
    return out


def check_finite(matrix: np.ndarray) -> None:
    """Raise :class:`NonFiniteFeatureError` naming the columns with NaN or inf values."""
    bad = ~np.isfinite(matrix)
    if bad.any():
        cols = sorted({FEATURE_NAMES[c] for c in np.nonzero(bad)[1].tolist()})
        rows = sorted(set(np.nonzero(bad)[0].tolist()))
        raise NonFiniteFeatureError(
            f"non-finite feature value(s) in {', '.join(cols)} (rows {rows[:10]})"
        )
