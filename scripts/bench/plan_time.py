"""One plan for 20 candidate shapes on a 2,000-job queue (target: <= 2 s on 2 cores).

    .venv/bin/python scripts/bench/plan_time.py [--jobs 2000] [--repeat 3] [--draws 4]
        [--trace traces/ls6-a100-slice.log.gz] [--nodes 60] [--simulate]
        [--cerit ../shared/traces/cerit_wagap_2013/wagap-2013.swf.gz]

Two queues on ls6's calibrated profile (79 nodes x 3 A100s): a synthetic one of
``--jobs`` jobs (ls6-like sizes and limits, every node busy, the rest pending with
priorities), and the bundled ls6 slice replayed on ``--nodes`` nodes to its busiest hour
(a real queue, smaller). Run times are learned from 3,000 synthetic finished jobs (the
slice: from its own finished jobs). The 20 shapes are 1, 2, 3, 4 and 6 GPUs x limits of
6, 12, 24 and 48 hours. Times ``plan_chain`` (queue pass, draws, ranking), median of
``--repeat``, for no draws and for ``--draws``, each without and with a wait calibration
(a second pass, at limits: :mod:`mirage.plan.calibrate`); ``--simulate`` also times the event
simulation (``method="simulate"``, the look-ahead's ``lookahead_starts``) on one shape
of each queue, for comparison (tens of seconds on the synthetic one).

A third queue, where CERIT's log is there: its busiest hour on its calibrated profile (18
nodes x 80 CPUs, no GPU; jobs share nodes by their CPUs), with 20 CPU shapes (4, 8, 16,
32 and 64 CPUs x the same limits) for 200 hours' work on 32 CPUs: the planner's CPU
accounting per node, on a real queue.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.plan import Options, Shape, Snapshot, parse_work, plan_chain
from mirage.plan.calibrate import WaitCalibration
from mirage.policy.lookahead import RunTimes
from mirage.profile.schema import ClusterProfile, load_profile
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.workload import from_table
from mirage.slurm.types import JobState, QueueSnapshot, SlurmJob

REPO = Path(__file__).resolve().parents[2]
H = 3600
TARGET_S = 2.0
NOW = 1_700_000_000
LIMITS_H = (0.5, 0.5, 1, 1, 2, 2, 4, 8, 12, 24, 48)


def shapes(profile: ClusterProfile) -> list[Shape]:
    part = profile.partition()
    out = []
    for g in (1, 2, 3, 4, 6):
        nodes = -(-g // part.gpus_per_node)
        out += [Shape(part.name, nodes, g // nodes, h * H) for h in (6, 12, 24, 48)]
    return out


def cpu_shapes(profile: ClusterProfile) -> list[Shape]:
    part = profile.partition()
    return [Shape(part.name, 1, 0, h * H, c) for c in (4, 8, 16, 32, 64) for h in (6, 12, 24, 48)]


def _job(rng: random.Random, k: int, profile: ClusterProfile, running: bool) -> SlurmJob:
    part = profile.partition()
    limit = int(rng.choice(LIMITS_H) * H)
    nodes = rng.choice((1, 1, 1, 1, 1, 1, 2, 2, 4))
    start = NOW - rng.randint(0, limit - 1) if running else None
    return SlurmJob(
        job_id=str(1000 + k), name="j", user=f"u{rng.randint(0, 60)}", account="a",
        partition=part.name, state=JobState.RUNNING if running else JobState.PENDING,
        reason="None" if running else "Priority", submit=NOW - rng.randint(0, 3 * 86400),
        eligible=NOW - rng.randint(0, 86400), start=start,
        end=None if start is None else start + limit, time_limit=limit, nodes=nodes,
        cpus=nodes * part.cpus_per_node, gpus=nodes * part.gpus_per_node,
        priority=rng.randint(1000, 100_000), dependency="", comment="",
    )  # fmt: skip


def synthetic(profile: ClusterProfile, n: int, seed: int = 1) -> Snapshot:
    """``n`` jobs: running ones until every node is taken (each on its own nodes, as squeue
    lists them), the rest pending."""
    rng = random.Random(seed)
    names = Simulation(profile).node_names
    free = profile.partition().nodes or 0
    jobs = []
    for k in range(n):
        job = _job(rng, k, profile, running=True)
        if job.nodes <= free:
            used = len(names) - free
            job = replace(job, node_list=tuple(names[used : used + job.nodes]))
            free -= job.nodes
        else:
            job = _job(rng, k, profile, running=False)
        jobs.append(job)
    runtimes = RunTimes()
    for _ in range(3000):
        limit = int(rng.choice(LIMITS_H) * H)
        runtimes.add(f"u{rng.randint(0, 60)}", int(limit * rng.random()), limit)
    return Snapshot(QueueSnapshot(taken_at=NOW, jobs=tuple(jobs)), profile, NOW, runtimes)


def busiest(profile: ClusterProfile, trace: str, nodes: int | None) -> Snapshot:
    """The trace replayed on ``nodes`` nodes (the slice: 60 of ls6's 79, a deeper queue;
    None: the profile's); the largest queue at an hourly look (as ``mirage plan --backend
    sim`` finds it)."""
    from mirage.trace.readers import load_trace

    if nodes is not None:
        part = profile.partition()
        sized = replace(part, nodes=nodes)
        profile = replace(
            profile, partitions=tuple(sized if p is part else p for p in profile.partitions)
        )

    jobs = from_table(load_trace(trace).jobs, profile).jobs
    first = min(j.submit for j in jobs)
    sim = Simulation(profile, start_time=first, track_estimates=False)
    sim.add_jobs_skipping_invalid(jobs)
    client = SimSlurmClient(sim)
    best = client.queue()
    for t in range(first + H, max(j.submit for j in jobs), H):
        sim.run_until(t)
        snap = client.queue()
        if len(snap.jobs) > len(best.jobs):
            best = snap
    runtimes = RunTimes()
    runtimes.observe(j for j in client.accounting(first) if j.end and j.end <= best.taken_at)
    return Snapshot(best, profile, best.taken_at, runtimes)


def timed(
    q: Snapshot, cands: list[Shape], options: Options, repeat: int, spec: str = "96h@4gpu"
) -> tuple[float, str]:
    work = parse_work(spec)
    unit = work.unit
    times, best = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = plan_chain(q, work, cands, options=options)
        times.append(time.perf_counter() - t0)
        c = plan.recommended
        done_h = (c.completion - q.now) / H
        best = f"{c.shape.size(unit)} {unit}s x {c.shape.time_limit // H} h, in {done_h:.0f} h"
    return statistics.median(times), best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--trace", default=str(REPO / "traces" / "ls6-a100-slice.log.gz"))
    ap.add_argument("--nodes", type=int, default=60, help="the slice's nodes")
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--cerit", default=str(REPO.parent / "shared" / "traces" / "cerit_wagap_2013"
                                           / "wagap-2013.swf.gz"))  # fmt: skip
    args = ap.parse_args()
    profile = load_profile(str(REPO / "models" / "ls6" / "profile.toml"))
    cands = shapes(profile)
    queues = {
        "synthetic": (synthetic(profile, args.jobs), cands, "96h@4gpu"),
        "ls6 slice": (busiest(profile, args.trace, args.nodes), cands, "96h@4gpu"),
    }
    if Path(args.cerit).exists():
        cerit = load_profile(str(REPO / "models" / "cerit" / "profile.toml"))
        queues["CERIT"] = (busiest(cerit, args.cerit, None), cpu_shapes(cerit), "200h@32cpu")
    else:
        print(f"no {args.cerit}: CERIT's queue left out")
    print(f"{len(cands)} shapes; target {TARGET_S:.1f} s per plan (median of {args.repeat})")
    print(
        f"{'queue':<10} {'jobs':>5} {'pending':>7} {'draws':>5} {'calibrated':>10} {'plan s':>7} "
        f"{'x target':>8}  best"
    )
    # a wait calibration (mirage.plan.calibrate) reads the queue a second time, at limits;
    # its cost does not depend on its alphas
    cal = WaitCalibration((0.5, 1.0), (0.0, 0.5, 1.0))
    for name, (q, shaped, spec) in queues.items():
        pending = sum(j.state is JobState.PENDING for j in q.snapshot.jobs)
        for draws in (0, args.draws):
            for c in (None, cal):
                o = Options(overhead_s=600, draws=draws, calibration=c)
                s, best = timed(q, shaped, o, args.repeat, spec)
                said = "yes" if c else "no"
                print(f"{name:<10} {len(q.snapshot.jobs):>5} {pending:>7} {draws:>5} "
                      f"{said:>10} {s:>7.2f} {s / TARGET_S:>8.2f}  {best}")  # fmt: skip
    if args.simulate:  # the look-ahead's event simulation, one shape, for comparison
        for name, (q, shaped, spec) in queues.items():
            s, _ = timed(q, shaped[:1], Options(overhead_s=600, method="simulate"), 1, spec)
            print(f"event simulation (method=simulate), {name}, 1 shape: {s:.2f} s")


if __name__ == "__main__":
    main()
