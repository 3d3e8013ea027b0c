"""``mirage trace``: inspect, convert and import job traces."""

from __future__ import annotations

import importlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

import click

if TYPE_CHECKING:
    from collections.abc import Callable

    from mirage.slurm.client import SlurmClient
    from mirage.trace.api import TraceInputError
    from mirage.trace.csvmap import ColumnMap
    from mirage.trace.load import TraceLoad

_FORMATS = ("parquet", "ls6", "eagle", "theta", "swf-ext", "swf")  # = readers.FORMATS


def make_slurm_client() -> SlurmClient:
    """The real Slurm client (sacct); tests monkeypatch this or pass ``obj={"slurm_client"}``."""
    module = importlib.import_module("mirage.slurm.cli_backend")
    return cast("SlurmClient", module.CliSlurmClient())


_CHOICES = (*_FORMATS, "csv")  # csv: any CSV export, read with a column mapping


def column_map(columns: str | None, columns_file: str | None) -> ColumnMap | None:
    """The ``--columns`` / ``--columns-file`` mapping (None if neither is given)."""
    from mirage.trace.api import TraceInputError
    from mirage.trace.api import column_map as mapping

    try:
        return mapping(columns, columns_file)
    except TraceInputError as exc:
        raise _click_error(exc) from exc


def _click_error(exc: TraceInputError) -> click.ClickException:
    """The API's error as a command reports it: a bad value of the option at fault, or
    one line."""
    if exc.option:
        return click.BadParameter(str(exc), param_hint=exc.option)
    return click.ClickException(str(exc))


def _columns_options(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option(
        "--columns-file",
        type=click.Path(dir_okay=False),
        help="TOML column mapping ([columns] table; see docs/trace-csv.md).",
    )(fn)
    return click.option(
        "--columns",
        help="Read FILE as CSV with this mapping: submit=Submit,start=Start,... "
        "(see docs/trace-csv.md).",
    )(fn)


def _load(path: str, fmt: str | None, tz: str | None, cmap: ColumnMap | None = None) -> TraceLoad:
    from mirage.trace.api import TraceInputError, read

    try:
        return read(path, fmt, tz, cmap)
    except TraceInputError as exc:
        raise _click_error(exc) from exc


@click.group()
def trace() -> None:
    """Read job traces (sacct exports, SWF, CSV, Parquet) and Slurm accounting."""


@trace.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(_CHOICES), help="Skip format detection.")
@click.option("--tz", help="IANA zone of the trace's local times (default: per format).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_columns_options
def inspect(file: str, fmt: str | None, tz: str | None, as_json: bool, *,
            columns: str | None, columns_file: str | None) -> None:  # fmt: skip
    """Summarise FILE: jobs, skipped rows, span, users, waits, requests, chains."""
    from mirage.trace.api import TraceInputError
    from mirage.trace.api import inspect as summarize
    from mirage.trace.summary import render

    try:
        summary = summarize(file, fmt, tz, columns=columns, columns_file=columns_file)
    except TraceInputError as exc:
        raise _click_error(exc) from exc
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        render(summary)


@trace.command("infer-limits")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(_CHOICES), help="Skip format detection.")
@click.option("--tz", help="IANA zone of the trace's local times (default: per format).")
@click.option(
    "--min-users", default=3, show_default=True, help="Users at a ceiling that make it a limit."
)
@click.option("--gpus-per-node", type=int, help="GPUs of a node, for traces with node counts only.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_columns_options
def infer_limits(
    file: str,
    fmt: str | None,
    tz: str | None,
    *,
    min_users: int,
    gpus_per_node: int | None,
    as_json: bool,
    columns: str | None,
    columns_file: str | None,
) -> None:
    """Per-user limits FILE shows: running jobs (nodes, GPUs) no user ever exceeds."""
    from mirage.trace.limits import infer_user_limits

    found = infer_user_limits(
        _load(file, fmt, tz, column_map(columns, columns_file)).jobs,
        min_users=min_users,
        gpus_per_node=gpus_per_node,
    )
    if as_json:
        click.echo(json.dumps([f.as_dict() for f in found], indent=2))
        return
    for f in found:
        click.echo(f.line())
    jobs = next((f for f in found if f.measure == "jobs" and f.is_limit), None)
    if jobs is not None:
        click.echo(
            f"profile: [[qos]] max_jobs_per_user = {jobs.ceiling}  # inferred: "
            f"{jobs.users_at_ceiling} of {jobs.users} users reach it, none passes"
        )


@trace.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(_CHOICES), help="Skip format detection.")
@click.option("--tz", help="IANA zone of the trace's local times (default: per format).")
@_columns_options
def convert(file: str, out: str, fmt: str | None, tz: str | None, *,
            columns: str | None, columns_file: str | None) -> None:  # fmt: skip
    """Convert FILE to the canonical table in Parquet (OUT)."""
    from mirage.trace.parquet import write_parquet

    load = _load(file, fmt, tz, column_map(columns, columns_file))
    try:
        write_parquet(load, out)
    except OSError as exc:
        raise click.ClickException(f"{out}: cannot write: {exc.strerror or exc}") from exc
    click.echo(f"{out}: {len(load.jobs)} jobs ({len(load.skipped)} rows skipped) from {file}")


def _epoch(text: str, option: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(f"not an ISO date/time: {text!r}", param_hint=option) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


@trace.command(name="import")
@click.option("--start", required=True, help="ISO date/time (UTC unless it has an offset).")
@click.option("--end", required=True, help="ISO date/time (UTC unless it has an offset).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Parquet file.")
@click.pass_context
def import_(ctx: click.Context, start: str, end: str, out: str) -> None:
    """Import Slurm accounting (sacct) between START and END into a Parquet trace."""
    from mirage.slurm.types import SlurmError
    from mirage.trace.accounting import import_accounting
    from mirage.trace.parquet import write_parquet

    lo, hi = _epoch(start, "--start"), _epoch(end, "--end")
    if hi <= lo:
        raise click.BadParameter("must be after --start", param_hint="--end")
    obj = ctx.obj if isinstance(ctx.obj, dict) else {}
    try:
        client = obj.get("slurm_client") or make_slurm_client()
        load = import_accounting(client, lo, hi)
        write_parquet(load, out)
    except SlurmError as exc:
        raise click.ClickException(f"Slurm accounting failed: {exc}") from exc
    except (ImportError, OSError) as exc:
        raise click.ClickException(f"cannot import accounting: {exc}") from exc
    click.echo(f"{out}: {len(load.jobs)} jobs from Slurm accounting")
