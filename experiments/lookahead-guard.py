"""Would a guard on the look-ahead's simulated start be safe where the estimate guard is not?

    .venv/bin/python experiments/lookahead-guard.py ls6 models/ls6/profile.toml 1,1.05,1.13
        [--both] [--show METHOD:CONSTANT:EST:LA ...] [--every-h 4] [--step-min 10]
        [--cache out/probe-cache] [--record]

The estimate guard vetoes a pre-submission when Slurm's ``--test-only`` date for the
successor is before the planned end plus a margin. That date counts every job ahead at its
limit, so on a queue whose jobs end far before their limits it lies a day late and lets
pre-submissions through that start hours early (experiments/guard-frontier.py). The
look-ahead (mirage.policy.lookahead) simulates the present queue with run times predicted
from accounting: it sees such a queue drain. This walks the selection grid of
mirage.evaluate.shipping with a second veto, the look-ahead start before the planned end
plus a margin ``la`` (none: no such veto), beside the estimate guard's margin ``est``
(none: no estimate guard): a pre-submission waits where either says early, or with
``--both`` only where both do. The rule is the shipped one: on the tuning split, the candidate
of least summed mean J among those with no harm at any level of any load; it is then
measured on the test split, beside the shipped configuration. ``--show`` adds a
candidate's figures on both splits (``none`` for a veto left out).

Reads probes and look-ahead curves from the probe cache (only samples with both);
``--record`` records the missing look-ahead curves first (about 2 s a sample at load 1,
20 s at 1.13 on a core).
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass, field

import numpy as np

from mirage.evaluate.harness import HOUR, Outcomes, Walker, factory, outcomes_at
from mirage.evaluate.inputs import default_profile, default_test_setting
from mirage.evaluate.lookahead import LOOKAHEAD_CURVES
from mirage.evaluate.probes import PROBES, is_cached, record_all
from mirage.evaluate.shipping import GRID, inner_submits
from mirage.evaluate.stats import Gain, gains
from mirage.policy.base import revocable_step
from mirage.policy.cost import HELD_TWICE
from mirage.policy.guard import SHIPPED

EST_H: tuple[float | None, ...] = (None, 0.0, 8.0, 24.0, 36.0, 48.0, 72.0)
LA_H: tuple[float | None, ...] = (None, -2.0, 0.0, 2.0, 4.0, 8.0)


@dataclass
class Split:
    walker: Walker
    lookahead: list[np.ndarray]  # per sample, the look-ahead start at every step


@dataclass
class Cand:
    method: str
    constant: float
    est_h: float | None
    la_h: float | None
    levels: dict[float, dict[str, Gain]] = field(default_factory=dict)
    oracle_gain_h: dict[float, dict[str, float]] = field(default_factory=dict)
    mean_j_h: dict[float, float] = field(default_factory=dict)

    @property
    def safe(self) -> bool:
        return all(g.no_harm for per in self.levels.values() for lv, g in per.items()
                   if lv != "all")  # fmt: skip

    def label(self) -> str:
        return f"{self.method} {self.constant:g}, est {self.est_h}, la {self.la_h}"


def build(cluster: str, profile_name: str, load: float, split_name: str,
          args: argparse.Namespace) -> Split:  # fmt: skip
    sp = default_test_setting(cluster, load, args.every_h, split_name,
                              profile_name=profile_name, step_min=args.step_min)  # fmt: skip
    setting = sp.setting
    times = [t for t in sp.times if is_cached(args.cache, setting, t, PROBES)]
    if args.record:
        record_all(setting, times, LOOKAHEAD_CURVES, cache=args.cache, n_jobs=args.jobs)
    times = [t for t in times if is_cached(args.cache, setting, t, LOOKAHEAD_CURVES)]
    print(f"{split_name} split, load {load:g}: {len(times)} samples with probes and curves")
    samples = record_all(setting, times, PROBES, cache=args.cache)
    curves = {c.t: c.start for c in record_all(setting, times, LOOKAHEAD_CURVES, cache=args.cache)}
    walker = Walker(samples, setting.protocol, sp.profile, sp.partition)
    return Split(walker, [curves[s.t] for s in walker.samples])


def walk(sp: Split, submits: list[np.ndarray], est_h: float | None,
         la_h: float | None, both: bool) -> Outcomes:  # fmt: skip
    """``both``: veto only where both say early (a veto left out says so always), else
    where either does (a veto left out never does)."""
    steps, revoked = [], []
    for s, sub, la in zip(sp.walker.samples, submits, sp.lookahead, strict=True):
        est, ahead = s.estimate[:-1], la[:-1]
        by_est = np.full(len(est), both) if est_h is None else (
            (est >= 0) & (est < s.planned_end + est_h * HOUR))  # fmt: skip
        by_la = np.full(len(est), both) if la_h is None else (
            (ahead >= 0) & (ahead < s.planned_end + la_h * HOUR))  # fmt: skip
        early = (by_est & by_la) if both else (by_est | by_la)
        k, n = revocable_step(sub & ~early, early, s.succ_start, s.steps)
        steps.append(k)
        revoked.append(n)
    return outcomes_at(sp.walker.samples, steps, revoked)


def measure(splits: dict[float, Split], boot: int, both: bool) -> list[Cand]:
    cost_model = HELD_TWICE
    out: dict[tuple[str, float, float | None, float | None], Cand] = {}
    for load, sp in splits.items():
        base = {"reactive": sp.walker.run(factory("reactive", None)),
                "oracle": sp.walker.oracle(cost_model)}  # fmt: skip
        for method, constants in GRID.items():
            for c in constants:
                submits = inner_submits(sp.walker, method, c)
                for est_h, la_h in itertools.product(EST_H, LA_H):
                    cand = out.setdefault((method, c, est_h, la_h), Cand(method, c, est_h, la_h))
                    res = {**base, "x": walk(sp, submits, est_h, la_h, both)}
                    per = gains(res, cost_model, boot=boot)
                    cand.levels[load] = {lv: g.methods["x"] for lv, g in per.items()}
                    cand.oracle_gain_h[load] = {lv: g.oracle_gain.value for lv, g in per.items()}
                    cand.mean_j_h[load] = float(res["x"].cost(cost_model).mean()) / HOUR
    return list(out.values())


def report(c: Cand, title: str) -> None:
    print(f"{title}: {c.label()}  ({'safe' if c.safe else 'HARMS'})")
    for load, per in c.levels.items():
        for lv, g in per.items():
            h = g.harm
            print(f"  load {load:g} {lv:6s} oracle gain {c.oracle_gain_h[load][lv]:6.2f} h  "
                  f"share {g.share:5.0%}  - reactive {h.value:+.2f} [{h.lo:+.2f}, {h.hi:+.2f}]"
                  f"  {'' if g.no_harm else 'HARM'}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cluster")
    ap.add_argument("profile")
    ap.add_argument("loads")
    ap.add_argument("--every-h", type=float, default=4.0)
    ap.add_argument("--step-min", type=float, default=10.0)
    ap.add_argument("--cache", default="out/probe-cache")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit-h", type=float, default=48.0, help="the chains' time limit")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument(
        "--both",
        action="store_true",
        help="veto only where Slurm's date and the look-ahead both say early",
    )
    ap.add_argument(
        "--show",
        action="append",
        default=[],
        metavar="METHOD:CONSTANT:EST:LA",
        help="also report this candidate on the test split (none: no veto)",
    )
    args = ap.parse_args()
    profile = default_profile(args.cluster) if args.profile == "-" else args.profile
    loads = [float(x) for x in args.loads.split(",")]
    tune = measure(
        {ld: build(args.cluster, profile, ld, "tune", args) for ld in loads}, args.boot, args.both
    )
    safe = sorted((c for c in tune if c.safe), key=lambda c: sum(c.mean_j_h.values()))
    print(f"tuning split: {len(safe)} of {len(tune)} candidates safe; least summed J first:")
    for c in safe[:8]:
        print(f"  {c.label():45s} J {sum(c.mean_j_h.values()):6.2f} h")
    walked = measure({ld: build(args.cluster, profile, ld, "test", args) for ld in loads},
                     args.boot, args.both)  # fmt: skip
    test = {(c.method, c.constant, c.est_h, c.la_h): c for c in walked}
    if safe:
        ch = safe[0]
        report(test[(ch.method, ch.constant, ch.est_h, ch.la_h)], "test split, the choice")
    else:
        print("no candidate is safe on the tuning split: reactive")
    # the shipped margin (a share of the limit) in this experiment's hours
    est_h = SHIPPED.guard_margin_fraction * args.limit_h
    shipped = (SHIPPED.policy, SHIPPED.qbets_quantile, est_h, None)
    report(test[shipped], "test split, the shipped configuration")
    for spec in args.show:
        method, constant, est, la = spec.split(":")
        key = (method, float(constant), *(None if v == "none" else float(v) for v in (est, la)))
        tuned = next(c for c in tune if (c.method, c.constant, c.est_h, c.la_h) == key)
        report(tuned, f"tuning split (summed J {sum(tuned.mean_j_h.values()):.2f} h)")
        report(test[key], "test split")


if __name__ == "__main__":
    main()
