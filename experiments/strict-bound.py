"""Hindsight: the shipped rule with a stricter no-harm bound on the tuning split.

    .venv/bin/python experiments/strict-bound.py ls6 models/ls6/profile.toml 1,1.05,1.13
        [--trace FILE] [--every-h 4] [--bounds 0.05,0.025,0] [--cache out/probe-cache]

The rule of mirage.evaluate.shipping calls a candidate safe when, at every level of every
tuning load, the paired 95% interval of its J minus reactive's ends at most +0.05 h above
zero. With the look-ahead veto the grid has 279 candidates; this chooses again with each
bound of ``--bounds`` (the candidate of least summed tuning J whose every upper bound is
at most that) and walks each choice on the test split, per level: the oracle gain, the
share of it taken, and the no-harm interval. It reads cached probes and look-ahead curves
only (the samples with both). The test split is read: what it shows is hindsight, a lead
for a rule, not a rule chosen on tuning data.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from mirage.evaluate.harness import HOUR, Walker, factory, guarded
from mirage.evaluate.inputs import default_profile
from mirage.evaluate.shipping import Candidate, candidates, inner_submits
from mirage.evaluate.stats import gains
from mirage.policy.cost import HELD_TWICE


def tuning_walker(*args: Any) -> Walker:
    """scripts/select_shipped.py's tuning_walker (a split's walker, as the choice builds it)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "select_shipped.py"
    spec = importlib.util.spec_from_file_location("select_shipped", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    walker: Walker = module.tuning_walker(*args)
    return walker


def worst_bound(c: Candidate) -> float:
    """The largest upper bound of (candidate - reactive) over the levels that count."""
    return max(g.harm.hi for per in c.levels.values() for lv, g in per.items() if lv != "all")


def _h(x: float | None) -> float | None:
    return None if x is None else x * HOUR


def walk_test(c: Candidate, test: dict[float, Walker], boot: int) -> None:
    cost_model = HELD_TWICE
    for load, w in test.items():
        res = {
            "reactive": w.run(factory("reactive", None)),
            "oracle": w.oracle(cost_model),
            "x": guarded(
                w,
                inner_submits(w, c.method, c.constant),
                None,
                _h(c.lookahead_h),
                margin_fraction=c.margin,
            ),
        }
        for level, g in gains(res, cost_model, boot=boot).items():
            x = g.methods["x"]
            h = x.harm
            print(f"   load {load:g} {level:6s} oracle gain {g.oracle_gain.value:6.2f} h  "
                  f"share {x.share:5.0%}  - reactive {h.value:+.2f} [{h.lo:+.2f}, {h.hi:+.2f}]"
                  f"{'' if x.no_harm else '  HARM'}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cluster")
    ap.add_argument("profile", help="a profile path, or - for the cluster's default")
    ap.add_argument("loads")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--every-h", type=float, default=4.0)
    ap.add_argument("--step-min", type=float, default=10.0)
    ap.add_argument("--bounds", default="0.05,0.025,0")
    ap.add_argument("--cache", default="out/probe-cache")
    ap.add_argument("--boot", type=int, default=2000)
    args = ap.parse_args()
    # what select_shipped's walkers read: cached samples with look-ahead curves
    args.cached_only, args.jobs, args.no_lookahead = True, 1, False
    profile = default_profile(args.cluster) if args.profile == "-" else args.profile
    loads = [float(x) for x in args.loads.split(",")]
    tune = {ld: tuning_walker(args.cluster, profile, ld, args) for ld in loads}
    cands = candidates(tune, HELD_TWICE, boot=args.boot)
    test = {ld: tuning_walker(args.cluster, profile, ld, args, "test") for ld in loads}
    for bound in (float(b) for b in args.bounds.split(",")):
        safe = [c for c in cands if worst_bound(c) <= bound + 1e-9]
        chosen = min(safe, key=lambda c: c.total_j_h) if safe else None
        what = chosen.label() if chosen else "reactive (none safe)"
        print(f"== tuning bound <= {bound:+.3f} h: {len(safe)} of {len(cands)} safe; {what}")
        if chosen is not None:
            walk_test(chosen, test, args.boot)


if __name__ == "__main__":
    main()
