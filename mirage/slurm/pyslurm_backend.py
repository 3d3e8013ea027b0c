"""Optional SlurmClient over pyslurm 22.5 (Slurm's C API in-process), ``[slurm] backend =
"pyslurm"``.

PyPI has no pyslurm for Slurm 22.05: it is built from the vendored source against the
installed libslurm (``scripts/build-pyslurm.sh``). pyslurm is never imported by Mirage's
base install; :func:`load_pyslurm` imports it when this backend is chosen, and every call
goes through the module object given to :class:`PyslurmClient` (tests pass a fake one).

What goes through pyslurm (one RPC each, in this process, as the daemon's own uid):

* :meth:`PyslurmClient.queue`: ``pyslurm.job().get()`` (``slurm_load_jobs``, every job,
  finished ones too, as ``squeue --json``), converted by :func:`job_from_queue_dict`;
* :meth:`PyslurmClient.start_estimates`: the same load, pending jobs' ``start_time``
  (what ``squeue --start`` prints), by :func:`start_estimates_from_queue`;
* :meth:`PyslurmClient.accounting` *without* ``every_state``:
  ``pyslurm.slurmdb_jobs().get(starttime=…, endtime=…)`` (``slurmdb_jobs_get``, jobs
  eligible in the window, as plain ``sacct -S -E``), by :func:`job_from_db_dict`; its
  numeric TRES ids are named by ``sacctmgr show tres`` (once, then again only when an
  unknown id appears);
* :meth:`PyslurmClient.cancel` without ``pending_only``: ``pyslurm.slurm_kill_job2`` with
  the id as text, so ``123_4`` cancels that array task only (as ``scancel 123_4``);
* :meth:`PyslurmClient.hold` / :meth:`PyslurmClient.release` of plain job ids:
  ``pyslurm.Job(id).hold()`` / ``.release()`` (``slurm_update_job`` with priority 0 /
  INFINITE, as ``scontrol hold|release`` run by the same user).

What is delegated to the CLI backend (sbatch, sacct, scancel, scontrol), and why:

* **submit and test_only: always.** pyslurm 22.5's ``job().submit_batch_job`` loses the
  Slurm errno of a failed submission (it raises ``ValueError("Batch job submission
  failed: %s", None)``, so a refusal cannot be told from a lost reply), calls
  ``sys.exit()`` on some errors, writes ``SLURM_SUBMIT_DIR`` etc. into this process's
  ``os.environ`` and sends the daemon's own environment and directory with the job;
  ``JobSubmitDescription`` does not read the script's ``#SBATCH`` lines the way sbatch
  does. And neither can act *as the chain's owner*: only sbatch run as the owner reads
  the script and enters its directory with the owner's rights. The daemon's submissions
  and its other actions on a chain's jobs (cancel, signal, hold, release, test-only) run
  through :func:`mirage.daemon.identity.action_clients`, i.e. the CLI path run as the
  owner, whatever the backend; this backend serves the daemon's reads.
* **accounting(every_state=True)**, the daemon's poll: selecting by state
  (``sacct -s PD,R,…``, which finds a job held and cancelled before it was ever eligible)
  has no pyslurm 22.5 equivalent (the old API takes no state list; ``db.JobFilter``'s
  state filter is a stub).
* cancel(pending_only=True) (scancel's own state filter), signal, update_time_limit,
  hold/release of an array task id, show, accounting_limits, version.

Errors: pyslurm raises ``ValueError(message, errno)`` (the old API) or
``pyslurm.RPCError`` with ``.errno`` (the new one). :func:`classify_errno` maps the errno
the way :mod:`mirage.slurm.run` maps Slurm's error texts: a lost reply or a timeout is
:class:`SlurmTimeoutError` (outcome unknown), a controller or slurmdbd that cannot be
reached is :class:`SlurmUnreachableError`, only a Slurm refusal (``ESLURM_*``) is the
call's refusal (:class:`SubmitError` for a submission), anything else a plain
:class:`SlurmError` (outcome unknown too).
"""

from __future__ import annotations

import enum
import functools
import importlib
import logging
import pwd
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.parse import (
    _array_ids,
    _epoch,
    _exit_code,
    _minutes,
    _number,
    _task_string,
    map_state,
    running_nodes,
)
from mirage.slurm.syntax import digits, gres_gpus, parse_tres, tres_count, tres_gpus
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    SlurmTimeoutError,
    SlurmUnreachableError,
    StartEstimate,
    SubmitRequest,
)

log = logging.getLogger(__name__)

#: The pyslurm release series this backend is written for, and the Slurm series it binds.
PYSLURM_SERIES = (22, 5)

# ----------------------------------------------------------------------------- errno


class ErrnoKind(enum.StrEnum):
    """What a failed pyslurm call's errno says about its outcome."""

    #: Slurm refused the request: nothing was done
    REFUSED = "refused"
    #: the controller (or slurmdbd) could not be reached: not a verdict on the request
    UNREACHABLE = "unreachable"
    #: the request went out, the reply was lost or late: it may have been carried out
    TIMEOUT = "timeout"
    #: no errno, or one that proves nothing: outcome unknown
    UNKNOWN = "unknown"


# slurm_errno.h (Slurm 22.05) and Linux errno values, checked against the installed
# header. Each entry says why it is where it is.
#: The request reached slurmctld (or may have), its answer did not come back.
TIMEOUT_ERRNOS: Mapping[int, str] = {
    5004: "SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT",  # MessageTimeout passed waiting for the reply
    5000: "SLURM_PROTOCOL_SOCKET_IMPL_ZERO_RECV_LENGTH",  # connection closed instead of a reply
    5001: "SLURM_PROTOCOL_SOCKET_IMPL_NEGATIVE_RECV_LENGTH",
    5003: "ESLURM_PROTOCOL_INCOMPLETE_PACKET",  # part of the reply
    1003: "SLURM_COMMUNICATIONS_RECEIVE_ERROR",
    1802: "SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR",
    1004: "SLURM_COMMUNICATIONS_SHUTDOWN_ERROR",  # failed closing, after the exchange
    1803: "SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR",
    4: "EINTR",  # the RPC was cut short
    110: "ETIMEDOUT",
}
#: Nothing was decided: no connection, the request not (fully) sent, or a transient state.
UNREACHABLE_ERRNOS: Mapping[int, str] = {
    1001: "SLURM_COMMUNICATIONS_CONNECTION_ERROR",
    1800: "SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR",
    1002: "SLURM_COMMUNICATIONS_SEND_ERROR",
    1801: "SLURMCTLD_COMMUNICATIONS_SEND_ERROR",
    1013: "SLURM_COMMUNICATIONS_MISSING_SOCKET_ERROR",
    5002: "SLURM_PROTOCOL_SOCKET_IMPL_NOT_ALL_DATA_SENT",
    5005: "SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT",
    1005: "SLURM_PROTOCOL_VERSION_ERROR",  # client and controller cannot talk
    1007: "SLURM_PROTOCOL_AUTHENTICATION_ERROR",  # munge: clocks, key, munged restarting
    2027: "ESLURM_IN_STANDBY_MODE",  # a backup controller in standby
    2131: "ESLURM_IN_STANDBY_USE_BACKUP",
    7000: "ESLURM_DB_CONNECTION",  # slurmdbd
    7008: "ESLURM_DB_CONNECTION_INVALID",
    11: "EAGAIN",  # after Slurm's own retries
    32: "EPIPE",
    101: "ENETUNREACH",
    104: "ECONNRESET",
    107: "ENOTCONN",
    111: "ECONNREFUSED",
    113: "EHOSTUNREACH",
    **{e: "ESLURM_AUTH_*" for e in range(6000, 6009)},  # munge credential problems
}
#: Slurm's verdicts on the request (the ranges of slurm_errno.h; the exceptions above win).
REFUSAL_RANGES: tuple[tuple[int, int, str], ...] = (
    (2000, 3000, "ESLURM_* (slurmctld)"),
    (3000, 3100, "ESPANK_* (a SPANK plugin refused)"),
    (7001, 7200, "ESLURM_* (accounting, federation)"),
    (8000, 9000, "ESLURM_* (plugins: job_submit, time limit, ...)"),
)
#: For cancel: the job is gone or finished already (scancel's harmless errors).
CANCEL_HARMLESS: frozenset[int] = frozenset({2017, 2021})  # INVALID_JOB_ID, ALREADY_DONE


def classify_errno(errno: int | None) -> ErrnoKind:
    """What a Slurm errno says about a call's outcome (see the tables above).

    None, 0, SLURM_ERROR (-1) and any errno outside the tables and Slurm's refusal ranges
    are UNKNOWN: only a proven refusal may let the daemon resubmit."""
    if errno is None:
        return ErrnoKind.UNKNOWN
    if errno in TIMEOUT_ERRNOS:
        return ErrnoKind.TIMEOUT
    if errno in UNREACHABLE_ERRNOS:
        return ErrnoKind.UNREACHABLE
    if any(low <= errno < high for low, high, _ in REFUSAL_RANGES):
        return ErrnoKind.REFUSED
    return ErrnoKind.UNKNOWN


def exception_errno(exc: BaseException) -> int | None:
    """The Slurm errno a pyslurm exception carries: ``RPCError.errno`` (new API), or the
    second argument of the old API's ``ValueError(message, errno)``; None without one."""
    value = getattr(exc, "errno", None)
    if value is None and isinstance(exc, ValueError) and len(exc.args) >= 2:
        value = exc.args[1]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def error_for(exc: BaseException, call: str, refusal: type[SlurmError] = SlurmError) -> SlurmError:
    """The typed error for a failed pyslurm call (``refusal``: what a refusal raises)."""
    errno = exception_errno(exc)
    kind = classify_errno(errno)
    detail = f"{exc} (errno {errno})" if errno is not None else str(exc) or type(exc).__name__
    argv = [f"pyslurm.{call}"]
    if kind is ErrnoKind.TIMEOUT:
        return SlurmTimeoutError(
            argv, errno, detail, f"pyslurm.{call}: no answer (outcome unknown)"
        )
    if kind is ErrnoKind.UNREACHABLE:
        daemon = "slurmdbd" if call.startswith("slurmdb") else "Slurm controller"
        return SlurmUnreachableError(argv, errno, detail, f"{daemon} unreachable")
    if kind is ErrnoKind.REFUSED:
        return refusal(argv, errno, detail, f"pyslurm.{call} refused")
    return SlurmError(argv, errno, detail, f"pyslurm.{call} failed")


# ------------------------------------------------------------------------ converters


def _uid_name(uid: Any) -> str:
    n = _number(uid)
    if n is None:
        return ""
    try:
        return pwd.getpwuid(n).pw_name
    except KeyError:
        return str(n)


def _queue_time_limit(value: Any) -> int | None:
    """``time_limit``: minutes, or "UNLIMITED" / "Partition_Limit" (no limit of its own)."""
    return _minutes(value) if isinstance(value, int) else None


def _queue_gpus(job: Mapping[str, Any], nodes: int) -> int:
    """GPUs as the CLI backend counts them: allocated TRES, else requested TRES, else the
    per-job or per-node GRES request."""
    for key in ("tres_alloc_str", "tres_req_str"):
        gpus = tres_gpus(parse_tres(str(job.get(key) or "")))
        if gpus is not None:
            return gpus
    per_job = gres_gpus(str(job.get("tres_per_job") or ""))
    if per_job is not None:
        return per_job
    return (gres_gpus(str(job.get("tres_per_node") or "")) or 0) * max(nodes, 1)


def _queue_cpus(job: Mapping[str, Any], state: JobState) -> int:
    """``num_cpus``, but 0 for a finished job that never had an allocation (held, then
    cancelled): squeue --json prints no CPUs for it (its ``num_cpus`` is the request)."""
    if state.is_finished and not job.get("tres_alloc_str"):
        return 0
    return _number(job.get("num_cpus")) or 0


def job_from_queue_dict(
    job: Mapping[str, Any], user_name: Callable[[Any], str] = _uid_name
) -> SlurmJob:
    """One record of ``pyslurm.job().get()`` -> SlurmJob, as ``squeue --json`` gives it.

    ``exit_code`` is None: pyslurm 22.5.3 does not reset its exit status and signal
    between records (``get_job_ptr``), so its ``"exit_code"`` of a job that exited may
    carry an earlier job's signal. (The daemon reads exit codes from accounting.)"""
    job_id_num = _number(job.get("job_id"))
    if not job_id_num:
        what = f"job record without job_id: {job!r}"[:300]
        raise SlurmError(["pyslurm.job.get"], None, "", what)
    job_id, array_job_id, array_task_id = _array_ids(
        job_id_num,
        _number(job.get("array_job_id")),
        _number(job.get("array_task_id")),
        str(job.get("array_task_str") or ""),
    )
    state, raw = map_state(str(job.get("job_state") or ""))
    nodes = _number(job.get("num_nodes")) or 0
    return SlurmJob(
        job_id=job_id,
        name=str(job.get("name") or ""),
        user=user_name(job.get("user_id")),
        account=str(job.get("account") or ""),
        partition=str(job.get("partition") or ""),
        state=state,
        reason=str(job.get("state_reason") or ""),
        submit=_epoch(job.get("submit_time")),
        eligible=_epoch(job.get("eligible_time")),
        start=_epoch(job.get("start_time")),
        end=_epoch(job.get("end_time")),
        time_limit=_queue_time_limit(job.get("time_limit")),
        nodes=nodes,
        cpus=_queue_cpus(job, state),
        gpus=_queue_gpus(job, nodes),
        priority=_number(job.get("priority")),
        dependency=str(job.get("dependency") or ""),
        comment=str(job.get("comment") or ""),
        exit_code=None,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        raw_state=raw,
        node_list=running_nodes(state, str(job.get("nodes") or "")),
    )


def start_estimates_from_queue(jobs: Iterable[Mapping[str, Any]]) -> dict[str, StartEstimate]:
    """Pending jobs' estimates from ``pyslurm.job().get()`` records, as ``squeue --start``
    prints them: its ``%S`` is the job's ``start_time`` (0: no estimate, N/A), its ``%N``
    the job's ``nodes`` (none yet for a pending job; the nodes the backfill pass has in
    mind are ``%Y``, ``sched_nodes``, which the CLI backend does not ask for either)."""
    out: dict[str, StartEstimate] = {}
    for raw in jobs:
        if not str(raw.get("job_state") or "").upper().startswith("PENDING"):
            continue
        rec = job_from_queue_dict(raw, user_name=lambda _uid: "")
        out[rec.job_id] = StartEstimate(
            job_id=rec.job_id,
            start=rec.start,
            nodes=str(raw.get("nodes") or ""),
            partition=rec.partition,
        )
    return out


_TRES_ITEM = re.compile(r"^(\d+)=(\d+)$")


def named_tres(tres: str, names: Mapping[int, str]) -> dict[str, str] | None:
    """Accounting's numeric TRES string ("1=8,4=2,1001=4") with ``names`` applied
    ({"cpu": "8", "node": "2", "gres/gpu": "4"}); None when it holds an id ``names``
    lacks (the table must be read again)."""
    out: dict[str, str] = {}
    for part in (tres or "").split(","):
        m = _TRES_ITEM.match(part.strip())
        if not m:
            continue
        name = names.get(int(m.group(1)))
        if name is None:
            return None
        out[name] = m.group(2)
    return out


def job_from_db_dict(job: Mapping[str, Any], tres_names: Mapping[int, str]) -> SlurmJob:
    """One record of ``pyslurm.slurmdb_jobs().get()`` -> SlurmJob, as ``sacct --json -X``
    gives it (allocation only: the steps are dropped). ``tres_names``: TRES id -> name
    (:meth:`CliSlurmClient.tres_names`); an id it lacks raises KeyError.

    What sacct does with the same record, done here too: the comment is the record's
    ``derived_es`` (where slurmdbd keeps the job's comment under
    ``AccountingStoreFlags=job_comment``; sacct's Comment prints that field); a job that
        a job not yet finished has no end (the record carries "now"). The old API's record
    carries no state reason: ``reason`` is "" (sacct prints ``None`` or the last one)."""
    job_id_num = _number(job.get("jobid"))
    if not job_id_num:
        raise SlurmError(
            ["pyslurm.slurmdb_jobs.get"], None, "", f"job record without jobid: {job!r}"[:300]
        )
    # slurmdbd keeps an array's pending rest as a hex bitmap ("0x3F"); sacct prints it as
    # ranges ("0-5"), and so must this record (seen live: a throttled array's meta record)
    task_str = _task_string(job.get("array_task_str") or "")
    job_id, array_job_id, array_task_id = _array_ids(
        job_id_num,
        _number(job.get("array_job_id")),
        _number(job.get("array_task_id")),
        task_str,
    )
    state, raw = map_state(str(job.get("state_str") or ""))
    alloc = named_tres(str(job.get("tres_alloc_str") or ""), tres_names)
    req = named_tres(str(job.get("tres_req_str") or ""), tres_names)
    if alloc is None or req is None:
        raise KeyError("TRES id not in the TRES table")
    gpus = tres_gpus(alloc) if alloc else None
    if gpus is None:
        gpus = tres_gpus(req)
    cpus = tres_count(alloc, "cpu") or tres_count(req, "cpu") or _number(job.get("req_cpus"))
    nodes = _number(job.get("alloc_nodes")) or 0
    return SlurmJob(
        job_id=job_id,
        name=str(job.get("jobname") or ""),
        user=str(job.get("user") or "") or _uid_name(job.get("uid")),
        account=str(job.get("account") or ""),
        partition=str(job.get("partition") or ""),
        state=state,
        reason="",
        submit=_epoch(job.get("submit")),
        eligible=_epoch(job.get("eligible")),
        start=_epoch(job.get("start")),
        end=_epoch(job.get("end")) if state.is_finished else None,
        time_limit=_minutes(job.get("timelimit")),
        nodes=nodes,
        cpus=cpus or 0,
        gpus=gpus or 0,
        priority=_number(job.get("priority")),
        dependency="",
        comment=str(job.get("derived_es") or ""),
        exit_code=_exit_code(_number(job.get("exitcode"))) if state.is_finished else None,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        raw_state=raw,
    )


def local_slurm_time(epoch: int) -> bytes:
    """Epoch seconds as ``slurm_parse_time`` reads them in this process: local time (the
    library runs here, in the daemon's TZ; the CLI backend's children get TZ=UTC), as
    bytes (``slurmdb_jobs.get`` takes ``char*`` and refuses a str)."""
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%dT%H:%M:%S").encode()


#: ``slurmdb_job_cond_t.flags`` for :meth:`PyslurmClient.accounting`, as ``sacct -X``
#: sets them: JOBCOND_FLAG_NO_STEP (allocations only: steps are not loaded at all) and
#: JOBCOND_FLAG_NO_TRUNC (times as recorded; without it slurmdbd truncates them to the
#: window and gives a job cancelled before it ran its end as its start).
ACCOUNTING_FLAGS = (1 << 1) | (1 << 2)


# ---------------------------------------------------------------------- module, version


class PyslurmUnavailableError(ImportError):
    """pyslurm is not installed, or does not match the running Slurm (the message says
    what to install)."""


INSTALL_HINT = (
    "build pyslurm {series} from the vendored source into Mirage's environment: "
    'scripts/build-pyslurm.sh VENV (or set [slurm] backend = "cli")'
)


def load_pyslurm(importer: Callable[[str], Any] = importlib.import_module) -> Any:
    """Import pyslurm, or PyslurmUnavailableError saying what to install."""
    try:
        return importer("pyslurm")
    except ImportError as exc:
        hint = INSTALL_HINT.format(series=".".join(map(str, PYSLURM_SERIES)))
        raise PyslurmUnavailableError(
            f'[slurm] backend = "pyslurm": pyslurm is not installed ({exc}); {hint}'
        ) from exc


def _major_minor(text: str) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def version_mismatch(pyslurm_version: str, slurm_version: str) -> str:
    """Why this pyslurm cannot drive this Slurm ("" when it can): pyslurm's major.minor
    (22.5) names the Slurm release it binds (22.05), which the running one must be."""
    ours = _major_minor(pyslurm_version)
    theirs = _major_minor(slurm_version)
    if ours is None:
        return f"pyslurm reports no version ({pyslurm_version!r})"
    if theirs is None:
        return f"cannot tell the running Slurm's release from {slurm_version!r}"
    if ours != theirs:
        return (
            f"pyslurm {pyslurm_version} is for Slurm {ours[0]}.{ours[1]:02d}, the running "
            f"Slurm is {slurm_version}: build pyslurm {theirs[0]}.{theirs[1]} "
            '(scripts/build-pyslurm.sh) or set [slurm] backend = "cli"'
        )
    return ""


def check_pyslurm(module: Any, cli: CliSlurmClient) -> str:
    """The running Slurm's release (``scontrol version`` through the CLI backend), once
    ``module`` is known to match it; PyslurmUnavailableError otherwise."""
    version = getattr(module, "version", None)
    theirs = cli.version()
    why = version_mismatch(str(version() if callable(version) else version or ""), theirs)
    if why:
        raise PyslurmUnavailableError(why)
    return theirs


# ---------------------------------------------------------------------------- client


class PyslurmClient(SlurmClient):
    """Reads (and plain cancels, holds, releases) through pyslurm; see the module
    docstring for what is delegated to ``cli`` and why. ``module``: the pyslurm module
    (default: imported now); ``slurm_version``: the running Slurm's release if already
    known (:func:`check_pyslurm`), else read once through ``cli``."""

    def __init__(
        self,
        cli: CliSlurmClient | None = None,
        *,
        module: Any = None,
        slurm_version: str | None = None,
        clock: Callable[[], float] = time.time,
        user_name: Callable[[Any], str] = _uid_name,
    ) -> None:
        self.pyslurm = module if module is not None else load_pyslurm()
        self.cli = cli if cli is not None else CliSlurmClient()
        self._slurm_version = slurm_version
        self._clock = clock
        self._user_name = user_name
        self._tres: dict[int, str] | None = None

    def _call(
        self, name: str, fn: Callable[[], Any], refusal: type[SlurmError] = SlurmError
    ) -> Any:
        try:
            return fn()
        except SlurmError:
            raise
        except Exception as exc:  # pyslurm's ValueError / RPCError (and its bugs)
            raise error_for(exc, name, refusal) from exc

    # -- reads
    def version(self) -> str:
        if self._slurm_version is None:
            self._slurm_version = self.cli.version()
        return self._slurm_version

    def _load_jobs(self) -> list[Mapping[str, Any]]:
        got = self._call("job.get", lambda: self.pyslurm.job().get())
        return list(got.values())

    def queue(self) -> QueueSnapshot:
        version = self.version()
        taken_at = int(self._clock())
        records = self._load_jobs()
        jobs = tuple(job_from_queue_dict(j, self._user_name) for j in records)
        return QueueSnapshot(taken_at=taken_at, jobs=jobs, slurm_version=version)

    def start_estimates(self) -> dict[str, StartEstimate]:
        return start_estimates_from_queue(self._load_jobs())

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        if every_state:  # selection by state: sacct's alone (module docstring)
            return self.cli.accounting(start, end, every_state=True)
        stop = int(self._clock()) if end is None else end
        found = self._call(
            "slurmdb_jobs.get",
            lambda: self.pyslurm.slurmdb_jobs().get(
                starttime=local_slurm_time(start),
                endtime=local_slurm_time(stop),
                flags=ACCOUNTING_FLAGS,
            ),
        )
        records = list(found.values())
        if self._tres is None:
            self._tres = self.cli.tres_names()
        try:
            return [job_from_db_dict(j, self._tres) for j in records]
        except KeyError:  # a TRES added since the table was read
            self._tres = self.cli.tres_names()
            return [job_from_db_dict(j, self._tres) for j in records]

    def show(self, kind: str) -> list[Mapping[str, str]]:
        return self.cli.show(kind)

    def accounting_limits(self, kind: str) -> list[Mapping[str, str]]:
        return self.cli.accounting_limits(kind)

    # -- actions
    def submit(self, request: SubmitRequest) -> str:
        """sbatch, always (module docstring: pyslurm 22.5's submission loses the errno)."""
        return self.cli.submit(request)

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        return self.cli.test_only(request)

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        """``slurm_kill_job2(id, SIGKILL)`` per id (an array task's id cancels that task
        only); unknown or finished ids are not an error. Every id is tried; the first
        other failure is raised."""
        if pending_only:  # scancel's own state filter
            self.cli.cancel(job_ids, pending_only=True)
            return
        first: SlurmError | None = None
        for job_id in (str(j) for j in job_ids):
            try:
                self.pyslurm.slurm_kill_job2(job_id.encode(), 9, 0)
            except Exception as exc:
                if exception_errno(exc) in CANCEL_HARMLESS:
                    log.debug("cancel %s: %s (harmless)", job_id, exc)
                    continue
                first = first or error_for(exc, f"slurm_kill_job2({job_id})")
        if first is not None:
            raise first

    def _update(self, job_ids: Sequence[str], action: str) -> None:
        plain = [str(j) for j in job_ids if digits(str(j))]
        other = [str(j) for j in job_ids if not digits(str(j))]
        if other:  # array tasks: scontrol resolves "123_4" itself
            getattr(self.cli, action)(other)
        for job_id in plain:
            job = self.pyslurm.Job(int(job_id))
            self._call(f"Job({job_id}).{action}", getattr(job, action))

    def hold(self, job_ids: Sequence[str]) -> None:
        self._update(job_ids, "hold")

    def release(self, job_ids: Sequence[str]) -> None:
        self._update(job_ids, "release")

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        self.cli.signal(job_id, signal, batch_only)

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        self.cli.update_time_limit(job_id, seconds)


# ---------------------------------------------------------------------- in a worker


def open_pyslurm_client(cli: CliSlurmClient, margin_s: float = 5.0) -> SlurmClient:
    """The pyslurm backend as the daemon runs it: pyslurm checked here (import and
    release: :class:`PyslurmUnavailableError` saying what to install), then a
    :class:`PyslurmClient` built and run in a child process
    (:class:`~mirage.slurm.worker.ProcessClient`): pyslurm holds the GIL through its C
    calls and has no timeout of its own. Each call's limit is the CLI's for the same
    call plus ``margin_s``, so that the CLI's own typed errors come first."""
    from mirage.slurm.worker import ProcessClient

    version = check_pyslurm(load_pyslurm(), cli)
    return ProcessClient(
        functools.partial(PyslurmClient, cli, slurm_version=version),
        timeout=cli.timeout + margin_s,
        accounting_timeout=cli.accounting_timeout + margin_s,
        submit_timeout=cli.submit_timeout + margin_s,
        name="pyslurm",
    )
