"""pyslurm 22.5.3 and the CLI on the same jobs at the same moment, recorded from the test
cluster (tests/data/slurm/pyslurm/recorded/, scripts/slurm-testbed/record-pyslurm-fixtures.py):
the pyslurm converters give the CLI parsers' records, field for field, but for the
differences the contract allows (tests/slurm/test_backends.py, which checks the same live)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mirage.slurm.parse import (
    parse_sacct_json,
    parse_squeue_json,
    parse_start_estimates,
    parse_tres_table,
)
from mirage.slurm.pyslurm_backend import (
    job_from_db_dict,
    job_from_queue_dict,
    start_estimates_from_queue,
)
from mirage.slurm.types import JobState, SlurmJob

REC = Path(__file__).resolve().parent.parent / "data" / "slurm" / "pyslurm" / "recorded"


def _json(name: str) -> Any:
    return json.loads((REC / name).read_text())


def _ids() -> dict[str, str]:
    lines = (REC / "recording.txt").read_text().splitlines()
    return dict(ln.split(": ", 1) for ln in lines if ": " in ln and ln.split(": ")[1].isdigit())


def _diff(a: SlurmJob, b: SlurmJob) -> dict[str, tuple[Any, Any]]:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k: (da[k], db[k]) for k in da if da[k] != db[k]}


def _owner(_uid: Any) -> str:
    return "root"  # the recording's jobs are root's (the test cluster runs them as root)


@pytest.fixture(scope="module")
def queue_pairs() -> dict[str, tuple[SlurmJob, SlurmJob]]:
    cli = parse_squeue_json((REC / "squeue.json").read_text()).by_id()
    py = {
        j.job_id: j
        for j in (job_from_queue_dict(r, _owner) for r in _json("job_get.json").values())
    }
    assert set(cli) == set(py)
    return {k: (cli[k], py[k]) for k in cli}


def test_the_recording_has_every_kind_of_job(
    queue_pairs: dict[str, tuple[SlurmJob, SlurmJob]],
) -> None:
    ids = _ids()
    states = {k: a.state for k, (a, _) in queue_pairs.items()}
    assert states[ids["gpu-running"]] is JobState.RUNNING
    assert states[ids["failed-exit-3"]] is JobState.FAILED
    assert states[ids["never-eligible"]] is JobState.CANCELLED
    assert states[ids["held-odd-name"]] is JobState.PENDING
    array = ids["array-throttled"]
    assert {f"{array}_0", f"{array}_1", f"{array}_[2-5%2]"} <= set(queue_pairs)


def test_queue_records_equal_but_exit_code(
    queue_pairs: dict[str, tuple[SlurmJob, SlurmJob]],
) -> None:
    for job_id, (cli, py) in queue_pairs.items():
        diff = _diff(cli, py)
        assert set(diff) <= {"exit_code"}, (job_id, diff)
        assert py.exit_code is None  # pyslurm's is unreliable (module docstring)
    ids = _ids()
    odd = queue_pairs[ids["held-odd-name"]][1]
    assert (odd.name, odd.comment) == ("rec-é ü|x", "mirage:odd|comment, with spaces é")
    assert queue_pairs[ids["gpu-running"]][1].gpus == 2
    assert queue_pairs[ids["gpu-running"]][1].node_list == ("gpu1",)
    assert queue_pairs[ids["never-eligible"]][1].cpus == 0  # never allocated, as squeue


def test_start_estimates_equal() -> None:
    cli = parse_start_estimates((REC / "squeue-start.txt").read_text())
    py = start_estimates_from_queue(_json("job_get.json").values())
    assert cli == py and len(cli) == 3


def test_accounting_records_equal_but_reason_and_a_lost_exit_code() -> None:
    cli = {j.job_id: j for j in parse_sacct_json((REC / "sacct.json").read_text())}
    tres = parse_tres_table((REC / "tres.txt").read_text())
    py = {
        j.job_id: j
        for j in (job_from_db_dict(r, tres) for r in _json("slurmdb_jobs_get.json").values())
    }
    # eligible jobs only (plain sacct -S -E): the running, the ended, the array's tasks
    assert set(cli) == set(py) and len(cli) == 6
    ids = _ids()
    for job_id, record in cli.items():
        diff = _diff(record, py[job_id])
        assert diff.pop("reason", ("None", ""))[1] == ""  # the old API's record has none
        if job_id == ids["failed-exit-3"]:
            # sacct --json of 22.05 reports 0 for it, so the CLI parser says "unknown"
            assert diff.pop("exit_code") == (None, 3)
        assert diff == {}, job_id
    running = py[ids["gpu-running"]]
    assert running.end is None and running.gpus == 2  # the record says "now": no end yet
    # slurmdbd stores the comment when the job ends (live: test_cluster.py's comment test)
    assert running.comment == cli[ids["gpu-running"]].comment == ""
    assert ids["never-eligible"] not in py  # never eligible: selected by state only


def test_an_array_s_pending_rest_is_named_as_sacct_names_it() -> None:
    """slurmdbd keeps a throttled array's pending rest as a hex bitmap: sacct prints
    "0x3C" as 2-5, and pyslurm's record must say the same (a live run caught
    ``2617_[0x3C]`` against sacct's ``2617_[2-5]``)."""
    tres = parse_tres_table((REC / "tres.txt").read_text())
    task = next(r for r in _json("slurmdb_jobs_get.json").values() if r["array_task_id"] == 0)
    rest = {**task, "array_task_id": 4294967294, "array_task_str": "0x3C"}
    job = job_from_db_dict(rest, tres)
    assert (job.job_id, job.array_job_id, job.array_task_id) == ("2617_[2-5]", "2617", "2-5")
    for bits, text in (("0x3F", "0-5"), ("0x2D", "0,2-3,5"), ("3-5", "3-5")):
        got = job_from_db_dict({**rest, "array_task_str": bits}, tres)
        assert got.job_id == f"2617_[{text}]"
