"""ls6 waits with and without the per-user limit (MaxJobsPerUser), simulated vs real.

.venv/bin/python scripts/bench/sim_limits.py [--trace PATH] [--nodes 88,79] [--limit 8]
    [--before 2023-03-01]

Replays the trace (with dependency holds, as calibration does) on each node count, with
no limit and with a partition QOS MaxJobsPerUser=--limit, and compares waits from
eligible time with the trace's over the measured jobs (mirage.sim.prepare.compare: KS
distance, mean, median). Two windows: the whole trace, and the calibration's (jobs
submitted before --before, America/Chicago).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LS6

from mirage.profile.schema import ClusterProfile, Qos, load_profile
from mirage.sim.prepare import compare, prepare_trace, replay
from mirage.slurm.syntax import parse_when
from mirage.trace.readers import load_trace


def with_limit(profile: ClusterProfile, limit: int) -> ClusterProfile:
    if not limit:
        parts = tuple(dataclasses.replace(p, qos="") for p in profile.partitions)
        return dataclasses.replace(profile, partitions=parts, qos=())
    parts = tuple(dataclasses.replace(p, qos="cap") for p in profile.partitions)
    return dataclasses.replace(
        profile, partitions=parts, qos=(Qos("cap", max_jobs_per_user=limit),)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(LS6))
    ap.add_argument("--profile", default="ls6")
    ap.add_argument("--nodes", default="88,79")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--before", default="2023-03-01")
    args = ap.parse_args()
    base = load_profile(args.profile)
    df = load_trace(args.trace).jobs
    cutoff = parse_when(args.before, base.timezone)
    print(
        f"{'window':>12} {'nodes':>5} {'limit':>5} {'jobs':>6} {'unstarted':>9} {'KS':>6} "
        f"{'sim mean h':>10} {'real mean h':>11} {'sim med s':>9} {'real med s':>10} "
        f"{'wall s':>6}"
    )
    for window, before in (("full", None), (f"<{args.before}", cutoff)):
        for nodes in (int(n) for n in args.nodes.split(",")):
            for limit in (0, args.limit):
                profile = with_limit(base, limit)
                prep = prepare_trace(df, profile, max_nodes=nodes, before=before)
                t0 = time.perf_counter()
                rep = replay(prep, profile, nodes)
                wall = time.perf_counter() - t0
                w = compare(prep, rep.sim)
                print(
                    f"{window:>12} {nodes:5d} {limit or '-':>5} {w.jobs:6d} {w.unstarted:9d} "
                    f"{w.ks:6.3f} {w.sim_mean_s / 3600:10.2f} {w.real_mean_s / 3600:11.2f} "
                    f"{w.sim_median_s:9.0f} {w.real_median_s:10.0f} {wall:6.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
