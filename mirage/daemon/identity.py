"""Owner identity: a chain's jobs are submitted, cancelled and signalled as its owner.

A daemon running as root starts sbatch/scancel with the owner's uid, primary gid and
supplementary gids (``subprocess``'s ``user=``, ``group=``, ``extra_groups=``: the
child drops privileges before exec, without ``preexec_fn``). A per-user daemon (or the
``mirage chain`` command, which runs as the user) needs no privileges and runs them as
itself. Either way the child's environment is the chain's snapshot (``--export=ALL``)
or nothing but Mirage's clean defaults, never the daemon's own; and the command is an
argv list: no user string reaches a shell.
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
from mirage.daemon.store import Chain
from mirage.slurm.cli_backend import CliSlurmClient
from mirage.slurm.client import SlurmClient
from mirage.slurm.run import SubprocessRunner

log = logging.getLogger(__name__)

#: Environment a segment gets when the chain's export policy is not ALL (PATH for sbatch).
MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
#: Output kept of a chain's sbatch/scancel/scontrol (run in the user's environment, which
#: may make them print without end); Slurm's own answers are a few lines.
MAX_ACTION_OUTPUT = 16 * 1024 * 1024


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
    """The completion marker, checked with the owner's rights (``test -e`` as the owner)."""
    as_owner = runs_as_owner(config)

    def check(chain: Chain) -> bool | None:
        if not chain.until_file:
            return None
        path = str(Path(chain.chdir) / chain.until_file)
        if not as_owner:
            try:
                Path(path).stat()
            except FileNotFoundError:
                return False
            except OSError:
                return None
            return True
        try:
            proc = subprocess.run(  # noqa: S603 - fixed argv, the path is one argument
                ["/usr/bin/test", "-e", path],
                capture_output=True,
                timeout=10,
                env=dict(MINIMAL_ENV),
                check=False,
                user=chain.uid,
                group=chain.gid,
                extra_groups=list(chain.groups),
                cwd="/",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("marker check for chain %s failed: %s", chain.id, exc)
            return None
        if proc.returncode in (0, 1):
            return proc.returncode == 0
        return None

    return check
