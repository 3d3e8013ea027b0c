"""Plan evaluation: a chain's completion under every shape of a fixed grid, under the
planner's choice and under the habit, each from a fork of one replay.

A sample is a trace chain at one of its decision points (:mod:`.chainwork`): at ``t`` a
segment has just ended and ``W`` seconds of run are left on its request of ``g`` GPUs.

- **The grid** (:func:`grid`): segment limits of 6, 12, 24 and 48 hours and the
  partition's maximum (those above it left out), times the sizes 1, 2 and 4 in the unit
  of the trace's requests (a GPU; a whole node on a trace that records only nodes, such
  as ls6's), plus the **habitual shape**: the chain's own request at the partition's
  maximum limit. Work scales linearly: ``W x g / g'`` on ``g'`` GPUs. On a partition
  without GPUs (CERIT's) the unit is a CPU and the sizes are the chain's own CPU count
  times 1/4, 1/2, 1, 2 and 4 (the whole numbers among them): CPU requests range from 1
  to 80 per node, so one fixed list would be far from most chains' own size.
- **The truth per shape** (:func:`run_fixed`): the replay is forked at ``t`` (every later
  arrival and every job's true run time in it) and the chain's work is submitted as
  segments of that shape, each segment submitted when the one before it ends (reactive
  resubmission, the same for every shape: the comparison isolates the shape, not the
  submission timing, which is :mod:`mirage.policy`'s and is evaluated by
  ``mirage evaluate``). Each segment runs ``min(limit, left + overhead)``: the restart
  overhead is lost at every segment's start. The chain's completion is its last
  segment's end; one not done by ``t + horizon`` is *censored* and counts as the
  horizon (a lower bound).
- **The planned shape** (:func:`run_planned`): the same, but before every segment
  :func:`mirage.plan.plan_chain` is asked on what a live planner would see then: the
  simulator's ``squeue`` (:class:`~mirage.sim.backend.SimSlurmClient`), requested
  limits, and run times predicted from the jobs finished so far (the look-ahead's
  :class:`~mirage.policy.lookahead.RunTimes`, fed as the daemon's are). Its
  recommendation is the next segment's shape (re-planning between segments; with
  ``replan=False`` the first one is kept).
- **The best shape in hindsight**: the grid shape whose true completion is earliest.

The chain's own later segments stay in the replay as other jobs (one job among
thousands; removing them would need the trace row behind each replayed job).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from mirage.evaluate.chainwork import ChainPoint
from mirage.evaluate.lookahead import FinishedRuns
from mirage.evaluate.probes import Recorder
from mirage.evaluate.protocol import DAY, HOUR, Protocol
from mirage.plan import Options, Shape, Snapshot, Work, candidates, habitual_shape, plan_chain
from mirage.plan.calibrate import Limits, WaitCalibration, WaitPairs, width
from mirage.plan.queue import request_of
from mirage.plan.shapes import DEFAULT_LIMITS_S
from mirage.policy.lookahead import RunTimes, request_spec
from mirage.profile.schema import ClusterProfile
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.sim.workload import JobSpec

#: Bump when what a record holds or how it is computed changes: cached ones are redone.
PLANS_VERSION = 1
#: Bump when the planner (mirage.plan) changes what it recommends: the planned paths and
#: the planner's readings are redone, the grid's truths (the costly part) are not.
#: 2: running jobs planned on the nodes they hold (mirage.policy.lookahead.QueuePlan).
PLANNER_VERSION = 2
USER = "mirage-eval"
UNITS = ("auto", "gpu", "node", "cpu")


@dataclass(frozen=True)
class PlanProtocol:
    """What fixes a plan sample's outcome (hashed into its cache name)."""

    sizes: tuple[int, ...] = (1, 2, 4)  # in ``unit``s ("gpu", "node")
    # "gpu", "node" (a whole node's GPUs) or "cpu"; "auto": the trace's (run_plans: "cpu"
    # on a partition without GPUs, "node" on a trace of whole-node requests, else "gpu")
    unit: str = "auto"
    cpu_scales: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)  # "cpu": x the request
    limits_s: tuple[int, ...] = DEFAULT_LIMITS_S  # and the partition's maximum
    overhead_s: int = 600  # lost at every segment's start (restart, checkpoint)
    horizon_s: int = 7 * DAY
    min_work_s: int = 6 * HOUR
    max_work_s: int = 96 * HOUR
    replan: bool = True

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError("sizes must be positive")
        if not self.cpu_scales or min(self.cpu_scales) <= 0:
            raise ValueError("the CPU scales must be positive")
        if self.unit not in UNITS:
            raise ValueError(f"unknown size unit {self.unit!r}: use {', '.join(UNITS)}")
        if self.horizon_s <= 0 or not 0 < self.min_work_s <= self.max_work_s:
            raise ValueError("the horizon and the work bounds must be positive, min <= max")

    def tag(self) -> str:
        fields = asdict(self)
        if self.unit != "cpu":
            del fields["cpu_scales"]  # it changes nothing there (and older tags stay)
        blob = json.dumps({**fields, "version": PLANS_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def grid(
    profile: ClusterProfile, partition: str | None, point: ChainPoint, pp: PlanProtocol
) -> tuple[list[Shape], int]:
    """The grid's shapes for ``point`` (sorted) and the index of the habitual one."""
    part = profile.partition(partition)
    work = work_of(point, pp.unit)
    habit = habitual_shape(profile, work, part.name)
    shapes = candidates(
        profile, work, partitions=[part.name], sizes=grid_sizes(part.gpus_per_node, point, pp),
        limits_s=[*pp.limits_s, part.max_time_s or max(pp.limits_s)],
        overhead_s=pp.overhead_s,
    )  # fmt: skip
    every = sorted({*shapes, habit})
    return every, every.index(habit)


def grid_sizes(gpus_per_node: int, point: ChainPoint, pp: PlanProtocol) -> list[int]:
    """The grid's sizes in the work's unit (GPUs, or CPUs)."""
    if pp.unit == "cpu":
        scaled = (point.cpus * f for f in pp.cpu_scales)
        return sorted({int(x) for x in scaled if x >= 1 and float(x).is_integer()})
    per = gpus_per_node if pp.unit == "node" else 1
    return [s * per for s in pp.sizes]


def work_of(point: ChainPoint, unit: str = "gpu") -> Work:
    """The point's work, at its request in GPUs (a "node" grid's too) or CPUs."""
    if unit == "cpu":
        return Work(((point.cpus, point.work_s),), "cpu", "linear")
    return Work(((point.gpus, point.work_s),), "gpu", "linear")


def _segment(profile: ClusterProfile, shape: Shape, now: int, run: int, k: int) -> JobSpec:
    spec = request_spec(request_of(shape, USER), profile, now)
    return replace(spec, run=run, name=f"plan-seg{k}")


def _run_segment(
    sim: Simulation, shape: Shape, left: int, pp: PlanProtocol, cap: int, *, k: int
) -> tuple[int, int] | None:
    """Submit one segment now with ``left`` s of work at its size; (its end, the work
    it did), or None when it does not start by ``cap``."""
    run = min(shape.time_limit, left + pp.overhead_s)
    job = sim.add_job(_segment(sim.profile, shape, sim.now, run, k))
    start = sim.run_until_started(job, until=cap)
    if start is None:
        return None
    return start + run, run - pp.overhead_s


def run_fixed(base: Simulation, shape: Shape, work: Work, pp: PlanProtocol) -> int | None:
    """The chain's true completion with every segment of ``shape`` (None: censored)."""
    sim = base.fork()
    cap = base.now + pp.horizon_s
    left = work.run_at(shape.size(work.unit))
    k = 0
    while True:
        done = _run_segment(sim, shape, left, pp, cap, k=k)
        if done is None or done[0] > cap:
            return None
        left -= done[1]
        if left <= 0:
            return done[0]
        sim.run_until(done[0])  # resubmitted as the segment ends
        k += 1


@dataclass
class Planned:
    done: int | None  # None: censored
    shapes: list[Shape]  # each segment's
    plan_s: float  # time spent planning


def run_planned(
    base: Simulation,
    shapes: list[Shape],
    work: Work,
    pp: PlanProtocol,
    calibration: WaitCalibration | None = None,
) -> Planned:
    """The chain's true completion with each segment's shape chosen by the planner on
    the snapshot of the moment (only the first one when ``pp.replan`` is off), its waits
    calibrated by ``calibration`` when given."""
    sim = base.fork()
    runtimes = RunTimes()
    feed = FinishedRuns(sim, runtimes)
    client = SimSlurmClient(sim, user=USER)
    cap = base.now + pp.horizon_s
    out = Planned(None, [], 0.0)
    shape: Shape | None = None
    while True:
        if shape is None or pp.replan:
            t0 = time.perf_counter()
            feed.catch_up()
            q = Snapshot(client.queue(), sim.profile, sim.now, runtimes, user=USER)
            options = Options(
                overhead_s=pp.overhead_s, horizon_s=pp.horizon_s, calibration=calibration
            )
            shape = plan_chain(q, work, shapes, options=options).recommended.shape
            out.plan_s += time.perf_counter() - t0
        out.shapes.append(shape)
        size = shape.size(work.unit)
        left = work.run_at(size)
        done = _run_segment(sim, shape, left, pp, cap, k=len(out.shapes))
        if done is None or done[0] > cap:
            return out
        work = work.remaining(done[1], size)
        if work.base[1] <= 0:
            out.done = done[0]
            return out
        sim.run_until(done[0])


@dataclass
class PlanRecord:
    """One sample: every grid shape's true completion, the planned path's, and cost."""

    t: int
    size: int  # the chain's request, in GPUs (a "node" grid's too) or CPUs
    work_s: int  # at the request
    shapes: np.ndarray  # int64 (n, 4): nodes, GPUs per node, limit (s), CPUs per node
    habitual: int  # index of the habitual shape
    done: np.ndarray  # int64 (n,): completion, or t + horizon when censored
    censored: np.ndarray  # bool (n,)
    planned_done: int
    planned_censored: bool
    planned_shapes: np.ndarray  # int64 (segments,): index of each segment's shape
    plan_s: float
    wall_s: float

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        meta = np.array([self.t, self.size, self.work_s, self.habitual, self.planned_done,
                         int(self.planned_censored)], dtype=np.int64)  # fmt: skip
        np.savez_compressed(
            tmp, meta=meta, shapes=self.shapes, done=self.done, censored=self.censored,
            planned_shapes=self.planned_shapes, cost=np.array([self.plan_s, self.wall_s]),
        )  # fmt: skip
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> PlanRecord:
        with np.load(path) as z:
            t, g, w, h, pd, pc = (int(x) for x in z["meta"])
            plan_s, wall_s = (float(x) for x in z["cost"])
            shapes = z["shapes"]
            if shapes.shape[1] == 3:  # a record of before CPU shapes: none had CPUs
                shapes = np.hstack([shapes, np.zeros((len(shapes), 1), np.int64)])
            return cls(t, g, w, shapes, h, z["done"], z["censored"], pd, bool(pc),
                       z["planned_shapes"], plan_s, wall_s)  # fmt: skip


def record_point(
    sim: Simulation, protocol: Protocol, point: ChainPoint, pp: PlanProtocol
) -> PlanRecord:
    """The record of ``point`` from the replay at its time (``sim`` is not changed)."""
    t0 = time.perf_counter()
    shapes, habit = grid(sim.profile, protocol.partition, point, pp)
    work = work_of(point, pp.unit)
    cap = sim.now + pp.horizon_s
    fixed = [run_fixed(sim, s, work, pp) for s in shapes]
    planned = run_planned(sim, shapes, work, pp)
    return PlanRecord(
        t=sim.now,
        size=point.cpus if pp.unit == "cpu" else point.gpus,
        work_s=point.work_s,
        shapes=np.array([_row(s) for s in shapes], np.int64),
        habitual=habit,
        done=np.array([cap if d is None else d for d in fixed], np.int64),
        censored=np.array([d is None for d in fixed], bool),
        planned_done=cap if planned.done is None else planned.done,
        planned_censored=planned.done is None,
        planned_shapes=np.array([shapes.index(s) for s in planned.shapes], np.int64),
        plan_s=planned.plan_s,
        wall_s=time.perf_counter() - t0,
    )


def _row(s: Shape) -> list[int]:
    return [s.nodes, s.gpus_per_node, s.time_limit, s.cpus_per_node]


def _record(
    sim: Simulation, protocol: Protocol, points: dict[int, ChainPoint], pp: PlanProtocol
) -> PlanRecord:
    return record_point(sim, protocol, points[sim.now], pp)


def plan_recorder(points: list[ChainPoint], pp: PlanProtocol) -> Recorder[PlanRecord]:
    """The recorder of ``points`` (their times are the samples), cached per protocol
    (``<cache>/<setting key>/<t>.plans-<tag>.npz``)."""
    rec = partial(_record, points={p.t: p for p in points}, pp=pp)
    return Recorder(f".plans-{pp.tag()}.npz", rec, PlanRecord.load)


@dataclass
class PlannedRecord:
    """One sample's planned path with a calibrated planner (the grid's truths are the
    :class:`PlanRecord`'s: they do not depend on the planner)."""

    t: int
    planned_done: int
    planned_censored: bool
    planned_shapes: np.ndarray  # int64 (segments,): index of each segment's grid shape
    plan_s: float

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        meta = np.array([self.t, self.planned_done, int(self.planned_censored)], np.int64)
        np.savez_compressed(tmp, meta=meta, planned_shapes=self.planned_shapes,
                            cost=np.array([self.plan_s]))  # fmt: skip
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> PlannedRecord:
        with np.load(path) as z:
            t, done, censored = (int(x) for x in z["meta"])
            return cls(t, done, bool(censored), z["planned_shapes"], float(z["cost"][0]))

    def into(self, rec: PlanRecord) -> PlanRecord:
        """``rec`` with this planned path in place of its own."""
        return replace(rec, planned_done=self.planned_done, planned_censored=self.planned_censored,
                       planned_shapes=self.planned_shapes, plan_s=self.plan_s)  # fmt: skip


def _record_planned(
    sim: Simulation,
    protocol: Protocol,
    points: dict[int, ChainPoint],
    pp: PlanProtocol,
    calibration: WaitCalibration | None,
) -> PlannedRecord:
    shapes, _ = grid(sim.profile, protocol.partition, points[sim.now], pp)
    cap = sim.now + pp.horizon_s
    p = run_planned(sim, shapes, work_of(points[sim.now], pp.unit), pp, calibration)
    return PlannedRecord(
        t=sim.now,
        planned_done=cap if p.done is None else p.done,
        planned_censored=p.done is None,
        planned_shapes=np.array([shapes.index(s) for s in p.shapes], np.int64),
        plan_s=p.plan_s,
    )


def planned_recorder(
    points: list[ChainPoint], pp: PlanProtocol, calibration: WaitCalibration | None
) -> Recorder[PlannedRecord]:
    """The planner's path at ``points``, calibrated by ``calibration`` when given
    (``<cache>/<setting key>/<t>.planned-<tag>-p<planner version>-<calibration tag or
    "none">.npz``). The :class:`PlanRecord`'s own planned path is the planner's of when
    it was recorded; the figures read this one."""
    rec = partial(_record_planned, points={p.t: p for p in points}, pp=pp,
                  calibration=calibration)  # fmt: skip
    cal = calibration.tag() if calibration is not None else "none"
    return Recorder(f".planned-{pp.tag()}-p{PLANNER_VERSION}-{cal}.npz", rec, PlannedRecord.load)


@dataclass
class PlanPredictions:
    """What the planner reads at a sample for every grid shape, both ways (predicted runs,
    limits): the pairs a wait calibration is fitted on, beside the :class:`PlanRecord`'s
    truths."""

    t: int
    by_runs: np.ndarray  # int64 (n,): first wait with the queue's predicted runs, s
    by_limits: np.ndarray  # int64 (n,): first wait with every job at its limit, s
    segments: np.ndarray  # int64 (n,)
    runs: np.ndarray  # int64 (n,): run of every segment, overheads included, s
    widths: np.ndarray  # float (n,): the shape's size in nodes

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, t=np.array([self.t]), by_runs=self.by_runs,
                            by_limits=self.by_limits, segments=self.segments, runs=self.runs,
                            widths=self.widths)  # fmt: skip
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> PlanPredictions:
        with np.load(path) as z:
            return cls(int(z["t"][0]), z["by_runs"], z["by_limits"], z["segments"], z["runs"],
                       z["widths"])  # fmt: skip


def _record_predictions(
    sim: Simulation, protocol: Protocol, points: dict[int, ChainPoint], pp: PlanProtocol
) -> PlanPredictions:
    shapes, _ = grid(sim.profile, protocol.partition, points[sim.now], pp)
    work = work_of(points[sim.now], pp.unit)
    fork = sim.fork()
    runtimes = RunTimes()
    FinishedRuns(fork, runtimes)  # the jobs finished so far, as run_planned feeds them
    snap = SimSlurmClient(fork, user=USER).queue()
    options = Options(overhead_s=pp.overhead_s, horizon_s=pp.horizon_s)
    seen = []
    for runs in (runtimes, Limits()):
        q = Snapshot(snap, fork.profile, fork.now, runs, user=USER)
        seen.append({c.shape: c for c in plan_chain(q, work, shapes, options=options).candidates})
    by, at_limits = seen
    return PlanPredictions(
        t=sim.now,
        by_runs=np.array([by[s].first_wait_s for s in shapes], np.int64),
        by_limits=np.array([at_limits[s].first_wait_s for s in shapes], np.int64),
        segments=np.array([by[s].segments for s in shapes], np.int64),
        runs=np.array([by[s].run_s for s in shapes], np.int64),
        widths=np.array([width(s, sim.profile) for s in shapes], float),
    )


def predictions_recorder(points: list[ChainPoint], pp: PlanProtocol) -> Recorder[PlanPredictions]:
    """The planner's predictions at ``points`` (``<t>.planpred-<tag>-p<planner
    version>.npz``)."""
    rec = partial(_record_predictions, points={p.t: p for p in points}, pp=pp)
    return Recorder(f".planpred-{pp.tag()}-p{PLANNER_VERSION}.npz", rec, PlanPredictions.load)


def wait_pairs(truths: list[PlanRecord], preds: list[PlanPredictions]) -> WaitPairs:
    """Every grid shape at every sample, as a fit's pairs (a censored truth counts as
    the horizon, as in the figures)."""
    parts = []
    for k, (tr, pr) in enumerate(zip(truths, preds, strict=True)):
        parts.append(WaitPairs(np.full(len(pr.runs), k), pr.widths, pr.segments, pr.runs,
                               pr.by_runs, pr.by_limits, tr.done - tr.t))  # fmt: skip
    return WaitPairs.concat(parts)
