"""The daemon's side of ``mirage plan``: its last poll serves every user's plan.

Each cycle hands the planner its ``squeue`` snapshot and ``sacct`` records (run times of
finished jobs); a ``{"op": "plan", ...}`` request on the socket is planned on them
(:func:`mirage.plan.request.plan_request`) instead of every user's command reading the
controller itself. The first request reads the accounting history once (the look-ahead's
14 days) when the cycles have not yet seen enough. A lock keeps a cycle from changing the
snapshot or the run times while a request is planned on them (a plan takes about a
second; the cycle waits that long at most). Where the daemon's policy is a trained
forecaster (``rf``, ``xgb``) that is not set aside, its waits and stated intervals give
the later waits and the interval (:mod:`mirage.plan.predict`). Where the cluster's models
folder holds a wait calibration (``plan.toml``, :mod:`mirage.plan.calibrate`), plans use
it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mirage.plan.calibrate import WaitCalibration
from mirage.plan.predict import WaitForecast
from mirage.plan.queue import Snapshot
from mirage.plan.request import plan_request
from mirage.plan.shapes import Shape
from mirage.plan.source import HISTORY_S, policy_forecast
from mirage.plan.work import PlanInputError
from mirage.policy.base import DecisionContext, Policy
from mirage.policy.lookahead import RunTimes
from mirage.profile.schema import ClusterProfile
from mirage.slurm.client import SlurmClient
from mirage.slurm.types import QueueSnapshot, SlurmError, SlurmJob

log = logging.getLogger(__name__)

#: Fewer finished jobs than this seen by the cycles: the first plan reads the history.
MIN_HISTORY = 50
#: A plan holds the cycle up (the lock) while it runs: at most this many drawn passes
#: (about 0.25 s each on 2,000 jobs), and never the event simulation (tens of seconds
#: per shape on such a queue: ``mirage plan --backend cli --method simulate`` runs it in
#: the user's own process).
MAX_DAEMON_DRAWS = 8


def _refused(request: Mapping[str, Any]) -> str:
    """Why the daemon does not make this plan; "" when it does."""
    if (request.get("method") or "plan") != "plan":
        return "the daemon plans with --method plan only: use --backend cli for the simulation"
    draws = request.get("draws")
    if isinstance(draws, int) and draws > MAX_DAEMON_DRAWS:
        return f"the daemon draws at most {MAX_DAEMON_DRAWS} times (--draws)"
    return ""


class Planner:
    """The last poll and the run-time history, for plans asked on the socket."""

    def __init__(
        self,
        client: SlurmClient,
        profile: Callable[[], ClusterProfile | None],
        forecaster: Callable[[], Policy | None] = lambda: None,
        calibration: WaitCalibration | None = None,
    ) -> None:
        self.client = client
        self.profile = profile  # the daemon's (its policies'), else the live cluster's
        # the cluster's wait calibration (<models_dir>/<cluster>/plan.toml) where it has one
        self.calibration = calibration
        # the daemon's trained forecaster (rf, xgb) when it decides: later waits and the
        # interval from its stated 90% intervals (mirage.plan.predict)
        self.forecaster = forecaster
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
        refused = _refused(request)
        if refused:
            return {"ok": False, "error": refused}
        with self._lock:
            if self._snapshot is None:
                return {"ok": False, "error": "the daemon has not polled Slurm yet: try again"}
            profile = self.profile()
            if profile is None:
                return {"ok": False, "error": "the daemon knows no cluster profile to plan on"}
            self._read_history()
            q = Snapshot(self._snapshot, profile, self._now, self.runtimes, user=user)
            try:
                plan = plan_request(q, request, self._forecast(q), self.calibration)
            except PlanInputError as exc:
                return {"ok": False, "error": str(exc)}
        return {"ok": True, "plan": plan.to_dict()}

    def _forecast(self, q: Snapshot) -> WaitForecast | None:
        policy = self.forecaster()
        if policy is None:
            return None
        ask = policy_forecast(policy, DecisionContext(q.now, q.snapshot, q.profile), q.user)

        def guarded(shapes: Sequence[Shape]) -> list[tuple[int, int, int] | None]:
            try:
                return list(ask(shapes))
            except Exception as exc:  # a model that cannot read this queue: plan without
                log.warning("plan: the forecaster %s gave no waits: %r", policy.name, exc)
                return [None] * len(shapes)

        return guarded

    def _read_history(self) -> None:
        if self._history_read or len(self.runtimes) >= MIN_HISTORY:
            return
        self._history_read = True  # once: a failure is logged, the plan goes on without
        try:
            self.runtimes.observe(self.client.accounting(self._now - HISTORY_S, self._now))
        except SlurmError as exc:
            log.warning("plan: cannot read the run-time history: %s", exc)
