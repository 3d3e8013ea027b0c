"""``mirage demo``: its command (the run itself is mirage.demo.run)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import click

from mirage.daemon.cli import startup_errors
from mirage.daemon.clicommon import config_option, config_or_fail, echo_json, json_option
from mirage.daemon.config import MAX_DURATION_S, Config, PolicySection

if TYPE_CHECKING:
    from mirage.demo.run import DemoSpec


@click.command("demo")
@config_option
@click.option(
    "--trace",
    "trace_path",
    required=True,
    help="The trace replayed as the other users' workload (e.g. traces/ls6-a100-slice.log.gz).",
)
@click.option("--trace-format", default=None, help="The trace's format (default: guessed).")
@click.option(
    "--profile",
    "profile_name",
    default="testbed",
    show_default=True,
    help="The cluster profile (name or TOML), e.g. models/ls6/profile.toml.",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=None,
    help="Nodes of the default partition (the replay's cluster, shrunk to make the queue busier).",
)
@click.option(
    "--chains",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Chains registered on the replay.",
)
@click.option(
    "--segments",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Segments per chain.",
)
@click.option(
    "--time-limit",
    default="2:00:00",
    show_default=True,
    help="Each segment's time limit (Slurm format).",
)
@click.option(
    "--policy",
    metavar="NAME",
    default=None,
    help="The daemon's policy (default: the configuration's): any name [policy] default "
    "takes (an unknown one is refused with the valid ones), or shipped: the shipped default "
    "with its guard, whatever the configuration says. A trained one is read from the "
    "configuration's models_dir and cluster (default: models/ls6).",
)
@click.option(
    "--lead",
    "lead_s",
    type=click.IntRange(min=0, max=MAX_DURATION_S),
    default=None,
    help="fixed-lead's lead, seconds.",
)
@click.option(
    "--start-hours",
    type=float,
    default=None,
    help="Register the chains this many hours after the trace's first submit (default: a "
    "busy instant, chosen by a quick replay).",
)
@json_option
def demo_cmd(
    *,
    config_path: str | None,
    trace_path: str,
    trace_format: str | None,
    profile_name: str,
    nodes: int | None,
    chains: int,
    segments: int,
    time_limit: str,
    policy: str | None,
    lead_s: int | None,
    start_hours: float | None,
    as_json: bool,
) -> None:
    """The daemon on a replayed real trace, in accelerated time, against reactive
    submission: a live status view, then the gap of every transition (`make demo`), e.g.
    `mirage demo --trace traces/ls6-a100-slice.log.gz --profile models/ls6/profile.toml
    --nodes 70 --policy xgb`."""
    cfg = config_or_fail(config_path)
    with startup_errors():  # a model or profile that cannot be used: say why
        demo = _DemoArgs(chains, segments, time_limit, policy, lead_s, start_hours)
        _run_demo(cfg, profile_name, (trace_path, trace_format), nodes, demo, as_json=as_json)


class _DemoArgs(NamedTuple):
    chains: int
    segments: int
    time_limit: str
    policy: str | None
    lead_s: int | None
    start_hours: float | None


def _run_demo(
    cfg: Config,
    profile_name: str,
    trace: tuple[str, str | None],
    nodes: int | None,
    args: _DemoArgs,
    *,
    as_json: bool,
) -> None:
    """The demo (mirage.demo.run): live view on the terminal, then the gap table."""
    from rich.console import Console

    from mirage.demo.run import render, run_demo
    from mirage.learn.artifacts import ModelError

    spec = _demo_spec(cfg, profile_name, trace, nodes, args)
    # the view goes to stderr under --json, so that stdout is only the JSON
    view = Console(stderr=as_json)
    click.echo(_demo_intro(spec, nodes), err=True)
    try:
        out = run_demo(spec, cfg, view)
    except ModelError as exc:  # a trained policy asked for, and not there or not loadable
        raise click.ClickException(str(exc)) from exc
    if as_json:
        echo_json(out)
        return
    console = Console()
    render(out, console if console.is_terminal else Console(width=max(console.width, 110)))


def _demo_spec(
    cfg: Config,
    profile_name: str,
    trace: tuple[str, str | None],
    nodes: int | None,
    args: _DemoArgs,
) -> DemoSpec:
    from mirage.daemon.chains import ChainSpecError, parse_time_limit
    from mirage.demo.run import DemoError, DemoSpec, load_jobs
    from mirage.profile.schema import ProfileError, load_profile
    from mirage.sim.calibrate import with_settings
    from mirage.trace.load import SkippedRow, TraceFormatError

    try:
        limit = parse_time_limit(args.time_limit)
        profile = with_settings(load_profile(profile_name), nodes)
        if profile.partition().nodes is None:
            raise click.UsageError(f"profile {profile.name!r} leaves node counts open: --nodes N")
        skipped: list[SkippedRow] = []
        jobs = load_jobs(trace[0], trace[1], profile, skipped)
    except (ChainSpecError, ProfileError, DemoError, TraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"{trace[0]}: {exc}") from exc
    max_time = profile.partition().max_time_s
    if max_time is not None and limit > max_time:
        raise click.UsageError(f"--time-limit {args.time_limit} is over the partition's limit")
    start = None
    if args.start_hours is not None:
        start = jobs[0].submit + int(args.start_hours * 3600)
    spec = DemoSpec(
        profile=profile,
        jobs=jobs,
        trace=trace[0],
        chains=args.chains,
        segments=args.segments,
        time_limit_s=limit,
        policy=args.policy or cfg.policy.default,
        lead_s=cfg.policy.lead_s if args.lead_s is None else args.lead_s,
        models_dir=_demo_models(cfg),
        model_cluster=cfg.policy.cluster or "ls6",
        start=start,
        skipped_rows=len(skipped),
    )
    _check_policy(cfg, spec)
    return spec


def _check_policy(cfg: Config, spec: DemoSpec) -> None:
    """--policy as the daemon's loader takes it, refused in its words before any replay."""
    from mirage.daemon.config import ConfigError
    from mirage.demo.run import daemon_config

    try:
        daemon_config(cfg, spec, spec.policy)
    except ConfigError as exc:  # "<source> [policy]: why": the why alone
        raise click.BadParameter(str(exc).split("]: ", 1)[-1], param_hint="--policy") from exc


def _demo_models(cfg: Config) -> str:
    """The demo's models: the configured folder if it holds the cluster's, else the
    shipped ones (``models/`` of the checkout: the demo runs before any install)."""
    configured = Path(cfg.policy.models_dir) / (cfg.policy.cluster or "ls6")
    if cfg.policy.models_dir and configured.is_dir():
        return cfg.policy.models_dir
    if cfg.policy.models_dir != PolicySection().models_dir and cfg.policy.models_dir:
        return cfg.policy.models_dir  # configured on purpose: its error is the user's to see
    return "models"


def _demo_intro(spec: DemoSpec, nodes: int | None) -> str:
    part = spec.profile.partition()
    shrunk = f" (--nodes {nodes}: fewer than the profile's, for a busier queue)" if nodes else ""
    bad = spec.skipped_rows
    rows = f" ({bad} malformed row{'s' * (bad > 1)} skipped)" if bad else ""
    return (
        f"demo: {spec.chains} chains x {spec.segments} segments on {len(spec.jobs)} replayed "
        f"jobs of {spec.trace}{rows}, cluster {spec.profile.name}: {part.nodes} nodes of "
        f"{part.name}{shrunk}; policy {spec.policy}, then reactive on the same replay"
    )
