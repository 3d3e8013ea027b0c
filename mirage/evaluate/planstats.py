"""The plan evaluation's figures: mean completion of the habitual, planned and
hindsight-best shapes with bootstrap 95% intervals (seeded, paired: one resampling of
the samples for every figure), the paired difference planned - habitual, and the
targets of issue 30.

Completion is counted from the decision point (``done - t``, hours). A censored
completion counts as the horizon: a lower bound, so a mean with censored samples is
too; their counts are reported beside it.

Targets (per load): where the hindsight-best shape's mean is at least ``GAIN`` (20%)
shorter than the habitual one's, the planned shape's must be too, with the paired
interval of (planned - habitual) below zero; and everywhere the planned mean must be
within ``NEAR`` (10%) of the hindsight best.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mirage.evaluate.plans import PlanRecord

HOUR = 3600
GAIN = 0.20
NEAR = 0.10


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}


def completions(records: Sequence[PlanRecord]) -> dict[str, np.ndarray]:
    """Hours to completion per sample: habitual, planned, best (and censoring)."""
    rec = list(records)
    hab = np.array([r.done[r.habitual] - r.t for r in rec], float) / HOUR
    plan = np.array([r.planned_done - r.t for r in rec], float) / HOUR
    best = np.array([r.done.min() - r.t for r in rec], float) / HOUR
    return {
        "habitual": hab,
        "planned": plan,
        "best": best,
        "habitual_censored": np.array([bool(r.censored[r.habitual]) for r in rec]),
        "planned_censored": np.array([r.planned_censored for r in rec], bool),
        "best_censored": np.array([bool(r.censored[int(np.argmin(r.done))]) for r in rec]),
    }


def _ci(stat: np.ndarray, value: float) -> Interval:
    ok = stat[np.isfinite(stat)]
    if ok.size == 0:
        return Interval(value, float("nan"), float("nan"))
    lo, hi = np.percentile(ok, [2.5, 97.5])
    return Interval(value, float(lo), float(hi))


def _share(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    return out


def summarize(records: Sequence[PlanRecord], boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """One load's figures (JSON-ready): means with intervals, the paired difference,
    the gains, the planned share of the hindsight gain and the targets' verdicts."""
    c = completions(records)
    n = c["habitual"].size
    if n == 0:
        return {"n": 0}
    idx = np.random.default_rng(seed).integers(0, n, size=(boot, n))
    means = {
        k: (float(c[k].mean()), c[k][idx].mean(axis=1)) for k in ("habitual", "planned", "best")
    }
    (h, hb), (p, pb), (b, bb) = means["habitual"], means["planned"], means["best"]
    out: dict[str, Any] = {
        "n": n,
        **{k: _ci(v[1], v[0]).as_dict() for k, v in means.items()},
        "planned_minus_habitual": _ci(pb - hb, p - h).as_dict(),
        "best_gain": _ci(1 - _share(bb, hb), 1 - b / h if h > 0 else float("nan")).as_dict(),
        "planned_gain": _ci(1 - _share(pb, hb), 1 - p / h if h > 0 else float("nan")).as_dict(),
        "planned_share_of_best_gain": _ci(
            _share(hb - pb, hb - bb), (h - p) / (h - b) if h > b else float("nan")
        ).as_dict(),
        "planned_over_best": p / b - 1 if b > 0 else float("nan"),
        "censored": {k: int(c[f"{k}_censored"].sum()) for k in ("habitual", "planned", "best")},
        "planned_is_best": int(np.sum(np.isclose(c["planned"], c["best"]))),
        "mean_plan_s": float(np.mean([r.plan_s for r in records])),
        "mean_sample_s": float(np.mean([r.wall_s for r in records])),
    }
    out["targets"] = targets(out)
    return out


def targets(s: dict[str, Any]) -> dict[str, bool | None]:
    """Issue 30's verdicts: ``gain`` (None where the hindsight best gains under 20%: no
    target there) and ``near_best``."""
    applies = s["best_gain"]["value"] >= GAIN
    gain = (
        s["planned_gain"]["value"] >= GAIN and s["planned_minus_habitual"]["hi"] < 0
        if applies
        else None
    )
    return {"gain": gain, "near_best": bool(s["planned_over_best"] <= NEAR)}


def render(rows: dict[str, dict[str, Any]], title: str) -> str:
    """The table: one row per load."""
    head = (
        f"{'load':>5} {'nodes':>5} {'n':>4}  {'habitual h':>20}  {'planned h':>20}  "
        f"{'best h':>20}  {'planned-habitual h':>20}  {'best gain':>9} {'plan gain':>9} "
        f"{'share':>6} {'vs best':>7}  targets"
    )
    lines = [title, head]
    for load, s in rows.items():
        if not s.get("n"):
            lines.append(f"{load:>5} {s.get('nodes', ''):>5} {0:>4}  (no usable sample)")
            continue
        t = s["targets"]
        verdict = f"gain {_yes(t['gain'])}, within {NEAR:.0%} of best {_yes(t['near_best'])}"
        lines.append(
            f"{load:>5} {s['nodes']:>5} {s['n']:>4}  {_cell(s['habitual']):>20}  "
            f"{_cell(s['planned']):>20}  {_cell(s['best']):>20}  "
            f"{_cell(s['planned_minus_habitual']):>20}  {_pct(s['best_gain']['value']):>9} "
            f"{_pct(s['planned_gain']['value']):>9} "
            f"{_pct(s['planned_share_of_best_gain']['value']):>6} "
            f"{s['planned_over_best']:>+7.0%}  {verdict}"
        )
    for load, s in rows.items():
        if s.get("n"):
            cz = s["censored"]
            lines.append(
                f"load {load}: censored (at the horizon) habitual {cz['habitual']}, planned "
                f"{cz['planned']}, best {cz['best']}; planned = best in {s['planned_is_best']}"
                f"/{s['n']}; {s['mean_sample_s']:.1f} s a sample, of which planning "
                f"{s['mean_plan_s']:.2f} s"
            )
            u = s.get("uncalibrated")
            if u:
                lines.append(
                    f"load {load}: the planner with its wait calibration (above); without it: "
                    f"planned {_cell(u['planned'])} h, planned - habitual "
                    f"{_cell(u['planned_minus_habitual'])} h, {u['planned_over_best']:+.0%} vs "
                    f"best, planned = best in {u['planned_is_best']}/{s['n']}"
                )
    return "\n".join(lines)


def _cell(c: dict[str, float]) -> str:
    return f"{c['value']:.1f} [{c['lo']:.1f}, {c['hi']:.1f}]"


def _pct(x: float | None) -> str:
    """A share; a dash where there is none (no hindsight gain to take a share of)."""
    if x is None or math.isnan(x):
        return "-"
    return f"{x + 0.0:.0%}" if round(x, 2) else "0%"


def _yes(v: bool | None) -> str:
    return "n/a" if v is None else ("yes" if v else "NO")
