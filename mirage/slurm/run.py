"""The one place where Mirage starts Slurm commands.

Every Slurm command goes through a :class:`Runner`: a callable that takes an argv list (never
a shell string), optional stdin bytes and a timeout, and returns a :class:`CommandResult`.
:class:`SubprocessRunner` is the real one; tests pass scripted fakes instead, so that the
backends can be exercised against recorded conversations.

A runner only raises for what prevents a result from existing at all (timeout:
:class:`SlurmTimeoutError`; binary missing or not executable: :class:`SlurmUnreachableError`).
Turning a non-zero exit into a typed error is :func:`check_result`'s job, so that fakes and
real runs are classified by the same code.

Working directory: a runner runs a command in ``cwd`` when one is given (sbatch, so that
the job's ``SLURM_SUBMIT_DIR`` is the directory the chain was registered from, as sbatch
run there by hand would make it), else wherever the runner runs. A command that cannot
start there (the directory is gone, is not one, or its user may not enter it) never ran:
:class:`WorkdirError`, a :class:`SubmitError` (nothing was submitted).

Environment cleaning (:func:`clean_environment`): Slurm's commands read many variables that
silently change their output or behaviour. Removed from the child's environment:

* every ``SQUEUE_*``, ``SACCT_*``, ``SINFO_*``, ``SCONTROL_*``, ``SCANCEL_*``, ``SBATCH_*``,
  ``SALLOC_*``, ``SRUN_*`` and ``SPRIO_*`` variable (formats, sort orders, default
  filters such as ``SQUEUE_USERS`` or ``SCANCEL_USER``, sbatch defaults such as
  ``SBATCH_PARTITION``/``SBATCH_TIMELIMIT``/``SBATCH_EXPORT``);
* every ``SLURM_*`` variable (``SLURM_TIME_FORMAT``, ``SLURM_CLUSTERS``, and the job
  variables ``SLURM_JOB_ID`` etc. that leak in when Mirage itself runs inside a job and
  would otherwise be exported into submitted jobs), except ``SLURM_CONF``, which is kept
  unless ``keep_slurm_conf=False``;
* ``TZ`` is set to ``UTC`` (by default) so that the few text outputs carrying local times
  (``squeue --start``, ``sbatch --test-only``) are in UTC, and ``LC_ALL``/``LANG`` to ``C``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mirage.slurm.types import SlurmError, SlurmTimeoutError, SlurmUnreachableError, SubmitError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0

#: Prefixes of environment variables removed before running any Slurm command.
REMOVED_PREFIXES: tuple[str, ...] = (
    "SQUEUE_",
    "SACCT_",
    "SINFO_",
    "SCONTROL_",
    "SCANCEL_",
    "SBATCH_",
    "SALLOC_",
    "SRUN_",
    "SPRIO_",
    "SLURM_",
)
#: Kept although it matches a removed prefix (unless the caller asks otherwise).
KEPT_BY_DEFAULT: frozenset[str] = frozenset({"SLURM_CONF"})

# stderr fragments meaning "the controller (or slurmdbd) could not be reached" rather than
# "the command was refused". Matched case-insensitively. Wordings are Slurm's
# (src/common/slurm_errno.c) or libc's strerror text that Slurm prints with %m. For sbatch
# this split decides between "refused" (SubmitError: the daemon resubmits) and "outcome
# unknown" (resolved by token), so anything that does not prove a refusal belongs here.
_UNREACHABLE_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"unable to contact slurm controller",
        r"socket timed out on send/recv",
        r"connection refused",
        r"connection timed out",
        r"slurm_load_(jobs|partitions|node|ctl_conf)[a-z_]* error(?!: invalid)",
        r"problem talking to the database",
        r"unable to connect to database",
        r"slurm_persist_conn_open",
        r"sending persistinit msg",
        r"zero bytes were transmitted or received",
        r"communication connection failure",
        r"slurmdbd.*(not responding|unreachable|down)",
        r"unable to establish .*controller",
        r"no route to host",
        # connection-level failures: the request may or may not have reached slurmctld
        r"connection reset by peer",
        r"broken pipe",
        r"unexpected message received",
        r"transport endpoint is not connected",
        r"network is unreachable",
        r"message (send|receive) failure",
        r"interrupted system call",  # EINTR: the RPC was cut short, outcome unknown
        # transient controller conditions, not a verdict on the job
        r"protocol authentication error",  # munge: clocks, key, munged restarting
        r"munge (en|de)code failed",  # the same, seen by the client (may be the reply)
        r"resource temporarily unavailable",  # EAGAIN, after sbatch's own retries
        r"backup controller in standby mode",
        r"rate limit exceeded",  # slurmctld rate limiting (SLURMCTLD_COMMUNICATIONS_BACKOFF)
    )
)

# Shells report "killed by signal N" as exit status 128 + N; real signal numbers stop
# below NSIG, so e.g. 255 stays an ordinary exit code.
_SHELL_SIGNAL_BASE = 128


class WorkdirError(SubmitError):
    """The command could not start in its working directory (gone, not a directory, or
    not enterable by the user it runs as): it never ran, so nothing was submitted."""


@dataclass(frozen=True)
class CommandResult:
    """What one command run produced."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration: float = 0.0


class Runner(Protocol):
    """Runs one command: argv list, optional stdin, timeout in seconds, working directory."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> CommandResult: ...


def clean_environment(
    base: Mapping[str, str] | None = None,
    *,
    keep_slurm_conf: bool = True,
    tz: str | None = "UTC",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment Slurm commands run in (see the module docstring for what goes)."""
    source = os.environ if base is None else base
    kept = KEPT_BY_DEFAULT if keep_slurm_conf else frozenset()
    env = {k: v for k, v in source.items() if k in kept or not k.startswith(REMOVED_PREFIXES)}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    if tz is not None:
        env["TZ"] = tz
    if extra:
        env.update(extra)
    return env


def is_unreachable(stderr: str) -> bool:
    """Whether stderr says the controller or slurmdbd could not be reached."""
    return any(p.search(stderr) for p in _UNREACHABLE_PATTERNS)


#: The commands that talk to slurmdbd rather than slurmctld.
ACCOUNTING_COMMANDS = frozenset({"sacct", "sacctmgr", "sreport", "sshare"})


def unreachable_what(argv: Sequence[str]) -> str:
    """Which daemon an unreachable command could not reach, in words."""
    name = Path(argv[0]).name if argv else ""
    if name in ACCOUNTING_COMMANDS:
        return "Slurm accounting (slurmdbd) unreachable"
    return "Slurm controller unreachable"


def killed_by_signal(returncode: int) -> int | None:
    """The signal that killed a command: subprocess reports -N, a shell wrapper 128 + N."""
    if returncode < 0:
        return -returncode
    if _SHELL_SIGNAL_BASE < returncode < _SHELL_SIGNAL_BASE + signal.NSIG:
        return returncode - _SHELL_SIGNAL_BASE
    return None


def check_result(
    result: CommandResult,
    error: type[SlurmError] = SlurmError,
    *,
    ok_codes: frozenset[int] = frozenset({0}),
) -> CommandResult:
    """Return ``result`` if its exit code is fine, else raise the matching typed error.

    A command killed by a signal raises a plain :class:`SlurmError` whatever ``error`` is:
    it may have been killed after slurmctld accepted the request, so it proves nothing
    (a :class:`SubmitError` would make the daemon resubmit a job that may exist).
    Connection problems raise :class:`SlurmUnreachableError`; anything else raises ``error``
    (e.g. :class:`SubmitError` for sbatch), carrying argv, exit code and stderr.
    """
    if result.returncode in ok_codes:
        return result
    signum = killed_by_signal(result.returncode)
    if signum is not None:
        raise SlurmError(
            result.argv,
            result.returncode,
            result.stderr,
            f"{result.argv[0] if result.argv else '?'} was killed by signal {signum}",
        )
    if is_unreachable(result.stderr):
        raise SlurmUnreachableError(
            result.argv, result.returncode, result.stderr, unreachable_what(result.argv)
        )
    raise error(result.argv, result.returncode, result.stderr)


class SubprocessRunner:
    """The real runner: ``subprocess.run`` with an argv list, a timeout, a clean environment."""

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        keep_slurm_conf: bool = True,
        tz: str | None = "UTC",
        env_extra: Mapping[str, str] | None = None,
        base_env: Mapping[str, str] | None = None,
        max_output: int | None = None,
    ) -> None:
        self.timeout = timeout
        # Bytes a command may print on stdout or stderr before it is killed (None: no
        # bound). The commands run in a user's environment (their sbatch, under their
        # LD_PRELOAD) are bounded: whatever they print is held in the daemon's memory.
        self.max_output = max_output
        self.keep_slurm_conf = keep_slurm_conf
        self.tz = tz
        self.env_extra = dict(env_extra or {})
        self.base_env = None if base_env is None else dict(base_env)

    def environment(self) -> dict[str, str]:
        return clean_environment(
            self.base_env, keep_slurm_conf=self.keep_slurm_conf, tz=self.tz, extra=self.env_extra
        )

    def spawn_options(self) -> dict[str, Any]:
        """Extra ``subprocess.run`` options (e.g. the user to run as); none by default."""
        return {}

    def launch(
        self, args: tuple[str, ...], cwd: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """(argv to execute, ``subprocess`` options) for ``args`` run in ``cwd``.

        Here the child changes directory itself (``cwd=``): it runs as this process's
        user, so it may enter exactly what that user may. A runner that switches users
        overrides this (``subprocess`` changes directory before it drops privileges).
        """
        options = self.spawn_options()
        if cwd is not None:
            options["cwd"] = cwd
        return args, options

    def _run_bounded(
        self,
        args: tuple[str, ...],
        stdin: bytes | None,
        timeout: float,
        max_output: int,
        options: dict[str, Any],
    ) -> subprocess.CompletedProcess[bytes]:
        """``subprocess.run`` with at most ``max_output`` bytes kept of each stream: a
        command that prints more is killed, and its outcome is unknown (SlurmError)."""
        proc = subprocess.Popen(  # noqa: S603 - argv list, no shell, clean env
            args,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.environment(),
            **options,
        )
        with proc:
            reader = _Bounded(proc, max_output)
            reader.feed(stdin)
            try:
                rc = reader.run(timeout)
            except subprocess.TimeoutExpired as exc:
                exc.stderr = bytes(reader.err)
                raise
        if reader.over:
            raise SlurmError(
                args, rc, _decode(bytes(reader.err[-2000:])),
                f"{args[0]} printed more than {max_output} bytes on {reader.over}: killed",
            )  # fmt: skip
        return subprocess.CompletedProcess(args, rc, bytes(reader.out), bytes(reader.err))

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        args = tuple(str(a) for a in argv)
        if not args:
            raise ValueError("empty argv")
        limit = self.timeout if timeout is None else timeout
        executed, options = self.launch(args, cwd)
        started = time.monotonic()
        try:
            if self.max_output is not None:
                proc = self._run_bounded(executed, stdin, limit, self.max_output, options)
            else:
                proc = subprocess.run(  # noqa: S603 - argv list, no shell, clean env
                    executed,
                    input=stdin,
                    stdin=None if stdin is not None else subprocess.DEVNULL,
                    capture_output=True,
                    timeout=limit,
                    env=self.environment(),
                    check=False,
                    **options,
                )
        except subprocess.TimeoutExpired as exc:
            duration = time.monotonic() - started
            log.debug("slurm: %s timed out after %.3fs", args, duration)
            raise SlurmTimeoutError(
                args, None, _decode(exc.stderr), f"{args[0]} timed out after {limit:g}s"
            ) from exc
        except OSError as exc:
            if cwd is not None and options.get("cwd") == cwd and exc.filename == cwd:
                # the child's chdir failed (subprocess names the directory): never ran
                raise WorkdirError(args, None, str(exc), workdir_message(args, cwd)) from exc
            # binary missing / not executable: no Slurm client here
            raise SlurmUnreachableError(args, None, str(exc), f"cannot run {args[0]}") from exc
        duration = time.monotonic() - started
        log.debug("slurm: %s -> rc=%d in %.3fs", args, proc.returncode, duration)
        return CommandResult(
            args, proc.returncode, _decode(proc.stdout), _decode(proc.stderr), duration
        )


def workdir_message(args: Sequence[str], cwd: str) -> str:
    """What a :class:`WorkdirError` says: which command, which directory."""
    return f"cannot run {args[0] if args else '?'} in {cwd}"


class _Bounded:
    """A child's output, read by threads that kill the child once either stream passes
    ``limit`` bytes (``over`` then names the stream)."""

    def __init__(self, proc: subprocess.Popen[bytes], limit: int) -> None:
        self.proc = proc
        self.limit = limit
        self.out = bytearray()
        self.err = bytearray()
        self.over = ""
        self.threads = [
            threading.Thread(target=self._drain, args=(proc.stdout, self.out, "stdout")),
            threading.Thread(target=self._drain, args=(proc.stderr, self.err, "stderr")),
        ]

    def _drain(self, stream: Any, buf: bytearray, name: str) -> None:
        while chunk := stream.read1(65536):
            if len(buf) + len(chunk) > self.limit:
                self.over = self.over or name
                with contextlib.suppress(OSError):  # already gone
                    self.proc.kill()
                return
            buf.extend(chunk)

    def feed(self, data: bytes | None) -> None:
        """Write stdin in its own thread: a child that never reads it cannot block us."""
        stdin = self.proc.stdin
        if data is None or stdin is None:
            return

        def write() -> None:
            with contextlib.suppress(BrokenPipeError, OSError):
                stdin.write(data)
                stdin.close()

        self.threads.append(threading.Thread(target=write, daemon=True))

    def run(self, timeout: float) -> int:
        for t in self.threads:
            t.daemon = True
            t.start()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                self.proc.kill()
            raise
        finally:
            for t in self.threads:
                t.join(timeout=5)
        return rc


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def run(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout: float | None = None,
    runner: Runner | None = None,
    error: type[SlurmError] = SlurmError,
) -> CommandResult:
    """Run one command through ``runner`` (default: a :class:`SubprocessRunner`), checked."""
    active: Runner = runner if runner is not None else SubprocessRunner()
    return check_result(active(argv, stdin=stdin, timeout=timeout), error)
