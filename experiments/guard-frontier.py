"""How far can the guarded family go on a test split, when it is chosen on that split itself?

    .venv/bin/python experiments/guard-frontier.py ls6 models/ls6/profile.toml 1,1.05,1.13
        [--split test] [--every-h 4] [--step-min 10] [--cache out/probe-cache]
        [--lookahead] [--show qbets:0.9:24]

The shipped configuration is chosen on the tuning month (mirage.evaluate.shipping). This
asks the question the other way round, as an upper bound: walk every candidate of the
selection grid (wait baselines and Slurm's estimate, behind the estimate guard at every
margin; with ``--lookahead`` also behind the look-ahead veto, alone or beside it, and with
no guard at all) on the *test* split, and print per candidate its worst no-harm bound (the
upper end of the paired 95% interval of candidate - reactive, over every level with enough
samples) and its share of the oracle gain per level. If no candidate of the grid keeps no harm and
takes a level's gain even when picked on the test month, no tuning month can pick one.

``--show METHOD:CONSTANT:MARGIN_H`` then lists, for that candidate, the quiet-level samples
it made worse and the busy ones it helped most: each with the decision step's queue (what
the daemon sees when it pre-submits), the hours left to the planned end, Slurm's estimate
and where the successor started. Only samples already in the probe cache are read.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from mirage.evaluate.harness import HOUR, Walker, factory, guarded
from mirage.evaluate.inputs import default_profile
from mirage.evaluate.probes import QUEUE_FEATURES
from mirage.evaluate.shipping import Candidate, candidates, inner_submits
from mirage.evaluate.stats import load_levels
from mirage.policy.cost import HELD_TWICE


def select_shipped() -> Any:
    """scripts/select_shipped.py (its tuning_walker builds a split's walker as it does)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "select_shipped.py"
    spec = importlib.util.spec_from_file_location("select_shipped", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cells(c: Candidate) -> list[tuple[float, str, float, float]]:
    """(load, level, share, no-harm upper bound) for every judged level of ``c``."""
    return [(ld, lv, g.share, g.harm.hi) for ld, per in c.levels.items()
            for lv, g in per.items() if lv != "all"]  # fmt: skip


def table(cands: list[Candidate]) -> None:
    rows = sorted(cands, key=lambda c: max(hi for *_, hi in cells(c)))
    print("candidate (on the test split), worst no-harm upper bound (h), then per load/level "
          "the share of the oracle gain [upper bound]")  # fmt: skip
    for c in rows:
        worst = max(hi for *_, hi in cells(c))
        per = "  ".join(f"{ld:g}/{lv} {sh:5.0%} [{hi:+.2f}]" for ld, lv, sh, hi in cells(c))
        print(f"  {c.label():45s} {worst:+.2f}  {per}")
    levels = sorted({(ld, lv) for c in cands for ld, lv, *_ in cells(c)})
    print("per level: the best share of any candidate, and of a candidate with no harm anywhere")
    for ld, lv in levels:
        shares = [(sh, c) for c in cands for l2, v2, sh, _ in cells(c) if (l2, v2) == (ld, lv)]
        best = max(sh for sh, _ in shares)
        safe = [sh for sh, c in shares if max(hi for *_, hi in cells(c)) <= 0.05]
        print(f"  load {ld:g} {lv:6s}  any {best:5.0%}  no harm {max(safe, default=0):5.0%}")


def show(walker: Walker, method: str, constant: float, margin_h: float) -> None:
    cost_model = HELD_TWICE
    react = walker.run(factory("reactive", None))
    cand = guarded(walker, inner_submits(walker, method, constant), margin_h * HOUR)
    diff = (cand.cost(cost_model) - react.cost(cost_model)) / HOUR
    level = load_levels(react.gap)
    print(f"{method} {constant:g} behind a {margin_h:g} h guard: decision-step queue "
          f"({', '.join(QUEUE_FEATURES)})")  # fmt: skip
    worse = [i for i in np.argsort(-diff) if level[i] == "low" and diff[i] > 0.005]
    better = [i for i in np.argsort(diff) if level[i] != "low" and diff[i] < -0.005][:8]
    for name, idx in (("quiet, made worse", worse), ("busy, helped most", better)):
        print(f" {name}:")
        for i in idx:
            s, k = walker.samples[i], int(cand.step[i])
            est = (s.estimate[k] - s.planned_end) / HOUR if s.estimate[k] >= 0 else float("nan")
            left = (s.planned_end - s.steps[k]) / HOUR
            started = (s.succ_start[k] - s.planned_end) / HOUR
            print(f"   {level[i]:6s} J {diff[i]:+6.2f} h  {left:4.1f} h left  estimate "
                  f"end{est:+6.1f} h  started end{started:+6.2f} h  "
                  f"queue {s.queue[k].round().astype(int).tolist()}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cluster")
    ap.add_argument("profile")
    ap.add_argument("loads", help="comma-separated load factors")
    ap.add_argument("--split", default="test")
    ap.add_argument("--every-h", type=float, default=4.0)
    ap.add_argument("--step-min", type=float, default=10.0)
    ap.add_argument("--cache", default="out/probe-cache")
    ap.add_argument("--show", default=None, metavar="METHOD:CONSTANT:MARGIN_H")
    ap.add_argument(
        "--lookahead",
        action="store_true",
        help="also walk the look-ahead veto's candidates (needs the curves cached)",
    )
    args = ap.parse_args()
    opts = argparse.Namespace(trace=None, step_min=args.step_min, every_h=args.every_h,
                              cached_only=True, cache=args.cache, jobs=1,
                              no_lookahead=not args.lookahead)  # fmt: skip
    profile = default_profile(args.cluster) if args.profile == "-" else args.profile
    loads = [float(x) for x in args.loads.split(",")]
    tuning_walker = select_shipped().tuning_walker
    walkers = {ld: tuning_walker(args.cluster, profile, ld, opts, args.split) for ld in loads}
    table(candidates(walkers, HELD_TWICE))
    if args.show:
        method, constant, margin = args.show.split(":")
        for ld, w in walkers.items():
            print(f"load {ld:g}:")
            show(w, method, float(constant), float(margin))


if __name__ == "__main__":
    main()
