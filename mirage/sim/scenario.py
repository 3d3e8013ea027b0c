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


#: The Slurm test cluster (scripts/slurm-testbed/start.sh): 4 nodes x 16 CPUs x 4 GPUs;
#: partition "gpu" has all of them, "debug" only gpu1 (overlapping partitions).
TESTBED_NODES = {"gpu": ("gpu1", "gpu2", "gpu3", "gpu4"), "debug": ("gpu1",)}


def testbed_profile(**scheduler: Any) -> ClusterProfile:
    """The test cluster's partitions; pair with ``partition_nodes=TESTBED_NODES``."""
    parts = tuple(
        Partition(
            name=name,
            cpus_per_node=16,
            memory_mb_per_node=64000,
            nodes=nodes,
            gpus_per_node=4,
            gpu_type="a100",
            max_time_s=limit,
            default=name == "gpu",
        )
        for name, nodes, limit in (("gpu", 4, 2 * 86400), ("debug", 1, 3600))
    )
    return ClusterProfile(
        name="testbed", partitions=parts, scheduler=SchedulerSettings(**scheduler)
    )


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
