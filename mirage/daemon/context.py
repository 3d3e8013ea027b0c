"""What a chain's step may use, and nothing more: :class:`StepContext`.

Reconciliation, advancing a chain, submission and revocation each act on one chain at a
time. They get the owner's Slurm clients, the metrics, the ``[daemon]`` settings, the
completion-marker check, the crash-test hook and the rule for a chain's own failure:
not the daemon that orchestrates them.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from mirage.daemon.config import DaemonSection
from mirage.daemon.metrics import DaemonMetrics
from mirage.daemon.outcomes import CycleReport
from mirage.daemon.store import Chain, event_row
from mirage.daemon.timing import TimingReader
from mirage.policy.cost import DEFAULT_COST, HELD_TWICE, CostModel
from mirage.slurm.client import SlurmClient

log = logging.getLogger(__name__)

#: chain -> the client its jobs are submitted, cancelled and signalled with (the owner's)
ActionClients = Callable[[Chain], SlurmClient]
#: chain -> does its completion marker exist (None: could not check)
MarkerCheck = Callable[[Chain], bool | None]

#: Test hook (tests/slurm/test_daemon_process.py): ``MIRAGE_FAULT=<point>`` in the daemon's
#: environment makes the process SIGKILL itself the first time it reaches that point, so
#: that crash recovery is tested on the real process and cluster. Read once per Daemon;
#: unset or empty, it is inert; an unknown point is refused (a typo must not pass silently).
FAULT_POINTS = frozenset({"after-intent", "after-sbatch", "during-handoff"})


def fault_from_env() -> str:
    point = os.environ.get("MIRAGE_FAULT", "")
    if point and point not in FAULT_POINTS:
        raise ValueError(f"MIRAGE_FAULT={point!r}: valid points are {sorted(FAULT_POINTS)}")
    if point:
        log.warning("test hook armed: SIGKILL at %s (MIRAGE_FAULT)", point)
    return point


def local_marker_check(chain: Chain) -> bool | None:
    """The marker with the daemon's own rights (a per-user daemon). A symbolic link counts
    as there, wherever it points: a link left in the marker's place is refused at
    registration, not followed."""
    if not chain.until_file:
        return None
    path = Path(chain.chdir) / chain.until_file  # an absolute until_file stays itself
    try:
        path.lstat()
    except FileNotFoundError:
        return False
    except OSError:
        return None
    return True


@dataclass
class StepContext:
    """The narrow state one chain's step acts with."""

    cfg: DaemonSection
    metrics: DaemonMetrics
    clients: ActionClients
    marker_check: MarkerCheck = local_marker_check
    fault: str = ""  # the armed MIRAGE_FAULT point, "" when none
    # running segments' timing reports (their restart overhead), as the owner where asked
    timings: TimingReader = field(default_factory=TimingReader)

    @property
    def cost(self) -> CostModel:
        """The cost of record for this daemon's transitions: with ``[daemon] handoff`` off
        an early successor waits beside its predecessor (held twice, SC'23's J)."""
        return DEFAULT_COST if self.cfg.handoff else HELD_TWICE

    def fault_point(self, point: str) -> None:
        """kill -9 here when MIRAGE_FAULT names this point (see FAULT_POINTS)."""
        if self.fault == point:
            os.kill(os.getpid(), signal.SIGKILL)

    def chain_failed(
        self,
        s: Session,
        chain_id: str,
        step: str,
        exc: Exception,
        *,
        now: int,
        report: CycleReport,
    ) -> None:
        """Record an error of one chain's step on that chain (its uncommitted work is
        rolled back; what other chains did this cycle is already committed), count it and
        go on. Nothing else of the chain changes: it is retried next cycle."""
        s.rollback()
        text = f"{step}: {type(exc).__name__}: {exc}"[:2000]
        log.error("chain %s: %s", chain_id, text, exc_info=exc)
        self.metrics.chain_errors.labels(step).inc()
        report.chain_errors.append(chain_id)
        chain = s.get(Chain, chain_id)
        if chain is None:
            return
        chain.error, chain.error_at, chain.errors = text, now, chain.errors + 1
        s.add(event_row(now, "chain.error", chain_id, text, step=step))
        s.commit()


def set_note(chain: Chain, text: str) -> None:
    """Why the chain is not pre-submitted as its policy would (``mirage status``); written
    only when it changes."""
    if chain.note != text:
        chain.note = text
