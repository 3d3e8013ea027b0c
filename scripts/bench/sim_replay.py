"""Replay a trace through the simulator and report speed, memory and waits.

.venv/bin/python scripts/bench/sim_replay.py [--trace PATH] [--nodes 88]
    [--arrival-scale 1.0] [--backfill slurm|easy] [--estimates] [--tracemalloc]
    [--configs 88:1,88:2,44:1,60:1] [--max-jobs-per-user 8] [--will-run-batches]

``--configs`` runs several (nodes:arrival scale) configurations in one invocation and
prints them side by side: wall time, jobs/s, events/s, peak traced heap (with
``--tracemalloc``; the replay then runs slower) and the process's peak RSS so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import workload

from mirage.sim import Simulation
from mirage.sim.report import summarize


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replay(args: argparse.Namespace, nodes: int, scale: float) -> dict[str, float]:
    profile, wl, source = workload(args.trace, nodes, scale)
    if args.backfill:
        sched = dataclasses.replace(profile.scheduler, backfill=args.backfill)
        profile = dataclasses.replace(profile, scheduler=sched)
    if args.will_run_batches:  # Slurm's _will_run_test batches (SchedulerSettings)
        sched = dataclasses.replace(profile.scheduler, bf_will_run_batches=True)
        profile = dataclasses.replace(profile, scheduler=sched)
    if args.max_jobs_per_user:  # a partition QOS with MaxJobsPerUser (mirage.sim.limits)
        from mirage.profile.schema import Qos

        parts = tuple(dataclasses.replace(p, qos="cap") for p in profile.partitions)
        qos = (Qos("cap", max_jobs_per_user=args.max_jobs_per_user),)
        profile = dataclasses.replace(profile, partitions=parts, qos=qos)
    if args.tracemalloc:
        tracemalloc.start()
    t0 = time.perf_counter()
    sim = Simulation(
        profile,
        nodes=nodes,
        start_time=wl.jobs[0].submit,
        track_estimates=args.estimates,
        priority_calc_period_s=args.priority_calc_period,
    )
    sim.add_jobs(wl.jobs)
    sim.run()
    wall = time.perf_counter() - t0
    peak = 0.0
    if args.tracemalloc:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    summary = summarize(sim, wall, wl.dropped)
    print(f"== trace {source}, {nodes} nodes, arrival x{scale}, {profile.scheduler.backfill}")
    print("\n".join(summary.lines()))
    print(
        f"events {sim.events} ({sim.events / wall:.0f}/s), main passes {sim.main_passes}, "
        f"backfill passes {sim.backfill_passes}"
    )
    return {
        "nodes": nodes,
        "scale": scale,
        "jobs": len(wl.jobs),
        "wall": wall,
        "jobs_s": len(wl.jobs) / wall,
        "events_s": sim.events / wall,
        "heap": peak,
        "rss": rss_mib(),
        "util": summary.utilisation,
        "p50": summary.sim_wait.get("p50", 0.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--arrival-scale", type=float, default=1.0)
    ap.add_argument("--configs", default=None, help="nodes:scale,... run side by side")
    ap.add_argument("--backfill", choices=["slurm", "easy"], default=None)
    ap.add_argument("--estimates", action="store_true", help="keep start estimates fresh")
    ap.add_argument("--priority-calc-period", type=int, default=0, help="seconds (0: every pass)")
    ap.add_argument("--max-jobs-per-user", type=int, default=0, help="partition QOS limit")
    ap.add_argument(
        "--will-run-batches", action="store_true", help="backfill starts in Slurm's batches"
    )
    ap.add_argument("--tracemalloc", action="store_true", help="peak Python heap (slower)")
    args = ap.parse_args()
    configs = [(args.nodes, args.arrival_scale)]
    if args.configs:
        configs = [
            (int(n), float(x or 1))
            for n, _, x in (c.partition(":") for c in args.configs.split(","))
        ]
    rows = [replay(args, n, x) for n, x in configs]
    print()
    print(
        f"{'nodes':>5} {'arrival':>7} {'jobs':>7} {'wall s':>8} {'jobs/s':>8} {'events/s':>9} "
        f"{'heap MiB':>8} {'RSS MiB':>8} {'util':>5} {'p50 wait':>8}"
    )
    for r in rows:
        heap = f"{r['heap']:8.1f}" if args.tracemalloc else f"{'-':>8}"
        print(
            f"{r['nodes']:5.0f} {r['scale']:7.1f} {r['jobs']:7.0f} {r['wall']:8.2f} "
            f"{r['jobs_s']:8.0f} {r['events_s']:9.0f} {heap} {r['rss']:8.0f} "
            f"{r['util']:5.3f} {r['p50']:8.0f}"
        )
    print("RSS: the process's peak so far (pandas and the trace included), cumulative")


if __name__ == "__main__":
    main()
