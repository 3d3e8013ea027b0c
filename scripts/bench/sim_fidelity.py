"""Simulator fidelity on the real test cluster: per-job starts, real vs real vs simulated.

    scripts/slurm-testbed/start.sh
    .venv/bin/python scripts/bench/sim_fidelity.py [--seed 20] [--jobs 42] [--runs 2]

Runs the scripted workload of ``mirage.sim.fidelity`` ``--runs`` times on the test cluster
(about 6 minutes each; the queue must be empty: leftover ``mirage-t-``/``mirage-fid-``
jobs are cancelled, other jobs waited for) and once in the simulator configured from the
captured cluster profile. Prints the workload's knife edges (one-job 1 s changes that move a
simulated start by more than 35 s: ties that real runs split on), the real-vs-real share
of starts within 35 s (the noise floor), the sim-vs-real share against each real run,
median absolute errors, the pass mark, and the jobs with the largest differences.
``--sim-only`` skips the cluster; ``--json`` saves the runs and ``--replay`` scores saved
runs against the current simulator.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.sim import fidelity as fid
from mirage.slurm.cli_backend import CliSlurmClient


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=fid.DEFAULT_SEED)
    ap.add_argument("--jobs", type=int, default=42)
    ap.add_argument("--runs", type=int, default=2, help="real runs (>= 2 for the noise floor)")
    ap.add_argument("--exclusive", action="store_true", help="whole nodes (default: shared)")
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--json", type=Path, help="write every run's per-job starts here")
    ap.add_argument(
        "--replay",
        type=Path,
        help="score the real runs saved by --json against the current simulator (no cluster)",
    )
    args = ap.parse_args(argv)

    client = CliSlurmClient(timeout=60.0)
    jobs = fid.scripted_workload(args.seed, args.jobs)
    saved: list[fid.RunResult] = []
    if args.replay:
        jobs, saved = load_runs(args.replay)
        model = fid.default_model(exclusive=args.exclusive)
    else:
        model = fid.testbed_model(client, exclusive=args.exclusive)
    sim = fid.run_sim(jobs, model)
    easy = fid.run_sim(jobs, model, backfill="easy")
    fifo = fid.run_sim(jobs, model, fifo=True)
    print(f"workload seed {args.seed}: {fid.describe(jobs)}")
    print(
        f"sim: makespan {sim.makespan} s; starts differing (>= 5 s) from slurm backfill: "
        f"EASY {fid.count_differences(sim.starts, easy.starts)}, "
        f"FIFO {fid.count_differences(sim.starts, fifo.starts)}"
    )
    edges = fid.knife_edges(jobs, model)
    print(
        f"knife edges (a 1 s change to one job moves a start > {fid.TOLERANCE_S} s): {len(edges)}"
    )
    for e in edges:
        print(f"  {e.key} {e.what} {e.shift:+d} s moves {', '.join(e.moved)}")
    if args.sim_only:
        return 0

    reals = saved
    for k in range(0 if saved else args.runs):
        fid.drain_queue(client, log=print)
        print(f"real run {k + 1}/{args.runs} ...", flush=True)
        run = fid.run_real(client, jobs, exclusive=args.exclusive, log=print)
        print(f"  {run.label}: makespan {run.makespan} s", flush=True)
        reals.append(run)

    twins = score(jobs, model, sim, reals)
    if args.json:
        out = {
            "jobs": [asdict(j) for j in jobs],
            "runs": [asdict(r) for r in [*reals, *twins, sim]],
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


def score(
    jobs: list[fid.FidelityJob],
    model: fid.SimModel,
    sim: fid.RunResult,
    reals: list[fid.RunResult],
) -> list[fid.RunResult]:
    """Print the shares, errors, pass mark and table; return the simulated twins."""
    print()
    tol = fid.TOLERANCE_S
    floor = []
    for a, b in itertools.combinations(reals, 2):
        c = fid.compare_starts(a.starts, b.starts)
        floor.append(c.share)
        print(
            f"real vs real  ({a.label} / {b.label}): {c.share:6.1%} within {tol} s, "
            f"median |diff| {c.median_abs:.1f} s, max {c.max_abs} s, missing {len(c.missing)}"
        )
    shares = []
    twins = []
    for r in reals:
        twin = fid.sim_like(jobs, model, r)
        twins.append(twin)
        kill = fid.model_at(model, r).kill_phase_s
        calc = fid.model_at(model, r).calc_phase_s
        for label, sim_run in ((f"{twin.label}", twin), ("sim blind", sim)):
            c = fid.compare_starts(sim_run.starts, r.starts)
            if sim_run is twin:
                shares.append(c.share)
            print(
                f"{label:<13} vs {r.label}: {c.share:6.1%} within {tol} s, "
                f"median |diff| {c.median_abs:.1f} s, max {c.max_abs} s, missing {len(c.missing)}"
                + (
                    f"  (limit-check phase {kill} s, recalc phase {calc} s)"
                    if sim_run is twin
                    else ""
                )
            )
    if floor:
        rr, sr = statistics.mean(floor), statistics.mean(shares)
        verdict = "PASS" if fid.passes(sr, rr) else "FAIL"
        print(
            f"pass mark: sim share (mean over real runs) {sr:.1%} >= real-vs-real {rr:.1%} - "
            f"{fid.ALLOWED_GAP:.0%} -> {verdict}"
        )
    print()
    print(fid.job_table(jobs, [*reals, *twins], top=15))
    return twins


def load_runs(path: Path) -> tuple[list[fid.FidelityJob], list[fid.RunResult]]:
    """The workload and the real runs of a --json file."""
    data = json.loads(path.read_text())
    jobs = [fid.FidelityJob(**j) for j in data["jobs"]]
    runs = []
    for r in data["runs"]:
        if r["label"].startswith("real"):
            clock = fid.ClusterClock(**r["clock"]) if r.get("clock") else None
            runs.append(replace(fid.RunResult(**r), clock=clock))
    return jobs, runs


if __name__ == "__main__":
    sys.exit(main())
