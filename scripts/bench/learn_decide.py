"""One batched decision for many chains, per trained policy (target: 1,000 chains in 1 s).

    .venv/bin/python scripts/bench/learn_decide.py [--models models/ls6] [--chains 1000]
        [--trace FILE --nodes N --days D]

Replays the bundled ls6 slice to its busiest moment (of its first month; with the full
trace, ``--nodes 70 --days 60`` finds a queue of 1.13's depth), takes the
simulated cluster's ``squeue``-shaped snapshot, and times ``policy.decide`` on ``--chains`` pending
transitions in one call (features from the snapshot, one model call), for every trained
policy found under ``--models`` and for the fixed-lead baseline beside them, for the
shipped default (QBETS behind the estimate guard, ``sbatch --test-only`` stubbed), for the
guard's look-ahead veto (``la-guard``, every chain asked), and for the
look-ahead (run times learned from every job finished by then; one simulation of the
queue per distinct request shape: once with every chain asking for the same shape, once
with ten shapes). Prints the median of ``--repeat`` calls and the ratio to the target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.learn.artifacts import POLICIES, ModelError, load_policy
from mirage.policy.base import DecisionContext, PendingTransition, Policy
from mirage.policy.baselines import FixedLead, Qbets
from mirage.policy.guard import SHIPPED, EstimateGuard, Guard
from mirage.policy.lookahead import LookaheadPolicy, RunTimes
from mirage.profile.schema import load_profile
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.workload import from_table
from mirage.slurm.types import SlurmJob, StartEstimate
from mirage.trace.readers import load_trace

REPO = Path(__file__).resolve().parents[2]
H = 3600
TARGET_S = 1.0


def busy_context(
    profile_path: str, trace: str, nodes: int | None = None, days: int = 30
) -> tuple[DecisionContext, int, RunTimes, list[SlurmJob]]:
    profile = load_profile(profile_path)
    if nodes is not None:  # a smaller cluster: a busier queue (70 of ls6's 79 is load 1.13)
        part = profile.partition(None)
        sized = replace(part, nodes=nodes)
        profile = replace(
            profile, partitions=tuple(sized if q is part else q for q in profile.partitions)
        )
    jobs = from_table(load_trace(trace).jobs, profile).jobs
    first = min(j.submit for j in jobs)
    sim = Simulation(profile, start_time=first, track_estimates=False)
    sim.add_jobs_skipping_invalid(jobs)
    client = SimSlurmClient(sim)
    best = client.queue()
    for k in range(1, 2 * days):  # the busiest of the first days, sampled twice a day
        sim.run_until(first + k * 43200)
        snap = client.queue()
        if len(snap.jobs) > len(best.jobs):
            best = snap
    ctx = DecisionContext(now=best.taken_at, snapshot=best, profile=profile)
    runtimes = RunTimes()
    runtimes.observe(j for j in client.accounting(first) if j.end and j.end <= best.taken_at)
    started = [j for j in client.accounting(first) if j.start and j.start <= best.taken_at]
    return ctx, len(best.jobs), runtimes, started


def timed(policy: Policy, ctx: DecisionContext, pending: list[PendingTransition], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = policy.decide(ctx, pending)
        times.append(time.perf_counter() - t0)
        assert len(out) == len(pending)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=str(REPO / "models" / "ls6"))
    ap.add_argument("--profile", default=str(REPO / "models" / "ls6" / "profile.toml"))
    ap.add_argument("--trace", default=str(REPO / "traces" / "ls6-a100-slice.log.gz"))
    ap.add_argument("--chains", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--nodes", type=int, help="the partition's node count (default: profile's)")
    ap.add_argument("--days", type=int, default=30, help="how far to look for the busiest queue")
    args = ap.parse_args()
    ctx, queued, runtimes, started = busy_context(args.profile, args.trace, args.nodes, args.days)
    part = ctx.profile.partition(None).name
    pending = [
        PendingTransition(
            f"c{i}", str(i), ctx.now - (i * 97) % (48 * H), 48 * H, 1, 0, 48 * H, part
        )
        for i in range(args.chains)
    ]
    print(f"snapshot: {queued} jobs in squeue; {args.chains} pending transitions")
    policies: dict[str, Policy] = {"fixed-lead": FixedLead(H)}
    for kind in POLICIES:
        try:
            policies[kind] = load_policy(Path(args.models) / kind)[0]
        except ModelError as exc:
            print(f"{kind}: skipped ({exc})")
    ahead = LookaheadPolicy(0, runtimes)
    # the daemon's default: QBETS on the waits of the jobs started by then, behind the guard,
    # whose sbatch --test-only is a stub here (its cost is the controller's, one per shape)
    shipped = EstimateGuard(Qbets(SHIPPED.qbets_quantile), SHIPPED.guard_margin_s)
    shipped.observe(replace(ctx, accounting=started))
    far = StartEstimate(None, ctx.now + 24 * H)
    guarded_ctx = replace(ctx, estimate_start=lambda _req: far)
    shapes = [replace(p, succ_time_limit=(4 + 4 * (i % 10)) * H) for i, p in enumerate(pending)]
    # the look-ahead veto (Theta's shipped guard), every chain asked: its inner policy
    # submits all of them, so the guard simulates each request shape
    la_guard = Guard(FixedLead(48 * H), estimate_margin_s=None, lookahead_margin_s=2 * H)
    la_guard.runtimes = runtimes
    runs: dict[str, tuple[Policy, list[PendingTransition]]] = {
        **{name: (policy, pending) for name, policy in policies.items()},
        "shipped": (shipped, pending),
        "shipped/10": (shipped, shapes),
        "la-guard": (la_guard, pending),
        "la-guard/10": (la_guard, shapes),
        "lookahead": (ahead, pending),
        "lookahead/10": (ahead, shapes),
        # the median of 16 simulations with drawn run times (lookahead_draws = 16)
        "lookahead*16": (LookaheadPolicy(0, runtimes, draws=16), pending),
        "lookahead*16/10": (LookaheadPolicy(0, runtimes, draws=16), shapes),
    }
    print(f"lookahead: {len(runtimes)} finished jobs' run times known")
    print(f"{'policy':<16}{'s/decision':>12}{'chains/s':>12}{'x target':>10}")
    for name, (policy, batch) in runs.items():
        s = timed(policy, guarded_ctx if name.startswith("shipped") else ctx, batch, args.repeat)
        verdict = "PASS" if s <= TARGET_S else "FAIL"
        print(f"{name:<16}{s:>12.4f}{args.chains / s:>12.0f}{TARGET_S / s:>10.1f} {verdict}")


if __name__ == "__main__":
    main()
