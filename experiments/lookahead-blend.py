"""Blend the look-ahead with a forecaster (ls6): is the combination better than either?

The blended wait is a weighted mean, in log(1 + hours), of the look-ahead's simulated wait
(weight ``w``) and one of the forecaster's wait quantiles (``1 - w``); the rule submits at
the first step where now + blended wait + margin reaches the planned end. ``w = 1`` is
the look-ahead; ``w = 0`` is the forecaster's quantile with a plain margin (not its tuned
policy: no quiet-queue rule, no band). For each weight the quantile and the margin are
tuned on the 28 days before the test split (samples whose outcome was known by then, as
``mirage evaluate --recalibrate-every-days 31`` tunes), then judged on the test split.
The weight of least tuning J is the blend's pick; it is compared, paired, with the
look-ahead and with the forecaster's rule.

    .venv/bin/python experiments/lookahead-blend.py [--load 1.05] [--every-h 4]
        [--model models/ls6/xgb]

Reads the probes, look-ahead curves (current version, median run times) and queue
features from out/probe-cache (`mirage evaluate --cluster ls6 --load L --policies
…,xgb,lookahead --recalibrate-every-days 31` records them); missing ones are recorded
here, on 2 processes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import numpy as np

from mirage.evaluate.features import FEATURES
from mirage.evaluate.harness import Outcomes, Walker, evaluate, outcomes_at
from mirage.evaluate.inputs import default_test_setting
from mirage.evaluate.lookahead import LOOKAHEAD_CURVES
from mirage.evaluate.probes import PROBES, SampleResult, record_all
from mirage.evaluate.stats import head_to_head, load_levels
from mirage.learn.artifacts import load_policy
from mirage.learn.forecast import ForecastPolicy
from mirage.policy.cost import HELD_TWICE, CostModel

CACHE = "out/probe-cache"
H = 3600
DAY = 86400
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
MARGINS_H = (-8, -4, -2, -1, -0.5, 0, 0.5, 1, 2, 4, 6, 8, 12, 16)

#: per sample, per step (the last, the planned end, excepted): a predicted wait in hours
Waits = Callable[[int], np.ndarray]


def records(load: float, every_h: float) -> tuple[Walker, list[np.ndarray], int]:
    """Tuning and test samples at ``load`` (usable ones), their look-ahead curves, and the
    test split's start."""
    probes: list[SampleResult] = []
    curves: list[np.ndarray] = []
    queue: list[np.ndarray] = []
    for name in ("tune", "test"):
        split = default_test_setting("ls6", load, every_h, name)
        setting, times = split.setting, split.times
        probes += record_all(setting, times, PROBES, cache=CACHE, n_jobs=2)
        curves += [c.start for c in record_all(setting, times, LOOKAHEAD_CURVES, cache=CACHE,
                                               n_jobs=2)]  # fmt: skip
        queue += [c.queue for c in record_all(setting, times, FEATURES, cache=CACHE, n_jobs=2)]
    ok = [i for i, s in enumerate(probes) if s.ok]
    w = Walker([probes[i] for i in ok], setting.protocol, split.profile, split.partition,
               [queue[i] for i in ok])  # fmt: skip
    return w, [curves[i] for i in ok], setting.split.start


def lookahead_waits(w: Walker, curves: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The look-ahead's simulated wait (hours) per step; NaN where it had none."""
    out = []
    for s, start in zip(w.samples, curves, strict=True):
        last = len(s.steps) - 1
        wait = np.where(start[:last] < 0, np.nan, (start[:last] - s.steps[:last]) / H)
        out.append(np.maximum(wait, 0.0))
    return out


def rule(w: Walker, waits: Waits, margin_h: float) -> Outcomes:
    """Submit at the first step where now + wait + margin reaches the planned end (or where
    the wait is unknown)."""
    steps = []
    for k, s in enumerate(w.samples):
        last = len(s.steps) - 1
        wait = waits(k)
        due = np.isnan(wait) | (s.steps[:last] + (wait + margin_h) * H >= s.planned_end)
        hit = np.flatnonzero(due)
        steps.append(int(hit[0]) if hit.size else last)
    return outcomes_at(w.samples, steps)


def blended(la: list[np.ndarray], q: list[np.ndarray], weight: float, level: int) -> Waits:
    def waits(k: int) -> np.ndarray:
        a = np.log1p(np.nan_to_num(la[k], nan=0.0))
        b = np.log1p(np.maximum(q[k][:, level], 0.0))
        out: np.ndarray = np.expm1(weight * a + (1 - weight) * b)
        return np.where(np.isnan(la[k]) & (weight > 0), np.nan, out)

    return waits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=float, default=1.05)
    ap.add_argument("--every-h", type=float, default=4.0)
    ap.add_argument("--model", default="models/ls6/xgb")
    args = ap.parse_args()
    w, curves, test_start = records(args.load, args.every_h)
    policy, _meta = load_policy(args.model)
    if not isinstance(policy, ForecastPolicy):
        raise SystemExit(f"{args.model}: not a forecaster")
    levels = policy.forecaster.levels
    q = [policy.forecaster.predict(x) for x in w.matrices]
    la = lookahead_waits(w, curves)
    t = np.array([s.t for s in w.samples])
    tune = (t >= test_start - 28 * DAY) & (t + w.protocol.window_s <= test_start)
    test = t >= test_start
    cost_model = HELD_TWICE
    react = evaluate(w, ["reactive"], {}, cost_model)["reactive"]
    print(f"ls6 load {args.load}: {tune.sum()} tuning, {test.sum()} test samples; "
          f"{args.model} levels {levels}")  # fmt: skip
    picks: dict[float, tuple[float, Outcomes]] = {}
    for weight in WEIGHTS:
        best: tuple[float, int, float, Outcomes] | None = None
        for level in range(len(levels)) if weight < 1 else [0]:
            for m in MARGINS_H:
                out = rule(w, blended(la, q, weight, level), m)
                score = float(out.cost(cost_model)[tune].mean())
                if best is None or score < best[0]:
                    best = (score, level, m, out)
        assert best is not None
        score, level, m, out = best
        picks[weight] = (score, out)
        quantile = f"quantile {levels[level]:.3g}, " if weight < 1 else ""
        print(f"w={weight:.2f} {quantile}margin {m:+g} h: tuning "
              f"{score / H:.2f} h | test {describe(out, react, test, cost_model)}")  # fmt: skip
    chosen = min((x for x in WEIGHTS if 0 < x < 1), key=lambda x: picks[x][0])
    print(f"picked on the tuning split: w={chosen}")
    sub = [i for i in range(len(t)) if test[i]]
    results = {
        "blend": picks[chosen][1],
        "lookahead": picks[1.0][1],
        "forecaster": picks[0.0][1],
        "reactive": react,
    }
    results = {k: v.take(sub) for k, v in results.items()}
    for other in ("lookahead", "forecaster"):
        for lv, h in head_to_head(results, cost_model, ["blend"], [other]).items():
            d = h.diff
            print(f"  blend - {other}, {lv} ({d.n}): {d.value:+.2f} h "
                  f"[{d.lo:+.2f}, {d.hi:+.2f}], {h.verdict}")  # fmt: skip


def describe(out: Outcomes, react: Outcomes, test: np.ndarray, cost_model: CostModel) -> str:
    j = out.cost(cost_model)
    levels = load_levels(react.gap)
    parts = [f"all {j[test].mean() / H:.2f}"]
    for lv in ("low", "medium", "heavy"):
        mask = test & (levels == lv)
        if mask.sum() >= 10:
            parts.append(f"{lv} ({mask.sum()}) {j[mask].mean() / H:.2f}")
    return ", ".join(parts)


if __name__ == "__main__":
    main()
