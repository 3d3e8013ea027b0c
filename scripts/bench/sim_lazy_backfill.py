"""Lazy backfill's skip past the first instant with no node free, on heavy-load probes.

    .venv/bin/python scripts/bench/sim_lazy_backfill.py [--cluster ls6] [--load 1.13]
        [--samples 0,4] [--step-min 60]

Probes samples of ``mirage evaluate``'s test split (the cluster's known trace, shrunk to
``--load``) three ways, side by side in one run, and checks that all three give the same
outcome curves:

- *eager*: start estimates kept fresh (``track_estimates=True``), every backfill pass
  plans every job it tests;
- *lazy, no dry skip*: ``track_estimates=False`` as before this skip (``Availability.dry``
  patched to "now, if no node is free now; else never"), which only skips a partition's
  jobs when it has no node free now;
- *lazy*: as the evaluation runs, also skipping jobs that cannot end before the first
  instant the plan has no node free (``mirage.sim.backfill._counts``).

The skip is in the whole-node backfill (ls6, Theta). Shared nodes (CERIT) plan per node;
the same cut there, at the first instant no node has room for the pass's smallest
per-node request, was tried and measured no faster on CERIT's probes (1.00 and 1.10
times, two samples), so it was not kept: there the middle and last columns are the same
code.

``--step-min`` coarsens the decision steps (the evaluation uses 10) to keep the run short;
the work per step is the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mirage.evaluate.inputs import default_test_setting
from mirage.evaluate.probes import SampleResult, load_setting_jobs, probe_sample
from mirage.sim import plan
from mirage.sim.engine import Simulation

FIELDS = ("steps", "succ_start", "censored", "estimate", "queue", "hist_start", "hist_wait")


def now_only(self: plan.Availability) -> float:
    """The rule before the skip: a partition with no node free now skips every job."""
    return self.times[0] if self.free[0] <= 0 else math.inf


def same(a: SampleResult, b: SampleResult) -> bool:
    return a.pred_start == b.pred_start and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS
    )


def timed(
    make: Callable[[], Simulation], run: Callable[[Simulation], SampleResult]
) -> tuple[SampleResult, float]:
    sim = make()
    t0 = time.perf_counter()
    res = run(sim)
    return res, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cluster", default="ls6")
    ap.add_argument("--load", type=float, default=1.13)
    ap.add_argument("--samples", default="0,4", help="indices into the test split's samples")
    ap.add_argument("--step-min", type=int, default=60)
    ap.add_argument("--every-h", type=float, default=12, help="sample spacing, as evaluate's")
    args = ap.parse_args()
    split = default_test_setting(args.cluster, args.load, args.every_h)
    protocol = dataclasses.replace(split.setting.protocol, step_s=args.step_min * 60)
    profile, jobs = load_setting_jobs(split.setting)
    first = min(j.submit for j in jobs)
    print(
        f"{args.cluster} at load {args.load} ({split.setting.nodes} nodes), "
        f"{len(jobs)} jobs, steps every {args.step_min} min"
    )
    print(f"{'sample':>6} {'eager s':>8} {'lazy, no dry s':>15} {'lazy s':>7} {'ratio':>6}  same")
    totals = [0.0, 0.0, 0.0]
    for idx in (int(x) for x in args.samples.split(",")):
        t = split.times[idx]
        base = Simulation(profile, start_time=min(first, t), track_estimates=False)
        base.add_jobs_skipping_invalid(jobs)
        base.run_until(t)

        def make(eager: bool, base: Simulation = base) -> Simulation:
            sim = base.fork()
            sim.track_estimates = eager
            return sim

        def run(sim: Simulation) -> SampleResult:
            return probe_sample(sim, protocol)

        eager, te = timed(lambda: make(True), run)
        with patch.object(plan.Availability, "dry", now_only):
            nodry, tn = timed(lambda: make(False), run)
        lazy, tl = timed(lambda: make(False), run)
        ok = same(eager, lazy) and same(nodry, lazy)
        totals = [totals[0] + te, totals[1] + tn, totals[2] + tl]
        print(f"{idx:6d} {te:8.1f} {tn:15.1f} {tl:7.1f} {tn / tl:6.2f}  {'yes' if ok else 'NO'}")
        if not ok:
            raise SystemExit("the three variants disagree")
    te, tn, tl = totals
    print(f"{'all':>6} {te:8.1f} {tn:15.1f} {tl:7.1f} {tn / tl:6.2f}")
    print(f"lazy is {tn / tl:.2f}x lazy without the dry skip and {te / tl:.2f}x eager")


if __name__ == "__main__":
    main()
