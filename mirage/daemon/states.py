"""What a segment's Slurm state means for its chain: one pure function and its table.

``segment_action`` looks at the latest record of a chain's *current* segment (the one
training now, or the last one that did) and answers one of:

- **WAIT**: nothing to conclude yet (the job is queued, runs, is being requeued, or
  Slurm does not know it right now: unknown is not finished);
- **CONTINUE**: the segment is over and training goes on: the successor runs (already
  pre-submitted, or submitted now) unless the chain's budget is used up;
- **STOP**: the chain ends: the pre-submitted successor, if any, is cancelled. The
  chain is COMPLETED when the completion marker was found, STOPPED otherwise.

| Slurm state (base)                      | condition                                   | action   |
|-----------------------------------------|---------------------------------------------|----------|
| PENDING                                 | reason `DependencyNeverSatisfied`           | STOP     |
| PENDING (incl. a requeued job, same id) | any other reason                            | WAIT     |
| RUNNING, COMPLETING, SUSPENDED, STOPPED | —                                           | WAIT     |
| REQUEUED, RESIZING                      | —                                           | WAIT     |
| any ended state (COMPLETED ... REVOKED) | the chain's `--until-file` marker exists    | STOP [1] |
| any ended state                         | marker configured, check failed (unknown)   | WAIT     |
| COMPLETED                               | no marker / marker absent                   | CONTINUE |
| TIMEOUT                                 | —                                           | CONTINUE |
| CANCELLED                               | Mirage signalled or cancelled it (handoff)  | CONTINUE |
| CANCELLED                               | by the user or an admin                     | STOP     |
| FAILED                                  | Mirage had signalled it for a handoff       | CONTINUE |
| FAILED                                  | otherwise (non-zero exit)                   | STOP     |
| OUT_OF_MEMORY                           | —                                           | STOP     |
| NODE_FAIL, BOOT_FAIL                    | (not requeued by Slurm) the node's fault    | CONTINUE |
| PREEMPTED                               | (not requeued by Slurm) the scheduler's act | CONTINUE |
| DEADLINE                                | the user's `--deadline` passed              | STOP     |
| REVOKED, SPECIAL_EXIT                   | federation revoke / the job asked to be held | STOP    |
| no record at all, or UNKNOWN            | —                                           | WAIT     |

[1] the chain is COMPLETED; every other STOP leaves it STOPPED.

The completion marker is checked for every segment that ended, however it ended: a job
that finished its training and wrote the marker, then failed on its way out (a signal
during the interpreter's exit: Slurm's warning just after the last step), has finished
its chain; the reason says what Slurm reported. Mirage's own handoff
signal makes the predecessor checkpoint and exit: however it exits (COMPLETED, CANCELLED
by the signal, FAILED from a non-zero status) it CONTINUEs, except OUT_OF_MEMORY. "Mirage
signalled it" includes a handoff whose intent was recorded but whose signal was not (the
daemon died in between: the job may have had the signal; core records the intent first).
A CONTINUE that would exceed ``--segments N`` is the chain's business (core), not this
table's: the table only says what the segment's end means.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mirage.slurm.types import JobState


class Action(enum.Enum):
    WAIT = "WAIT"
    CONTINUE = "CONTINUE"
    STOP = "STOP"


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str
    completed: bool = False  # STOP because the completion marker says the run is done


#: PENDING reasons that say the job can never start (a dependency that cannot be met).
NEVER_REASONS = frozenset({"DependencyNeverSatisfied"})

_WAIT_STATES = frozenset(
    {
        JobState.RUNNING,
        JobState.COMPLETING,
        JobState.SUSPENDED,
        JobState.STOPPED,
        JobState.REQUEUED,
        JobState.RESIZING,
        JobState.UNKNOWN,
    }
)
_NOT_THE_JOBS_FAULT = frozenset({JobState.NODE_FAIL, JobState.BOOT_FAIL, JobState.PREEMPTED})
_STOP_STATES = frozenset(
    {JobState.DEADLINE, JobState.REVOKED, JobState.SPECIAL_EXIT, JobState.OUT_OF_MEMORY}
)


def segment_action(
    state: JobState | None,
    reason: str = "",
    *,
    until_file: bool = False,
    marker: bool | None = None,
    by_mirage: bool = False,
) -> Verdict:
    """The chain action for a segment whose job is in ``state``.

    ``state`` None: the job is in neither squeue nor sacct. ``until_file``: the chain has
    a completion marker; ``marker``: whether it exists (None: not checked, or the check
    failed). ``by_mirage``: Mirage signalled (handoff) or cancelled this job.
    """
    if state is None:
        return Verdict(Action.WAIT, "job in neither squeue nor sacct (unknown is not finished)")
    if state is JobState.PENDING:
        if reason in NEVER_REASONS:
            return Verdict(Action.STOP, f"pending with {reason}: it can never start")
        return Verdict(Action.WAIT, f"pending ({reason or 'no reason'})")
    if state in _WAIT_STATES:
        return Verdict(Action.WAIT, f"{state.value.lower()}")
    if until_file and marker is not False:
        return _marker_verdict(state, marker)
    if state is JobState.COMPLETED:
        return Verdict(Action.CONTINUE, "completed without the completion marker")
    if state is JobState.TIMEOUT:
        return Verdict(Action.CONTINUE, "reached its time limit")
    if state in _STOP_STATES:
        return Verdict(Action.STOP, f"ended {state.value}")
    if state in _NOT_THE_JOBS_FAULT:
        return Verdict(Action.CONTINUE, f"{state.value}: not the job's fault, resume")
    if state in (JobState.CANCELLED, JobState.FAILED):
        return _cancelled_or_failed(state, by_mirage)
    return Verdict(Action.WAIT, f"unmapped state {state.value}")


def _marker_verdict(state: JobState, marker: bool | None) -> Verdict:
    """An ended segment of a chain with a completion marker that is there or unknown."""
    if marker is None:
        return Verdict(Action.WAIT, f"{ended(state)}; the completion marker could not be checked")
    if state is JobState.COMPLETED:
        return Verdict(Action.STOP, "completed and wrote the completion marker", True)
    return Verdict(
        Action.STOP,
        f"wrote the completion marker (training done), though Slurm reports it {state.value}",
        True,
    )


def ended(state: JobState) -> str:
    return "completed" if state is JobState.COMPLETED else f"ended {state.value}"


def is_ended(state: JobState | None) -> bool:
    """Whether the segment's job will not run again (its completion marker is worth a look)."""
    return state is not None and state is not JobState.PENDING and state not in _WAIT_STATES


def _cancelled_or_failed(state: JobState, by_mirage: bool) -> Verdict:
    if by_mirage:
        return Verdict(Action.CONTINUE, f"{state.value} after Mirage's handoff signal")
    who = "by the user or an admin" if state is JobState.CANCELLED else "(non-zero exit)"
    return Verdict(Action.STOP, f"{state.value} {who}")
