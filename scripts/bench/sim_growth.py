"""Wall time against trace length and queue depth: 10k, 100k, 1M jobs.

    .venv/bin/python scripts/bench/sim_growth.py [--nodes 88] [--max-jobs 1000000]
        [--sizes 10000,100000,1000000] [--deep-scale 2]

Synthetic traces resampled from ls6 (or the synthetic stand-in): each job's size, limit
and run time are drawn from the trace's jobs, and inter-arrival times from the trace's
inter-arrival times, so the load stays about the same at every length. The deep-queue
variant compresses arrivals by ``--deep-scale``. Prints seconds and jobs/s per size and
the growth exponent (least-squares slope of log wall time over log jobs).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import workload

from mirage.profile.schema import ClusterProfile
from mirage.sim import JobSpec, Simulation


def resample(base: list[JobSpec], n: int, scale: float, seed: int = 1) -> list[JobSpec]:
    rng = random.Random(seed)
    gaps = [b.submit - a.submit for a, b in pairwise(base)]
    t, out = base[0].submit, []
    for _ in range(n):
        t += int(rng.choice(gaps) / scale)
        j = rng.choice(base)
        out.append(
            JobSpec(
                submit=t, run=j.run, time_limit=j.time_limit, nodes=j.nodes, partition=j.partition
            )
        )
    return out


def timed(profile: ClusterProfile, nodes: int, jobs: list[JobSpec]) -> tuple[float, int]:
    t0 = time.perf_counter()
    sim = Simulation(profile, nodes=nodes, start_time=jobs[0].submit, track_estimates=False)
    sim.add_jobs(jobs)
    sim.run()
    return time.perf_counter() - t0, sim.events


def slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / den if den else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--nodes", type=int, default=88)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--max-jobs", type=int, default=1_000_000)
    ap.add_argument("--deep-scale", type=float, default=2.0)
    ap.add_argument("--deep-max-jobs", type=int, default=100_000, help="deep-queue sizes cap")
    args = ap.parse_args()
    profile, wl, source = workload(args.trace, args.nodes, 1.0)
    sizes = [int(s) for s in args.sizes.split(",") if int(s) <= args.max_jobs]
    print(f"resampled from {source} ({len(wl.jobs)} jobs), {args.nodes} nodes")
    for label, scale in (
        ("load as traced", 1.0),
        (f"deep queue (x{args.deep_scale})", args.deep_scale),
    ):
        walls = []
        cap = args.deep_max_jobs if scale != 1.0 else args.max_jobs
        run_sizes = [n for n in sizes if n <= cap]
        for n in run_sizes:
            jobs = resample(wl.jobs, n, scale)
            wall, events = timed(profile, args.nodes, jobs)
            walls.append(wall)
            rate = f"{n / wall:8.0f} jobs/s {events / wall:8.0f} events/s"
            print(f"{label:>22}: {n:>8} jobs {wall:8.2f} s {rate}", flush=True)
        if len(run_sizes) > 1:
            exponent = slope([float(s) for s in run_sizes], walls)
            print(f"{label:>22}: growth exponent {exponent:.2f}")


if __name__ == "__main__":
    main()
