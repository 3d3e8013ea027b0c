"""Reactive submission against the daemon's policy, on the real test cluster, same workload.

    .venv/bin/python scripts/bench/daemon_cluster.py [--policies fixed-lead,reactive]
        [--chains 2] [--segments 3] [--limit-min 1] [--lead 45] [--pending 2] [--seed 7]
        [--json OUT.json]

Needs the Slurm test cluster (``scripts/slurm-testbed/start.sh``) to itself: it waits
until the queue is empty before each run. One run per policy, one after the other, each
the scenario of ``tests/slurm/test_daemon_e2e.py`` (``run_under_load`` in
tests/slurm/conftest.py): the real ``mirage daemon`` process (its own config, database and
socket) manages ``--chains`` chains of ``--segments`` segments of ``--limit-min``-minute
limits on whole nodes' GPUs, while a background workload of ordinary sbatch jobs (1-3
minute limits, 1-4 GPUs, the same seeded sequence in every run) keeps about ``--pending``
jobs waiting and the 16 GPUs busy. ``reactive`` submits each successor when its
predecessor has ended (what users do by hand); ``fixed-lead`` ``--lead`` seconds before
its planned end, with a handoff (USR1, the predecessor checkpoints and exits) when the
successor starts early.

Every transition is read back from sacct: gap = start(k+1) - planned end(k), interruption
= idle time between the two jobs, overlap = allocation held twice (or given up by the
handoff), J (``mirage.policy.cost``, the default cost). Printed: per transition
the gap / interruption / overlap under each policy side by side, then per policy the
means, and per run its wall time and how busy the background kept the cluster.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.slurm.cli_backend import CliSlurmClient
from tests.slurm.conftest import (
    LoadRun,
    MirageDaemon,
    TransitionRecord,
    run_under_load,
    set_policy,
    transition_table,
    until,
)


def wait_idle(client: CliSlurmClient, timeout: float) -> None:
    """Until squeue is empty: each run starts on the same idle cluster."""
    until(lambda: not client.queue().jobs, timeout, "an empty queue", every=2)


def one_run(client: CliSlurmClient, policy: str, args: argparse.Namespace) -> LoadRun:
    top = Path(tempfile.mkdtemp(prefix="mg-bench-", dir="/tmp"))
    name = "bench" + policy.replace("-", "")
    (top / name).mkdir()
    d = MirageDaemon(top / name, name)
    set_policy(d, policy)
    d.set_lead(args.lead)
    try:
        return run_under_load(
            d,
            client,
            chains=args.chains,
            segments=args.segments,
            limit_min=args.limit_min,
            seed=args.seed,
            pending=args.pending,
            timeout=args.timeout,
        )
    finally:
        d.stop()
        shutil.rmtree(d.sock_dir, ignore_errors=True)
        print(f"  ({policy}: daemon state and logs in {top})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="fixed-lead,reactive")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--segments", type=int, default=3)
    ap.add_argument("--limit-min", type=int, default=1, help="segment time limit, minutes")
    ap.add_argument("--lead", type=int, default=45, help="fixed-lead's lead, seconds")
    ap.add_argument("--pending", type=int, default=2, help="background jobs kept waiting")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    ap.add_argument("--json", default=None, help="also write the transitions here")
    args = ap.parse_args()

    client = CliSlurmClient(timeout=60.0)
    runs: dict[str, list[TransitionRecord]] = {}
    summary = []
    for policy in args.policies.split(","):
        wait_idle(client, 600)
        print(f"run: {policy} ...", flush=True)
        run = one_run(client, policy, args)
        runs[policy] = run.transitions
        first = min((t.times.pred_start for t in run.transitions), default=run.started)
        last = max((t.times.succ_start for t in run.transitions), default=run.ended)
        busy = run.load.busy_share(first, last)
        summary.append(
            f"{policy:<12} wall {run.ended - run.started:>4} s, {len(run.load.submitted)} "
            f"background jobs, queue non-empty and >= 12 of 16 GPUs busy in {busy:.0%} "
            f"of the samples over the transitions"
        )
        print(f"  {summary[-1]}", flush=True)
    print()
    print(
        f"{args.chains} chains x {args.segments} segments of {args.limit_min} min, "
        f"lead {args.lead} s, background seed {args.seed}, ~{args.pending} waiting "
        f"({time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime())})"
    )
    print(transition_table(runs))
    print()
    print("\n".join(summary))
    if args.json:
        out = {
            p: [{**asdict(t), "gap": t.gap, "cost": t.cost} for t in ts] for p, ts in runs.items()
        }
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
