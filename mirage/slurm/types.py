"""Typed records and errors shared by every Slurm backend (CLI, pyslurm, simulator).

All times are integer epoch seconds (UTC); all durations are integer seconds.
``None`` means "not known / not set" (e.g. a pending job without a start estimate),
and ``time_limit is None`` means an unlimited (INFINITE) limit.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field


class JobState(enum.Enum):
    """Slurm's base job states, plus UNKNOWN for anything we cannot map."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_active(self) -> bool:
        """Still holds or may still get an allocation."""
        return self in _ACTIVE

    @property
    def is_finished(self) -> bool:
        """Terminal: the job will never run (again) under this id."""
        return self in _FINISHED


_ACTIVE = frozenset(
    {
        JobState.PENDING,
        JobState.RUNNING,
        JobState.SUSPENDED,
        JobState.COMPLETING,
        JobState.REQUEUED,
        JobState.RESIZING,
        JobState.STOPPED,
    }
)
_FINISHED = frozenset(
    {
        JobState.COMPLETED,
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
        JobState.OUT_OF_MEMORY,
        JobState.REVOKED,
        JobState.SPECIAL_EXIT,
    }
)


@dataclass(frozen=True)
class SlurmJob:
    """One job as squeue or sacct reports it (array tasks are separate records)."""

    job_id: str  # "123" or "123_4" for an array task
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    reason: str
    submit: int | None
    eligible: int | None
    start: int | None  # actual start, or Slurm's estimate while pending
    end: int | None  # actual end, or expected end (start + limit) while running
    time_limit: int | None  # seconds; None = INFINITE
    nodes: int
    cpus: int
    gpus: int
    priority: int | None
    dependency: str
    comment: str
    exit_code: int | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    raw_state: str = ""  # the state string(s) exactly as Slurm printed them
    # the nodes a running job holds (squeue's NodeList): where it sits matters on nodes
    # that jobs share, whose free CPUs are scattered (empty where unknown or pending)
    node_list: tuple[str, ...] = ()

    @property
    def elapsed(self) -> int | None:
        if self.start is None or self.end is None:
            return None
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class QueueSnapshot:
    """Everything one ``squeue --json`` call returned, parsed."""

    taken_at: int
    jobs: tuple[SlurmJob, ...]
    slurm_version: str = ""

    def by_id(self) -> dict[str, SlurmJob]:
        return {j.job_id: j for j in self.jobs}


@dataclass(frozen=True)
class StartEstimate:
    """Slurm's own forecast for a pending job (``squeue --start`` / ``sbatch --test-only``)."""

    job_id: str | None
    start: int | None  # None: Slurm gives no estimate (yet)
    nodes: str = ""
    partition: str = ""


@dataclass(frozen=True)
class SubmitRequest:
    """Everything sbatch needs; rendered to an argv list, never to a shell string.

    ``script`` is the batch script's bytes (sent on stdin, so that later edits of the
    file on disk change nothing) unless ``script_path`` is given.
    """

    script: bytes | None = None
    script_path: str | None = None
    job_name: str | None = None
    time_limit: int | None = None  # seconds
    nodes: int | None = None
    gres: str | None = None  # e.g. "gpu:4" or "gpu:a100:4"
    partition: str | None = None
    account: str | None = None
    dependency: str | None = None  # e.g. "afterok:123"
    comment: str | None = None
    signal: str | None = None  # e.g. "B:USR1@300"
    chdir: str | None = None
    hold: bool = False
    extra_args: Sequence[str] = field(default_factory=tuple)


class SlurmError(Exception):
    """A Slurm command failed. Carries what is needed to understand why."""

    def __init__(
        self, argv: Sequence[str], returncode: int | None, stderr: str, message: str = ""
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.message = message
        text = message or f"{self.argv[0] if self.argv else '?'} exited with {returncode}"
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(f"{text}: {detail}" if detail else text)

    def __reduce__(self) -> tuple[type[SlurmError], tuple[list[str], int | None, str, str]]:
        # pickled whole, as raised (a backend run in a worker process sends its errors back)
        return type(self), (self.argv, self.returncode, self.stderr, self.message)


class SlurmUnreachableError(SlurmError):
    """The controller (or slurmdbd, for sacct) could not be reached: not a job outcome."""


class SlurmTimeoutError(SlurmError):
    """The command did not finish within its timeout.

    The outcome is unknown: e.g. a submit may have happened.
    """


class SlurmParseError(SlurmError):
    """The command succeeded but its output could not be understood."""


class SubmitError(SlurmError):
    """sbatch refused the job (bad option, limits, invalid account, ...)."""
