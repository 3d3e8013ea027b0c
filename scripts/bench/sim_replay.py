"""Replay a trace through the simulator and report speed, memory and waits.

.venv/bin/python scripts/bench/sim_replay.py [--trace PATH] [--nodes 88]
    [--arrival-scale 1.0] [--backfill slurm|easy] [--estimates]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--arrival-scale", type=float, default=1.0)
    ap.add_argument("--backfill", choices=["slurm", "easy"], default=None)
    ap.add_argument("--estimates", action="store_true", help="keep start estimates fresh")
    ap.add_argument("--tracemalloc", action="store_true", help="peak Python heap (slower)")
    args = ap.parse_args()
    profile, wl, source = workload(args.trace, args.nodes, args.arrival_scale)
    if args.backfill:
        sched = dataclasses.replace(profile.scheduler, backfill=args.backfill)
        profile = dataclasses.replace(profile, scheduler=sched)
    if args.tracemalloc:
        tracemalloc.start()
    t0 = time.perf_counter()
    sim = Simulation(
        profile, nodes=args.nodes, start_time=wl.jobs[0].submit, track_estimates=args.estimates
    )
    sim.add_jobs(wl.jobs)
    sim.run()
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] if args.tracemalloc else 0
    summary = summarize(sim, wall, wl.dropped)
    print(f"trace {source}, {args.nodes} nodes, backfill {profile.scheduler.backfill}")
    print("\n".join(summary.lines()))
    print(
        f"events {sim.events}, main passes {sim.main_passes}, backfill passes {sim.backfill_passes}"
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    heap = f", peak traced heap {peak / 2**20:.1f} MiB" if args.tracemalloc else ""
    print(f"peak RSS {rss:.0f} MiB (whole process incl. pandas and the trace){heap}")


if __name__ == "__main__":
    main()
