"""Counterfactual probes: fork() from a running replay vs replaying from the start.

    .venv/bin/python scripts/bench/sim_probes.py [--trace PATH] [--nodes 88]
        [--probes 1000] [--replay-probes 20] [--probe-nodes 8] [--days 5]

After a 2-day warm-up, ``--probes`` sample points are spread over the trace; at each, an
extra job (``--probe-nodes`` nodes, 48 h limit, runs to its limit) is injected and the
simulation runs ``--days`` simulated days. Variant (a) advances one base simulation
through the sample points and forks it at each; (b) replays from the start to the point.
(b) is timed on ``--replay-probes`` of the points and extrapolated to all of them (the
output says so); both variants must give the probe job the same start.
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

DAY = 86400


def inject(sim: Simulation, nodes: int, days: int) -> int | None:
    at = sim.now
    spec = JobSpec(submit=at, run=2 * DAY, time_limit=2 * DAY, nodes=nodes, partition="gpu-a100")
    job_id = sim.add_job(spec)
    sim.run_until(at + days * DAY)
    start = sim.view(job_id).start
    return None if start is None else start - at


def fresh(profile: ClusterProfile, nodes: int, jobs: list[JobSpec]) -> Simulation:
    sim = Simulation(profile, nodes=nodes, start_time=jobs[0].submit, track_estimates=False)
    sim.add_jobs(jobs)
    return sim


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--probes", type=int, default=1000)
    ap.add_argument("--replay-probes", type=int, default=20)
    ap.add_argument("--probe-nodes", type=int, default=8)
    ap.add_argument("--days", type=int, default=5)
    args = ap.parse_args()
    profile, wl, source = workload(args.trace, args.nodes, 1.0)
    jobs = wl.jobs
    first, last = jobs[0].submit + 2 * DAY, jobs[-1].submit - args.days * DAY
    points = [first + (last - first) * k // max(1, args.probes - 1) for k in range(args.probes)]
    print(f"trace {source}: {len(jobs)} jobs, {args.nodes} nodes, {args.probes} probes")
    base = fresh(profile, args.nodes, jobs)
    t0 = time.perf_counter()
    forked: list[int | None] = []
    for p in points:
        base.run_until(p)
        forked.append(inject(base.fork(), args.probe_nodes, args.days))
    fork_s = time.perf_counter() - t0
    step = max(1, len(points) // max(1, args.replay_probes))
    subset = list(range(0, len(points), step))[: args.replay_probes]
    t0 = time.perf_counter()
    for k in subset:
        sim = fresh(profile, args.nodes, jobs)
        sim.run_until(points[k])
        assert inject(sim, args.probe_nodes, args.days) == forked[k], k
    sub_s = time.perf_counter() - t0
    replay_s = sub_s / len(subset) * len(points)
    waits = sorted(w for w in forked if w is not None)
    print(
        f"probe job ({args.probe_nodes} nodes, 48 h) started within {args.days} d in "
        f"{len(waits)}/{len(points)} probes; median wait {waits[len(waits) // 2] if waits else 0} s"
    )
    print(
        f"fork:   {fork_s:8.2f} s total for {len(points)} probes "
        f"({fork_s / len(points) * 1e3:.1f} ms each, incl. advancing the base)"
    )
    print(
        f"replay: {replay_s:8.2f} s total, EXTRAPOLATED from {len(subset)} probes "
        f"({sub_s:.2f} s, {sub_s / len(subset) * 1e3:.0f} ms each)"
    )
    print(f"ratio replay / fork: {replay_s / fork_s:.1f}x (same probe starts on the subset)")


if __name__ == "__main__":
    main()
