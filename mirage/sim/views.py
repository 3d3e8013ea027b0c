"""What the simulation shows of its jobs: ``JobView``, as squeue and sacct would.

Read-only: a view is built from the simulation's job table at the instant it is asked
for (a pending job's reason and priority as of now, a running job's expected end), and
nothing in the scheduling reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mirage.sim.workload import INFINITE, JobSpec
from mirage.slurm.types import JobState

if TYPE_CHECKING:
    from mirage.sim.engine import Simulation

#: Dependency status of a pending job (Simulation.dep_state; its reason shows it).
DEP_OK, DEP_WAIT, DEP_NEVER = 0, 1, 2

PENDING, RUNNING = JobState.PENDING, JobState.RUNNING


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
    nodes: tuple[str, ...] = ()  # the nodes a running job holds


def top_jobs(sim: Simulation) -> set[int]:
    """Each partition's highest-priority startable pending job (reason "Resources")."""
    best: dict[str, tuple[int, int]] = {}
    for i in sim.pending:
        if sim.eligible_at[i] is None or sim.held[i]:
            continue
        if sim._lim is not None and sim._lim.reason(i):
            continue  # held by a limit: its reason is the limit's
        key = (-sim.priority(i), i)
        part = sim.specs[i].partition
        if part not in best or key < best[part]:
            best[part] = key
    return {key[1] for key in best.values()}


def _reason(sim: Simulation, i: int, top: set[int]) -> str:
    if sim.held[i]:
        return "JobHeldUser"
    if sim.dep_state[i] == DEP_NEVER:
        return "DependencyNeverSatisfied"
    if sim.dep_state[i] == DEP_WAIT:
        return "Dependency"
    if sim.eligible_at[i] is None:
        return "BeginTime"
    if sim._lim is not None:
        held = sim._lim.reason(i)
        if held:
            return held
    return "Resources" if i in top else "Priority"


def job_view(sim: Simulation, i: int, top: set[int]) -> JobView:
    spec, st = sim.specs[i], sim.state[i]
    start, end = sim.start[i], sim.end[i]
    reason = _reason(sim, i, top) if st is PENDING else "None"
    age = (start if start is not None else sim.now) - spec.submit
    limit = sim.limit[i]
    return JobView(
        job_id=str(i + sim.first_id),
        spec=spec,
        state=st,
        reason=reason,
        eligible=sim.eligible_at[i],
        start=start,
        end=_expected_end(sim, i) if st is RUNNING else end,
        time_limit=None if limit >= INFINITE else limit,
        priority=sim.priority(i) if st is PENDING else 0,
        estimate=sim.estimate[i] if st is PENDING else None,
        age=max(0, age) if st is not None else 0,
        held=sim.held[i],
        nodes=tuple(sim.node_names[n] for n, _, _ in sim.alloc.get(i, ())),
    )


def _expected_end(sim: Simulation, i: int) -> int | None:
    """What squeue shows for a running job: start + limit (the true end is unknown)."""
    start, limit = sim.start[i], sim.limit[i]
    return None if start is None or limit >= INFINITE else start + limit
