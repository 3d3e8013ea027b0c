"""Where the look-ahead's errors come from (ls6, test split).

1. Over every step of the last 24 h before each planned end, the look-ahead's simulated
   start against the true one (the probe's): a biased predictor shows here.
2. At the step where the look-ahead submits early (its rule with margin ``--margin-h``),
   the snapshot simulation is rerun with the true run times of every job, of the running
   jobs only, and of the pending jobs only. A predictor that is noisy but unbiased is
   late exactly where it decides (it submits early when its error happens to be
   positive); what the true run times take away is what each part of the run-time model
   costs, and what they leave is the future arrivals and the simulation itself.

    .venv/bin/python experiments/lookahead-attribution.py [--load 1.05] [--every-h 4]
        [--margin-h 0] [--level low]

Reads the probes and look-ahead curves from out/probe-cache (`mirage evaluate --cluster
ls6 --load L --policies …,lookahead` records them; missing ones are recorded here, on 2
processes); the reruns replay the test split once (about 4 minutes at 1.05).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from mirage.evaluate.harness import Walker, evaluate
from mirage.evaluate.inputs import default_test_setting
from mirage.evaluate.lookahead import LOOKAHEAD_CURVES, FinishedRuns, TrueRunTimes
from mirage.evaluate.probes import Recorder, base_world, generate, record_all, run_task
from mirage.evaluate.protocol import Protocol, Setting
from mirage.evaluate.stats import load_levels
from mirage.evaluate.whatif import runtime_oracle_step
from mirage.policy.cost import HELD_TWICE
from mirage.policy.features import RUNNING_STATES
from mirage.policy.lookahead import Request, RunPredictor, RunTimes, lookahead_starts
from mirage.sim.backend import SimSlurmClient
from mirage.sim.engine import Simulation
from mirage.slurm.types import SlurmJob

CACHE = "out/probe-cache"
H = 3600
#: The reruns, in order: the look-ahead's own run times, then true ones for some jobs.
VARIANTS = ("look-ahead", "true: all", "true: running", "true: pending")


@dataclass(frozen=True)
class Split:
    """Run times from ``running`` for the running jobs, from ``pending`` for the others."""

    running: RunPredictor
    pending: RunPredictor

    def predict_job(self, job: SlurmJob, now: int) -> int:
        source = self.running if job.state in RUNNING_STATES else self.pending
        return source.predict_job(job, now)


@dataclass
class Rerun:
    t: int
    starts: tuple[int, ...]  # one per VARIANTS

    def save(self, path: Path) -> None:
        raise AssertionError("reruns are not cached")


def rerun(sim: Simulation, protocol: Protocol, steps: dict[int, int]) -> Rerun:
    """The sample at ``sim.now`` replayed as :func:`lookahead_curve` does up to its step
    ``steps[t]``, where each variant's start is simulated."""
    t = sim.now
    world = base_world(sim, protocol)
    assert world is not None, "a usable sample has a base world"
    base, spec = world.sim, world.spec
    client = SimSlurmClient(base)
    req = Request(spec.partition, spec.nodes, spec.gpus, int(spec.time_limit or 0))
    base.run_until(world.steps[0])
    learned = RunTimes()
    feed = FinishedRuns(base, learned)
    for tau in world.steps[: steps[t] + 1]:
        base.run_until(tau)
        feed.catch_up()
    tau = world.steps[steps[t]]
    true = TrueRunTimes(base)
    predictors: list[RunPredictor] = [
        learned, true, Split(true, learned), Split(learned, true)
    ]  # fmt: skip
    snapshot = client.queue()
    starts = tuple(
        lookahead_starts(snapshot, base.profile, tau, p, [req], to_limit={world.pred_id})[0]
        for p in predictors
    )
    return Rerun(t, starts)


def _no_cache(path: Path) -> Rerun:
    raise AssertionError("reruns are not cached")


def step_errors(w: Walker, levels: np.ndarray) -> None:
    """Part 1: the simulated minus the true start over the last 24 h before the end."""
    print("1. simulated minus true start over the last 24 h before the planned end (h):")
    for level in ("low", "medium", "heavy"):
        errs = [np.zeros(0)]
        for s, start, lv in zip(w.samples, w.curves["lookahead"], levels, strict=True):
            lead = s.planned_end - s.steps
            use = (lead > 0) & (lead <= 24 * H) & (start >= 0) & (lv == level)
            use[-1] = False  # the reactive step: no decision there
            errs.append((start - s.succ_start)[use] / H)
        e = np.concatenate(errs)
        if e.size:
            q10, q50, q90 = np.quantile(e, [0.1, 0.5, 0.9])
            print(f"   {level:6s} {e.size:5d} steps: median {q50:+.2f}, mean {e.mean():+.2f},"
                  f" 10-90% [{q10:+.2f}, {q90:+.2f}]")  # fmt: skip


def decision_errors(
    setting: Setting, w: Walker, levels: np.ndarray, level: str, margin_h: float
) -> None:
    """Part 2: at each early submission, the start with true run times for some jobs."""
    steps: dict[int, int] = {}
    true_start: dict[int, int] = {}
    for s, start, lv in zip(w.samples, w.curves["lookahead"], levels, strict=True):
        k = runtime_oracle_step(start, s.planned_end, margin_h * H)
        if level in ("all", lv) and k < len(start) - 1:
            steps[s.t] = k
            true_start[s.t] = int(s.succ_start[k])
    print(f"2. {level} samples submitted before the planned end (margin {margin_h:+g} h):"
          f" {len(steps)}; their simulated minus true start (h):")  # fmt: skip
    if not steps:
        return
    rec = Recorder("", partial(rerun, steps=steps), _no_cache)
    reruns = run_task(setting, sorted(steps), None, rec)
    err = np.array([[(x - true_start[r.t]) / H for x in r.starts] for r in reruns])
    cached = {s.t: c for s, c in zip(w.samples, w.curves["lookahead"], strict=True)}
    same = sum(r.starts[0] == cached[r.t][steps[r.t]] for r in reruns)
    print(f"   (the look-ahead rerun matches its recorded curve at {same} of {len(reruns)})")
    for j, name in enumerate(VARIANTS):
        col = err[:, j]
        print(f"   {name:14s} median {np.median(col):+.2f}, mean {col.mean():+.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--load", type=float, default=1.05)
    ap.add_argument("--every-h", type=float, default=4.0)
    ap.add_argument("--margin-h", type=float, default=0.0)
    ap.add_argument("--level", default="low", choices=("low", "medium", "heavy", "all"))
    args = ap.parse_args()
    test = default_test_setting("ls6", args.load, args.every_h)
    setting, times = test.setting, test.times
    probes = generate(setting, times, cache=CACHE, n_jobs=2)
    curves = [c.start for c in record_all(setting, times, LOOKAHEAD_CURVES, cache=CACHE, n_jobs=2)]
    w = Walker(probes, setting.protocol, test.profile, test.partition, lookahead=curves)
    levels = load_levels(evaluate(w, ["reactive"], {}, HELD_TWICE)["reactive"].gap)
    print(f"ls6 load {args.load:g}, test split: {len(w.samples)} usable samples")
    step_errors(w, levels)
    decision_errors(setting, w, levels, args.level, args.margin_h)


if __name__ == "__main__":
    main()
