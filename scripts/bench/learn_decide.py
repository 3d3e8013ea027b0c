"""One batched decision for many chains, per trained policy (target: 1,000 chains in 1 s).

    .venv/bin/python scripts/bench/learn_decide.py [--models models/ls6] [--chains 1000]

Replays the bundled ls6 slice to its busiest moment (of its first month), takes the
simulated cluster's ``squeue``-shaped snapshot, and times ``policy.decide`` on ``--chains`` pending
transitions in one call (features from the snapshot, one model call), for every trained
policy found under ``--models`` and for the fixed-lead baseline beside them. Prints the
median of ``--repeat`` calls and the ratio to the target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.learn.artifacts import POLICIES, ModelError, load_policy
from mirage.policy.base import DecisionContext, PendingTransition, Policy
from mirage.policy.baselines import FixedLead
from mirage.profile.schema import load_profile
from mirage.sim import Simulation
from mirage.sim.backend import SimSlurmClient
from mirage.sim.workload import from_table
from mirage.trace.readers import load_trace

REPO = Path(__file__).resolve().parents[2]
H = 3600
TARGET_S = 1.0


def busy_context(profile_path: str, trace: str) -> tuple[DecisionContext, int]:
    profile = load_profile(profile_path)
    jobs = from_table(load_trace(trace).jobs, profile).jobs
    first = min(j.submit for j in jobs)
    sim = Simulation(profile, start_time=first, track_estimates=False)
    sim.add_jobs_skipping_invalid(jobs)
    client = SimSlurmClient(sim)
    best = client.queue()
    for k in range(1, 60):  # the busiest of the first 30 days, sampled twice a day
        sim.run_until(first + k * 43200)
        snap = client.queue()
        if len(snap.jobs) > len(best.jobs):
            best = snap
    ctx = DecisionContext(now=best.taken_at, snapshot=best, profile=profile)
    return ctx, len(best.jobs)


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
    args = ap.parse_args()
    ctx, queued = busy_context(args.profile, args.trace)
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
    print(f"{'policy':<12}{'s/decision':>12}{'chains/s':>12}{'x target':>10}")
    for name, policy in policies.items():
        s = timed(policy, ctx, pending, args.repeat)
        verdict = "PASS" if s <= TARGET_S else "FAIL"
        print(f"{name:<12}{s:>12.4f}{args.chains / s:>12.0f}{TARGET_S / s:>10.1f} {verdict}")


if __name__ == "__main__":
    main()
