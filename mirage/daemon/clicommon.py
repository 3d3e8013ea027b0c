"""What the user commands share: the --config and --json options, the configuration
with its log level, the daemon's socket and its answers, the Slurm client of the
configuration. Apart from ``mirage.daemon.cli`` so that ``mirage.daemon.plancli`` (the
plan options, used by ``chain submit --plan``) can use them without an import cycle."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mirage.daemon.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config

if TYPE_CHECKING:
    from mirage.slurm.client import SlurmClient

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"Daemon configuration (default $MIRAGE_CONFIG, else {DEFAULT_CONFIG_PATH} if present).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def config_or_fail(path: str | None) -> Config:
    """The configuration (``--config``, ``$MIRAGE_CONFIG`` or the default), its ``[log]
    level`` applied to Mirage's loggers unless ``-v`` asked for debug lines."""
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    ctx = click.get_current_context(silent=True)
    verbose = ctx.find_root().params.get("verbose", 0) if ctx is not None else 0
    if not verbose:
        logging.getLogger("mirage").setLevel(cfg.log.level.upper())
    return cfg


def daemon_socket(cfg: Config) -> Path | None:
    path = Path(cfg.socket.path)
    return path if path.is_socket() else None


def ask_daemon(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    from mirage.daemon.api import call

    try:
        answer = call(path, request)
    except OSError as exc:
        raise click.ClickException(f"cannot reach the daemon at {path}: {exc}") from exc
    except ValueError as exc:  # it closed the connection early, or is not Mirage's daemon
        raise click.ClickException(f"the daemon at {path} gave no valid answer: {exc}") from exc
    if not answer.get("ok"):
        raise click.ClickException(str(answer.get("error")))
    return answer


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def read_client(cfg: Config, backend: str) -> SlurmClient:
    """The daemon's own client (its polls): the CLI backend, or pyslurm over it.

    pyslurm missing, or built for another Slurm release than ``scontrol version`` names,
    stops the daemon here with one line saying what to install."""
    from mirage.slurm.cli_backend import CliSlurmClient
    from mirage.slurm.run import SubprocessRunner
    from mirage.slurm.types import SlurmError

    sl = cfg.slurm
    cli = CliSlurmClient(
        runner=SubprocessRunner(timeout=sl.timeout_s),
        bin_dir=sl.bin_dir or None,
        timeout=sl.timeout_s,
        accounting_timeout=sl.accounting_timeout_s,
        submit_timeout=sl.submit_timeout_s,
    )
    if backend != "pyslurm":
        return cli
    from mirage.slurm.pyslurm_backend import PyslurmUnavailableError, open_pyslurm_client

    try:
        return open_pyslurm_client(cli)  # pyslurm in a worker process (slurm/worker.py)
    except PyslurmUnavailableError as exc:
        raise click.ClickException(str(exc)) from exc
    except SlurmError as exc:
        raise click.ClickException(
            f'[slurm] backend = "pyslurm": cannot read the running Slurm\'s release '
            f"(scontrol version): {exc}"
        ) from exc
