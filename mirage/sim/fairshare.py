"""Slurm's classic fair share, per user, in closed form (the engine's ``FairShare``).

Fair-share (``fairshare = "classic"`` and ``priority_weight_fairshare`` > 0; off by
default, and then the engine holds none): Slurm's classic algorithm (priority/multifactor
with PriorityFlags=NO_FAIR_TREE, https://slurm.schedmd.com/classic_fair_share.html and
https://slurm.schedmd.com/priority_multifactor.html), on a flat tree of users (the job's
``user``; every user known to the simulation, i.e. of every job added so far, is an
association). A user's raw usage is the decayed integral of their running jobs' billing
(allocated CPUs, or GPUs with ``fairshare_usage = "gpus"``) over time, with half-life
``priority_decay_half_life_s`` (PriorityDecayHalfLife; 0: no decay): usage(t) = sum over
jobs of billing x integral of 2^(-(t - x)/half-life) dx over the job's run up to t.
Normalised usage U = usage / all users' usage, normalised shares S = shares / all users'
shares (equal unless ``Simulation(fairshare_shares=...)``), and the factor F = 2^(-U/S) (F
= 1 while nobody has used anything). Slurm accrues running jobs' usage and decays it every
PriorityCalcPeriod; here it is kept in closed form per user (sums over completed and
running jobs, updated in O(1) at each start and end), so usage is exact at any instant,
priorities use it as of the last calculation (``calc``, the engine's _prio_time), and the
per-user factors are computed in one numpy expression per pass.

Per user u, with w(t) = 2^((t - base) / half-life) (w(t) = t - base without decay):
  C[u] = sum over its completed jobs of billing x (w(end) - w(start))
  A[u] = sum over its running jobs of billing x w(start);  B[u] = their billing
and usage(t) = k (C + B w(t) - A) / w(t), k = half-life / ln 2 (without decay:
usage = C + B w(t) - A): the decayed integral of billing over every job's run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from mirage.profile.schema import SchedulerSettings
from mirage.sim.plan import Hold


class FairShare:
    """Every user's usage and fair-share factor; jobs are the engine's job indices."""

    def __init__(
        self,
        sched: SchedulerSettings,
        start_time: int,
        shares: Mapping[str, float] | None,
        periodic: bool,
    ) -> None:
        """``periodic``: priorities are recalculated every PriorityCalcPeriod (usage is
        then read as of the last calculation), not at every pass."""
        self._half = max(0, sched.priority_decay_half_life_s)
        self._gpus = sched.fairshare_usage == "gpus"
        self._periodic = periodic
        self._share_of = dict(shares or {})
        self.users: dict[str, int] = {}  # user name -> user number
        self.user_of: list[int] = []  # job -> user number
        self._c: list[float] = []  # completed jobs' usage (as usage() stores it)
        self._a: list[float] = []  # running jobs: sum of billing x w(start)
        self._b: list[float] = []  # running jobs: sum of billing
        self.running: dict[int, float] = {}  # running job -> its billing
        self._shares: list[float] = []  # user number -> shares
        self._base = start_time  # w(t) counts from here (moved on now and then)
        self._version = 0  # bumped at every change of the sums or of the users
        self._snap = np.zeros(0)  # usage as of _snap_t (periodic)
        self._snap_t: int | None = None
        self._cache: tuple[int, int, np.ndarray] | None = None  # (time, version, F)

    def copy(self) -> FairShare:
        """An independent copy (a fork's)."""
        clone = object.__new__(FairShare)
        clone.__dict__.update(self.__dict__)
        for name in ("users", "user_of", "_c", "_a", "_b", "running", "_shares", "_snap"):
            setattr(clone, name, getattr(self, name).copy())
        return clone

    def add_job(self, user: str) -> int:
        """A job added to the simulation (the next job index); its user's number."""
        u = self.users.get(user)
        if u is None:
            u = self.users[user] = len(self.users)
            self._c.append(0.0)
            self._a.append(0.0)
            self._b.append(0.0)
            self._shares.append(float(self._share_of.get(user, 1.0)))
            self._version += 1
        self.user_of.append(u)
        return u

    def _w(self, t: float) -> float:
        h = self._half
        return 2.0 ** ((t - self._base) / h) if h > 0 else float(t - self._base)

    def _sync(self, calc: int) -> None:
        """Before the sums change: keep the usage as of the last priority calculation.

        With a calculation period, priorities use the usage at the last calculation c; the
        sums are valid for any t after their last change, so the snapshot is taken at the
        first change (or read) after c, and it is exact (usage is continuous in t).
        """
        if not self._periodic:
            return
        if self._snap_t is None or calc > self._snap_t:
            self._snap = self.usage(calc)
            self._snap_t = calc

    def _change(self, now: int, calc: int) -> None:
        self._sync(calc)
        self._version += 1
        h = self._half
        if h > 0 and now - self._base > 256 * h:  # keep w() far from overflow
            k = 2.0 ** (-(now - self._base) / h)
            self._c = [x * k for x in self._c]
            self._a = [x * k for x in self._a]
            self._base = now

    def started(self, i: int, holds: Iterable[Hold], now: int, calc: int) -> None:
        """Job ``i`` started at ``now`` on ``holds`` (its billing: their CPUs or GPUs)."""
        billing = sum(h[1] if self._gpus else h[2] for h in holds)
        self._change(now, calc)
        u = self.user_of[i]
        self.running[i] = billing
        self._a[u] += billing * self._w(now)
        self._b[u] += billing

    def ended(self, i: int, start: int, now: int, calc: int) -> None:
        """Running job ``i`` (started at ``start``) ended at ``now``."""
        billing = self.running.pop(i, None)
        if billing is None:
            return
        self._change(now, calc)
        u = self.user_of[i]
        ws = billing * self._w(start)
        self._c[u] += billing * self._w(now) - ws
        self._b[u] -= billing
        self._a[u] = self._a[u] - ws if self._b[u] > 0 else 0.0

    def usage(self, t: int) -> np.ndarray:
        """Every user's raw usage at time ``t`` (>= the sums' last change), by user number."""
        c, a, b = np.array(self._c), np.array(self._a), np.array(self._b)
        w = self._w(t)
        h = self._half
        if h <= 0:
            return np.asarray(np.maximum(c + b * w - a, 0.0))
        return np.asarray(np.maximum((h / np.log(2.0)) * (c + b * w - a) / w, 0.0))

    def factors(self, now: int, calc: int) -> np.ndarray:
        """The fair-share factor F = 2^(-U/S) of every user, by user number (cached), as
        of ``calc``, the last priority calculation (``now`` without a period)."""
        cache = self._cache
        if cache is not None and cache[0] == calc and cache[1] == self._version:
            return cache[2]
        if self._periodic:
            self._sync(calc)
            usage = self._snap
            n = len(self._b)
            if len(usage) < n:  # users added since the snapshot have no usage yet
                usage = np.concatenate([usage, np.zeros(n - len(usage))])
        else:
            usage = self.usage(now)
        total = float(usage.sum())
        shares = np.array(self._shares)
        if total > 0 and shares.sum() > 0:
            with np.errstate(divide="ignore", invalid="ignore"):  # a user with 0 shares: F 0
                factor = np.asarray(
                    np.nan_to_num(np.exp2(-(usage / total) / (shares / shares.sum())))
                )
        else:
            factor = np.ones(len(shares))
        self._cache = (calc, self._version, factor)
        return factor
