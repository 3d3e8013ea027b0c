"""The pyslurm backend without pyslurm: pure converters on constructed pyslurm 22.5.3
records (tests/data/slurm/pyslurm/README.md), the errno classification, and the client
over a fake module that raises the errors pyslurm raises (ValueError(msg, errno) from the
old API, RPCError with .errno from the new one)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest

from mirage.daemon.config import ConfigError, config_from_dict
from mirage.daemon.outcomes import SubmitOutcome
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.parse import parse_scontrol_version, parse_tres_table
from mirage.slurm.pyslurm_backend import (
    CANCEL_HARMLESS,
    ErrnoKind,
    PyslurmClient,
    PyslurmUnavailableError,
    check_pyslurm,
    classify_errno,
    error_for,
    exception_errno,
    job_from_db_dict,
    job_from_queue_dict,
    load_pyslurm,
    named_tres,
    start_estimates_from_queue,
    version_mismatch,
)
from mirage.slurm.run import CommandResult
from mirage.slurm.types import (
    JobState,
    SlurmError,
    SlurmTimeoutError,
    SlurmUnreachableError,
    SubmitError,
    SubmitRequest,
)
from mirage.slurm.worker import ProcessClient

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm" / "pyslurm"
QUEUE: dict[str, dict[str, Any]] = json.loads((DATA / "job_get.json").read_text())
DB: dict[str, dict[str, Any]] = json.loads((DATA / "slurmdb_jobs_get.json").read_text())
TRES = parse_tres_table((DATA / "tres.txt").read_text())


def names(_uid: Any) -> str:
    return {1000: "alice", 1001: "bob"}.get(_uid, str(_uid))


def queue_job(job_id: str) -> Any:
    return job_from_queue_dict(QUEUE[job_id], names)


# ------------------------------------------------------------------ queue converter


def test_queue_running_job_field_for_field() -> None:
    job = queue_job("101")
    assert job.job_id == "101" and job.name == "mirage-c1-0001" and job.user == "alice"
    assert (job.account, job.partition, job.state) == ("proj", "gpu", JobState.RUNNING)
    assert (job.submit, job.eligible, job.start, job.end) == (
        1772445600, 1772445600, 1772445660, 1772449260,
    )  # fmt: skip
    assert (job.time_limit, job.nodes, job.cpus, job.gpus) == (3600, 2, 64, 8)
    assert job.priority == 4294901759 and job.comment == "mirage:tok1"
    assert job.exit_code is None and job.array_job_id is None and job.raw_state == "RUNNING"


def test_queue_held_pending_job() -> None:
    job = queue_job("102")
    assert job.state is JobState.PENDING and job.reason == "JobHeldUser"
    assert job.priority == 0  # held: not "unset"
    assert job.time_limit is None  # UNLIMITED
    assert job.gpus == 8  # gres:gpu:4 per node x 2 nodes, nothing in the TRES strings
    assert job.start is None and job.eligible is None
    assert job.dependency == "afterok:101(unfulfilled)"


def test_queue_partition_limit_and_requested_gpus() -> None:
    job = queue_job("103")
    assert job.time_limit is None and job.gpus == 2 and job.user == "bob"


def test_queue_array_ids_as_squeue_names_them() -> None:
    remainder, task = queue_job("200"), queue_job("202")
    assert remainder.job_id == "200_[3-5%2]" and remainder.array_task_id == "3-5%2"
    assert (task.job_id, task.array_job_id, task.array_task_id) == ("200_2", "200", "2")
    assert task.gpus == 0


def test_queue_finished_job_exit_code_not_trusted() -> None:
    job = queue_job("99")
    assert job.state is JobState.COMPLETED and job.exit_code is None and job.gpus == 1


def test_queue_completing_flag() -> None:
    assert queue_job("98").state is JobState.COMPLETING
    assert queue_job("98").time_limit == 2880 * 60


def test_queue_record_without_id_is_an_error() -> None:
    with pytest.raises(SlurmError):
        job_from_queue_dict({**QUEUE["101"], "job_id": None}, names)


def test_start_estimates_from_pending_jobs_only() -> None:
    est = start_estimates_from_queue(QUEUE.values())
    assert set(est) == {"102", "103", "200_[3-5%2]"}
    # squeue --start's %N: the job's nodes, none while pending (sched_nodes is %Y)
    assert est["103"].start == 1772460000 and est["103"].nodes == ""
    assert est["103"].partition == "gpu"
    assert est["102"].start is None  # squeue --start prints N/A


# ----------------------------------------------------------- accounting converter


def db_job(job_id: str) -> Any:
    return job_from_db_dict(DB[job_id], TRES)


def test_tres_table_and_named_tres() -> None:
    assert TRES[1] == "cpu" and TRES[1001] == "gres/gpu" and TRES[1002] == "gres/gpu:a100"
    assert named_tres("1=8,4=1,1001=2", TRES) == {"cpu": "8", "node": "1", "gres/gpu": "2"}
    assert named_tres("1=8,1999=2", TRES) is None
    assert named_tres("", TRES) == {}


def test_accounting_completed_typed_gpus_counted_once() -> None:
    job = db_job("101")
    assert (job.job_id, job.name, job.user, job.state) == (
        "101", "mirage-c1-0001", "alice", JobState.COMPLETED,
    )  # fmt: skip
    assert (job.nodes, job.cpus, job.gpus, job.exit_code) == (2, 64, 8, 0)
    assert (job.start, job.end, job.time_limit) == (1772445660, 1772449000, 3600)


def test_accounting_exit_codes_from_the_wait_status() -> None:
    assert db_job("104").exit_code == 3 and db_job("104").state is JobState.FAILED
    assert db_job("105").exit_code == 128 + 15


def test_accounting_never_started_job() -> None:
    job = db_job("106")
    assert job.state is JobState.CANCELLED and job.start is None and job.eligible is None
    assert job.time_limit is None  # INFINITE
    assert job.gpus == 4  # requested (typed only), nothing allocated
    assert job.cpus == 32


def test_accounting_array_task_and_running_job() -> None:
    job = db_job("203")
    assert (job.job_id, job.array_job_id, job.array_task_id) == ("200_3", "200", "3")
    assert job.exit_code is None  # running


def test_accounting_unknown_tres_id_raises_keyerror() -> None:
    with pytest.raises(KeyError):
        job_from_db_dict({**DB["101"], "tres_alloc_str": "1=4,1999=1"}, TRES)


# ------------------------------------------------------------------------- errno


@pytest.mark.parametrize(
    ("errno", "kind"),
    [
        (5004, ErrnoKind.TIMEOUT),  # SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT
        (1802, ErrnoKind.TIMEOUT),  # SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR
        (5000, ErrnoKind.TIMEOUT),  # zero-length reply
        (4, ErrnoKind.TIMEOUT),  # EINTR
        (1800, ErrnoKind.UNREACHABLE),  # SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR
        (1001, ErrnoKind.UNREACHABLE),
        (1801, ErrnoKind.UNREACHABLE),  # send error: nothing decided
        (1007, ErrnoKind.UNREACHABLE),  # munge
        (6002, ErrnoKind.UNREACHABLE),  # ESLURM_AUTH_NET_ERROR
        (2027, ErrnoKind.UNREACHABLE),  # ESLURM_IN_STANDBY_MODE
        (7000, ErrnoKind.UNREACHABLE),  # ESLURM_DB_CONNECTION
        (111, ErrnoKind.UNREACHABLE),  # ECONNREFUSED
        (11, ErrnoKind.UNREACHABLE),  # EAGAIN
        (2000, ErrnoKind.REFUSED),  # ESLURM_INVALID_PARTITION_NAME
        (2045, ErrnoKind.REFUSED),  # ESLURM_INVALID_ACCOUNT
        (2051, ErrnoKind.REFUSED),  # ESLURM_INVALID_TIME_LIMIT
        (2017, ErrnoKind.REFUSED),  # ESLURM_INVALID_JOB_ID
        (3000, ErrnoKind.REFUSED),  # ESPANK_ERROR
        (8000, ErrnoKind.REFUSED),  # ESLURM_MISSING_TIME_LIMIT (job_submit)
        (None, ErrnoKind.UNKNOWN),
        (0, ErrnoKind.UNKNOWN),
        (-1, ErrnoKind.UNKNOWN),  # SLURM_ERROR: no errno set
        (12, ErrnoKind.UNKNOWN),  # ENOMEM
        (9003, ErrnoKind.UNKNOWN),  # REST errors: not a verdict here
    ],
)
def test_classify_errno(errno: int | None, kind: ErrnoKind) -> None:
    assert classify_errno(errno) is kind


class RPCError(Exception):
    """pyslurm.RPCError's shape (new API): .errno and the message."""

    def __init__(self, errno: int = -1, msg: str | None = None) -> None:
        self.errno = errno
        super().__init__(msg or f"errno {errno}")


def test_exception_errno_both_apis() -> None:
    assert exception_errno(ValueError("Unable to contact slurm controller", 1800)) == 1800
    assert exception_errno(RPCError(2017, "Invalid job id specified")) == 2017
    # old submit_batch_job: ValueError("Batch job submission failed: %s", None)
    assert exception_errno(ValueError("Batch job submission failed: %s", None)) is None
    assert exception_errno(TypeError("expected bytes, str found")) is None


def test_error_for_types_and_submit_outcomes() -> None:
    cases = [
        (ValueError("Socket timed out on send/recv operation", 5004), SlurmTimeoutError),
        (RPCError(1800), SlurmUnreachableError),
        (ValueError("Invalid account or account/partition combination specified", 2045),
         SubmitError),
        (ValueError("Batch job submission failed: %s", None), SlurmError),
    ]  # fmt: skip
    for exc, kind in cases:
        err = error_for(exc, "submit", SubmitError)
        assert type(err) is kind
    # a refusal is only a SubmitError where the caller says so
    assert type(error_for(RPCError(2045), "Job(1).hold")) is SlurmError
    # the daemon's outcome of each (ledger.perform_submission's mapping)
    assert not isinstance(error_for(RPCError(5004), "s", SubmitError), SubmitError)
    assert SubmitOutcome.UNKNOWN.unresolved and SubmitOutcome.UNREACHABLE.unresolved


# ---------------------------------------------------------------- fake module


class FakeJob:
    def __init__(self, module: FakePyslurm, job_id: int) -> None:
        self.module, self.id = module, job_id

    def hold(self) -> None:
        self.module.record("hold", self.id)

    def release(self) -> None:
        self.module.record("release", self.id)


class FakePyslurm:
    """The parts of pyslurm 22.5.3 the backend uses; ``fail[name]`` raises instead."""

    RPCError = RPCError

    def __init__(self, version: str = "22.5.3") -> None:
        self._version = version
        self.calls: list[tuple[str, Any]] = []
        self.fail: dict[str, BaseException | dict[str, BaseException]] = {}
        outer = self

        class job:
            def get(self) -> dict[int, dict[str, Any]]:
                outer.record("job.get", None)
                return {int(k): v for k, v in QUEUE.items()}

        class slurmdb_jobs:
            def get(
                self, starttime: Any = 0, endtime: Any = 0, flags: int = 0
            ) -> dict[int, dict[str, Any]]:
                # as pyslurm 22.5.3: times are char* ("expected bytes, str found")
                if not all(isinstance(t, bytes) for t in (starttime, endtime)):
                    raise TypeError("expected bytes, str found")
                outer.record("slurmdb_jobs.get", (starttime.decode(), endtime.decode()))
                return {int(k): v for k, v in DB.items()}

        self.job = job
        self.slurmdb_jobs = slurmdb_jobs

    def version(self) -> str:
        return self._version

    def record(self, name: str, arg: Any) -> None:
        self.calls.append((name, arg))
        failure = self.fail.get(name)
        if isinstance(failure, dict):
            failure = failure.get(str(arg))
        if failure is not None:
            raise failure

    def slurm_kill_job2(self, job_id: bytes, signal: int, flags: int) -> int:
        if not isinstance(job_id, bytes):  # as pyslurm 22.5.3: "expected bytes, str found"
            raise TypeError("expected bytes, str found")
        self.record("kill", job_id.decode())
        return 0

    def Job(self, job_id: int) -> FakeJob:
        return FakeJob(self, job_id)


class ScriptedRunner:
    """A CLI runner that answers from a table by the command's name."""

    def __init__(self, answers: dict[str, CommandResult | str]) -> None:
        self.answers = answers
        self.argvs: list[list[str]] = []

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        self.argvs.append(list(argv))
        got = self.answers.get(argv[0], "")
        if isinstance(got, CommandResult):
            return got
        return CommandResult(tuple(argv), 0, got, "")


def client(
    fake: FakePyslurm | None = None, answers: dict[str, Any] | None = None
) -> tuple[PyslurmClient, FakePyslurm, ScriptedRunner]:
    fake = fake or FakePyslurm()
    runner = ScriptedRunner(
        answers or {"scontrol": "slurm 22.05.8\n", "sacctmgr": (DATA / "tres.txt").read_text()}
    )
    cli = CliSlurmClient(runner=runner)
    return PyslurmClient(cli, module=fake, user_name=names, clock=lambda: 1772450000), fake, runner


def test_queue_one_load_and_the_version() -> None:
    c, fake, runner = client()
    snap = c.queue()
    assert snap.slurm_version == "22.05.8" and snap.taken_at == 1772450000
    assert len(snap.jobs) == len(QUEUE)
    c.queue()
    assert [n for n, _ in fake.calls] == ["job.get", "job.get"]
    assert [a[:2] for a in runner.argvs] == [["scontrol", "version"]]  # read once


@pytest.mark.parametrize(
    ("errno", "kind"),
    [(1800, SlurmUnreachableError), (5004, SlurmTimeoutError), (2002, SlurmError)],
)
def test_queue_errors_typed(errno: int, kind: type[SlurmError]) -> None:
    c, fake, _ = client()
    c.version()
    fake.fail["job.get"] = ValueError("pyslurm says so", errno)
    with pytest.raises(kind) as got:
        c.queue()
    assert type(got.value) is kind and got.value.returncode == errno


def test_accounting_through_slurmdb_with_tres_names_read_once() -> None:
    c, fake, runner = client()
    jobs = c.accounting(1772440000, 1772450000)
    assert {j.job_id for j in jobs} == {"101", "104", "105", "106", "200_3"}
    assert next(j for j in jobs if j.job_id == "101").gpus == 8
    c.accounting(1772440000)
    assert [a[0] for a in runner.argvs] == ["sacctmgr"]
    (_, (start, end)) = fake.calls[0]
    assert isinstance(start, str) and isinstance(end, str)  # slurm_parse_time's text


def test_accounting_rereads_the_tres_table_for_a_new_id() -> None:
    c, _, runner = client()
    c._tres = {1: "cpu"}  # read before gres/gpu existed
    c.accounting(1772440000, 1772450000)
    assert [a[0] for a in runner.argvs] == ["sacctmgr"]


def test_accounting_unreachable_slurmdbd() -> None:
    c, fake, _ = client()
    fake.fail["slurmdb_jobs.get"] = ValueError("Unable to connect to database", 7000)
    with pytest.raises(SlurmUnreachableError):
        c.accounting(1772440000, 1772450000)


def test_accounting_by_state_goes_to_sacct() -> None:
    sacct = (DATA.parent / "sacct-X.json").read_text()
    c, fake, runner = client(answers={"sacct": sacct, "scontrol": "slurm 22.05.8"})
    c.accounting(1772440000, 1772450000, every_state=True)
    assert fake.calls == [] and runner.argvs[0][0] == "sacct" and "-s" in runner.argvs[0]


def test_cancel_array_task_cancels_that_task_only() -> None:
    c, fake, _ = client()
    c.cancel(["200_3", "101"])
    assert fake.calls == [("kill", "200_3"), ("kill", "101")]


def test_cancel_harmless_errors_and_the_first_real_one() -> None:
    c, fake, _ = client()
    fake.fail["kill"] = {
        "1": ValueError("Invalid job id specified", 2017),
        "2": RPCError(2021, "Job/step already completing or completed"),
        "3": ValueError("Unable to contact slurm controller", 1800),
        "4": ValueError("Access/permission denied", 2002),
    }
    c.cancel(["1", "2"])
    assert {2017, 2021} <= CANCEL_HARMLESS
    with pytest.raises(SlurmUnreachableError):
        c.cancel(["1", "3", "4", "5"])
    assert [a for n, a in fake.calls if n == "kill"][-4:] == ["1", "3", "4", "5"]  # all tried


def test_cancel_pending_only_is_scancels_filter() -> None:
    c, fake, runner = client(answers={"scancel": ""})
    c.cancel(["101"], pending_only=True)
    assert fake.calls == [] and runner.argvs == [["scancel", "--state=PENDING", "101"]]


def test_hold_release_plain_ids_native_array_tasks_by_scontrol() -> None:
    c, fake, runner = client(answers={"scontrol": ""})
    c.hold(["101", "200_3"])
    c.release(["101"])
    assert fake.calls == [("hold", 101), ("release", 101)]
    assert runner.argvs == [["scontrol", "hold", "200_3"]]


def test_hold_refused_and_lost() -> None:
    c, fake, _ = client()
    fake.fail["hold"] = RPCError(2073, "Job is no longer pending execution")
    with pytest.raises(SlurmError) as refused:
        c.hold(["101"])
    assert type(refused.value) is SlurmError
    fake.fail["hold"] = RPCError(5004, "Socket timed out on send/recv operation")
    with pytest.raises(SlurmTimeoutError):
        c.hold(["101"])


def test_submit_and_test_only_are_sbatchs() -> None:
    c, fake, runner = client(answers={"sbatch": "4242\n"})
    assert c.submit(SubmitRequest(script=b"#!/bin/sh\n", job_name="x")) == "4242"
    assert fake.calls == [] and runner.argvs[0][:2] == ["sbatch", "--parsable"]


def test_submit_refusal_and_outage_keep_the_cli_semantics() -> None:
    refused = CommandResult(("sbatch",), 1, "", "sbatch: error: Invalid account\n")
    down = CommandResult(
        ("sbatch",), 1, "", "sbatch: error: Batch job submission failed: Unable to contact "
        "slurm controller (connect failure)\n",
    )  # fmt: skip
    c, _, _ = client(answers={"sbatch": refused})
    with pytest.raises(SubmitError):
        c.submit(SubmitRequest(script=b"#!/bin/sh\n"))
    c, _, _ = client(answers={"sbatch": down})
    with pytest.raises(SlurmUnreachableError):
        c.submit(SubmitRequest(script=b"#!/bin/sh\n"))


def test_start_estimates_from_the_job_load() -> None:
    c, fake, runner = client()
    est = c.start_estimates()
    assert est["103"].start == 1772460000 and fake.calls == [("job.get", None)]
    assert runner.argvs == []


# ------------------------------------------------------------- selection, version


def test_version_parsers() -> None:
    assert parse_scontrol_version("slurm 22.05.8\n") == "22.05.8"
    assert parse_scontrol_version("slurm-wlm 23.11.4") == "23.11.4"
    with pytest.raises(SlurmError):
        parse_scontrol_version("bash: scontrol: not found")


def test_version_mismatch() -> None:
    assert version_mismatch("22.5.3", "22.05.8") == ""
    why = version_mismatch("22.5.3", "23.11.4")
    assert "pyslurm 22.5.3 is for Slurm 22.05" in why and "build pyslurm 23.11" in why
    assert version_mismatch("", "22.05.8")


def test_check_pyslurm_through_scontrol_version() -> None:
    runner = ScriptedRunner({"scontrol": "slurm 23.02.1\n"})
    with pytest.raises(PyslurmUnavailableError, match=r"build pyslurm 23\.2"):
        check_pyslurm(FakePyslurm(), CliSlurmClient(runner=runner))
    runner = ScriptedRunner({"scontrol": "slurm 22.05.8\n"})
    assert check_pyslurm(FakePyslurm(), CliSlurmClient(runner=runner)) == "22.05.8"
    assert runner.argvs == [["scontrol", "version"]]


def test_load_pyslurm_missing_says_what_to_install() -> None:
    def missing(name: str) -> Any:
        raise ModuleNotFoundError(f"No module named {name!r}")

    with pytest.raises(PyslurmUnavailableError, match=r"scripts/build-pyslurm\.sh"):
        load_pyslurm(missing)


def test_config_backend_key() -> None:
    assert config_from_dict({}).slurm.backend == "cli"
    assert config_from_dict({"slurm": {"backend": "pyslurm"}}).slurm.backend == "pyslurm"
    with pytest.raises(ConfigError):
        config_from_dict({"slurm": {"backend": "rest"}})


def test_daemon_read_client_stops_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage.daemon import clicommon as daemon_cli
    from mirage.slurm import pyslurm_backend

    def missing(importer: Any = None) -> Any:
        raise PyslurmUnavailableError("pyslurm is not installed; build it")

    cfg = config_from_dict({"slurm": {"backend": "pyslurm"}})
    monkeypatch.setattr(pyslurm_backend, "load_pyslurm", missing)
    with pytest.raises(click.ClickException, match="not installed"):
        daemon_cli.read_client(cfg, "pyslurm")
    assert isinstance(daemon_cli.read_client(cfg, "cli"), CliSlurmClient)

    monkeypatch.setattr(pyslurm_backend, "load_pyslurm", FakePyslurm)
    monkeypatch.setattr(CliSlurmClient, "version", lambda self: "23.11.4")
    with pytest.raises(click.ClickException, match=r"is for Slurm 22\.05"):
        daemon_cli.read_client(cfg, "pyslurm")
    monkeypatch.setattr(CliSlurmClient, "version", lambda self: "22.05.8")
    got = daemon_cli.read_client(cfg, "pyslurm")
    # checked here, run in a child process (mirage/slurm/worker.py: pyslurm holds the GIL)
    assert isinstance(got, ProcessClient) and got.name == "pyslurm"
    factory = got.factory
    assert isinstance(factory, functools.partial) and factory.func is PyslurmClient
    assert factory.keywords == {"slurm_version": "22.05.8"}
    assert got.timeout == cfg.slurm.timeout_s + 5  # the CLI's limit first, then the worker's
