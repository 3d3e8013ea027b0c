"""The state -> chain action table, on real recorded squeue/sacct output (Slurm 22.05)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mirage.daemon.states import Action, segment_action
from mirage.slurm.parse import parse_sacct_json, parse_squeue_json
from mirage.slurm.types import JobState, SlurmJob

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def sacct() -> dict[str, SlurmJob]:
    return {j.job_id: j for j in parse_sacct_json((DATA / "sacct-X.json").read_text())}


def squeue() -> dict[str, SlurmJob]:
    return parse_squeue_json((DATA / "squeue.json").read_text()).by_id()


def act(job: SlurmJob, **kw: bool | None) -> Action:
    return segment_action(job.state, job.reason, **kw).action  # type: ignore[arg-type]


def test_recorded_finished_jobs() -> None:
    jobs = sacct()
    assert act(jobs["1"]) is Action.CONTINUE  # TIMEOUT
    assert act(jobs["2"]) is Action.CONTINUE  # COMPLETED, no marker configured
    assert act(jobs["2"], until_file=True, marker=False) is Action.CONTINUE
    done = segment_action(jobs["2"].state, until_file=True, marker=True)
    assert done.action is Action.STOP and done.completed
    assert act(jobs["2"], until_file=True, marker=None) is Action.WAIT  # check failed
    assert act(jobs["3"]) is Action.STOP  # FAILED
    assert act(jobs["3"], by_mirage=True) is Action.CONTINUE  # exited on the handoff signal
    assert act(jobs["5"]) is Action.STOP  # CANCELLED by the user
    assert act(jobs["8"], by_mirage=True) is Action.CONTINUE  # CANCELLED by Mirage


def test_recorded_live_jobs_wait() -> None:
    jobs = squeue()
    assert act(jobs["8"]) is Action.WAIT  # RUNNING
    assert jobs["13"].reason == "Dependency"
    assert act(jobs["13"]) is Action.WAIT
    assert act(jobs["14"]) is Action.WAIT  # Resources
    assert act(jobs["16"]) is Action.WAIT  # held by the user


def test_dependency_never_satisfied_stops() -> None:
    never = dataclasses.replace(squeue()["13"], reason="DependencyNeverSatisfied")
    assert act(never) is Action.STOP


def test_requeued_job_back_to_pending_waits() -> None:
    # a requeued job goes back to PENDING under the same id (reason BeginTime/Requeued...)
    requeued = dataclasses.replace(squeue()["8"], state=JobState.PENDING, reason="BeginTime")
    assert act(requeued) is Action.WAIT
    assert segment_action(JobState.REQUEUED).action is Action.WAIT


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (JobState.OUT_OF_MEMORY, Action.STOP),
        (JobState.NODE_FAIL, Action.CONTINUE),
        (JobState.BOOT_FAIL, Action.CONTINUE),
        (JobState.PREEMPTED, Action.CONTINUE),
        (JobState.DEADLINE, Action.STOP),
        (JobState.SPECIAL_EXIT, Action.STOP),
        (JobState.REVOKED, Action.STOP),
        (JobState.SUSPENDED, Action.WAIT),
        (JobState.COMPLETING, Action.WAIT),
        (JobState.UNKNOWN, Action.WAIT),
        (None, Action.WAIT),  # in neither squeue nor sacct: unknown is not finished
    ],
)
def test_other_states(state: JobState | None, expected: Action) -> None:
    assert segment_action(state).action is expected


def test_every_state_is_mapped() -> None:
    for state in JobState:
        verdict = segment_action(state)
        assert "unmapped" not in verdict.reason, state
