"""SlurmClient over Slurm's command-line tools (the default backend).

Every call goes through one :class:`~mirage.slurm.run.Runner` (argv lists, timeouts, a
cleaned environment with ``TZ=UTC``); every output goes through the pure parsers in
:mod:`mirage.slurm.parse`. Batching rules, because the man pages warn against polling:

* :meth:`CliSlurmClient.queue` is exactly one ``squeue --json`` (22.05 ignores every filter
  with ``--json`` anyway; it returns every job slurmctld still holds, finished ones too);
* :meth:`CliSlurmClient.accounting` is exactly one ``sacct --json -a -S <start> -E <end>``
  with both bounds explicit (``sacct`` otherwise looks back only to midnight) and with
  ``-X`` (allocations only): the JSON then carries no step records, which Mirage does not
  use, and the output stays small. Times are ISO strings in UTC (the runner sets TZ=UTC).

:meth:`CliSlurmClient.submit` runs sbatch *in* the request's ``chdir`` (besides passing
``--chdir``): sbatch records its own working directory as the job's ``SLURM_SUBMIT_DIR``,
which batch scripts use to find their files (Slurm runs a spool copy of the script, so
``$0`` leads nowhere). A directory sbatch cannot run in is a
:class:`~mirage.slurm.run.WorkdirError` (a :class:`SubmitError`: nothing was submitted).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from mirage.slurm.client import SlurmClient
from mirage.slurm.parse import (
    START_FORMAT,
    parse_sacct_json,
    parse_sacctmgr_parsable,
    parse_sbatch_parsable,
    parse_scontrol_config,
    parse_scontrol_oneliner,
    parse_scontrol_version,
    parse_squeue_json,
    parse_start_estimates,
    parse_test_only,
    parse_tres_table,
)
from mirage.slurm.run import CommandResult, Runner, SubprocessRunner, check_result
from mirage.slurm.syntax import format_duration, format_slurm_time
from mirage.slurm.types import (
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    StartEstimate,
    SubmitError,
    SubmitRequest,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

SHOW_KINDS = frozenset({"partition", "node", "config", "job", "reservation"})

# scancel on a finished or unknown job: not an error for cancel()
#: Every state sacct 22.05 selects on (COMPLETING is not accounted: "not supported").
ACCOUNTED_STATES = "PD,R,S,CD,CA,F,TO,NF,PR,OOM,DL,BF,RQ,RS,RV"

_CANCEL_HARMLESS = (
    "invalid job id specified",
    "already completing or completed",
    "job/step already completing",
)


def _time_limit(seconds: int) -> str:
    """A time limit for sbatch or scontrol: 0 would mean none at all, so it is refused."""
    if seconds <= 0:
        raise ValueError(f"time limit must be positive, not {seconds}")
    return format_duration(seconds)


# SubmitRequest field -> sbatch option; a field left at None is not passed at all.
_SBATCH_OPTIONS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("job_name", "--job-name", str),
    ("time_limit", "--time", _time_limit),
    ("nodes", "--nodes", str),
    ("gres", "--gres", str),
    ("partition", "--partition", str),
    ("account", "--account", str),
    ("dependency", "--dependency", str),
    ("comment", "--comment", str),
    ("signal", "--signal", str),
    ("chdir", "--chdir", str),
)


def sbatch_options(request: SubmitRequest) -> list[str]:
    """The sbatch options for a request (no binary, no --parsable/--test-only, no script)."""
    opts = [
        f"{flag}={render(getattr(request, field))}"
        for field, flag, render in _SBATCH_OPTIONS
        if getattr(request, field) is not None
    ]
    if request.hold:
        opts.append("--hold")
    opts.extend(str(a) for a in request.extra_args)
    return opts


def _script_arg(request: SubmitRequest) -> tuple[list[str], bytes | None]:
    """(trailing argv, stdin) for the script: bytes on stdin, or the path as last argument."""
    if (request.script is None) == (request.script_path is None):
        raise ValueError("SubmitRequest needs exactly one of script and script_path")
    if request.script is not None:
        return [], request.script
    path = str(request.script_path)
    if path.startswith("-"):
        path = f"./{path}"  # never let a path be read as an option
    return [path], None


def parsed(result: CommandResult, parser: Callable[[str], _T], text: str | None = None) -> _T:
    """``parser(text)`` (default: the command's stdout), with the command attached to errors.

    The pure parsers know no command, so their errors (SlurmParseError, and the
    SlurmUnreachableError that squeue's JSON ``errors`` can mean) carry ``argv=[]`` and
    rc 0; re-raised here, same class and message, with the real argv, exit code, stderr.
    """
    try:
        return parser(result.stdout if text is None else text)
    except SlurmError as exc:
        raise type(exc)(result.argv, result.returncode, result.stderr, str(exc)) from exc


class CliSlurmClient(SlurmClient):
    """Slurm through squeue/sacct/sbatch/scancel/scontrol."""

    def __init__(
        self,
        *,
        runner: Runner | None = None,
        binaries: Mapping[str, str] | None = None,
        bin_dir: str | None = None,
        timeout: float = 30.0,
        accounting_timeout: float = 120.0,
        submit_timeout: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner: Runner = runner if runner is not None else SubprocessRunner(timeout=timeout)
        self._binaries = dict(binaries or {})
        self._bin_dir = bin_dir
        self.timeout = timeout
        self.accounting_timeout = accounting_timeout
        self.submit_timeout = submit_timeout
        self._clock = clock

    # -- plumbing
    def binary(self, name: str) -> str:
        if name in self._binaries:
            return self._binaries[name]
        if self._bin_dir:
            return f"{self._bin_dir.rstrip('/')}/{name}"
        return name

    def _run(
        self,
        name: str,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        error: type[SlurmError] = SlurmError,
        check: bool = True,
        cwd: str | None = None,
    ) -> CommandResult:
        argv = [self.binary(name), *args]
        limit = self.timeout if timeout is None else timeout
        # cwd only when asked: runners written before it existed keep working
        extra = {} if cwd is None else {"cwd": cwd}
        result = self.runner(argv, stdin=stdin, timeout=limit, **extra)
        return check_result(result, error) if check else result

    # -- reads
    def queue(self) -> QueueSnapshot:
        taken_at = int(self._clock())
        result = self._run("squeue", ["--json"])
        return parsed(result, functools.partial(parse_squeue_json, taken_at=taken_at))

    def accounting(
        self, start: int, end: int | None = None, every_state: bool = False
    ) -> list[SlurmJob]:
        stop = int(self._clock()) if end is None else end
        args = ["--json", "-a", "-X", "-S", format_slurm_time(start), "-E", format_slurm_time(stop)]
        if every_state:
            args += ["-s", ACCOUNTED_STATES]
        result = self._run("sacct", args, timeout=self.accounting_timeout)
        return parsed(result, parse_sacct_json)

    def accounting_text(
        self, job_ids: Sequence[str], fields: Sequence[str], start: int, end: int | None = None
    ) -> str:
        """sacct's raw ``-X -P --noheader`` text of ``fields`` for ``job_ids`` (all users),
        times in UTC (for recorded fixtures that keep what sacct printed, unparsed)."""
        stop = int(self._clock()) if end is None else end
        args = ["-X", "-P", "--noheader", "-a", "--format=" + ",".join(fields)]
        args += ["-S", format_slurm_time(start), "-E", format_slurm_time(stop)]
        args += ["-j", ",".join(str(j) for j in job_ids)]
        return self._run("sacct", args, timeout=self.accounting_timeout).stdout

    def share_text(self, fields: Sequence[str]) -> str:
        """sshare's raw ``-a -P --noheader`` text of ``fields`` (every association's usage
        and fair-share factor, for recorded fixtures)."""
        args = ["-a", "-P", "--noheader", "--format=" + ",".join(fields)]
        return self._run("sshare", args).stdout

    def start_estimates(self) -> dict[str, StartEstimate]:
        result = self._run("squeue", ["--start", "-h", "-o", START_FORMAT])
        return parsed(result, parse_start_estimates)

    def show(self, kind: str) -> list[Mapping[str, str]]:
        if kind not in SHOW_KINDS:
            raise ValueError(f"show() kind must be one of {sorted(SHOW_KINDS)}, not {kind!r}")
        if kind == "config":
            return [parsed(self._run("scontrol", ["show", "config"]), parse_scontrol_config)]
        return list(parsed(self._run("scontrol", ["-o", "show", kind]), parse_scontrol_oneliner))

    def accounting_limits(self, kind: str) -> list[Mapping[str, str]]:
        if kind not in ("qos", "assoc"):
            raise ValueError(f"accounting_limits() kind must be qos or assoc, not {kind!r}")
        return parsed(self._run("sacctmgr", ["-P", "show", kind]), parse_sacctmgr_parsable)

    def version(self) -> str:
        """The running Slurm's release, as ``scontrol version`` prints it ("22.05.8")."""
        return parsed(self._run("scontrol", ["version"]), parse_scontrol_version)

    def tres_names(self) -> dict[int, str]:
        """Accounting's TRES ids -> names (``sacctmgr -P show tres``): 1 -> "cpu",
        1001 -> "gres/gpu" (ids past the fixed ones are site-specific)."""
        args = ["-P", "show", "tres", "format=Type,Name,ID"]
        return parsed(self._run("sacctmgr", args), parse_tres_table)

    # -- actions
    def submit(self, request: SubmitRequest) -> str:
        tail, stdin = _script_arg(request)
        args = ["--parsable", *sbatch_options(request), *tail]
        result = self._run(
            "sbatch",
            args,
            stdin=stdin,
            timeout=self.submit_timeout,
            error=SubmitError,
            cwd=request.chdir,  # the job's SLURM_SUBMIT_DIR (see the module docstring)
        )
        return parsed(result, parse_sbatch_parsable)

    def test_only(self, request: SubmitRequest) -> StartEstimate:
        tail, stdin = _script_arg(request)
        args = ["--test-only", *sbatch_options(request), *tail]
        result = self._run(
            "sbatch", args, stdin=stdin, timeout=self.submit_timeout, error=SubmitError
        )
        return parsed(result, parse_test_only, result.stderr)

    def cancel(self, job_ids: Sequence[str], pending_only: bool = False) -> None:
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        # with a filter that matches none of the ids, scancel says so and exits 0
        state = ["--state=PENDING"] if pending_only else []
        result = self._run("scancel", [*state, *ids], check=False)
        if result.returncode == 0:
            return
        errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
        if errors and all(any(h in ln.lower() for h in _CANCEL_HARMLESS) for ln in errors):
            log.debug("scancel: ignoring harmless errors: %s", errors)
            return
        check_result(result)

    def signal(self, job_id: str, signal: str, batch_only: bool = True) -> None:
        args = [f"--signal={signal}"]
        if batch_only:
            args.append("--batch")
        self._run("scancel", [*args, str(job_id)])

    def hold(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self._run("scontrol", ["hold", ",".join(str(j) for j in job_ids)])

    def release(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self._run("scontrol", ["release", ",".join(str(j) for j in job_ids)])

    def update_time_limit(self, job_id: str, seconds: int) -> None:
        self._run(
            "scontrol",
            ["update", f"JobId={job_id}", f"TimeLimit={_time_limit(seconds)}"],
        )
