"""Optional SlurmClient over pyslurm (the C API), for sites that have it installed.

PyPI has no pyslurm for Slurm 22.05 (it must be built from source matching the installed
Slurm), so this backend is not exercised by Mirage's test suite. It implements what the
pyslurm API shared by 22.5.2+ and 23.x+ offers (``pyslurm.Jobs.load()``,
``pyslurm.db.Jobs.load(pyslurm.db.JobFilter(...))``, ``pyslurm.JobSubmitDescription``,
``pyslurm.Job(id).cancel()``) and delegates everything else, and anything it cannot
do, to a :class:`~mirage.slurm.cli_backend.CliSlurmClient`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.parse import map_state
from mirage.slurm.types import (
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    StartEstimate,
    SubmitError,
    SubmitRequest,
)


class PyslurmUnavailableError(ImportError):
    """pyslurm is not installed (or does not match this Slurm)."""


def load_pyslurm() -> ModuleType:
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        raise PyslurmUnavailableError(
            "pyslurm is not installed: build it from source for your Slurm version "
            "(PyPI has none for 22.05), or use CliSlurmClient"
        ) from exc


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _job_from_pyslurm(job: Any) -> SlurmJob:
    state, raw = map_state(str(getattr(job, "state", "") or ""))
    limit = _int(getattr(job, "time_limit", None))  # minutes
    array_job = _int(getattr(job, "array_id", None))
    array_task = getattr(job, "array_task_id", None)
    job_id = str(getattr(job, "id", ""))
    if array_job and array_task is not None:
        job_id = f"{array_job}_{array_task}"
    deps = getattr(job, "dependencies", None)
    return SlurmJob(
        job_id=job_id,
        name=str(getattr(job, "name", "") or ""),
        user=str(getattr(job, "user_name", "") or ""),
        account=str(getattr(job, "account", "") or ""),
        partition=str(getattr(job, "partition", "") or ""),
        state=state,
        reason=str(getattr(job, "state_reason", "") or ""),
        submit=_int(getattr(job, "submit_time", None)),
        eligible=_int(getattr(job, "eligible_time", None)),
        start=_int(getattr(job, "start_time", None)),
        end=_int(getattr(job, "end_time", None)),
        time_limit=None if limit is None else limit * 60,
        nodes=_int(getattr(job, "num_nodes", None)) or 0,
        cpus=_int(getattr(job, "cpus", None)) or 0,
        gpus=0,  # pyslurm's GRES accessors differ between releases: not mapped here
        priority=_int(getattr(job, "priority", None)),
        dependency=str(deps) if deps else "",
        comment=str(getattr(job, "comment", "") or ""),
        array_job_id=str(array_job) if array_job else None,
        array_task_id=None if array_task is None else str(array_task),
        raw_state=raw,
    )


class PyslurmClient(SlurmClient):
    """queue, accounting, submit and cancel via pyslurm; the rest via the CLI backend."""

    def __init__(self, fallback: CliSlurmClient | None = None) -> None:
        self._pyslurm = load_pyslurm()
        self._cli = fallback if fallback is not None else CliSlurmClient()

    def queue(self) -> QueueSnapshot:
        taken_at = int(time.time())
        try:
            jobs = self._pyslurm.Jobs.load()
        except Exception as exc:  # pyslurm raises its own RPCError
            raise SlurmError(["pyslurm.Jobs.load"], None, str(exc)) from exc
        return QueueSnapshot(
            taken_at=taken_at, jobs=tuple(_job_from_pyslurm(j) for j in jobs.values())
        )

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        if every_state:  # sacct's own state selection
            return self._cli.accounting(start, end, every_state=True)
        db = self._pyslurm.db
        try:
            found = db.Jobs.load(db.JobFilter(start_time=start, end_time=end or int(time.time())))
        except Exception as exc:
            raise SlurmError(["pyslurm.db.Jobs.load"], None, str(exc)) from exc
        return [_job_from_pyslurm(j) for j in found.values()]

    def submit(self, request: SubmitRequest) -> str:
        if request.script_path is not None or request.extra_args:
            return self._cli.submit(request)  # pyslurm wants script text and known fields
        desc: dict[str, Any] = {"script": (request.script or b"").decode()}
        for key, value in (
            ("name", request.job_name),
            ("nodes", request.nodes),
            ("gres_per_node", request.gres),
            ("partition", request.partition),
            ("account", request.account),
            ("dependencies", request.dependency),
            ("comment", request.comment),
            ("signal", request.signal),
            ("working_directory", request.chdir),
        ):
            if value is not None:
                desc[key] = value
        if request.time_limit is not None:
            desc["time_limit"] = max(1, -(-request.time_limit // 60))
        if request.hold:
            desc["priority"] = 0
        try:
            return str(self._pyslurm.JobSubmitDescription(**desc).submit())
        except Exception as exc:
            raise SubmitError(["pyslurm.JobSubmitDescription.submit"], None, str(exc)) from exc

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        if pending_only:  # scancel's own state filter
            self._cli.cancel(job_ids, pending_only=True)
            return
        for job_id in job_ids:
            try:
                self._pyslurm.Job(int(str(job_id).split("_")[0])).cancel()
            except Exception as exc:
                raise SlurmError(["pyslurm.Job.cancel", str(job_id)], None, str(exc)) from exc

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        self._cli.signal(job_id, signal, batch_only)

    def hold(self, job_ids: Sequence[str]) -> None:
        self._cli.hold(job_ids)

    def release(self, job_ids: Sequence[str]) -> None:
        self._cli.release(job_ids)

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        self._cli.update_time_limit(job_id, seconds)

    def start_estimates(self) -> dict[str, StartEstimate]:
        return self._cli.start_estimates()

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        return self._cli.test_only(request)

    def show(self, kind: str) -> list[Mapping[str, str]]:
        return self._cli.show(kind)
