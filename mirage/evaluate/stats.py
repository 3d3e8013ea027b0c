"""The report's figures with bootstrap 95% intervals (numpy, seeded), by load level.

Load levels are Mirage's classes by the reactive gap: low <= 2 h, medium 2-12 h,
heavy > 12 h. A level counts only with n >= 30 (``counts``); a target holds only at
its interval's bound. "Removed" is the share of reactive's J removed,
1 - sum J(method) / sum J(reactive), with a paired bootstrap (same resampled samples).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mirage.evaluate.harness import Outcomes
from mirage.fmt import duration
from mirage.policy.cost import HELD_TWICE, CostModel

HOUR = 3600
MIN_N = 30
LEVELS = ("all", "low", "medium", "heavy")
METRICS = (
    "mean_J_h",
    "mean_interruption_h",
    "mean_overlap_h",
    "mean_abs_gap_h",
    "zero_interruption",
    "abs_gap_le_30min",
    "p90_interruption_h",
    "revoked",
    "removed",
    # SC'23's headline measures, for a direct comparison: the share of reactive's
    # interruption removed, the share of transitions handed off (the successor started
    # early), and J at SC'23's weight (interruption + 0.5 x overlap)
    "interruption_removed",
    "handoffs",
    "mean_J_sc23_h",
    # allocation time beyond the training per transition (restart, handoff window, the
    # extra segments' restarts): times the chain's GPUs, its GPU-hours beyond the training
    "beyond_training_h",
)


def load_levels(reactive_gap: np.ndarray) -> np.ndarray:
    """ "low" / "medium" / "heavy" per sample, by the reactive gap (seconds)."""
    return np.where(
        reactive_gap <= 2 * HOUR, "low", np.where(reactive_gap <= 12 * HOUR, "medium", "heavy")
    )


@dataclass
class Cell:
    value: float
    lo: float
    hi: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n}


Stat = Callable[[np.ndarray], np.ndarray]  # (B, n) resampled rows -> (B,)


def _boot(x: np.ndarray, idx: np.ndarray, f: Stat) -> tuple[float, float, float]:
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    value = float(f(x[None, :])[0])
    res = f(x[idx])
    res = res[np.isfinite(res)]
    if res.size == 0:
        return value, float("nan"), float("nan")
    lo, hi = np.percentile(res, [2.5, 97.5])
    return value, float(lo), float(hi)


def _mean(a: np.ndarray) -> np.ndarray:
    out: np.ndarray = a.mean(axis=1)
    return out


def _p90(a: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.percentile(a, 90, axis=1)
    return out


def table(
    results: Mapping[str, Outcomes],
    cost_model: CostModel,
    reactive: str = "reactive",
    boot: int = 2000,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Cell]]]:
    """method -> level -> metric -> Cell. Needs the reactive method among ``results``."""
    levels = load_levels(results[reactive].gap)
    base_j = results[reactive].cost(cost_model)
    base_i = results[reactive].interruption
    out: dict[str, dict[str, dict[str, Cell]]] = {}
    for name, o in results.items():
        j = o.cost(cost_model)
        sc23 = o.cost(HELD_TWICE)
        beyond = o.beyond_training(cost_model)
        per: dict[str, dict[str, Cell]] = {}
        for level in LEVELS:
            mask = np.ones(j.size, bool) if level == "all" else levels == level
            n = int(mask.sum())
            rng = np.random.default_rng(seed)
            idx = rng.integers(0, n, size=(boot, n)) if n else np.zeros((boot, 0), np.int64)
            cols = {
                "mean_J_h": (j[mask] / HOUR, _mean),
                "mean_interruption_h": (o.interruption[mask] / HOUR, _mean),
                "mean_overlap_h": (o.overlap[mask] / HOUR, _mean),
                "mean_abs_gap_h": (np.abs(o.gap[mask]) / HOUR, _mean),
                "zero_interruption": ((o.interruption[mask] == 0).astype(float), _mean),
                "abs_gap_le_30min": ((np.abs(o.gap[mask]) <= 1800).astype(float), _mean),
                "p90_interruption_h": (o.interruption[mask] / HOUR, _p90),
                # pre-submissions cancelled while pending, per transition
                "revoked": (o.revoked[mask].astype(float), _mean),
                "handoffs": ((o.overlap[mask] > 0).astype(float), _mean),
                "mean_J_sc23_h": (sc23[mask] / HOUR, _mean),
                "beyond_training_h": (beyond[mask] / HOUR, _mean),
            }
            cells = {}
            for metric, (x, f) in cols.items():
                v, lo, hi = _boot(x, idx, f)
                cells[metric] = Cell(v, lo, hi, n)
            cells["removed"] = _removed(j[mask], base_j[mask], idx, n)
            cells["interruption_removed"] = _removed(o.interruption[mask], base_i[mask], idx, n)
            per[level] = cells
        out[name] = per
    return out


def _removed(j: np.ndarray, base: np.ndarray, idx: np.ndarray, n: int) -> Cell:
    def share(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            out: np.ndarray = 1.0 - a.sum(axis=-1) / b.sum(axis=-1)
        return out

    if n == 0 or base.sum() == 0:
        return Cell(float("nan"), float("nan"), float("nan"), n)
    value = float(share(j, base))
    res = share(j[idx], base[idx])
    res = res[np.isfinite(res)]
    lo, hi = np.percentile(res, [2.5, 97.5]) if res.size else (float("nan"), float("nan"))
    return Cell(value, float(lo), float(hi), n)


def ceiling(
    tab: Mapping[str, Mapping[str, Mapping[str, Cell]]], oracle: str = "oracle"
) -> dict[str, Cell]:
    """Per level that counts (and all samples): the oracle's share of reactive's J removed.

    The oracle takes each sample's least J, and :func:`table` bootstraps every method on the
    same resamples, so in each resample no method removes more than the oracle: no method's
    share, nor either bound of its interval, can exceed the oracle's. A target above the
    oracle's lower bound is out of reach of every policy on these samples."""
    if oracle not in tab:
        return {}
    out = {}
    for level, cells in tab[oracle].items():
        cell = cells["removed"]
        if not np.isnan(cell.value) and (level == "all" or cell.n >= MIN_N):
            out[level] = cell
    return out


def level_counts(results: Mapping[str, Outcomes], reactive: str = "reactive") -> dict[str, int]:
    levels = load_levels(results[reactive].gap)
    return {lv: int((levels == lv).sum()) for lv in ("low", "medium", "heavy")}


@dataclass
class HeadToHead:
    """The best learned method against the best non-oracle baseline at one load level."""

    learned: str
    baseline: str
    diff: Cell  # mean J (hours), learned minus baseline, paired over the same samples

    @property
    def verdict(self) -> str:
        if self.diff.hi < 0:
            return "better"
        if self.diff.lo > 0:
            return "worse"
        return "tie"

    def as_dict(self) -> dict[str, object]:
        return {"learned": self.learned, "baseline": self.baseline,
                "diff_mean_J_h": self.diff.as_dict(), "verdict": self.verdict}  # fmt: skip


def head_to_head(
    results: Mapping[str, Outcomes],
    cost_model: CostModel,
    learned: Sequence[str],
    baselines: Sequence[str],
    *,
    reactive: str = "reactive",
    boot: int = 2000,
    seed: int = 0,
) -> dict[str, HeadToHead]:
    """Per level with n >= MIN_N (and all samples): the learned and the baseline method of
    least mean J among those in ``results``, and the bootstrap of the mean of their
    per-sample difference. Paired: both ran on the same transitions, so the interval is
    far narrower than the two methods' own intervals side by side, and it is what says
    whether one beats the other. (Both are picked as the best on this split: the verdict
    is for the best of each family, not for a method named in advance.)"""
    mine = [m for m in learned if m in results]
    theirs = [m for m in baselines if m in results]
    if not mine or not theirs:
        return {}
    levels = load_levels(results[reactive].gap)
    out: dict[str, HeadToHead] = {}
    for level in LEVELS:
        mask = np.ones(levels.size, bool) if level == "all" else levels == level
        n = int(mask.sum())
        if n == 0 or (level != "all" and n < MIN_N):
            continue
        j = {m: results[m].cost(cost_model)[mask] / HOUR for m in (*mine, *theirs)}
        a = min(mine, key=lambda m: float(j[m].mean()))
        b = min(theirs, key=lambda m: float(j[m].mean()))
        idx = np.random.default_rng(seed).integers(0, n, size=(boot, n))
        out[level] = HeadToHead(a, b, Cell(*_boot(j[a] - j[b], idx, _mean), n))
    return out


#: The no-harm mark: a method harms no level whose paired 95% interval of its mean J minus
#: reactive's has its upper bound at most this (hours).
NO_HARM_H = 0.05


@dataclass
class Gain:
    """One method at one level, against reactive submission and the oracle."""

    share: float  # of the oracle gain: (J reactive - J method) / (J reactive - J oracle)
    harm: Cell  # mean J of the method minus reactive's (h), paired over the same samples

    @property
    def no_harm(self) -> bool:
        return not math.isnan(self.harm.hi) and self.harm.hi <= NO_HARM_H

    def as_dict(self) -> dict[str, object]:
        return {"share_of_oracle_gain": self.share, "minus_reactive_J_h": self.harm.as_dict(),
                "no_harm": self.no_harm}  # fmt: skip


@dataclass
class LevelGains:
    """Per level: what the oracle gains over reactive, and what each method takes of it."""

    oracle_gain: Cell  # mean J of reactive minus the oracle's (h), paired
    methods: dict[str, Gain]

    def as_dict(self) -> dict[str, object]:
        return {"oracle_gain_h": self.oracle_gain.as_dict(),
                "methods": {m: g.as_dict() for m, g in self.methods.items()}}  # fmt: skip


def gains(
    results: Mapping[str, Outcomes],
    cost_model: CostModel,
    *,
    reactive: str = "reactive",
    oracle: str = "oracle",
    boot: int = 2000,
    seed: int = 0,
    min_n: int = MIN_N,
) -> dict[str, LevelGains]:
    """Per level with n >= ``min_n`` (and all samples), when reactive and the oracle ran:
    the oracle gain (reactive's mean J minus the oracle's, h), each other method's share of
    it (a point estimate), and the paired 95% interval of its mean J minus reactive's, whose
    upper bound says whether it can make that level worse than reactive submission
    (``Gain.no_harm``: at most NO_HARM_H)."""
    if reactive not in results or oracle not in results:
        return {}
    levels = load_levels(results[reactive].gap)
    out: dict[str, LevelGains] = {}
    for level in LEVELS:
        mask = np.ones(levels.size, bool) if level == "all" else levels == level
        n = int(mask.sum())
        if n == 0 or (level != "all" and n < min_n):
            continue
        j = {m: o.cost(cost_model)[mask] / HOUR for m, o in results.items()}
        idx = np.random.default_rng(seed).integers(0, n, size=(boot, n))
        base = j[reactive]
        gain = Cell(*_boot(base - j[oracle], idx, _mean), n)
        per = {}
        for m in results:
            if m in (reactive, oracle):
                continue
            share = float((base.mean() - j[m].mean()) / gain.value) if gain.value > 0 else math.nan
            per[m] = Gain(share, Cell(*_boot(j[m] - base, idx, _mean), n))
        out[level] = LevelGains(gain, per)
    return out


#: The shipped configuration's targets: no harm at every level (:data:`NO_HARM_H`), and
#: where the oracle gains at least GAIN_MIN_H, at least GAIN_SHARE of that gain taken.
GAIN_MIN_H = 1.0
GAIN_SHARE = 0.85


@dataclass
class ShippedRow:
    """One level of the shipped configuration's summary."""

    n: int
    reactive_h: float
    oracle_h: float
    gain: Cell  # the oracle gain (h)
    best_baseline: str  # least mean J among the baselines (references aside), on these samples
    best_baseline_h: float
    shipped_h: float
    shipped: Gain  # its share of the oracle gain and its no-harm interval
    against_best: Cell  # shipped minus the best baseline, paired (h)

    @property
    def meets(self) -> bool:
        """No harm, and most of the gain where there is one to take (and beats the best
        baseline in the paired comparison there)."""
        if not self.shipped.no_harm:
            return False
        if self.gain.value < GAIN_MIN_H:
            return True
        return self.shipped.share >= GAIN_SHARE and self.against_best.hi < 0

    def as_dict(self) -> dict[str, object]:
        return {"n": self.n, "reactive_J_h": self.reactive_h, "oracle_J_h": self.oracle_h,
                "oracle_gain_h": self.gain.as_dict(), "best_baseline": self.best_baseline,
                "best_baseline_J_h": self.best_baseline_h, "shipped_J_h": self.shipped_h,
                **self.shipped.as_dict(), "minus_best_baseline_J_h": self.against_best.as_dict(),
                "meets_targets": self.meets}  # fmt: skip


def shipped_rows(
    results: Mapping[str, Outcomes],
    cost_model: CostModel,
    baselines: Sequence[str],
    *,
    shipped: str = "shipped",
    reactive: str = "reactive",
    oracle: str = "oracle",
    boot: int = 2000,
    seed: int = 0,
) -> dict[str, ShippedRow]:
    """Per level that counts (and all samples): the issue's one table for the shipped
    configuration (reactive, oracle, the gain, the best baseline, and the shipped
    configuration's J, share, no-harm interval and paired difference to that baseline)."""
    if not {shipped, reactive, oracle} <= set(results):
        return {}
    gained = gains({m: results[m] for m in (reactive, oracle, shipped)}, cost_model, boot=boot,
                   seed=seed)  # fmt: skip
    theirs = [m for m in baselines if m in results and m not in (oracle, shipped)]
    levels = load_levels(results[reactive].gap)
    out: dict[str, ShippedRow] = {}
    for level, g in gained.items():
        mask = np.ones(levels.size, bool) if level == "all" else levels == level
        n = int(mask.sum())
        j = {
            m: results[m].cost(cost_model)[mask] / HOUR
            for m in (*theirs, reactive, oracle, shipped)
        }
        best = min(theirs, key=lambda m: float(j[m].mean()))
        idx = np.random.default_rng(seed).integers(0, n, size=(boot, n))
        diff = Cell(*_boot(j[shipped] - j[best], idx, _mean), n)
        out[level] = ShippedRow(n, float(j[reactive].mean()), float(j[oracle].mean()),
                                g.oracle_gain, best, float(j[best].mean()),
                                float(j[shipped].mean()), g.methods[shipped], diff)  # fmt: skip
    return out


#: A forecaster whose stated 90% intervals hold fewer of the true waits than this is
#: called out (trained on too little, or on a cluster unlike this one).
COVERAGE_WARN = 0.75


def warnings_for(
    tune_scores: Mapping[str, Mapping[str, float]] | None,
    selection: Mapping[str, Any] | None,
    counts: Mapping[str, int],
    coverage: Mapping[str, float | None],
) -> list[str]:
    """What a reader of the tables must know, in words: tuned constants that all tie on the
    tuning split (it cannot tell them apart: the first is used), a selection among
    methods that all tie, levels with samples too few to count, forecasters whose stated
    90% intervals held far fewer of the true waits."""
    out = []
    for method, by in (tune_scores or {}).items():
        if len(by) > 1 and len(set(by.values())) == 1:
            out.append(
                f"{method}: every constant tried gives the same mean J on the tuning split "
                f"({duration(next(iter(by.values())))}): it cannot tell them apart, so the "
                "first is used; the tuning split is too quiet (or too short) for this method"
            )
    scores = (selection or {}).get("tune_mean_J_h") or {}
    if len(scores) > 1 and len(set(scores.values())) == 1:
        out.append(
            "selected: every candidate ties on the tuning split "
            f"({duration(next(iter(scores.values())) * HOUR)}), so "
            f"{selection['chosen'] if selection else '?'} was picked by its place in "
            "the list, not by merit"
        )
    few = [f"{lv} ({n})" for lv, n in counts.items() if 0 < n < MIN_N]
    if few:
        out.append(
            f"too few samples to count (under {MIN_N}): {', '.join(few)}; those levels' "
            "figures are shown but are no result"
        )
    for method, share in coverage.items():
        if share is not None and share < COVERAGE_WARN:
            out.append(
                f"{method}: its stated 90% intervals held only {share:.0%} of the true waits "
                "on the test split; its forecasts do not hold on this cluster (retrain, or "
                "recalibrate on this cluster's own history)"
            )
    return out
