"""Shared by the simulator benchmarks: find a trace, build the workload."""

from __future__ import annotations

import random
from pathlib import Path

from mirage.profile.schema import ClusterProfile, load_profile
from mirage.sim import JobSpec, Workload, from_table

REPO = Path(__file__).resolve().parents[2]
LS6 = REPO.parent / "shared" / "traces" / "tacc_ls6_a100" / "ls6-a100.log.gz"


def synthetic(n: int = 24_000, nodes: int = 88, seed: int = 1) -> Workload:
    """A stand-in with ls6-like sizes and limits, when no trace is readable."""
    rng = random.Random(seed)
    t, jobs = 0, []
    for _ in range(n):
        t += int(rng.expovariate(1 / 650))
        limit = rng.choice([1800, 3600, 7200, 86400, 172800])
        run = min(limit, int(rng.expovariate(1 / (limit / 3))) + 1)
        size = min(nodes, rng.choice([1, 1, 1, 1, 2, 4, 8, 16]))
        jobs.append(JobSpec(submit=t, run=run, time_limit=limit, nodes=size, partition="gpu-a100"))
    return Workload(jobs=jobs)


def workload(
    trace: str | None, nodes: int, arrival_scale: float
) -> tuple[ClusterProfile, Workload, str]:
    """(profile, jobs, where they came from): the trace via mirage.trace, else synthetic."""
    profile = load_profile("ls6")
    path = Path(trace) if trace else LS6
    try:
        from mirage.trace.readers import load_trace

        load = load_trace(path)
    except (ImportError, OSError) as exc:
        print(f"no trace ({exc}); using a synthetic workload")
        return profile, synthetic(nodes=nodes), "synthetic"
    wl = from_table(load.jobs, profile, arrival_scale=arrival_scale, max_nodes=nodes)
    return profile, wl, str(path)
