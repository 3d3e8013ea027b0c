"""When would each candidate shape start if submitted now: one pass over the present queue.

The look-ahead (:mod:`mirage.policy.lookahead`) simulates the snapshot forward event by
event for each request shape: Slurm's scheduler rule by rule, which on a 2,000-job queue
takes tens of seconds per shape (every backfill pass re-plans hundreds of jobs). A plan
compares 20 shapes in a command's time, so it uses the look-ahead's queue (the same
predicted run times, the same priority order, the same node placement of the jobs that
run now) planned **once**, as a conservative backfill would plan it knowing the runs:

1. the snapshot's jobs go into the look-ahead's simulation and its scheduling pass at
   ``now`` places the running jobs on the nodes squeue lists for them
   (:meth:`QueuePlan.place`; by its own packing where it lists none the profile knows),
   and whatever starts at once;
2. every pending job, in priority order, reserves the earliest slot where it fits for
   its predicted run;
3. each candidate, ranked below all of them (a new job has age 0), gets the earliest
   slot left for its whole time limit: its predicted start. Jobs waiting on a
   dependency rank below it (they become eligible later), and a conservative plan never
   lets a lower job delay a higher one: they are left out.

What this leaves out, against the event simulation (``method="simulate"``,
:func:`mirage.policy.lookahead.lookahead_starts`, kept for small queues and checks):
Slurm plans with time limits, not predicted runs, and tests at most ``bf_max_job_test``
jobs per pass, so the real scheduler leaves holes the plan fills: the plan's starts are
earlier on deep queues, for every shape alike. QOS and association limits are not
applied. Runs are planned in steps of the profile's ``bf_resolution_s`` (Slurm's own),
or of ``step_s`` when given. Starts past ``horizon_s`` read as ``now + horizon_s``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np

from mirage.plan.shapes import Shape
from mirage.policy.lookahead import (
    HORIZON_S,
    QueuePlan,
    Request,
    RunPredictor,
    lookahead_starts,
    queue_specs,
    request_spec,
)
from mirage.profile.schema import ClusterProfile
from mirage.sim.engine import Simulation
from mirage.sim.plan import NodePlan
from mirage.sim.workload import JobSpec
from mirage.slurm.types import QueueSnapshot

METHODS = ("plan", "simulate")
#: The step of the passes that only measure a spread (drawn run times): the passes at
#: Slurm's minute cost 0.5 s each on 2,000 jobs, at 15 minutes 0.25 s
#: (scripts/bench/plan_time.py). Coarse steps shift starts on a deep queue (the ls6
#: slice's busiest hour: 7h00m at 900 s, 5h24m at 60 s as the event simulation says),
#: so they give only the spread around the point, never the point.
COARSE_STEP_S = 900


def request_of(shape: Shape, user: str = "") -> Request:
    return Request(shape.partition, shape.nodes, shape.gpus, shape.time_limit, user, shape.cpus)


@dataclass(frozen=True)
class Snapshot:
    """One queue snapshot and how run times are predicted: what every estimate reads."""

    snapshot: QueueSnapshot
    profile: ClusterProfile
    now: int
    runtimes: RunPredictor
    to_limit: Collection[str] = ()
    user: str = ""


def start_times(
    q: Snapshot,
    shapes: Sequence[Shape],
    *,
    method: str = "plan",
    horizon_s: int = HORIZON_S,
    step_s: int | None = None,
) -> list[int]:
    """Predicted start of each shape if submitted alone at ``q.now`` (``step_s``: the
    plan's time step, default the profile's ``bf_resolution_s``)."""
    if method == "simulate":
        reqs = [request_of(s, q.user) for s in shapes]
        return lookahead_starts(
            q.snapshot, q.profile, q.now, q.runtimes, reqs, to_limit=q.to_limit,
            horizon_s=horizon_s,
        )  # fmt: skip
    if method != "plan":
        raise ValueError(f"unknown method {method!r}: use {' or '.join(METHODS)}")
    step = step_s or max(1, q.profile.scheduler.bf_resolution_s)
    return _planned(q, shapes, horizon_s, step)


class _Ranked(Simulation):
    """The snapshot's jobs rank in the order they were added (the look-ahead's order)."""

    def priority(self, i: int) -> int:
        return 0 if self.held[i] else 2 * 10**9 - i


def _planned(q: Snapshot, shapes: Sequence[Shape], horizon_s: int, step: int) -> list[int]:
    """The module's three steps: place, reserve the queue, fit each shape after it."""
    plan = _on_grid(queue_specs(q.snapshot, q.profile, q.now, q.runtimes, q.to_limit), step)
    sim = _Ranked(q.profile, start_time=q.now, track_estimates=False)
    plan.place(sim)
    sim.run_until(q.now)  # the pass at now: running jobs on their nodes
    nodes = _node_plan(sim)
    _reserve_pending(sim, nodes, horizon_s)
    last = q.now + horizon_s
    out = []
    for shape in shapes:
        spec = request_spec(request_of(shape), q.profile, q.now)
        start = _earliest(sim, nodes, spec, q.now, spec.time_limit or 1)
        out.append(last if start is None else min(start, last))
    return out


def _on_grid(plan: QueuePlan, step: int) -> QueuePlan:
    """Every run rounded to the nearest ``step`` (at least one): fewer distinct ends, fewer
    breakpoints to search, and more jobs that share a floor (:class:`_Floors`). Coarse
    steps move starts along a deep queue (the ls6 slice's busiest hour, a 6-GPU request:
    7h15m at 900 s rounded up, 7h00m to the nearest, 5h24m at 60 s, as the event
    simulation says), so the point is planned at Slurm's own bf_resolution."""

    def on_step(spec: JobSpec) -> JobSpec:
        return replace(spec, run=max(1, round(spec.run / step)) * step)

    return QueuePlan(
        [on_step(s) for s in plan.ahead], [(on_step(s), p) for s, p in plan.after], plan.nodes
    )


def _node_plan(sim: Simulation) -> NodePlan:
    """Free GPUs and CPUs per node from now, each running job ending at its predicted end."""
    releases = [(sim.now + sim.specs[i].run, sim.alloc[i]) for i in sim.running]
    return NodePlan(
        sim.now,
        gpus_free=sim.gfree,
        cpus_free=sim.cfree,
        gpus_cap=sim.node_gpus,
        cpus_cap=sim.node_cpus,
        releases=releases,
    )


def _earliest(
    sim: Simulation, plan: NodePlan, spec: JobSpec, not_before: int, duration: int
) -> int | None:
    found = _fit(sim, plan, spec, not_before, duration)
    return None if found is None else found[0]


def _fit(
    sim: Simulation, plan: NodePlan, spec: JobSpec, not_before: int, duration: int
) -> tuple[int, tuple[int, ...]] | None:
    whole = spec.whole_nodes
    g, c = (0, 0) if whole else spec.per_node()
    return plan.earliest(
        sim.cluster.part_arr[spec.partition],
        spec.nodes,
        gpus=g,
        cpus=c,
        exclusive=whole,
        duration=max(1, duration),
        not_before=not_before,
    )


def _reserve(
    sim: Simulation, plan: NodePlan, spec: JobSpec, start: int, nodes: tuple[int, ...]
) -> int:
    """Reserve ``spec``'s predicted run from ``start`` on ``nodes``; its planned end."""
    whole = spec.whole_nodes
    g, c = (0, 0) if whole else spec.per_node()
    holds = [(n, sim.node_gpus[n], sim.node_cpus[n]) if whole else (n, g, c) for n in nodes]
    end = start + max(1, spec.run)
    plan.reserve(start, end, holds)
    return end


def _reserve_pending(sim: Simulation, plan: NodePlan, horizon_s: int) -> dict[int, int]:
    """Each pending job's slot in priority order; planned end per job index (running
    jobs too)."""
    ends = {i: sim.now + sim.specs[i].run for i in sim.running}
    floors = _Floors(sim.now)
    last = sim.now + horizon_s
    for i in sorted(sim.pending):
        spec = sim.specs[i]
        found = _fit(sim, plan, spec, floors.get(spec), spec.run)
        start = last if found is None else min(found[0], last)
        floors.put(spec, start)
        if found is None or found[0] > last:
            ends[i] = last
            continue
        ends[i] = _reserve(sim, plan, spec, found[0], found[1])
    return ends


class _Floors:
    """Reservations only take room away, so a job starts no earlier than an earlier job
    of its size that runs no longer than it: that floor saves most of the search (the
    rows before it are never read)."""

    def __init__(self, now: int) -> None:
        self.now = now
        self._by_size: dict[tuple[str, int, int, int, bool], list[tuple[int, int]]] = {}

    @staticmethod
    def _size(spec: JobSpec) -> tuple[str, int, int, int, bool]:
        return (spec.partition, spec.nodes, spec.gpus, spec.cpus, spec.whole_nodes)

    def get(self, spec: JobSpec) -> int:
        seen = self._by_size.get(self._size(spec), ())
        return max((t for run, t in seen if run <= spec.run), default=self.now)

    def put(self, spec: JobSpec, start: int) -> None:
        seen = self._by_size.setdefault(self._size(spec), [])
        # keep only what can still raise a floor: a longer run with an earlier start never does
        seen[:] = [(r, t) for r, t in seen if not (r >= spec.run and t <= start)]
        seen.append((spec.run, start))


def spread(values: Sequence[int], low: float = 0.1, high: float = 0.9) -> tuple[int, int]:
    """The ``low``..``high`` quantiles of ``values`` (integers, interpolated)."""
    arr = np.asarray(values, dtype=float)
    return int(np.quantile(arr, low)), int(np.ceil(np.quantile(arr, high)))
