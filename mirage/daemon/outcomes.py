"""What the daemon's steps produce, named once: the outcome enums and a cycle's report.

The enums are ``StrEnum`` on purpose: their values are what the database, the metrics'
labels and ``--json`` output held before they had names, so stored rows, dashboards and
scripts read them unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirage.daemon.store import Chain
    from mirage.policy.base import Decision, PendingTransition


class SubmitOutcome(enum.StrEnum):
    """What one sbatch of a committed intent came to (``ledger.perform_submission``).

    Only ``REJECTED`` (Slurm refused: no job exists) and ``SUBMITTED`` (the job id is
    known) are final. The others may hide a job: the submission stays UNKNOWN and is
    resolved by its token (adopted, or LOST after ``unknown_timeout_s``).
    """

    SUBMITTED = "submitted"
    #: refused by Slurm (or the request could not be started at all): no job exists
    REJECTED = "rejected"
    #: the controller timed out: the reply was lost, a job may exist
    UNKNOWN = "unknown"
    #: the controller could not be reached
    UNREACHABLE = "unreachable"
    #: sbatch was killed, or its answer could not be read
    UNANSWERED = "unanswered"

    @property
    def stalls(self) -> bool:
        """Whether the controller itself failed to answer: the cycle's other submissions
        wait for a good poll (one chain's garbled sbatch stops no one else)."""
        return self in (SubmitOutcome.UNKNOWN, SubmitOutcome.UNREACHABLE)

    @property
    def unresolved(self) -> bool:
        """Whether the job may or may not exist (resolved later by its token)."""
        return self not in (SubmitOutcome.SUBMITTED, SubmitOutcome.REJECTED)


class SegmentOutcome(enum.StrEnum):
    """How a finished segment ended for its chain (``Segment.outcome``)."""

    #: the state table's CONTINUE: training goes on with the successor
    CONTINUE = "CONTINUE"
    #: the state table's STOP: the chain ends
    STOP = "STOP"
    #: cancelled by Mirage because its chain ended
    CANCELLED = "CANCELLED"
    #: a pre-submitted successor cancelled while pending (a revocation)
    REVOKED = "REVOKED"


class Skip(enum.StrEnum):
    """Why a cycle did not poll or act (``CycleReport.skipped``)."""

    #: another daemon holds this cluster's lease
    LEASE = "lease"
    #: waiting out the back-off after failed polls
    BACKOFF = "backoff"
    #: the controller (or slurmdbd) could not be reached
    UNREACHABLE = "unreachable"
    #: the poll failed otherwise (a timeout, an unreadable answer)
    ERROR = "error"


@dataclass
class CycleReport:
    """What one cycle did (``Daemon.cycle``'s answer; ``mirage status`` records a digest)."""

    now: int
    acted: bool = False
    skipped: Skip | None = None
    slurm_reads: int = 0
    submitted: list[str] = field(default_factory=list)  # job ids
    unknown: list[str] = field(default_factory=list)  # tokens
    adopted: list[str] = field(default_factory=list)  # tokens
    lost: list[str] = field(default_factory=list)  # tokens
    rejected: list[str] = field(default_factory=list)  # tokens
    signalled: list[str] = field(default_factory=list)  # job ids
    cancelled: list[str] = field(default_factory=list)  # job ids
    revoked: list[str] = field(default_factory=list)  # job ids (pending pre-submissions)
    ended: list[str] = field(default_factory=list)  # chain ids
    decisions: int = 0
    error: str = ""
    duration_s: float = 0.0
    submit_stalled: bool = False  # an sbatch timed out or lost the controller
    failed: bool = False  # the cycle failed as a whole (error says why)
    chain_errors: list[str] = field(default_factory=list)  # chains whose own step failed
    accounting_error: str = ""  # sacct failed while squeue answered: went on from squeue


@dataclass
class Want:
    """A successor to submit in this cycle's act step (``presubmit``: while its
    predecessor runs, as the policy decided; else because there is no live segment)."""

    chain: Chain
    index: int
    time_limit: int
    presubmit: bool
    decision: Decision | None = None
    pending: PendingTransition | None = None
