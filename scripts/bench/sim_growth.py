"""Wall time against trace length and queue depth: 10k, 100k, 1M jobs, in one run.

    .venv/bin/python scripts/bench/sim_growth.py [--nodes 88] [--sizes 10000,100000,1000000]
        [--loads 1,1.6] [--overload 2] [--overload-max-jobs 100000] [--trace PATH]

Synthetic traces resampled from ls6 (or the synthetic stand-in): each job's size, limit
and run time are drawn from the trace's jobs, and inter-arrival times from the trace's
inter-arrival times divided by the load factor, so the load stays the same at every
length. ``--loads``: the load factors run at every size; at x1 the queue is short (a few
jobs pending, whatever the length); at x1.6 it is deep (hundreds to thousands pending) and
still deepening with length (measured: mean 315 pending at 10k jobs, 942 at 30k, 1,174 at
100k, 1,877 at 1M, at most 8,157), so the slope there mixes length and depth.
``--overload``: a load the cluster cannot sustain (x2: the queue grows without bound), run
only up to ``--overload-max-jobs``. Backfill tests at most bf_max_job_test (500) jobs per
pass, so once the queue is deeper than that, a pass costs about the same, and time grows
with length again; the main pass's vectorised priorities grow with the queue (numpy over
every pending job), which shows at 100k overloaded jobs (mean 8,585 pending). Measured on
the 2-core machine (2026-11-26, beside other jobs): x1.6 6.2 s / 26.8 s / 94.5 s / 1,106 s
at 10k / 30k / 100k / 1M jobs (exponent 1.11 overall, 1.07 from 100k to 1M, 797 MiB at
1M); x2 9.8 s / 39.7 s / 120 s at 10k / 30k / 100k (1.09).

Each (load, size) runs in a child process of its own, so that its peak RSS is its own
(``ru_maxrss``; ``base`` is the child's RSS before the jobs are built: the interpreter,
numpy, pandas and the base trace). Printed per run: wall and CPU seconds of the replay
(building the job list excluded), jobs/s, events/s, peak RSS and RSS growth over the base,
mean and maximum pending jobs (mean by Little's law: total wait / span). Per load: the
growth exponent, the least-squares slope of log wall time over log jobs (1 = linear).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import resource
import sys
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from _common import workload

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


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def depth(jobs: list[JobSpec], sim: Simulation) -> tuple[float, int]:
    """(mean, max) pending jobs over the replay; a job that never started counts to the end."""
    sub = np.fromiter((j.submit for j in jobs), np.int64, len(jobs))
    last = max(e for e in sim.end if e is not None)
    st = np.fromiter((last if s is None else s for s in sim.start), np.int64, len(jobs))
    mean = float((st - sub).sum()) / max(1, last - int(sub[0]))
    times = np.concatenate([sub, st])
    steps = np.concatenate([np.ones(len(sub), np.int64), -np.ones(len(st), np.int64)])
    order = np.lexsort((steps, times))  # at one instant, starts before submits
    return mean, int(np.cumsum(steps[order]).max())


def one(trace: str | None, nodes: int, n: int, load: float) -> dict[str, float]:
    """One (size, load) replay in this process."""
    profile, wl, _ = workload(trace, nodes, 1.0)
    base = rss_mib()
    jobs = resample(wl.jobs, n, load)
    w0, c0 = time.perf_counter(), time.process_time()
    sim = Simulation(profile, nodes=nodes, start_time=jobs[0].submit, track_estimates=False)
    sim.add_jobs(jobs)
    sim.run()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    mean, top = depth(jobs, sim)
    return {
        "jobs": n,
        "load": load,
        "wall": wall,
        "cpu": cpu,
        "events": sim.events,
        "rss": rss_mib(),
        "base": base,
        "mean_pending": mean,
        "max_pending": top,
        "backfill_passes": sim.backfill_passes,
    }


def run_child(args: argparse.Namespace, n: int, load: float) -> dict[str, float]:
    """``one`` in a fresh interpreter (spawned), so that its peak RSS is its own."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result: dict[str, float] = pool.apply(one, (args.trace, args.nodes, n, load))
    return result


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
    ap.add_argument("--loads", default="1,1.6", help="load factors run at every size")
    ap.add_argument("--overload", type=float, default=2.0, help="0: no overload runs")
    ap.add_argument("--overload-max-jobs", type=int, default=100_000)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    plan = [(float(x), sizes) for x in args.loads.split(",")]
    if args.overload:
        plan.append((args.overload, [n for n in sizes if n <= args.overload_max_jobs]))
    print(f"{args.nodes} nodes; jobs resampled from {args.trace or 'ls6 (or its stand-in)'}")
    print(
        f"{'load':>5} {'jobs':>8} {'wall s':>8} {'cpu s':>8} {'jobs/s':>7} {'events/s':>8} "
        f"{'RSS MiB':>8} {'+base':>6} {'pending mean':>12} {'max':>7}"
    )
    for load, run_sizes in plan:
        walls = []
        for n in run_sizes:
            r = run_child(args, n, load)
            walls.append(r["wall"])
            print(
                f"{load:5.1f} {n:8d} {r['wall']:8.2f} {r['cpu']:8.2f} {n / r['wall']:7.0f} "
                f"{r['events'] / r['wall']:8.0f} {r['rss']:8.0f} {r['rss'] - r['base']:6.0f} "
                f"{r['mean_pending']:12.0f} {r['max_pending']:7.0f}",
                flush=True,
            )
        if len(run_sizes) > 1:
            print(f"{load:5.1f} growth exponent {slope([float(s) for s in run_sizes], walls):.2f}")


if __name__ == "__main__":
    main()
