"""What fork() saves: probe a counterfactual from a warm simulation vs replaying the warm-up.

    .venv/bin/python scripts/bench/sim_fork.py [--trace PATH] [--nodes 88] [--at 0.5]

Warms a replay up to a busy instant (or a fraction of the trace), then, for several
probes (submit a 32-node job now, or 10, 30, 60 minutes later, and run until it starts),
times (a) fork + probe and (b) a fresh replay to the same instant + the same probe, and
checks that both give the same start.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import workload

from mirage.profile.schema import ClusterProfile
from mirage.sim import JobSpec, Simulation


def probe(sim: Simulation, delay: int) -> int | None:
    """Submit a 32-node, 2-hour job ``delay`` seconds from now; when does it start?"""
    at = sim.now + delay
    sim.run_until(at)
    job_id = sim.add_job(
        JobSpec(submit=at, run=7200, time_limit=7200, nodes=32, partition="gpu-a100")
    )
    return sim.run_until_started(job_id)


def warm(profile: ClusterProfile, nodes: int, jobs: list[JobSpec], until: int) -> Simulation:
    sim = Simulation(profile, nodes=nodes, start_time=jobs[0].submit)
    sim.add_jobs(jobs)
    sim.run_until(until)
    return sim


def busiest(profile: ClusterProfile, nodes: int, jobs: list[JobSpec]) -> int:
    """A fork point with a queue: just after the submit of the job that waited longest."""
    sim = warm(profile, nodes, jobs, jobs[-1].submit)
    sim.run()
    worst = max(sim.all_jobs(), key=lambda v: (v.start or 0) - v.spec.submit)
    return worst.spec.submit + 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--at", type=float, default=None, help="fork at this fraction of the span")
    args = ap.parse_args()
    profile, wl, source = workload(args.trace, args.nodes, 1.0)
    first, last = wl.jobs[0].submit, wl.jobs[-1].submit
    if args.at is None:
        t = busiest(profile, args.nodes, wl.jobs)
    else:
        t = int(first + args.at * (last - first))
    t0 = time.perf_counter()
    base = warm(profile, args.nodes, wl.jobs, t)
    warm_s = time.perf_counter() - t0
    print(f"trace {source}: warm-up to day {(t - first) / 86400:.0f} took {warm_s:.2f} s")
    fork_s = replay_s = 0.0
    delays = [0, 600, 1800, 3600]
    for delay in delays:
        t0 = time.perf_counter()
        a = probe(base.fork(), delay)
        fork_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        b = probe(warm(profile, args.nodes, wl.jobs, t), delay)
        replay_s += time.perf_counter() - t0
        assert a == b, (delay, a, b)
        print(f"  submit +{delay:>5} s -> starts +{(a or 0) - t:>6} s after the fork point")
    n = len(delays)
    t0 = time.perf_counter()
    for _ in range(20):
        base.fork()
    bare = (time.perf_counter() - t0) / 20
    print(f"fork alone: {bare * 1e3:.2f} ms ({len(wl.jobs)} jobs)")
    print(f"fork + probe:   {fork_s / n * 1e3:8.1f} ms per probe")
    print(f"replay + probe: {replay_s / n * 1e3:8.1f} ms per probe")
    print(f"ratio (replay / fork): {replay_s / fork_s:.0f}x")


if __name__ == "__main__":
    main()
