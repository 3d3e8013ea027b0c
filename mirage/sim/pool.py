"""The engine's pending pool: pending jobs as numpy columns, and their priority order.

Speed with deep queues: each pass computes every pending job's priority in one
vectorised expression (``PendingPool.keys``: the same float arithmetic as
``Simulation.priority``, hence the same integers) and sorts only the head of the order it
uses (``in_order``: the main pass stops when every partition is blocked; backfill takes at
most ``bf_max_job_test``). Jobs are the engine's job indices; a job's slot is its row in
the columns, freed when it leaves the pool (starts, ends, is cancelled) and reclaimed in
bulk.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from mirage.profile.schema import SchedulerSettings
from mirage.sim.limits import Limits

# Scheduling order key: -priority * KEY_SHIFT + job index (job indices stay below 2**32).
KEY_SHIFT = 1 << 32
KEY_MASK = KEY_SHIFT - 1

# The columns, with the value of a free slot.
_COLUMNS = (
    ("idx", -1),
    ("ok", False),
    ("eligible", np.inf),
    ("ws", 0.0),
    ("wsx", 0.0),
    ("submit", 0.0),
    ("part", 0),
    ("nodes", 0),
    ("limit", 0),
    ("user", 0),
)


class PendingPool:
    """Pending jobs by slot: the columns a pass's vectorised priorities and tests read."""

    def __init__(self, sched: SchedulerSettings) -> None:
        self.sched = sched  # the priority weights
        self.slot: list[int] = []  # job -> pool slot (-1: not pending)
        self.idx = np.full(64, -1, dtype=np.int64)  # slot -> job (-1: free slot)
        self.ok = np.zeros(64, dtype=bool)  # a candidate: not held, dependencies met
        self.candidates = 0  # how many slots are candidates (ok): no scan when none
        self.eligible = np.full(64, np.inf)  # eligible time (inf: not yet)
        self.ws = np.zeros(64)  # job size term of the priority
        self.wsx = np.zeros(64)  # ... once recalculated (exclusive jobs: whole-node CPUs)
        self.submit = np.zeros(64)  # submit time
        self.part = np.zeros(64, dtype=np.int64)  # partition number
        self.nodes = np.zeros(64, dtype=np.int64)
        self.limit = np.zeros(64, dtype=np.int64)  # time limit (s)
        self.user = np.zeros(64, dtype=np.int64)  # user number (fair share)
        self.n = 0  # slots used
        self._dead = 0  # slots used whose job left the pool
        self.size_changes = False  # some pooled job's size term changes at recalculation
        # Set when a pass found every eligible pending job held by a limit (see
        # all_held): (next eligible time, their rule groups' pairs) ...
        self.held_memo: tuple[float, frozenset[tuple[int, int]]] | None = None
        self.new: list[int] = []  # ... and the jobs synced in the pool since

    def copy(self) -> PendingPool:
        """An independent copy (a fork's)."""
        clone = object.__new__(PendingPool)
        clone.__dict__.update(self.__dict__)
        for name in ("slot", "new", *(column for column, _ in _COLUMNS)):
            setattr(clone, name, getattr(self, name).copy())
        return clone

    def add(
        self,
        i: int,
        *,
        size: tuple[float, float],
        submit: int,
        part: int,
        nodes: int,
        limit: int,
        user: int,
    ) -> None:
        """Pending job ``i`` joins (``size``: its size term at submit and recalculated);
        ``sync`` then sets its candidate flag and eligible time."""
        n = self.n
        if n == len(self.idx):
            self._resize(max(64, 2 * (n - self._dead)))
            n = self.n
        self.idx[n] = i
        self.ws[n], self.wsx[n] = size
        self.submit[n] = submit
        if self.wsx[n] != self.ws[n]:
            self.size_changes = True
        self.part[n] = part
        self.nodes[n] = nodes
        self.limit[n] = limit
        self.user[n] = user
        self.slot[i] = n
        self.n = n + 1

    def sync(self, i: int, ok: bool, eligible: int | None) -> None:
        """Refresh pending job ``i``'s candidate flag and eligible time."""
        s = self.slot[i]
        if s < 0:
            return
        if self.held_memo is not None:
            self.new.append(i)
        self.candidates += ok - bool(self.ok[s])
        self.ok[s] = ok
        self.eligible[s] = np.inf if eligible is None else eligible

    def remove(self, i: int) -> None:
        s = self.slot[i]
        if s < 0:
            return
        self.candidates -= bool(self.ok[s])
        self.ok[s] = False
        self.idx[s] = -1
        self.slot[i] = -1
        self._dead += 1
        if self._dead > 256 and 2 * self._dead > self.n:
            self._resize(len(self.idx))

    def set_limit(self, i: int, seconds: int) -> None:
        """Job ``i``'s time limit changed (also when it is not pooled yet)."""
        if self.slot[i] >= 0:
            self.limit[self.slot[i]] = seconds
        self.held_memo = None

    def _resize(self, size: int) -> None:
        """Drop the slots of jobs that left, into columns of ``size`` slots."""
        live = np.flatnonzero(self.idx[: self.n] >= 0)
        k = len(live)
        size = max(size, 2 * k, 64)
        cols = {}
        for name, fill in _COLUMNS:
            old = getattr(self, name)
            new = np.full(size, fill, dtype=old.dtype)
            new[:k] = old[live]
            cols[name] = new
        self.__dict__.update(cols)
        for s, i in enumerate(self.idx[:k].tolist()):
            self.slot[i] = s
        self.n = k
        self._dead = 0

    def keys(self, slots: np.ndarray, calc: int, fairshare: np.ndarray | None) -> np.ndarray:
        """Scheduling order keys of slots: ascending key = (-priority, job index), with
        priorities as of ``calc`` (the last calculation) and ``fairshare`` the users'
        factors (None: fair share off). The arithmetic of ``Simulation.priority``."""
        idx = self.idx[slots]
        s = self.sched
        m = s.priority_max_age_s
        age = np.minimum(np.maximum(calc - self.eligible[slots], 0), m)
        f_age = age / m if m > 0 else np.ones(len(idx))
        ws = self.ws[slots]
        if self.size_changes:
            ws = np.where(self.submit[slots] <= calc, self.wsx[slots], ws)
        value = s.priority_weight_age * f_age + ws + s.priority_weight_partition
        if fairshare is not None:
            value = value + s.priority_weight_fairshare * fairshare[self.user[slots]]
        return np.asarray(-value.astype(np.int64) * KEY_SHIFT + idx)

    def note_all_held(self, lim: Limits, now: int) -> None:
        """Every eligible pending job is held by a limit now: remember which rule groups
        hold them, and until when no other job becomes eligible (all_held)."""
        n = self.n
        ok, eligible = self.ok[:n], self.eligible[:n]
        later = eligible[ok & (eligible > now)]
        upto = float(later.min()) if later.size else np.inf
        pairs = lim.rule_pairs(self.idx[:n][ok & (eligible <= now)].tolist())
        self.held_memo = (upto, pairs)
        self.new.clear()

    def all_held(self, lim: Limits | None, now: int) -> bool:
        """Is every eligible pending job still held by a limit, as a pass found earlier
        (``held_memo`` set)?

        A speed shortcut, exact: a job's limit rules never change, so that stays so until
        a job becomes a candidate (a submit, a release, a dependency met: ``new``) that
        no failing rule group holds, a candidate's eligible time comes, or one of the rule
        groups holding them stops failing. Until then the passes have nothing to do (with
        limits, a quiet cluster keeps a few users' jobs pending at their limit; they
        submit more, and every start and end of other users' jobs would otherwise test
        them all again, twice).
        """
        memo = self.held_memo
        assert memo is not None and lim is not None  # the memo is only set with limits
        upto, pairs = memo
        if self.new:  # the jobs that may have become candidates join the memo
            new = []
            ok, eligible, slot = self.ok, self.eligible, self.slot
            for i in self.new:
                s = slot[i]
                if s < 0 or not ok[s]:
                    continue
                e = float(eligible[s])
                if e > now:
                    upto = min(upto, e)
                else:
                    new.append(i)
            self.new.clear()
            pairs = pairs | lim.rule_pairs(new)
            self.held_memo = (upto, pairs)
        if now < upto and lim.all_fail(pairs):
            return True
        self.held_memo = None
        return False


def in_order(keys: np.ndarray, first: int) -> Iterator[int]:
    """Job indices by ascending key: a partial sort for the ``first``, then the rest.
    ``keys`` (a fresh array from PendingPool.keys) is sorted in place."""
    n = len(keys)
    if n > first > 0:
        part = keys.argpartition(first - 1)
        head = keys[part[:first]]
        head.sort()
        yield from (head & KEY_MASK).tolist()
        keys = keys[part[first:]]
    keys.sort()
    yield from (keys & KEY_MASK).tolist()
