"""How far to trust the simulator on a cluster: replay its own accounting and compare.

``mirage sim validate`` (:mod:`mirage.sim.cli`) reads a window of a cluster's accounting
(a ``sacct`` export or the live ``sacct`` through a :class:`~mirage.slurm.client.SlurmClient`),
replays it through the engine with the cluster's profile, and reports how well the simulated
start times and waits agree with the real ones. Everything here is a pure function of its
inputs: records and a profile in, a :class:`Report` out.

Readers (:func:`read_sacct`): ``sacct --json`` (any shape :func:`parse_sacct_json` reads),
and ``sacct -P`` / ``-p`` text with a header line (the ``--format`` field names), or without
one (``--noheader``) in the fidelity recordings' field list (:data:`FIDELITY_FIELDS`). Job
steps and rows that cannot be read are skipped and counted by reason.

The replay (:func:`replay`) starts from the real state at the window's start ``t0``:

- a job running at ``t0`` (started before it, not ended by it) is *seeded running*: submitted
  at ``t0`` ahead of every other job, it holds its nodes until its real end (with what is
  left of its time limit, which backfill plans with); one the profile cannot place at ``t0``
  next to the others is taken out and counted (*not placed*);
- a job pending at ``t0`` (submitted before it, started at or after it) is *seeded pending*:
  submitted at ``t0``, its priority age counted from its real eligible time;
- later jobs are submitted at their real submit time, until the window's end.

Every job runs for its real run time (end - start: early ends and cancellations included),
killed at its time limit as the profile's scheduler kills (TIMEOUT jobs ran past their limit
only by Slurm's check delay). A job eligible after its submit (held, waiting on a dependency,
``--begin``) becomes eligible at its real eligible time: sacct shows no dependency field, so
its real eligibility stands in for the parent's end. A job cancelled before it started is
cancelled at its real end time in the replay too (pending or, if the simulation started it,
running). A job still held when the accounting was read stays held. A job still running or
pending then runs for its time limit (its real run time is unknown).

Compared: every job of the window (seeded pending ones included) that started in reality:
start error = simulated start - real start (seconds; positive: the simulator is late), its
quantiles and the share within 35 s / 5 min / 1 h; waits (start - real submit) real against
simulated: means and the Kolmogorov-Smirnov distance (a job the simulation never started
counts as an infinite wait, and as outside every tolerance). Overall, per partition, per
node-count bucket and per GPU-count bucket.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from mirage.profile.schema import ClusterProfile, Partition
from mirage.sim.engine import Simulation
from mirage.sim.prepare import ks_distance
from mirage.sim.suite import SACCT_FIELDS
from mirage.sim.workload import INFINITE, JobSpec
from mirage.slurm.parse import map_state, parse_sacct_json
from mirage.slurm.syntax import (
    SlurmSyntaxError,
    digits,
    parse_limit,
    parse_slurm_time,
    parse_tres,
    tres_count,
    tres_gpus,
)
from mirage.slurm.types import SlurmError, SlurmJob

#: ``sacct -X -P --noheader -a --format=...`` of the recorded fidelity runs
#: (tests/data/fidelity/<workload>/run-*/sacct.txt): a header-less file with exactly these
#: fields is read as this list.
FIDELITY_FIELDS = SACCT_FIELDS
#: Fields a text export must have (case-insensitive).
REQUIRED_FIELDS = ("JobID", "Submit", "Start", "End")
#: Start-error tolerances reported (seconds): the fidelity pass mark, 5 minutes, 1 hour.
TOLERANCES_S = (35, 300, 3600)
#: Quantiles of the signed start error.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Job size buckets: (label, lowest, highest) node counts and GPU counts (whole job).
NODE_BUCKETS = (
    ("1", 1, 1),
    ("2", 2, 2),
    ("3-4", 3, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-64", 17, 64),
    ("65+", 65, 1 << 62),
)
GPU_BUCKETS = (("0", 0, 0), *NODE_BUCKETS)


class ValidateError(ValueError):
    """Input that cannot be validated against (a malformed file, an empty window)."""


# ---- reading accounting --------------------------------------------------------------------


@dataclass
class Accounting:
    """Job records read from one source, and the rows left out (reason -> count)."""

    jobs: list[SlurmJob]
    source: str
    format: str  # "sacct-json", "sacct-text", "sacct-text (fidelity fields)", "slurm"
    skipped: dict[str, int] = field(default_factory=dict)


def read_sacct(path: str | Path, tz: str = "UTC") -> Accounting:
    """A ``sacct --json`` or ``sacct -P`` export; text times are read in zone ``tz``."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValidateError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidateError(f"{path}: not a sacct export (not UTF-8 text)") from exc
    if text.lstrip().startswith(("{", "[")):
        return parse_sacct_json_text(text, str(path))
    return parse_sacct_text(text, str(path), tz)


def parse_sacct_json_text(text: str, source: str = "<sacct --json>") -> Accounting:
    try:
        jobs = parse_sacct_json(text)
    except SlurmError as exc:
        raise ValidateError(f"{source}: {exc}") from exc
    return Accounting(jobs, source, "sacct-json")


def parse_sacct_text(text: str, source: str = "<sacct -P>", tz: str = "UTC") -> Accounting:
    """``sacct -P`` (or ``-p``: a trailing ``|``) text: a header line of field names, or
    none and exactly :data:`FIDELITY_FIELDS` (or all of them but the last, NodeList, as
    the suite's older recordings have). Times are local times of zone ``tz``."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidateError(f"unknown time zone {tz!r}") from exc
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ValidateError(f"{source}: empty file")
    first = _fields(lines[0][1])
    names = [f.strip().lower() for f in first]
    fmt = "sacct-text"
    if "jobid" in names:
        lines = lines[1:]
    elif len(first) in (len(FIDELITY_FIELDS), len(FIDELITY_FIELDS) - 1):
        # the suite's recordings: with NodeList last, or (before 2026-11-28) without it
        names = [f.lower() for f in FIDELITY_FIELDS[: len(first)]]
        fmt = "sacct-text (fidelity fields)"
    else:
        raise ValidateError(
            f"{source}: not a sacct -P export: line {lines[0][0]} is no header naming JobID, "
            f"and has {len(first)} fields, not the {len(FIDELITY_FIELDS)} of "
            f"--format={','.join(FIDELITY_FIELDS)}"
        )
    missing = [f for f in REQUIRED_FIELDS if f.lower() not in names]
    if missing:
        raise ValidateError(f"{source}: the header lacks {', '.join(missing)}")
    col = {name: k for k, name in reversed(list(enumerate(names)))}
    jobs: list[SlurmJob] = []
    skipped: Counter[str] = Counter()
    for _, line in lines:
        values = _fields(line)
        if len(values) == len(names) + 1 and values[-1] == "":
            values = values[:-1]  # sacct -p ends every line with "|"
        if len(values) != len(names):
            skipped["wrong number of fields"] += 1
            continue
        row = {name: values[k].strip() for name, k in col.items()}
        if "." in row["jobid"]:
            skipped["job step"] += 1
            continue
        try:
            jobs.append(_text_job(row, zone))
        except ValueError as exc:
            skipped[str(exc)] += 1
    return Accounting(jobs, source, fmt, dict(skipped))


def _fields(line: str) -> list[str]:
    return line.rstrip("\r\n").split("|")


def _time(value: str, zone: ZoneInfo) -> int | None:
    try:
        return parse_slurm_time(value, zone)
    except SlurmSyntaxError:
        raise ValueError("unreadable time") from None


def _limit(row: Mapping[str, str]) -> int | None:
    """TimelimitRaw (minutes) where exported, else Timelimit."""
    raw = row.get("timelimitraw", "")
    try:
        return parse_limit(raw or row.get("timelimit", ""))
    except SlurmSyntaxError:
        raise ValueError("unreadable time limit") from None


def _text_job(row: Mapping[str, str], zone: ZoneInfo) -> SlurmJob:
    alloc = parse_tres(row.get("alloctres", ""))
    req = parse_tres(row.get("reqtres", ""))
    nnodes = row.get("nnodes", "")
    nodes = int(nnodes) if digits(nnodes) else None
    if nodes is None or nodes == 0:
        nodes = tres_count(alloc, "node") or tres_count(req, "node") or 0
    gpus = tres_gpus(alloc)
    if gpus is None:
        gpus = tres_gpus(req) or 0
    cpus = tres_count(alloc, "cpu") or tres_count(req, "cpu")
    if cpus is None:
        for key in ("alloccpus", "ncpus", "reqcpus"):
            if digits(row.get(key, "")):
                cpus = int(row[key])
                break
    state, raw = map_state(row.get("state", ""))
    job_id = row["jobid"]
    if not job_id:
        raise ValueError("no job id")
    submit = _time(row["submit"], zone)
    if submit is None:
        raise ValueError("no submit time")
    return SlurmJob(
        job_id=job_id,
        name=row.get("jobname", ""),
        user=row.get("user", ""),
        account=row.get("account", ""),
        partition=row.get("partition", ""),
        state=state,
        reason=row.get("reason", ""),
        submit=submit,
        eligible=_time(row.get("eligible", ""), zone),
        start=_time(row["start"], zone),
        end=_time(row["end"], zone),
        time_limit=_limit(row),
        nodes=nodes,
        cpus=cpus or 0,
        gpus=gpus,
        priority=None,
        dependency=row.get("dependency", ""),
        comment=row.get("comment", ""),
        raw_state=raw,
    )


def from_client_jobs(jobs: Iterable[SlurmJob], source: str) -> Accounting:
    return Accounting(list(jobs), source, "slurm")


# ---- the replay ----------------------------------------------------------------------------


class _ReplaySimulation(Simulation):
    """The engine, with the age of seeded pending jobs counted from their real eligible time
    (before the window's start, where the simulation cannot submit them)."""

    backdate: dict[int, int]

    def _refresh_eligible(self, i: int) -> None:
        super()._refresh_eligible(i)
        when = self.backdate.get(i)
        current = self.eligible_at[i]
        if when is not None and current is not None and when < current:
            self.eligible_at[i] = when


@dataclass(frozen=True)
class Outcome:
    """One compared job: real times and the simulated start (None: never started)."""

    job_id: str
    partition: str
    nodes: int
    gpus: int
    submit: int
    real_start: int
    sim_start: int | None
    seeded: bool  # pending at the window's start

    @property
    def error(self) -> float:
        """Simulated start - real start (s); +inf when the simulation never started it."""
        return math.inf if self.sim_start is None else float(self.sim_start - self.real_start)

    @property
    def real_wait(self) -> int:
        return max(0, self.real_start - self.submit)

    @property
    def sim_wait(self) -> float:
        return math.inf if self.sim_start is None else float(max(0, self.sim_start - self.submit))


@dataclass
class Replay:
    """What the replay did, and the compared jobs."""

    start: int  # the window, epoch s (UTC)
    end: int
    outcomes: list[Outcome]
    replayed: int  # jobs given to the simulation (seeds included)
    seeded_running: int
    seeded_running_unplaced: int  # seeded running jobs the profile could not place at start
    seeded_pending: int
    cancelled_pending: int  # jobs cancelled before they started, cancelled in the replay too
    not_started_real: int  # replayed jobs that never started in reality (not compared)
    left_out: dict[str, int]  # jobs not replayed, by reason
    wall_s: float


def _partition_of(job: SlurmJob, profile: ClusterProfile) -> Partition | None:
    """The profile's partition the job ran in (the first of a pending job's list it has;
    the default one when the record names none)."""
    if not job.partition:
        return profile.partition()
    by_name = {p.name: p for p in profile.partitions}
    for name in job.partition.split(","):
        if name in by_name:
            return by_name[name]
    return None


def _nodes(job: SlurmJob, part: Partition) -> int:
    """The job's node count; for one accounted without (never started: sacct --json shows
    no allocation), the fewest nodes its GPUs fit on."""
    if job.nodes > 0:
        return job.nodes
    if part.gpus_per_node > 0 and job.gpus > 0:
        return -(-job.gpus // part.gpus_per_node)
    return 1


def _whole_nodes(job: SlurmJob, part: Partition) -> bool:
    """Does the job take whole nodes: it names no GPUs or CPUs (a node-count-only record),
    or holds every CPU of its nodes (``--exclusive``: sacct's AllocTRES has them all)?"""
    if job.gpus <= 0 and job.cpus <= 0:
        return True
    return job.nodes > 0 and job.cpus >= job.nodes * part.cpus_per_node


def _spec(
    job: SlurmJob, part: Partition, submit: int, run: int, limit: int | None, **extra: Any
) -> JobSpec:
    return JobSpec(
        submit=submit,
        run=max(0, run),
        time_limit=None if limit is None else max(1, limit),
        nodes=_nodes(job, part),
        partition=part.name,
        gpus=max(0, job.gpus),
        cpus=max(0, job.cpus),
        exclusive=_whole_nodes(job, part),
        user=job.user,
        name=job.name,
        trace_id=job.job_id,
        real_submit=job.submit,
        real_start=job.start,
        **extra,
    )


def _run_time(job: SlurmJob) -> int:
    """The real run time; the time limit for a job still running or never started."""
    if job.start is not None and job.end is not None:
        return job.end - job.start
    return INFINITE if job.time_limit is None else job.time_limit


def _usable(
    jobs: Iterable[SlurmJob], profile: ClusterProfile, left: Counter[str]
) -> list[tuple[SlurmJob, Partition]]:
    """Jobs with a submit time, each with the profile's partition it ran in."""
    usable: list[tuple[SlurmJob, Partition]] = []
    for job in jobs:
        if job.submit is None:
            left["no submit time"] += 1
            continue
        part = _partition_of(job, profile)
        if part is None:
            left["partition not in the profile"] += 1
            continue
        usable.append((job, part))
    return usable


def _split(
    usable: list[tuple[SlurmJob, Partition]], t0: int, t1: int, left: Counter[str]
) -> tuple[list[tuple[SlurmJob, Partition]], list[tuple[SlurmJob, Partition]]]:
    """(running at t0, pending at t0 or submitted in the window); the rest is counted."""
    running: list[tuple[SlurmJob, Partition]] = []
    waiting: list[tuple[SlurmJob, Partition]] = []
    for job, part in usable:
        if job.end is not None and job.end <= t0 and (job.start is None or job.start < t0):
            left["ended before the window"] += 1
        elif (job.submit or 0) > t1:
            left["submitted after the window"] += 1
        elif job.start is not None and job.start < t0:
            running.append((job, part))
        else:
            waiting.append((job, part))
    return running, waiting


def _seed_running(
    sim: Simulation, running: list[tuple[SlurmJob, Partition]], t0: int
) -> tuple[int, int, int]:
    """Start the jobs running at t0, alone: (seeded, not placed, refused)."""
    specs = []
    for job, part in running:
        assert job.start is not None
        limit = None if job.time_limit is None else job.start + job.time_limit - t0
        # still running when the accounting was read: until its limit
        unknown = INFINITE if limit is None else limit
        left_s = unknown if job.end is None else job.end - t0
        specs.append(_spec(job, part, t0, max(1, left_s), limit))
    ids = [i for i in sim.add_jobs_skipping_invalid(specs) if i]
    sim.run_until(t0)
    unplaced = [i for i in ids if sim.start[int(i) - sim.first_id] is None]
    for i in unplaced:
        sim.cancel(i)
    refused = sum(sim.skipped.values())
    sim.skipped.clear()
    return len(ids), len(unplaced), refused


@dataclass
class _Waiting:
    specs: list[JobSpec] = field(default_factory=list)
    backdate: dict[int, int] = field(default_factory=dict)  # position -> real eligible
    cancels: list[tuple[int, int]] = field(default_factory=list)  # (real end, position)
    seeded: int = 0


def _waiting_specs(waiting: list[tuple[SlurmJob, Partition]], t0: int) -> _Waiting:
    out = _Waiting()
    for job, part in sorted(waiting, key=lambda x: (x[0].submit or 0, x[0].job_id)):
        sub = job.submit or 0
        eligible = job.eligible if job.eligible is not None else sub
        extra: dict[str, Any] = {}
        if sub < t0:
            out.seeded += 1
            if eligible < t0:
                out.backdate[len(out.specs)] = eligible
        if eligible > max(sub, t0):
            extra["begin"] = eligible
        if job.start is None and job.end is None and job.reason.startswith("JobHeld"):
            extra["hold"] = True
        if job.start is None and job.end is not None:
            out.cancels.append((job.end, len(out.specs)))
        out.specs.append(_spec(job, part, max(sub, t0), _run_time(job), job.time_limit, **extra))
    return out


def _outcomes(
    sim: Simulation, specs: Sequence[JobSpec], ids: Sequence[str], t0: int
) -> tuple[list[Outcome], int]:
    """The compared jobs, and how many replayed jobs never started in reality."""
    outcomes: list[Outcome] = []
    not_started = 0
    for spec, sid in zip(specs, ids, strict=True):
        if not sid:
            continue
        if spec.real_start is None:
            not_started += 1
            continue
        real_submit = spec.real_submit if spec.real_submit is not None else spec.submit
        outcomes.append(
            Outcome(
                job_id=spec.trace_id,
                partition=spec.partition,
                nodes=spec.nodes,
                gpus=spec.gpus,
                submit=real_submit,
                real_start=spec.real_start,
                sim_start=sim.start[int(sid) - sim.first_id],
                seeded=real_submit < t0,
            )
        )
    return outcomes, not_started


def replay(
    jobs: Iterable[SlurmJob],
    profile: ClusterProfile,
    start: int | None = None,
    end: int | None = None,
) -> Replay:
    """Replay the jobs active in ``[start, end]`` (default: first to last submit) from the
    real state at ``start`` (see the module docstring). Raises ``ValidateError`` when no job
    of the window can be compared."""
    t_wall = time.perf_counter()
    unsized = [p.name for p in profile.partitions if p.nodes is None]
    if unsized:
        raise ValidateError(f"profile {profile.name!r}: partition {unsized[0]!r} has no node count")
    left: Counter[str] = Counter()
    usable = _usable(jobs, profile, left)
    if not usable:
        raise ValidateError(
            f"no job with a submit time in a partition of the profile (left out: {_reasons(left)})"
        )
    t0 = start if start is not None else min(j.submit or 0 for j, _ in usable)
    t1 = end if end is not None else max(j.submit or 0 for j, _ in usable)
    if t1 < t0:
        raise ValidateError("the window ends before it starts")
    running, waiting = _split(usable, t0, t1, left)
    if not any(job.start is not None for job, _ in waiting):
        raise ValidateError(
            f"empty window {iso(t0)} .. {iso(t1)}: no job submitted in it (or pending at its "
            "start) that started"
        )
    sim = _ReplaySimulation(profile, start_time=t0, track_estimates=False)
    sim.backdate = {}
    seeded, unplaced, refused = _seed_running(sim, running, t0)
    if refused:
        left["running at the start, refused by the profile"] += refused
    w = _waiting_specs(waiting, t0)
    ids = sim.add_jobs_skipping_invalid(w.specs)
    sim.backdate = {int(ids[k]) - sim.first_id: t for k, t in w.backdate.items() if ids[k]}
    for reason, n in sim.skipped.items():
        left[f"refused by the profile: {reason}"] += n
    cancelled = 0
    for when, k in sorted(w.cancels):
        if ids[k]:
            sim.run_until(max(when, sim.now))
            sim.cancel(ids[k])
            cancelled += 1
    sim.run()
    outcomes, not_started = _outcomes(sim, w.specs, ids, t0)
    if not outcomes:
        raise ValidateError(
            f"empty window {iso(t0)} .. {iso(t1)}: no job that started could be replayed "
            f"(left out: {_reasons(left)})"
        )
    return Replay(
        start=t0,
        end=t1,
        outcomes=outcomes,
        replayed=seeded + sum(1 for i in ids if i),
        seeded_running=seeded,
        seeded_running_unplaced=unplaced,
        seeded_pending=w.seeded,
        cancelled_pending=cancelled,
        not_started_real=not_started,
        left_out=dict(left),
        wall_s=time.perf_counter() - t_wall,
    )


# ---- the report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupStats:
    """Agreement over one group of compared jobs."""

    group: str  # "all", "partition", "nodes", "gpus"
    label: str
    jobs: int
    sim_unstarted: int  # started in reality, never in the simulation
    error_quantiles_s: dict[str, float]  # "p5" .. "p95" of simulated - real start
    mean_abs_error_s: float  # over the jobs started in both
    within: dict[str, float]  # "35s", "5min", "1h" -> share of jobs (unstarted: outside)
    ks: float  # real waits against simulated waits
    real_mean_wait_s: float
    sim_mean_wait_s: float  # over the jobs the simulation started

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "label": self.label,
            "jobs": self.jobs,
            "sim_unstarted": self.sim_unstarted,
            "start_error_s": {k: _finite(v) for k, v in self.error_quantiles_s.items()},
            "mean_abs_start_error_s": _finite(self.mean_abs_error_s),
            "within": dict(self.within),
            "wait_ks": self.ks,
            "mean_wait_s": {
                "real": _finite(self.real_mean_wait_s),
                "simulated": _finite(self.sim_mean_wait_s),
            },
        }


def _finite(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else x


def _tol_label(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}min"
    return f"{seconds}s"


def group_stats(
    group: str, label: str, outcomes: Sequence[Outcome], ks_floor_s: int = 0
) -> GroupStats:
    """The group's agreement; waits under ``ks_floor_s`` count as zero in the KS distance
    (as ``mirage calibrate`` counts waits under a minute: a 1 s difference between two
    near-immediate starts is then no difference)."""
    err = np.array([o.error for o in outcomes], dtype=float)
    started = np.isfinite(err)
    real_w = np.array([o.real_wait for o in outcomes], dtype=float)
    sim_w = np.array([o.sim_wait for o in outcomes], dtype=float)
    fin = err[started]
    quant = {
        f"p{round(q * 100)}": float(np.quantile(err, q, method="lower")) if err.size else math.nan
        for q in QUANTILES
    }
    n = len(outcomes)
    within = {
        _tol_label(t): float(np.sum(np.abs(fin) <= t)) / n if n else math.nan for t in TOLERANCES_S
    }
    return GroupStats(
        group=group,
        label=label,
        jobs=n,
        sim_unstarted=int(n - started.sum()),
        error_quantiles_s=quant,
        mean_abs_error_s=float(np.mean(np.abs(fin))) if fin.size else math.nan,
        within=within,
        ks=ks_distance(_floored(real_w, ks_floor_s), _floored(sim_w, ks_floor_s)),
        real_mean_wait_s=float(np.mean(real_w)) if n else math.nan,
        sim_mean_wait_s=float(np.mean(sim_w[started])) if started.any() else math.nan,
    )


def _floored(waits: np.ndarray, floor_s: int) -> np.ndarray:
    return np.where(waits < floor_s, 0.0, waits) if floor_s > 0 else waits


def _bucket(value: int, buckets: Sequence[tuple[str, int, int]]) -> str:
    for label, lo, hi in buckets:
        if lo <= value <= hi:
            return label
    return "?"


@dataclass
class Report:
    replay: Replay
    profile: str
    source: str
    rows: list[GroupStats]
    read_skipped: dict[str, int] = field(default_factory=dict)
    read: int = 0
    ks_floor_s: int = 0

    @property
    def overall(self) -> GroupStats:
        return self.rows[0]

    def as_dict(self) -> dict[str, Any]:
        r = self.replay
        return {
            "source": self.source,
            "profile": self.profile,
            "window": {
                "start": r.start,
                "end": r.end,
                "start_utc": iso(r.start),
                "end_utc": iso(r.end),
            },
            "records_read": self.read,
            "rows_skipped": dict(self.read_skipped),
            "jobs_left_out": dict(r.left_out),
            "replayed": r.replayed,
            "seeded": {
                "running": r.seeded_running,
                "running_not_placed": r.seeded_running_unplaced,
                "pending": r.seeded_pending,
            },
            "cancelled_before_start": r.cancelled_pending,
            "never_started_real": r.not_started_real,
            "compared": len(r.outcomes),
            "wall_s": r.wall_s,
            "ks_floor_s": self.ks_floor_s,
            "rows": [g.as_dict() for g in self.rows],
            "jobs": [
                {
                    "job_id": o.job_id,
                    "partition": o.partition,
                    "nodes": o.nodes,
                    "gpus": o.gpus,
                    "submit": o.submit,
                    "real_start": o.real_start,
                    "sim_start": o.sim_start,
                    "seeded_pending": o.seeded,
                }
                for o in r.outcomes
            ],
        }


def build_report(
    rep: Replay,
    profile: str,
    source: str,
    accounting: Accounting | None = None,
    ks_floor_s: int = 0,
) -> Report:
    """Overall, per partition, per node-count and per GPU-count bucket."""
    rows = [group_stats("all", "all", rep.outcomes, ks_floor_s)]
    groupings: list[tuple[str, Any, list[str]]] = [
        ("partition", lambda o: o.partition, sorted({o.partition for o in rep.outcomes})),
        ("nodes", lambda o: _bucket(o.nodes, NODE_BUCKETS), [b[0] for b in NODE_BUCKETS]),
        ("gpus", lambda o: _bucket(o.gpus, GPU_BUCKETS), [b[0] for b in GPU_BUCKETS]),
    ]
    for group, key, labels in groupings:
        by: dict[str, list[Outcome]] = {}
        for o in rep.outcomes:
            by.setdefault(key(o), []).append(o)
        rows.extend(
            group_stats(group, label, by[label], ks_floor_s) for label in labels if label in by
        )
    return Report(
        replay=rep,
        profile=profile,
        source=source,
        rows=rows,
        read_skipped=dict(accounting.skipped) if accounting else {},
        read=len(accounting.jobs) if accounting else 0,
        ks_floor_s=ks_floor_s,
    )


def validate(
    accounting: Accounting,
    profile: ClusterProfile,
    start: int | None = None,
    end: int | None = None,
    ks_floor_s: int = 0,
) -> Report:
    """Records + profile -> replay -> report."""
    rep = replay(accounting.jobs, profile, start, end)
    return build_report(rep, profile.name, accounting.source, accounting, ks_floor_s)


# ---- rendering -----------------------------------------------------------------------------


def iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _reasons(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda x: -x[1])) or "none"


def dur(seconds: float | None, signed: bool = False) -> str:
    """Seconds for a table cell: 12s, 4.5m, 2.3h, 1.2d; "-" for unknown, "inf"."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if math.isinf(seconds):
        return "+inf" if seconds > 0 else "-inf"
    sign = ("+" if seconds > 0 else "-" if seconds < 0 else "") if signed else ""
    a = abs(seconds)
    if a < 120:
        text = f"{a:.0f}s"
    elif a < 7200:
        text = f"{a / 60:.1f}m"
    elif a < 4 * 86400:
        text = f"{a / 3600:.1f}h"
    else:
        text = f"{a / 86400:.1f}d"
    return sign + text


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.0f}%"


def table_lines(rows: Sequence[GroupStats]) -> list[str]:
    head = ["group", "jobs", "no sim"]
    head += [f"err {k}" for k in (f"p{round(q * 100)}" for q in QUANTILES)]
    head += [f"<={_tol_label(t)}" for t in TOLERANCES_S]
    head += ["wait KS", "wait real", "wait sim"]
    body = []
    for g in rows:
        label = "all" if g.group == "all" else f"{g.group}={g.label}"
        cells = [label, str(g.jobs), str(g.sim_unstarted)]
        cells += [dur(v, signed=True) for v in g.error_quantiles_s.values()]
        cells += [_pct(v) for v in g.within.values()]
        cells += [f"{g.ks:.3f}", dur(g.real_mean_wait_s), dur(g.sim_mean_wait_s)]
        body.append(cells)
    widths = [max(len(r[k]) for r in [head, *body]) for k in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if k == 0 else c.rjust(w)
            for k, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(head), rule, *(line(c) for c in body)]


def render_text(report: Report) -> str:
    r = report.replay
    lines = [
        f"Validation of profile {report.profile!r} against {report.source}",
        f"window: {iso(r.start)} .. {iso(r.end)} ({dur(float(r.end - r.start))})",
    ]
    if report.read:
        lines.append(f"records read: {report.read}; rows skipped: {_reasons(report.read_skipped)}")
    lines += [
        f"seeded from the real state at the window's start: {r.seeded_running} running "
        f"({r.seeded_running_unplaced} not placed by the profile), {r.seeded_pending} pending",
        f"replayed: {r.replayed} jobs ({r.cancelled_pending} cancelled before they started, "
        f"cancelled at their real end); left out: {_reasons(r.left_out)}",
        f"compared: {len(r.outcomes)} jobs that started in reality "
        f"({r.not_started_real} replayed jobs never started in reality)",
        "",
        "start error = simulated start - real start (+: the simulator is late); waits from "
        "real submit; 'no sim': never started in the simulation (outside every tolerance, "
        "an infinite wait in the KS distance)"
        + (f"; KS counts waits under {report.ks_floor_s} s as zero" if report.ks_floor_s else ""),
        *table_lines(report.rows),
        "",
        f"overall mean wait: real {dur(report.overall.real_mean_wait_s)}, "
        f"simulated {dur(report.overall.sim_mean_wait_s)}; replay {r.wall_s:.2f} s",
    ]
    return "\n".join(lines) + "\n"


def plot_cdf(report: Report, path: str | Path) -> None:
    """The CDF of simulated - real start, overall and per partition, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: list[tuple[str, list[Outcome]]] = [("all", report.replay.outcomes)]
    parts = sorted({o.partition for o in report.replay.outcomes})
    if len(parts) > 1:
        groups += [(p, [o for o in report.replay.outcomes if o.partition == p]) for p in parts]
    for label, outs in groups:
        err = np.sort(np.array([o.error for o in outs], dtype=float))
        y = np.arange(1, err.size + 1) / err.size
        fin = np.isfinite(err)
        ax.step(err[fin], y[fin], where="post", label=f"{label} ({err.size} jobs)")
    for t in TOLERANCES_S[:1]:
        ax.axvspan(-t, t, color="green", alpha=0.1, label=f"within {t} s")
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("simulated start - real start (s)")
    ax.set_ylabel("share of jobs")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(f"Start error, profile {report.profile!r}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = [
    "FIDELITY_FIELDS",
    "Accounting",
    "GroupStats",
    "Outcome",
    "Replay",
    "Report",
    "ValidateError",
    "build_report",
    "parse_sacct_json_text",
    "parse_sacct_text",
    "plot_cdf",
    "read_sacct",
    "render_text",
    "replay",
    "validate",
]
