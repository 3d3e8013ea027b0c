"""Job arrivals as a calendar-driven point process, fitted on a trace's submit times.

Queueing depends on *when* jobs arrive far more than on the marginal of inter-arrival gaps:
a week of quiet nights and busy weekday afternoons loads a cluster differently from the
same gaps shuffled. So submit times are not a column of the tabular synthesizer; they come
from this model:

- **bursts**: submits at most ``burst_gap_s`` (60 s) apart form one burst (scripted loops, job
  arrays: ~13% of ls6 gaps are 0 s); a burst's size and its inner gaps are drawn from
  their empirical distributions;
- **burst starts** follow a non-homogeneous Poisson process with one rate per hour of the
  week (local time, so the working day stays where it is across DST), estimated as bursts
  per observed hour; hours inside long silent stretches of the trace (outages, holes
  between the slices of a trace) are not counted as observed;
- **swings**: real days differ far more than Poisson noise allows (deadlines, one user's
  campaign), and so do hours within a day (sessions at the terminal); each day's rates
  are scaled by a Gamma(k_d, 1/k_d) factor and each hour's by a Gamma(k_h, 1/k_h) factor,
  both fitted by the method of moments on burst counts (a Cox process; None means no
  extra spread at that level).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import count
from typing import Any

import numpy as np
import pandas as pd

HOURS_PER_WEEK = 168
HOUR = 3600
DAY = 86400
#: Longer silences are holes in the trace, not quiet time: longer than a long weekend on a
#: quiet cluster (a weekday-only workload is silent ~64 h every weekend).
MAX_SILENCE_S = 4 * DAY


def hour_of_week(epoch_s: np.ndarray, tz: str) -> np.ndarray:
    """Local hour of the week (Monday 00:00 = 0) of each epoch second."""
    ts = pd.to_datetime(epoch_s, unit="s", utc=True).tz_convert(tz)
    how: np.ndarray = (ts.dayofweek * 24 + ts.hour).to_numpy(dtype=np.int64)
    return how


def burst_ids(sorted_submits: np.ndarray, burst_gap_s: int) -> np.ndarray:
    """Burst index of each (sorted) submit: a new burst where the gap exceeds the limit."""
    gaps = np.diff(sorted_submits)
    ids: np.ndarray = np.concatenate([[0], np.cumsum(gaps > burst_gap_s)]).astype(np.int64)
    return ids


def observed_hours(sorted_submits: np.ndarray, start: int, end: int, max_silence_s: int
                   ) -> np.ndarray:  # fmt: skip
    """Start times (epoch s, on the hour) of the hours in [start, end) that count as
    observed: every hour except those wholly inside a silence longer than
    ``max_silence_s`` (a hole in the trace, not a quiet night)."""
    first = start - start % HOUR
    hours = np.arange(first, end, HOUR, dtype=np.int64)
    edges = np.concatenate([[start], sorted_submits, [end]])
    gaps = np.diff(edges)
    holes = np.flatnonzero(gaps > max_silence_s)
    keep = np.ones(hours.size, dtype=bool)
    for k in holes:
        lo, hi = edges[k], edges[k + 1]
        keep &= ~((hours >= lo) & (hours + HOUR <= hi))
    out: np.ndarray = hours[keep]
    return out


@dataclass
class ArrivalModel:
    """Fitted arrival process (see the module docstring). All times in seconds."""

    tz: str
    burst_gap_s: int
    rates_per_hour: list[float]  # bursts per hour, by local hour of the week
    burst_sizes: list[int]  # empirical burst sizes (jobs per burst)
    inner_gaps: list[int]  # empirical gaps inside bursts (each <= burst_gap_s)
    day_shape: float | None  # Gamma shape k of the daily factor; None: no extra spread
    hour_shape: float | None  # Gamma shape of the hourly factor (within a day)
    observed_hours: int
    jobs: int
    bursts: int
    notes: list[str] = field(default_factory=list)

    @property
    def jobs_per_day(self) -> float:
        mean_size = float(np.mean(self.burst_sizes)) if self.burst_sizes else 1.0
        return float(np.mean(self.rates_per_hour)) * 24 * mean_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArrivalModel:
        return cls(**d)

    def sample(
        self,
        n: int | None,
        start: int,
        rng: np.random.Generator,
        *,
        end: int | None = None,
        rate_scale: float = 1.0,
    ) -> np.ndarray:
        """Sorted submit times (int epoch s) from ``start``, and the burst index of each
        (returned as a (2, n) array: row 0 submits, row 1 burst ids): ``n`` of them, or
        (``n`` None) every one before ``end``. ``rate_scale`` multiplies every burst rate
        (to load a target window more or less than the training window did)."""
        if n is None and end is None:
            raise ValueError("give a job count or an end time")
        if rate_scale <= 0:
            raise ValueError("rate_scale must be positive")
        if n is not None and n <= 0:
            return np.zeros((2, 0), dtype=np.int64)
        rates = np.asarray(self.rates_per_hour, dtype=np.float64) * rate_scale
        if not np.any(rates > 0):
            raise ValueError("arrival model has no positive rate")
        sizes = np.asarray(self.burst_sizes or [1], dtype=np.int64)
        inner = np.asarray(self.inner_gaps or [0], dtype=np.int64)
        times: list[np.ndarray] = []
        bursts: list[np.ndarray] = []
        total = 0
        want = math.inf if n is None else n
        stop = math.inf if end is None else end
        for t0 in self._burst_heads(start, stop, rates, rng):
            if total >= want:
                break
            size = int(rng.choice(sizes))
            offs = np.concatenate([[0], np.cumsum(rng.choice(inner, size=size - 1))])
            times.append(t0 + offs.astype(np.int64))
            bursts.append(np.full(size, len(bursts), dtype=np.int64))
            total += size
        if not times:
            return np.zeros((2, 0), dtype=np.int64)
        sub = np.concatenate(times)
        bid = np.concatenate(bursts)
        order = np.argsort(sub, kind="stable")
        keep = sub[order] < stop  # a burst's tail may run past the end
        sub, bid = sub[order][keep], bid[order][keep]
        if n is not None:
            sub, bid = sub[:n], bid[:n]
        return np.vstack([sub, bid])

    def _burst_heads(
        self, start: int, stop: float, rates: np.ndarray, rng: np.random.Generator
    ) -> Iterator[int]:
        """Burst start times in [start, stop), in order (endless without a stop)."""
        hour0 = start - start % HOUR
        day_factor, day_of = 1.0, -1
        kd, kh = self.day_shape, self.hour_shape
        # Walk hour by hour: a piecewise-constant rate makes each hour's count Poisson and
        # its points uniform inside the hour (exact, no thinning needed).
        for h in count():
            t_hour = hour0 + h * HOUR
            if t_hour >= stop:
                return
            if (t_hour - hour0) // DAY != day_of:
                day_of = (t_hour - hour0) // DAY
                day_factor = 1.0 if kd is None else float(rng.gamma(kd, 1.0 / kd))
            how = int(hour_of_week(np.array([t_hour]), self.tz)[0])
            hour_factor = 1.0 if kh is None else float(rng.gamma(kh, 1.0 / kh))
            k = int(rng.poisson(rates[how] * day_factor * hour_factor))
            if k == 0:
                continue
            heads = np.sort(rng.uniform(t_hour, t_hour + HOUR, size=k)).astype(np.int64)
            yield from (t for t in heads.tolist() if start <= t < stop)


def fit_arrivals(
    submits: np.ndarray,
    tz: str,
    *,
    start: int | None = None,
    end: int | None = None,
    burst_gap_s: int = 60,
    max_silence_s: int = MAX_SILENCE_S,
) -> ArrivalModel:
    """Fit the arrival process on submit times (epoch s) observed in [start, end)."""
    s = np.sort(np.asarray(submits, dtype=np.int64))
    if s.size < 2:
        raise ValueError("need at least two submits to fit arrivals")
    lo = int(s[0]) if start is None else start
    hi = int(s[-1]) + 1 if end is None else end
    s = s[(s >= lo) & (s < hi)]
    bid = burst_ids(s, burst_gap_s)
    heads = s[np.concatenate([[True], np.diff(bid) > 0])]
    sizes = np.bincount(bid)
    gaps = np.diff(s)
    inner = gaps[gaps <= burst_gap_s]
    hours = observed_hours(s, lo, hi, max_silence_s)
    notes: list[str] = []
    if hours.size == 0:
        raise ValueError("no observed hour in the training window")
    exposure = np.bincount(hour_of_week(hours, tz), minlength=HOURS_PER_WEEK)
    head_how = hour_of_week(heads, tz)
    counts = np.bincount(head_how, minlength=HOURS_PER_WEEK)
    # Hours of the week never observed (a very short window) take the overall mean rate.
    overall = counts.sum() / max(1, exposure.sum())
    rates = np.where(exposure > 0, counts / np.maximum(exposure, 1), overall)
    if (exposure == 0).any():
        notes.append(f"{int((exposure == 0).sum())} hours of the week unobserved: mean rate")
    skipped = int(((hi - lo) // HOUR) - hours.size)
    if skipped > 0:
        notes.append(f"{skipped} hours inside silences > {max_silence_s // 3600} h not counted")
    day_shape, hour_shape = _shapes(heads, hours, rates, tz)
    return ArrivalModel(
        tz=tz,
        burst_gap_s=burst_gap_s,
        rates_per_hour=[float(r) for r in rates],
        burst_sizes=[int(x) for x in sizes],
        inner_gaps=[int(x) for x in inner],
        day_shape=day_shape,
        hour_shape=hour_shape,
        observed_hours=int(hours.size),
        jobs=int(s.size),
        bursts=int(heads.size),
        notes=notes,
    )


def _moment_shape(mu: np.ndarray, got: np.ndarray) -> float | None:
    """Method-of-moments Gamma shape of a rate factor (None: Poisson suffices).

    With expected counts mu and counts N, a Gamma(k, 1/k) factor gives
    Var(N) = mu + mu^2 / k, so k = sum(mu^2) / sum((N - mu)^2 - mu).
    """
    if mu.size < 7:
        return None
    excess = float(((got - mu) ** 2 - mu).sum())
    if excess <= 0:
        return None
    k = float((mu**2).sum()) / excess
    return k if math.isfinite(k) and k > 0 else None


def _shapes(heads: np.ndarray, hours: np.ndarray, rates: np.ndarray, tz: str
            ) -> tuple[float | None, float | None]:  # fmt: skip
    """Gamma shapes of the daily factor (whole observed days) and of the hourly factor
    (hours of those days, expected counts scaled by their day's observed/expected ratio,
    so that the hourly spread is what is left once the day's level is known)."""
    mu_h = rates[hour_of_week(hours, tz)]
    got_h = np.bincount(np.searchsorted(hours, heads, side="right") - 1, minlength=hours.size)
    day = hours // DAY
    frame = pd.DataFrame({"day": day, "mu": mu_h, "got": got_h})
    per_day = frame.groupby("day").agg(mu=("mu", "sum"), got=("got", "sum"), n=("mu", "size"))
    per_day = per_day[per_day["n"] == 24]  # whole days only
    k_day = _moment_shape(per_day["mu"].to_numpy(), per_day["got"].to_numpy())
    ratio = (per_day["got"] / per_day["mu"].where(per_day["mu"] > 0)).fillna(0.0)
    in_full = frame["day"].isin(per_day.index).to_numpy()
    scaled = frame["mu"].to_numpy() * frame["day"].map(ratio).fillna(0.0).to_numpy()
    k_hour = _moment_shape(scaled[in_full], frame["got"].to_numpy()[in_full])
    return k_day, k_hour


def hourly_counts(submits: np.ndarray, max_silence_s: int = MAX_SILENCE_S) -> np.ndarray:
    """Jobs submitted in each observed clock hour (:func:`observed_hours`) from the first
    submit's hour to the last's: holes in a trace are not hours with no arrivals."""
    s = np.sort(np.asarray(submits, dtype=np.int64))
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    base = int(s[0] - s[0] % HOUR)
    idx = (s - base) // HOUR
    counts = np.bincount(idx)
    hours = observed_hours(s, int(s[0]), int(s[-1]) + 1, max_silence_s)
    out: np.ndarray = counts[(hours - base) // HOUR]
    return out


def interarrivals(submits: np.ndarray) -> np.ndarray:
    """Gaps between consecutive sorted submits (seconds)."""
    s = np.sort(np.asarray(submits, dtype=np.int64))
    out: np.ndarray = np.diff(s)
    return out
