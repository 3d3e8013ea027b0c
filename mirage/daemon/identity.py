"""Owner identity: a chain's jobs are submitted, cancelled and signalled as its owner.

A daemon running as root starts sbatch/scancel with the owner's uid, primary gid and
supplementary gids (``subprocess``'s ``user=``, ``group=``, ``extra_groups=``: the
child drops privileges before exec, without ``preexec_fn``). A per-user daemon (or the
``mirage chain`` command, which runs as the user) needs no privileges and runs them as
itself. Either way the child's environment is the chain's snapshot (``--export=ALL``)
or nothing but Mirage's clean defaults, never the daemon's own; and the command is an
argv list: no user string reaches a shell.

sbatch runs in the chain's directory (so that the job's ``SLURM_SUBMIT_DIR`` is where the
chain was registered). ``subprocess`` changes directory before it drops privileges, which
would enter it as root: wrong both ways (root may enter what the owner may not; on an NFS
home exported with root_squash root may not enter what the owner may). So an owner's
command that needs a directory runs as ``env --chdir=DIR -- COMMAND …`` (GNU coreutils
8.28 or later): the owner's own process changes directory, then execs the command; a
directory it cannot enter is that submission's :class:`~mirage.slurm.run.WorkdirError`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mirage.daemon.config import Config
from mirage.daemon.handoff import REPORT_DIR
from mirage.daemon.store import Chain
from mirage.daemon.timing import MAX_REPORT_BYTES, ReportRead, local_read
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.run import (
    CommandResult,
    SubprocessRunner,
    WorkdirError,
    workdir_message,
)
from mirage.slurm.types import SlurmUnreachableError

log = logging.getLogger(__name__)

#: Environment a segment gets when the chain's export policy is not ALL (PATH for sbatch).
MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
#: Output kept of a chain's sbatch/scancel/scontrol (run in the user's environment, which
#: may make them print without end); Slurm's own answers are a few lines.
MAX_ACTION_OUTPUT = 16 * 1024 * 1024
#: Changes directory as the owner, then execs the command (``--chdir``: coreutils 8.28+).
ENV = "/usr/bin/env"
#: env's own exit codes: it failed itself (125: e.g. chdir), the command could not be
#: executed (126) or was not found (127); its messages then start with "/usr/bin/env: ".
_ENV_FAILED, _ENV_CANNOT_EXEC, _ENV_NOT_FOUND = 125, 126, 127


class OwnerRunner(SubprocessRunner):
    """``SubprocessRunner`` whose children run as another user (the daemon must be root)."""

    def __init__(
        self,
        uid: int,
        gid: int,
        groups: Sequence[int],
        *,
        timeout: float = 30.0,
        base_env: Mapping[str, str] | None = None,
        max_output: int | None = None,
    ) -> None:
        super().__init__(timeout=timeout, base_env=base_env, max_output=max_output)
        self.uid = uid
        self.gid = gid
        self.groups = list(groups)

    def spawn_options(self) -> dict[str, Any]:
        # the child drops to the owner before exec (no preexec_fn: unsafe with threads);
        # cwd "/" so that it never depends on a directory the owner cannot enter
        return {"user": self.uid, "group": self.gid, "extra_groups": self.groups, "cwd": "/"}

    def launch(
        self, args: tuple[str, ...], cwd: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        # the owner's process enters cwd (see the module docstring), never root's
        if cwd is None:
            return args, self.spawn_options()
        return (ENV, f"--chdir={cwd}", "--", *args), self.spawn_options()

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        result = super().__call__(argv, stdin=stdin, timeout=timeout, cwd=cwd)
        if cwd is not None:
            _check_env_wrapper(result, cwd)
        return result


def _check_env_wrapper(result: CommandResult, cwd: str) -> None:
    """Raise what env's own failure means: the directory (the command never ran), or a
    command that cannot be executed (no Slurm client, as for an unwrapped command)."""
    if not result.stderr.startswith(f"{ENV}: "):
        return  # the command's own answer (sbatch's messages start with "sbatch: ")
    if result.returncode == _ENV_FAILED:
        raise WorkdirError(
            result.argv, result.returncode, result.stderr, workdir_message(result.argv, cwd)
        )
    if result.returncode in (_ENV_CANNOT_EXEC, _ENV_NOT_FOUND):
        raise SlurmUnreachableError(
            result.argv, result.returncode, result.stderr, f"cannot run {result.argv[0]}"
        )


def runs_as_owner(config: Config) -> bool:
    mode = config.daemon.run_as_owner
    return mode == "always" or (mode == "auto" and os.geteuid() == 0)


def chain_environment(chain: Chain) -> dict[str, str]:
    """The environment sbatch runs in for this chain: the snapshot (export ALL) or minimal."""
    if chain.export.split(",")[0] == "ALL" and chain.environment:
        return dict(chain.environment)
    return dict(MINIMAL_ENV)


def action_clients(config: Config) -> Callable[[Chain], SlurmClient]:
    """chain -> a CliSlurmClient that runs sbatch/scancel as the chain's owner."""
    as_owner = runs_as_owner(config)
    sl = config.slurm
    cache: dict[str, SlurmClient] = {}
    # Resolve the commands once, in the daemon's environment: the child's environment is
    # the chain's (its PATH may not lead to Slurm, or may lead to the user's own sbatch).
    binaries: dict[str, str] = {}
    if not sl.bin_dir:
        for name in ("sbatch", "scancel", "scontrol", "squeue", "sacct"):
            found = shutil.which(name)
            if found:
                binaries[name] = found

    def client_for(chain: Chain) -> SlurmClient:
        got = cache.get(chain.id)
        if got is not None:
            return got
        env = chain_environment(chain)
        runner: SubprocessRunner
        if as_owner:
            runner = OwnerRunner(
                chain.uid,
                chain.gid,
                chain.groups,
                timeout=sl.timeout_s,
                base_env=env,
                max_output=MAX_ACTION_OUTPUT,
            )
        else:
            runner = SubprocessRunner(
                timeout=sl.timeout_s, base_env=env, max_output=MAX_ACTION_OUTPUT
            )
        client = CliSlurmClient(
            runner=runner,
            binaries=binaries,
            bin_dir=sl.bin_dir or None,
            timeout=sl.timeout_s,
            accounting_timeout=sl.accounting_timeout_s,
            submit_timeout=sl.submit_timeout_s,
        )
        cache[chain.id] = client
        return client

    return client_for


def owner_marker_check(config: Config) -> Callable[[Chain], bool | None]:
    """The completion marker, checked with the owner's rights (``test -e`` as the owner; a
    symbolic link counts as there, as in :func:`mirage.daemon.context.local_marker_check`)."""
    as_owner = runs_as_owner(config)

    def check(chain: Chain) -> bool | None:
        if not chain.until_file:
            return None
        path = str(Path(chain.chdir) / chain.until_file)
        if not as_owner:
            try:
                Path(path).lstat()
            except FileNotFoundError:
                return False
            except OSError:
                return None
            return True
        try:
            proc = _as_owner(chain, ["/usr/bin/test", "-e", path, "-o", "-L", path])
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("marker check for chain %s failed: %s", chain.id, exc)
            return None
        if proc.returncode in (0, 1):
            return proc.returncode == 0
        return None

    return check


def _as_owner(chain: Chain, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as the chain's owner (its uid, gid and groups), from ``/``, with the
    minimal environment and a timeout; OSError or TimeoutExpired when it cannot run."""
    return subprocess.run(  # noqa: S603 - fixed argv, paths are single arguments
        argv,
        capture_output=True,
        timeout=10,
        env=dict(MINIMAL_ENV),
        check=False,
        user=chain.uid,
        group=chain.gid,
        extra_groups=list(chain.groups),
        cwd="/",
    )


def owner_read(chain: Chain, name: str) -> str | None:
    """A timing report read as the chain's owner: ``find`` lists it only when it is a
    regular file (``-P``: no link followed, the ``.mirage`` folder's own included) of at
    most 4 KiB (``-size -5k`` rounds up to KiB), and ``cat`` prints it."""
    folder = str(Path(chain.chdir) / REPORT_DIR)
    argv = ["/usr/bin/find", "-P", folder, "-maxdepth", "1", "-name", name, "-type", "f",
            "-size", "-5k", "-exec", "/usr/bin/cat", "{}", "+"]  # fmt: skip
    try:
        proc = _as_owner(chain, argv)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("timing report of chain %s: %s", chain.id, exc)
        return None
    if proc.returncode != 0 or not proc.stdout:
        return None
    return proc.stdout[:MAX_REPORT_BYTES].decode("utf-8", "replace")


def owner_report_read(config: Config) -> ReportRead:
    """Segments' timing reports (mirage.daemon.timing), read with the owner's rights where
    the daemon submits as owners, else with its own."""
    return owner_read if runs_as_owner(config) else local_read


#: What a chain's owner must be able to do with its directory, each with the refusal.
_DIRECTORY_PROBES = (
    ("-d", "is not a directory (or does not exist)"),
    ("-x", "cannot be entered by you"),
    ("-w", "cannot be written by you (Slurm writes the jobs' output there)"),
)


def owner_access_check(config: Config) -> Callable[[Chain], str]:
    """Why a new chain's owner cannot use what it points at ("" when they can), checked
    with the owner's own rights (as the owner, where the daemon submits as owners): its
    directory must be one they may enter and write, and its until-file's folder must not
    lead out of that directory through a link."""
    as_owner = runs_as_owner(config)

    def run(chain: Chain, argv: list[str]) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(  # noqa: S603 - fixed argv, the paths are one argument each
                argv,
                capture_output=True,
                text=True,
                timeout=10,
                env=dict(MINIMAL_ENV),
                check=False,
                cwd="/",
                **_owner_kw(chain, as_owner),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("access check for chain %s failed: %s", chain.id, exc)
            return None

    def real(chain: Chain, path: str) -> str | None:
        got = run(chain, ["/usr/bin/realpath", "-e", "--", path])
        return got.stdout.strip() if got is not None and got.returncode == 0 else None

    def check(chain: Chain) -> str:
        where = chain.chdir
        for flag, why in _DIRECTORY_PROBES:
            got = run(chain, ["/usr/bin/test", flag, where])
            if got is not None and got.returncode == 1:
                return f"the chain's directory {where} {why}"
        if not chain.until_file or Path(chain.until_file).is_absolute():
            return ""
        folder = str(Path(where) / chain.until_file).rsplit("/", 1)[0]
        inside, top = real(chain, folder), real(chain, where)
        if inside is None or top is None:
            return ""  # not there yet: the job creates it (as the owner, inside)
        if inside != top and not inside.startswith(top.rstrip("/") + "/"):
            return (
                f"--until-file {chain.until_file}: its folder {folder} leads out of the chain's "
                f"directory (to {inside}); name a file inside it"
            )
        return ""

    return check


def _owner_kw(chain: Chain, as_owner: bool) -> dict[str, Any]:
    if not as_owner:
        return {}
    return {"user": chain.uid, "group": chain.gid, "extra_groups": list(chain.groups)}
