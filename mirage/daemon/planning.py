"""The daemon's side of ``mirage plan``: its last poll serves every user's plan.

Each cycle hands the planner its ``squeue`` snapshot and ``sacct`` records (run times of
finished jobs); a ``{"op": "plan", ...}`` request on the socket is planned on them
(:func:`mirage.plan.request.plan_request`) instead of every user's command reading the
controller itself. The first request reads the accounting history once (the look-ahead's
14 days) when the cycles have not yet seen enough. A lock keeps a cycle from changing the
snapshot or the run times while a request is planned on them (a plan takes about a
second; the cycle waits that long at most).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mirage.plan.queue import Snapshot
from mirage.plan.request import plan_request
from mirage.plan.source import HISTORY_S
from mirage.plan.work import PlanInputError
from mirage.policy.lookahead import RunTimes
from mirage.profile.schema import ClusterProfile
from mirage.slurm.client import SlurmClient
from mirage.slurm.types import QueueSnapshot, SlurmError, SlurmJob

log = logging.getLogger(__name__)

#: Fewer finished jobs than this seen by the cycles: the first plan reads the history.
MIN_HISTORY = 50


class Planner:
    """The last poll and the run-time history, for plans asked on the socket."""

    def __init__(self, client: SlurmClient, profile: Callable[[], ClusterProfile | None]) -> None:
        self.client = client
        self.profile = profile  # the daemon's (its policies'), else the live cluster's
        self.runtimes = RunTimes()
        self._snapshot: QueueSnapshot | None = None
        self._now = 0
        self._history_read = False
        self._lock = threading.Lock()

    def observe(self, now: int, snapshot: QueueSnapshot, accounting: Iterable[SlurmJob]) -> None:
        with self._lock:
            self._snapshot, self._now = snapshot, now
            self.runtimes.observe(accounting)

    def answer(self, request: Mapping[str, Any], user: str) -> dict[str, Any]:
        """``{"ok": true, "plan": {...}}`` (Plan.to_dict), or the error in one line."""
        with self._lock:
            if self._snapshot is None:
                return {"ok": False, "error": "the daemon has not polled Slurm yet: try again"}
            profile = self.profile()
            if profile is None:
                return {"ok": False, "error": "the daemon knows no cluster profile to plan on"}
            self._read_history()
            q = Snapshot(self._snapshot, profile, self._now, self.runtimes, user=user)
            try:
                plan = plan_request(q, request)
            except PlanInputError as exc:
                return {"ok": False, "error": str(exc)}
        return {"ok": True, "plan": plan.to_dict()}

    def _read_history(self) -> None:
        if self._history_read or len(self.runtimes) >= MIN_HISTORY:
            return
        self._history_read = True  # once: a failure is logged, the plan goes on without
        try:
            self.runtimes.observe(self.client.accounting(self._now - HISTORY_S, self._now))
        except SlurmError as exc:
            log.warning("plan: cannot read the run-time history: %s", exc)
