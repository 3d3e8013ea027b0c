"""``mirage simulate`` (replay a trace) and ``mirage calibrate`` (fit a cluster to a trace)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from mirage.extras import require
from mirage.fmt import duration

if TYPE_CHECKING:
    import pandas as pd

    from mirage.sim.api import ReplayError
    from mirage.sim.calibrate import Candidate

_FORMATS = ("parquet", "ls6", "eagle", "theta", "swf-ext", "swf")  # = readers.FORMATS


def _load_table(path: str, fmt: str | None) -> pd.DataFrame:
    from mirage.sim.api import ReplayError, load_trace_file

    try:
        return load_trace_file(path, fmt).jobs
    except ReplayError as exc:
        raise _click_error(exc) from exc


def _click_error(exc: ReplayError) -> click.ClickException:
    """The API's error as the command reports it: a bad value of the option at fault, or
    one line."""
    if exc.option:
        return click.BadParameter(str(exc), param_hint=exc.option)
    return click.ClickException(str(exc))


_TRACE = click.option(
    "--trace", "trace_path", required=True, type=click.Path(dir_okay=False), help="Trace file."
)
_FORMAT = click.option("--format", "fmt", type=click.Choice(_FORMATS), help="Skip detection.")
_PROFILE = click.option(
    "--profile", "profile_name", default="ls6", show_default=True, help="Built-in name or path."
)
_HOLDS = click.option(
    "--holds/--no-holds",
    default=True,
    show_default=True,
    help="Model dependency holds (trace eligible times, else detected chains).",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_STRICT = click.option(
    "--strict",
    is_flag=True,
    help="Fail when more than 5% of the trace's jobs cannot be replayed (else a warning).",
)
_UNKNOWN_LIMIT = click.option(
    "--unknown-limit",
    type=click.Choice(["runtime", "partition-max", "drop"]),
    default="runtime",
    show_default=True,
    help="A job without a time limit in the trace: its run time as its limit, its "
    "partition's MaxTime, or left out.",
)

_PROCS_PER_NODE = click.option(
    "--procs-per-node",
    help="Read a job without a node count but with CPUs (an SWF log's processors) as "
    "ceil(CPUs / N) nodes; 'profile': N is the partition's CPUs per node. Default: one node.",
)


def _trace_use(use: Any, strict: bool) -> dict[str, Any]:
    """The trace's use for the output; a warning on stderr when much was left out, an
    error with ``strict``."""
    from mirage.sim.api import ReplayError, check_use

    try:
        said = check_use(use, strict)
    except ReplayError as exc:
        raise _click_error(exc) from exc
    if said:
        _warn(said)
    out: dict[str, Any] = use.as_dict()
    return out


def _warn(said: str) -> None:
    click.echo(f"warning: {said}", err=True)


@click.command()
@_TRACE
@_FORMAT
@_PROFILE
@click.option("--nodes", type=click.IntRange(min=1), help="Nodes of the default partition.")
@click.option(
    "--arrival-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Compress inter-arrival times by this factor (2 = twice the load).",
)
@click.option("--backfill", type=click.Choice(["slurm", "easy"]), help="Override the profile.")
@click.option("--before", help="Only jobs submitted before this ISO date (profile's zone).")
@_HOLDS
@_STRICT
@_UNKNOWN_LIMIT
@_PROCS_PER_NODE
@_JSON
def simulate(
    *,
    trace_path: str,
    fmt: str | None,
    profile_name: str,
    nodes: int | None,
    arrival_scale: float,
    backfill: str | None,
    before: str | None,
    holds: bool,
    strict: bool,
    unknown_limit: str,
    procs_per_node: str | None,
    as_json: bool,
) -> None:
    """Replay a trace through the simulator and summarise waits, utilisation and speed.

    Waits are shown from submit (as in the trace) and from eligible time (dependency holds
    taken out, after a 2-day warm-up), simulated against real. The summary says how many
    of the trace's jobs were replayed and why the others were not, and which fields the
    trace did not give; more than 5% left out is a warning (an error with --strict).
    """
    from mirage.sim.api import ReplayError, replay

    try:
        out = replay(
            trace_path, profile_name, nodes=nodes, arrival_scale=arrival_scale,
            backfill=backfill, before=before, holds=holds, strict=strict,
            unknown_limit=unknown_limit, procs_per_node=procs_per_node, fmt=fmt,
            progress=not as_json, warn=_warn,
        )  # fmt: skip
    except ReplayError as exc:
        raise _click_error(exc) from exc
    if as_json:
        click.echo(json.dumps(out.summary, indent=2))
    else:
        _render_summary(out.summary)


def _cutoff(before: str | None, tz: str) -> int | None:
    from mirage.sim.api import ReplayError, cutoff_of

    try:
        return cutoff_of(before, tz)
    except ReplayError as exc:
        raise _click_error(exc) from exc


def _use_text(use: dict[str, Any]) -> str:
    text = f"{use['used']} of {use['rows']} jobs replayed ({1 - use['unused_share']:.1%})"
    if use["dropped"]:
        text += "\nleft out: " + ", ".join(f"{k} {v}" for k, v in use["dropped"].items())
    if use["unknown"]:
        text += "\nnot in the trace: " + ", ".join(f"{k} {v}" for k, v in use["unknown"].items())
    return text


def _render_summary(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    h = out["holds"]
    info = Table(title=f"Replay of {out['trace']}", show_header=False)
    info.add_column("", style="bold")
    info.add_column("")
    info.add_row("cluster", f"{out['profile']}: {out['nodes']} nodes, backfill {out['backfill']}")
    info.add_row("jobs", f"{out['jobs']} (started {out['started']})")
    info.add_row("trace use", _use_text(out["trace_use"]))
    info.add_row("arrival scale", f"{out['arrival_scale']:g}")
    info.add_row("simulated span", f"{out['span_s'] / 86400:.1f} d")
    info.add_row("utilisation", f"{out['utilisation']:.3f}")
    info.add_row("wall time", f"{out['wall_s']:.2f} s (+ {out['load_s']:.2f} s to load)")
    info.add_row("jobs per second", f"{out['jobs_per_s']:.0f}")
    info.add_row(
        "dependency holds",
        f"{h['source']}: {h['held']} jobs held ({h['dependencies']} afterany, "
        f"{h['begin_fallback']} begin); real mean wait {duration(h['real_mean_wait_submit_s'])} "
        f"from submit, {duration(h['real_mean_wait_eligible_s'])} from eligible",
    )
    we = out["wait_from_eligible_s"]
    waits = Table(
        title="Waits",
        caption=f"* from eligible time (holds taken out), {we['jobs']} jobs after the warm-up"
        + ("" if out["arrival_scale"] == 1 else "; real waits are at the trace's own load"),
    )
    waits.add_column("")
    for key in ("mean", "p50", "p75", "p90", "p99", "max"):
        waits.add_column(key, justify="right")
    for label, stats in (
        ("simulated", out["wait_s"]["simulated"]),
        ("real", out["wait_s"]["real"]),
        ("simulated*", we["simulated"]),
        ("real*", we["real"]),
    ):
        keys = ("mean", "p50", "p75", "p90", "p99", "max")
        waits.add_row(label, *(duration(stats.get(k)) for k in keys))
    console = Console()
    console.print(info)
    console.print(waits)
    if we["ks"] is None:
        console.print(
            "KS distance (from eligible, after warm-up): none, no job was submitted after the "
            "warm-up (the log is shorter than it)"
        )
    else:
        console.print(f"KS distance (from eligible, after warm-up): {we['ks']:.3f}")


@click.command()
@_TRACE
@_FORMAT
@_PROFILE
@click.option(
    "--before",
    required=True,
    help="Use only jobs submitted before this ISO date/time (naive: the profile's zone).",
)
@click.option(
    "--nodes-min",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Fewest nodes tried (40-120 brackets ls6's 88: give your partition's range).",
)
@click.option(
    "--nodes-max", type=click.IntRange(min=1), default=120, show_default=True,
    help="Most nodes tried.",
)  # fmt: skip
@click.option(
    "--step",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Coarse step from --nodes-max down (then half of it about the best, a quarter, "
    "... down to 1: two replays a step).",
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0, min_open=True),
    help="Wall seconds per replay; a slower one stops there and ends the coarse descent.",
)
@click.option(
    "--tune-settings",
    is_flag=True,
    help="Also try backfill and priority-age variants at the best node count.",
)
@click.option("--out", type=click.Path(dir_okay=False), help="Write the calibrated profile here.")
@_HOLDS
@_STRICT
@_JSON
def calibrate(
    *,
    trace_path: str,
    fmt: str | None,
    profile_name: str,
    before: str,
    nodes_min: int,
    nodes_max: int,
    step: int,
    budget_s: float | None,
    tune_settings: bool,
    out: str | None,
    holds: bool,
    strict: bool,
    as_json: bool,
) -> None:
    """Find the node count (and settings) whose replay best reproduces the trace's waits.

    Node counts from --nodes-max down to --nodes-min (by default 120 down to 40, made
    for ls6's 88-node partition: set both around your partition's size), every --step
    nodes, then about the best at half the step, a quarter, ... down to 1. Loss: KS
    distance between simulated and real waits from eligible time (dependency holds
    taken out), over jobs submitted after a 2-day warm-up and before --before. A line per
    replay as it ends (stderr), then the table. Says how many of those jobs the replays
    used (at the best size); more than 5% left out is a warning, an error with --strict.
    """
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.sim import calibrate as cal_mod

    if nodes_min > nodes_max:
        raise click.BadParameter("must not exceed --nodes-max", param_hint="--nodes-min")
    try:
        prof = load_profile(profile_name)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from exc
    cutoff = _cutoff(before, prof.timezone)
    assert cutoff is not None
    df = _load_table(trace_path, fmt)

    def report(c: Candidate) -> None:
        if not as_json:
            row = cal_mod.table_rows([c])[0]
            click.echo("  " + "  ".join(f"{h}={v}" for h, v in zip(
                cal_mod.TABLE_HEADER, row, strict=True)), err=True)  # fmt: skip

    grid = cal_mod.SETTINGS_GRID if tune_settings else ()
    try:
        result = cal_mod.calibrate(
            df, prof, cutoff, nodes_min=nodes_min, nodes_max=nodes_max, coarse_step=step,
            settings_grid=grid, holds=holds, budget_s=budget_s, on_candidate=report,
        )  # fmt: skip
    except cal_mod.NothingToCompare as exc:  # a log too short: one line, not a traceback
        raise click.ClickException(str(exc)) from exc
    if result.jobs == 0:
        raise click.ClickException(f"{trace_path}: no job submitted before {before}")
    if result.use is not None:
        _trace_use(result.use, strict)
    if out:
        try:
            cal_mod.write_profile(result, out, trace_path, prof.timezone)
        except OSError as exc:
            raise click.ClickException(f"{out}: cannot write: {exc.strerror or exc}") from exc
    if as_json:
        data = result.as_dict()
        data["profile"] = asdict(result.profile)
        data["out"] = out
        click.echo(json.dumps(data, indent=2))
        return
    _render_calibration(result, out, trace_path, prof.timezone)


def _render_calibration(result: Any, out: str | None, trace: str, tz: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from mirage.fmt import duration
    from mirage.sim import calibrate as cal_mod

    floor = duration(cal_mod.latency_floor(result.profile))  # the floor calibrate used
    table = Table(
        title=f"Calibration on {result.jobs} jobs ({result.measured} compared)",
        caption=f"waits from eligible time; KS counts waits under {floor} as zero",
    )
    for h in cal_mod.TABLE_HEADER:
        table.add_column(h, justify="left" if h == "settings" else "right")
    for cand, row in zip(result.candidates, cal_mod.table_rows(result.candidates), strict=True):
        style = "bold green" if cand is result.best else None
        table.add_row(*row, style=style)
    console = Console()
    console.print(table)
    h = result.holds
    console.print(
        f"dependency holds ({h.source}): {h.held} jobs held; real mean wait "
        f"{duration(h.real_mean_wait_submit_s)} from submit -> "
        f"{duration(h.real_mean_wait_eligible_s)} from eligible"
    )
    for note in result.notes:
        console.print(note)
    b = result.best
    settings = f" {b.settings}" if b.settings else ""
    if result.use is not None:
        console.print(f"trace use (before the cut-off, at {b.nodes} nodes): {result.use.line()}")
    console.print(f"best: {b.nodes} nodes{settings}, KS {b.ks:.3f} "
                  f"({result.wall_s:.0f} s in all)")  # fmt: skip
    h = result.held_out
    if h is not None:
        console.print(
            f"after the cut-off (held out, {h.jobs} jobs): KS {h.ks:.3f}, mean wait "
            f"{duration(h.sim_mean_s)} simulated against {duration(h.real_mean_s)} real"
        )
    if out:
        console.print(f"wrote {out}")
    else:
        sys.stdout.write(cal_mod.calibrated_toml(result, trace, tz))


# ---- mirage sim ... -------------------------------------------------------------------------


@click.group("sim")
def sim() -> None:
    """The simulator against a cluster's own accounting."""


def _when(text: str, tz: str, hint: str) -> int:
    """``now``, epoch seconds, or an ISO date/time (naive: zone ``tz``)."""
    from mirage.slurm.syntax import parse_when

    text = text.strip()
    if text.lower() == "now":
        return int(time.time())
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        return parse_when(text, tz)
    except ValueError as exc:
        raise click.BadParameter(
            f"not 'now', epoch seconds or an ISO date/time: {text!r}", param_hint=hint
        ) from exc


def _check_zone(tz: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise click.BadParameter(f"unknown time zone {tz!r}", param_hint="--tz") from exc


def _client(ctx: click.Context) -> Any:
    client = ctx.obj.get("slurm_client") if isinstance(ctx.obj, dict) else None
    if client is None:
        from mirage.slurm.cli_backend import CliSlurmClient

        client = CliSlurmClient()
    return client


def _accounting(
    ctx: click.Context, sacct_path: str | None, t0: int | None, t1: int | None, tz: str
) -> Any:
    """The file's records, or the cluster's accounting for the window."""
    from mirage.sim import validate as val

    if sacct_path is not None:
        return val.read_sacct(sacct_path, tz)
    assert t0 is not None and t1 is not None
    from mirage.trace.accounting import CHUNK_ABOVE_S

    if t1 - t0 > CHUNK_ABOVE_S:
        raise click.BadParameter("at most 31 days", param_hint="--start/--end")
    jobs = _client(ctx).accounting(t0, t1)
    return val.from_client_jobs(jobs, f"sacct {val.iso(t0)} .. {val.iso(t1)}")


@sim.command("validate")
@click.option(
    "--sacct",
    "sacct_path",
    type=click.Path(dir_okay=False),
    help="A sacct export: `sacct --json`, or `sacct -P` text (with a header line, or "
    "--noheader with the fidelity recordings' --format list). Default: read the cluster's "
    "accounting for --start .. --end.",
)
@click.option(
    "--start",
    help="Window start: ISO date/time (naive: --tz), epoch seconds or 'now'. Required "
    "without --sacct; with it, default: the file's first submit.",
)
@click.option(
    "--end", help="Window end (as --start). Default: now, or with --sacct the last submit."
)
@click.option(
    "--profile",
    "profile_path",
    help="A captured profile (TOML path or built-in name). Default: capture the live "
    "cluster's, as `mirage profile capture` does.",
)
@click.option(
    "--tz",
    default="UTC",
    show_default=True,
    help="Zone of sacct -P text times and of naive --start/--end.",
)
@click.option("--plot", type=click.Path(dir_okay=False), help="Write the start-error CDF (PNG).")
@click.option(
    "--ks-floor",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Count waits under this many seconds as zero in the wait KS distance "
    "(mirage calibrate uses 60).",
)
@_JSON
@click.pass_context
def validate(
    ctx: click.Context,
    *,
    sacct_path: str | None,
    start: str | None,
    end: str | None,
    profile_path: str | None,
    tz: str,
    plot: str | None,
    ks_floor: int,
    as_json: bool,
) -> None:
    """Replay a window of the cluster's own accounting and report how well the simulator
    agrees: start error (simulated - real start) quantiles and shares within 35 s / 5 min /
    1 h, and the KS distance of real against simulated waits, overall, per partition and
    per job size. Jobs running or pending at the window's start are seeded as they were.
    """
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.sim import validate as val
    from mirage.slurm.types import SlurmError

    if sacct_path is None and start is None:
        raise click.UsageError("give --sacct FILE, or --start (and --end) to read the cluster's")
    _check_zone(tz)
    t0 = None if start is None else _when(start, tz, "--start")
    t1 = None if end is None else _when(end, tz, "--end")
    if t1 is None and sacct_path is None:
        t1 = int(time.time())
    if t0 is not None and t1 is not None and t1 <= t0:
        raise click.BadParameter("must be after --start", param_hint="--end")
    try:
        acc = _accounting(ctx, sacct_path, t0, t1, tz)
        if profile_path is not None:
            prof = load_profile(profile_path)
        else:
            from mirage.profile.capture import capture_profile

            prof = capture_profile(_client(ctx), "live", tz)
        report = val.validate(acc, prof, t0, t1, ks_floor)
    except (val.ValidateError, ProfileError, SlurmError) as exc:
        raise click.ClickException(str(exc)) from exc
    if plot:
        require("plots", "--plot")
        try:
            val.plot_cdf(report, plot)
        except OSError as exc:
            raise click.ClickException(f"{plot}: cannot write: {exc.strerror or exc}") from exc
    if as_json:
        data = report.as_dict()
        data["plot"] = plot
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(val.render_text(report), nl=False)
        if plot:
            click.echo(f"wrote {plot}")
