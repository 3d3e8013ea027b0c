"""Wait forecasters (random forest, XGBoost) and the policy that acts on them.

A forecaster predicts, from the decision features, quantiles of the successor's wait if it
were submitted now (hours). The policy submits when the time left to the predecessor's
planned end is at most the predicted wait quantile plus a band tuned on the tuning split.

Why a quantile and which one: with J = interruption + w * overlap (w the cost's early-start
weight, :meth:`mirage.policy.cost.CostModel.early_weight`; the handoff window's fixed
charge aside), submitting at time tau costs (tau + W - E)+ + w * (E - tau - W)+ for wait W
and planned end E. Its expectation is least when P(tau + W <= E) = 1 / (1 + w) (the
newsvendor solution), so the target is the 1/(1+w) quantile of W given what is seen (0.98
for a 48 h limit under the default cost, capped at the interval's 0.95; 2/3 under SC'23's
w = 0.5): the
policy submits once the time left falls to it. The band absorbs what the forecaster gets
systematically wrong; the outer quantiles (5% and 95%) give the daemon's 90% interval,
widened by conformalized quantile regression (Romano et al., 2019) on the tuning split
(:func:`conformal_pad`), in log(1 + hours) so that the widening is relative: raw quantile
models under-cover once the queue is busier than in training.

- :class:`XGBForecaster`: one XGBoost model with the multi-quantile objective
  (``reg:quantileerror``), quantiles re-sorted so that they never cross.
- :class:`ForestForecaster`: a scikit-learn random forest of the wait; its quantiles are
  the per-leaf empirical quantiles of the training waits averaged over the trees (a
  cheap quantile-forest approximation: one table lookup per tree at prediction time).
"""

from __future__ import annotations

import abc
import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mirage.policy.base import Decision, DecisionContext, PendingTransition, Policy
from mirage.policy.cost import DEFAULT_COST
from mirage.policy.decision import decision_features

HOUR = 3600.0


Levels = tuple[float, ...]


#: The outer levels: the daemon's 90% interval.
LOW_LEVEL, HIGH_LEVEL = 0.05, 0.95


def newsvendor_level(weight: float) -> float:
    """The J-optimal quantile 1/(1+w) for early-start weight ``w``, within the interval's
    levels (a level above 0.95 would be the interval's edge)."""
    return min(HIGH_LEVEL, round(1.0 / (1.0 + weight), 4))


def quantile_levels(weight: float = DEFAULT_COST.early_weight(48 * HOUR)) -> Levels:
    """5%, 95% (the daemon's 90% interval), the median (its predicted start), the
    J-optimal 1/(1+w) and a few around it, among which tuning picks the one to act on
    (a forecaster's quantiles are calibrated on its training months, not on the next)."""
    return tuple(sorted({LOW_LEVEL, 0.25, 0.5, newsvendor_level(weight), 0.8, 0.9, HIGH_LEVEL}))


class Forecaster(abc.ABC):
    """Quantiles of the wait (hours) if submitted now, one row per feature row."""

    kind: ClassVar[str]

    def __init__(self, levels: Levels, seed: int = 0, **params: Any) -> None:
        self.levels = levels
        self.seed = seed

    @abc.abstractmethod
    def fit(self, x: np.ndarray, wait_h: np.ndarray) -> None: ...

    @abc.abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray:
        """float64 (n, len(levels)): the quantiles of ``levels``, non-decreasing per row."""

    @abc.abstractmethod
    def save(self, folder: Path) -> list[str]:
        """Write the model's files into ``folder``; return their names."""

    @classmethod
    @abc.abstractmethod
    def load(cls, folder: Path, levels: Levels) -> Forecaster: ...


class XGBForecaster(Forecaster):
    kind = "xgb"
    # XGBoost's own version-portable format (UBJSON), gzipped: a third of the JSON's size
    FILE = "model.ubj.gz"

    def __init__(self, levels: Levels, seed: int = 0, **params: Any) -> None:
        import xgboost as xgb

        super().__init__(levels, seed)
        defaults: dict[str, Any] = {
            "n_estimators": 300,
            "max_depth": 6,
            "learning_rate": 0.05,
            "min_child_weight": 5.0,
            "subsample": 0.8,
            "colsample_bytree": 0.8,
            "tree_method": "hist",
            "n_jobs": 2,
        }
        defaults.update(params)
        self.model = xgb.XGBRegressor(
            objective="reg:quantileerror",
            quantile_alpha=np.asarray(levels),
            random_state=seed,
            **defaults,
        )

    def fit(self, x: np.ndarray, wait_h: np.ndarray) -> None:
        self.model.fit(x, wait_h)

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = np.asarray(self.model.predict(x), dtype=np.float64).reshape(len(x), -1)
        out = np.maximum(out, 0.0)
        return np.sort(out, axis=1)

    def save(self, folder: Path) -> list[str]:
        raw = bytes(self.model.get_booster().save_raw("ubj"))
        (folder / self.FILE).write_bytes(gzip.compress(raw, mtime=0))  # same model, same bytes
        return [self.FILE]

    @classmethod
    def load(cls, folder: Path, levels: Levels) -> XGBForecaster:
        out = cls(levels)
        out.model.load_model(bytearray(gzip.decompress((folder / cls.FILE).read_bytes())))
        return out


class ForestForecaster(Forecaster):
    kind = "rf"
    FILE = "model.joblib"

    def __init__(self, levels: Levels, seed: int = 0, **params: Any) -> None:
        from sklearn.ensemble import RandomForestRegressor

        super().__init__(levels, seed)
        defaults: dict[str, Any] = {
            "n_estimators": 100,
            "min_samples_leaf": 20,
            "max_features": 0.5,
            "max_samples": 0.5,
            "n_jobs": 2,
        }
        defaults.update(params)
        self.model = RandomForestRegressor(random_state=seed, **defaults)
        self.leaf_q: list[np.ndarray] = []  # per tree: (n_nodes, levels) wait quantiles per leaf

    def fit(self, x: np.ndarray, wait_h: np.ndarray) -> None:
        self.model.fit(x, wait_h)
        leaves = self.model.apply(x)  # (n, trees)
        self.leaf_q = [
            self._leaf_table(t, leaves[:, i], wait_h) for i, t in enumerate(self.model.estimators_)
        ]

    def _leaf_table(self, tree: Any, leaf: np.ndarray, y: np.ndarray) -> np.ndarray:
        table = np.zeros((tree.tree_.node_count, len(self.levels)))
        order = np.argsort(leaf, kind="stable")
        ids, starts = np.unique(leaf[order], return_index=True)
        for node, ys in zip(ids, np.split(y[order], starts[1:]), strict=True):
            table[node] = np.quantile(ys, self.levels)
        return table

    def predict(self, x: np.ndarray) -> np.ndarray:
        leaves = self.model.apply(x)
        acc = np.zeros((len(x), len(self.levels)))
        for i, table in enumerate(self.leaf_q):
            acc += table[leaves[:, i]]
        out: np.ndarray = np.sort(acc / max(1, len(self.leaf_q)), axis=1)
        return out

    def save(self, folder: Path) -> list[str]:
        import joblib

        joblib.dump({"model": self.model, "leaf_q": self.leaf_q}, folder / self.FILE, compress=3)
        return [self.FILE]

    @classmethod
    def load(cls, folder: Path, levels: Levels) -> ForestForecaster:
        import joblib

        # joblib files are pickles: models/ is written by `mirage train` and owned by the
        # admin, like the daemon's code; never load one from an untrusted place.
        blob = joblib.load(folder / cls.FILE)
        out = cls(levels)
        out.model, out.leaf_q = blob["model"], blob["leaf_q"]
        return out


FORECASTERS: dict[str, type[Forecaster]] = {"rf": ForestForecaster, "xgb": XGBForecaster}


#: The forecast median (hours) under which a decision counts as a "quiet queue" one, with
#: its own tuned band: Mirage's low/medium boundary, fixed, not tuned.
QUIET_H = 2.0


def conformal_pad(q_lo_h: np.ndarray, q_hi_h: np.ndarray, wait_h: np.ndarray,
                  coverage: float = 0.9) -> float:  # fmt: skip
    """CQR's widening, in log(1 + hours): the ceil((n + 1) * coverage)-th smallest score
    max(lo - y, y - hi) on held-out rows (negative: the raw interval was too wide)."""
    n = len(wait_h)
    if n == 0:
        return 0.0
    y = np.log1p(np.maximum(wait_h, 0.0))
    score = np.maximum(np.log1p(np.maximum(q_lo_h, 0.0)) - y, y - np.log1p(np.maximum(q_hi_h, 0.0)))
    k = min(n, int(np.ceil((n + 1) * coverage)))
    return float(np.sort(score)[k - 1])


#: Forecast-median edges (hours) of the groups that get their own conformal pad (quiet,
#: busy, deep queues: Mirage's low/medium/heavy boundaries). One pad for all rows covers
#: 90% on average but not within each group: deep queues, rarer in tuning, under-covered.
PAD_EDGES_H = (QUIET_H, 12.0)
#: Fewer tuning rows than this in a group: it takes the pad of all rows instead.
MIN_GROUP_ROWS = 1000


def pad_group(median_h: np.ndarray) -> np.ndarray:
    """Each row's pad group (0 quiet, 1 busy, 2 deep) from its forecast median (hours)."""
    out: np.ndarray = np.digitize(median_h, PAD_EDGES_H)
    return out


def group_pads(
    q_lo_h: np.ndarray, q_hi_h: np.ndarray, median_h: np.ndarray, wait_h: np.ndarray
) -> tuple[float, ...]:
    """:func:`conformal_pad` per pad group (Mondrian conformal prediction: coverage holds
    within each group, not only on average); a group with too few rows takes the pad of
    all rows."""
    overall = conformal_pad(q_lo_h, q_hi_h, wait_h)
    group = pad_group(median_h)
    out = []
    for g in range(len(PAD_EDGES_H) + 1):
        rows = group == g
        enough = int(rows.sum()) >= MIN_GROUP_ROWS
        out.append(conformal_pad(q_lo_h[rows], q_hi_h[rows], wait_h[rows]) if enough else overall)
    return tuple(out)


def widen(
    q_lo_h: np.ndarray, q_hi_h: np.ndarray, pad: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The interval (hours) after a :func:`conformal_pad` widening (one pad, or one per row)."""
    lo = np.expm1(np.log1p(np.maximum(q_lo_h, 0.0)) - pad)
    hi = np.expm1(np.log1p(np.maximum(q_hi_h, 0.0)) + pad)
    return np.maximum(lo, 0.0), np.maximum(hi, lo)


#: Revocation margins (hours; None: never revoke) that tuning chooses among: a pending
#: pre-submission is cancelled once the rule finds it that much too early.
REVOKE_MARGINS_H: tuple[float | None, ...] = (None, 8.0, 4.0, 2.0, 1.0, 0.5)


def first_submit(left_h: np.ndarray, q_h: np.ndarray, band_h: np.ndarray | float) -> int:
    """The first step whose time left is within the predicted wait plus the band
    (``len(left_h)``: none; the successor is then submitted at the planned end)."""
    hit = np.nonzero(left_h <= q_h + band_h)[0]
    return int(hit[0]) if len(hit) else len(left_h)


class ForecastPolicy(Policy):
    """Submit when the time left is within the forecast wait quantile ``act`` + a band.

    ``act`` indexes the forecaster's levels (tuned; 1/(1+w) in theory). Where the
    forecast median is under :data:`QUIET_H` (a quiet queue, where submitting early mostly
    buys overlap) the rule uses its own quantile ``quiet_act`` and band ``quiet_band_s``,
    elsewhere ``act`` and ``band_s``; all four tuned. The
    decision shows the median as the predicted start, the 5-95% quantiles widened by
    ``interval_pads`` (one per :func:`pad_group`; older models: the one ``interval_pad``)
    as its 90% interval.
    """

    def __init__(
        self,
        forecaster: Forecaster,
        band_s: float,
        act: int,
        name: str | None = None,
        *,
        quiet_band_s: float | None = None,
        interval_pad: float = 0.0,
        quiet_act: int | None = None,
        interval_pads: Sequence[float] | None = None,
        revoke_margin_h: float | None = None,
    ) -> None:
        levels = forecaster.levels
        quiet_act = act if quiet_act is None else quiet_act
        for a in (act, quiet_act):
            if not 0 <= a < len(levels):
                raise ValueError(f"act must index the levels {levels}, got {a}")
        self.quiet_act = quiet_act
        self.forecaster = forecaster
        self.band_s = band_s
        self.quiet_band_s = band_s if quiet_band_s is None else quiet_band_s
        self.act = act
        self.interval_pad = interval_pad
        if interval_pads is not None and len(interval_pads) != len(PAD_EDGES_H) + 1:
            raise ValueError(f"interval_pads needs one pad per group, got {interval_pads}")
        self.interval_pads = None if interval_pads is None else tuple(interval_pads)
        self.mid = min(range(len(levels)), key=lambda i: abs(levels[i] - 0.5))
        self.name = name or forecaster.kind
        self.revoke_margin_h = revoke_margin_h

    @property
    def revocable(self) -> bool:
        return self.revoke_margin_h is not None

    def bands_h(self, q_h: np.ndarray) -> np.ndarray:
        """The band (hours) for each row of forecast quantiles (hours)."""
        out: np.ndarray = np.where(self.quiet(q_h), self.quiet_band_s, self.band_s) / HOUR
        return out

    def quiet(self, q_h: np.ndarray) -> np.ndarray:
        """Which rows of forecast quantiles (hours) are quiet-queue decisions."""
        out: np.ndarray = q_h[:, self.mid] < QUIET_H
        return out

    def acted_h(self, q_h: np.ndarray) -> np.ndarray:
        """The wait quantile (hours) the rule acts on, per row of forecast quantiles."""
        out: np.ndarray = np.where(self.quiet(q_h), q_h[:, self.quiet_act], q_h[:, self.act])
        return out

    def first_step(self, q_h: np.ndarray, left_h: np.ndarray) -> int:
        """The rule on one sample's forecast quantiles (hours), step by step."""
        return first_submit(left_h, self.acted_h(q_h), self.bands_h(q_h))

    def plan(self, q_h: np.ndarray, left_h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per step: submit (time left within the acted quantile + band), and revoke a
        pending pre-submission (time left beyond it by more than ``revoke_margin_h``: a
        fresh submission now would start that much too early, and the pending one, older,
        earlier still)."""
        due = self.acted_h(q_h) + self.bands_h(q_h)
        submit: np.ndarray = left_h <= due
        if self.revoke_margin_h is None:
            return submit, np.zeros_like(submit)
        revoke: np.ndarray = left_h > due + self.revoke_margin_h
        return submit, revoke

    def plan_for(self, matrix: np.ndarray, left_h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`plan` on a recorded sample's decision rows, in one batched prediction."""
        return self.plan(self.forecaster.predict(matrix), left_h)

    def revoke(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[bool]:
        if not pending or self.revoke_margin_h is None:
            return [False] * len(pending)
        q_h = self.forecaster.predict(decision_features(ctx, pending))
        left_h = np.array([p.remaining(ctx.now) / HOUR for p in pending])
        return [bool(v) for v in self.plan(q_h, left_h)[1]]

    def interval_h(self, q_h: np.ndarray) -> np.ndarray:
        """The stated 90% interval (hours; columns low, high) for rows of quantiles: the
        5-95% quantiles widened by the row's group pad (or the one pad of older models)."""
        pad: float | np.ndarray = self.interval_pad
        if self.interval_pads is not None:
            pad = np.asarray(self.interval_pads)[pad_group(q_h[:, self.mid])]
        lo, hi = widen(q_h[:, 0], q_h[:, -1], pad)
        return np.column_stack([lo, hi])

    def decide(self, ctx: DecisionContext, pending: Sequence[PendingTransition]) -> list[Decision]:
        if not pending:
            return []
        q_h = self.forecaster.predict(decision_features(ctx, pending))
        rows = zip(
            pending,
            (q_h[:, self.mid] * HOUR).tolist(),
            (self.acted_h(q_h) * HOUR).tolist(),
            (self.bands_h(q_h) * HOUR).tolist(),
            (self.interval_h(q_h) * HOUR).tolist(),
            self.quiet(q_h).tolist(),
            strict=True,
        )
        out = []
        for p, mid, act, band, (lo, hi), calm in rows:
            left = p.remaining(ctx.now)
            level = self.forecaster.levels[self.quiet_act if calm else self.act]
            out.append(
                Decision(
                    submit=left <= act + band,
                    predicted_start=ctx.now + round(mid),
                    interval=(ctx.now + round(lo), ctx.now + round(hi)),
                    reason=f"{self.name}: left {left / HOUR:.2f} h, wait q{level:g} "
                    f"{act / HOUR:.2f} h + band {band / HOUR:+.2f} h"
                    + (" (quiet queue)" if calm else ""),
                )
            )
        return out

    def steps_for(self, matrix: np.ndarray, left_h: np.ndarray) -> int:
        """The submission step on a recorded sample (rows = its decision steps): the same
        rule as :meth:`decide`, in one batched prediction."""
        return self.first_step(self.forecaster.predict(matrix), left_h)
