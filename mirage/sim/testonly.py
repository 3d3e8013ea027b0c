"""``sbatch --test-only``'s start estimate, as Slurm 22.05 computes it.

Slurm does not answer a will-run request from the backfill plan (what ``squeue --start``
shows). ``job_allocate(will_run)`` creates the job (its priority set, age 0) and calls
src/slurmctld/job_scheduler.c:``job_start_data``, which

1. runs the select plugin's ``_will_run_test`` (cons_common/job_test.c) on the job's
   partition: the job on what is free now, else after each batch of **running** jobs'
   expected ends. Pending jobs and their backfill reservations are not seen at all
   (:meth:`mirage.sim.plan.WillRunPlan.will_run`, the same code backfill uses);
2. adds ``_delayed_job_start_time``: the "area" of every pending job of the same
   partition whose priority is at least the new job's, ``max(min_cpus, min_nodes x
   partition CPUs per node) x time limit (minutes)`` summed, divided by the partition's
   CPUs (integer division), times 60 s. Shapes, node sharing and backfill play no part:
   a 1-CPU job counts as a whole node's CPUs for its whole limit;
3. answers ``max(that, begin time, now)``.

So the estimate exists whenever the job can ever fit, however deep the queue: there is
no backfill window in it (where ``squeue --start`` says N/A, ``--test-only`` still gives
a date). On the test cluster, three queues (a pending job of higher priority ahead;
six ahead; two whole-partition jobs ahead, the second beyond ``bf_window``) gave the
dates this computes to the second (``tests/slurm/test_test_only.py``).
"""

from __future__ import annotations

import typing

import numpy as np

from mirage.sim.backfill import running_plan
from mirage.sim.pool import KEY_SHIFT
from mirage.sim.workload import INFINITE

if typing.TYPE_CHECKING:
    from mirage.sim.engine import Simulation


def will_run_start(sim: Simulation, i: int) -> int | None:
    """When ``_will_run_test`` would start pending job ``i`` over the running jobs only
    (None: it never fits on its partition's nodes)."""
    plan = running_plan(sim)
    avail = np.zeros(len(sim.node_gpus), dtype=bool)
    avail[list(sim.part_nodes[sim.specs[i].partition])] = True
    count, g, c, whole = sim.dem[i]
    found = plan.will_run(avail, count, g, c, whole)
    return None if found is None else found[0]


def delay_s(sim: Simulation, i: int) -> int:
    """``_delayed_job_start_time``: seconds added for the pending jobs of ``i``'s partition
    whose priority is at least ``i``'s (held jobs have priority 0)."""
    part = sim.specs[i].partition
    nodes = sim.part_nodes[part]
    cpu_cnt = sum(sim.node_cpus[n] for n in nodes)
    per_node = cpu_cnt // len(nodes) if cpu_cnt > len(nodes) else 1
    pool = sim._pool
    slots = np.flatnonzero(
        (pool.idx[: pool.n] >= 0) & (pool.part[: pool.n] == sim.cluster.part_no[part])
    )
    jobs = pool.idx[slots]
    prio = (jobs - sim._keys(slots)) // KEY_SHIFT  # the keys are -priority * SHIFT + job
    held = np.fromiter((sim.held[j] for j in jobs.tolist()), bool, len(jobs))
    prio[held] = 0
    mine = int(prio[jobs == i][0]) if (jobs == i).any() else sim.priority(i)
    ahead = (prio >= mine) & (jobs != i)
    max_s = sim.profile.partition(part).max_time_s
    area = 0
    for j in jobs[ahead].tolist():
        n, _, cpn, _ = sim.dem[j]
        lim = sim.limit[j] if sim.limit[j] < INFINITE or max_s is None else max_s
        minutes = -(-lim // 60)  # Slurm keeps limits in minutes (sbatch rounds up)
        area += max(n * cpn, n * per_node) * minutes
    return area // cpu_cnt * 60


def test_only_start(sim: Simulation, i: int) -> int | None:
    """``sbatch --test-only``'s start for pending job ``i`` (module docstring); None when
    it can never fit (Slurm: "Requested node configuration is not available")."""
    t = will_run_start(sim, i)
    if t is None:
        return None
    begin = sim.specs[i].begin
    return max(t + delay_s(sim, i), sim.now, begin or 0)
