"""Small hand-made clusters and jobs, for tests, examples and what-if probes."""

from __future__ import annotations

from typing import Any

from mirage.profile.schema import ClusterProfile, Partition, SchedulerSettings
from mirage.sim.workload import JobSpec


def toy_profile(nodes: int = 4, gpus_per_node: int = 4, **scheduler: Any) -> ClusterProfile:
    """One partition "gpu" of ``nodes`` nodes; ``scheduler`` overrides SchedulerSettings."""
    part = Partition(
        name="gpu",
        cpus_per_node=32,
        memory_mb_per_node=256000,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        default=True,
    )
    return ClusterProfile(name="toy", partitions=(part,), scheduler=SchedulerSettings(**scheduler))


def job(
    submit: int,
    run: int,
    nodes: int = 1,
    limit: int | None = None,
    partition: str = "gpu",
    **extra: Any,
) -> JobSpec:
    """A job whose limit defaults to its run time (it ends exactly at its limit)."""
    return JobSpec(
        submit=submit,
        run=run,
        time_limit=run if limit is None else limit,
        nodes=nodes,
        partition=partition,
        **extra,
    )
